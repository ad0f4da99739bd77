//! What the relay answers to an HTTP request, without I/O (`proto-spec/http.md`): which
//! resource a path names, byte ranges, entity tags and conditional requests, and the
//! `GET /sessions` list. The shell (`mod.rs`) reads files and writes replies as these say.

use serde::Serialize;

use bsor_stream_core::net::wire::valid_session_name;
use bsor_stream_core::stream::StreamHeader;

/// The Content-Security-Policy of every asset (`http.md` §3).
pub const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
worker-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data: blob:; \
style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Entries `GET /sessions` lists at most.
pub const MAX_SESSIONS: usize = 1000;

/// The longest asset name looked up (no embedded file has a longer one).
const MAX_ASSET_NAME: usize = 128;

/// What a request's path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// An embedded asset of the page (`/` is `index.html`).
    Asset(&'a str),
    /// The session list.
    Sessions,
    /// The archived stream of a session.
    Replay(&'a str),
    /// A session's event chunks so far (live or archived).
    SessionEvents(&'a str),
    /// A map's zip (`/maps/HASH.zip`), by its hash in lowercase.
    Map(String),
    /// A name that is not a session name (or a path that cannot name an asset): `400`.
    BadName,
}

/// The resource `path` (the request target's path, still percent-encoded) names. Nothing
/// is decoded: a `%` or `/` is in no asset or session name, so `/..%2f` or
/// `/replays/../x` can name nothing outside what is embedded or archived.
pub fn route(path: &str) -> Target<'_> {
    if path == "/" {
        return Target::Asset("index.html");
    }
    if path == "/sessions" {
        return Target::Sessions;
    }
    if let Some(rest) = path.strip_prefix("/sessions/") {
        return match rest.strip_suffix("/events") {
            Some(name) if valid_session_name(name) => Target::SessionEvents(name),
            _ => Target::BadName,
        };
    }
    if let Some(rest) = path.strip_prefix("/replays/") {
        return match rest.strip_suffix(".bsors") {
            Some(name) if valid_session_name(name) => Target::Replay(name),
            _ => Target::BadName,
        };
    }
    if let Some(rest) = path.strip_prefix("/maps/") {
        return match rest.strip_suffix(".zip").and_then(map_hash) {
            Some(hash) => Target::Map(hash),
            None => Target::BadName,
        };
    }
    match path.strip_prefix('/') {
        Some(name) if is_asset_name(name) => Target::Asset(name),
        _ => Target::BadName,
    }
}

/// Hex digits in a map's hash (BeatSaver's: a SHA-1).
pub const MAP_HASH_LEN: usize = 40;

/// A map's hash as its file is named: exactly [`MAP_HASH_LEN`] hex digits, in any case,
/// given back in lowercase; anything else (a dot, a slash, a `%`) is no hash, so a map's
/// path can name nothing outside the maps folder.
pub fn map_hash(s: &str) -> Option<String> {
    (s.len() == MAP_HASH_LEN && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| s.to_ascii_lowercase())
}

/// A flat file name: letters, digits, `.`, `_`, `-`, not starting with a dot.
fn is_asset_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ASSET_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The Content-Type of an asset, from its extension.
pub fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript",
        "css" => "text/css",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

/// A strong entity tag for a file of `len` bytes last modified at `mtime_ns` (nanoseconds
/// since the Unix epoch): an archived stream never changes once its session ended, and a
/// new file of the same name has another length or time.
pub fn etag(len: u64, mtime_ns: u128) -> String {
    format!("\"{len:x}-{mtime_ns:x}\"")
}

/// A strong entity tag for bytes that never change while the process runs (an asset).
pub fn asset_etag(bytes: &[u8]) -> String {
    format!("\"{:08x}-{:x}\"", crc32fast::hash(bytes), bytes.len())
}

/// Whether an `If-None-Match` value matches `etag` (weak comparison, RFC 9110 §13.1.2).
pub fn none_match(header: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let want = bare(etag);
    header.trim() == "*" || header.split(',').any(|t| bare(t) == want)
}

/// Whether an `If-Range` value lets the range apply (strong comparison; a date never
/// does, since the relay sends no `Last-Modified`).
pub fn if_range_holds(header: &str, etag: &str) -> bool {
    let t = header.trim();
    !t.starts_with("W/") && t == etag
}

/// What a `Range` header asks of a representation of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranged {
    /// The whole representation (no range, one that does not parse, or several).
    Whole,
    /// Bytes `first..=last`.
    Part {
        /// The first byte.
        first: u64,
        /// The last byte (included).
        last: u64,
    },
    /// No byte of it: `416`.
    Unsatisfiable,
}

/// The longest `Range` value parsed; longer is ignored (the whole file is served).
const MAX_RANGE_HEADER: usize = 256;

/// A `Range` header against `len` bytes (RFC 9110 §14.1.2): one `bytes=` range, `A-B`,
/// `A-` or `-N`. A value that does not parse, or another unit, is ignored (the whole
/// representation); several ranges are answered with the whole representation too.
pub fn parse_range(header: &str, len: u64) -> Ranged {
    if header.len() > MAX_RANGE_HEADER {
        return Ranged::Whole;
    }
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Ranged::Whole;
    };
    if spec.contains(',') {
        return Ranged::Whole;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Ranged::Whole;
    };
    let num = |s: &str| -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, true) => Ranged::Whole,
        // A suffix: the last N bytes.
        (true, false) => match num(b) {
            Some(0) => Ranged::Unsatisfiable,
            Some(n) if len > 0 => Ranged::Part {
                first: len.saturating_sub(n),
                last: len - 1,
            },
            Some(_) => Ranged::Unsatisfiable,
            None => Ranged::Whole,
        },
        (false, open) => {
            let Some(first) = num(a) else {
                return Ranged::Whole;
            };
            let last = if open {
                u64::MAX
            } else {
                match num(b) {
                    Some(l) if l >= first => l,
                    _ => return Ranged::Whole,
                }
            };
            if first >= len {
                Ranged::Unsatisfiable
            } else {
                Ranged::Part {
                    first,
                    last: last.min(len - 1),
                }
            }
        }
    }
}

/// The conditional headers of a request for an archived stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions<'a> {
    /// `Range`.
    pub range: Option<&'a str>,
    /// `If-Range`.
    pub if_range: Option<&'a str>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a str>,
}

/// What to send of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// `200`, the whole file.
    Whole,
    /// `206`, bytes `first..=last`.
    Part {
        /// The first byte.
        first: u64,
        /// The last byte (included).
        last: u64,
    },
    /// `304`, nothing.
    NotModified,
    /// `416`, nothing (`Content-Range: bytes */LEN`).
    Unsatisfiable,
}

/// What to answer for a file of `len` bytes with entity tag `etag` (RFC 9110 §13.2.2:
/// `If-None-Match` first, then `If-Range`, then `Range`).
pub fn plan(c: &Conditions<'_>, len: u64, etag: &str) -> Plan {
    if c.if_none_match.is_some_and(|h| none_match(h, etag)) {
        return Plan::NotModified;
    }
    let Some(range) = c.range else {
        return Plan::Whole;
    };
    if c.if_range.is_some_and(|h| !if_range_holds(h, etag)) {
        return Plan::Whole;
    }
    match parse_range(range, len) {
        Ranged::Whole => Plan::Whole,
        Ranged::Part { first, last } => Plan::Part { first, last },
        Ranged::Unsatisfiable => Plan::Unsatisfiable,
    }
}

/// One entry of `GET /sessions` (`http.md` §4; field names as the contract says).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The session's name.
    pub name: String,
    /// The player's name.
    pub player: String,
    /// The player's platform id.
    pub player_id: String,
    /// The song's name.
    pub song: String,
    /// The map's hash.
    pub song_hash: String,
    /// The difficulty.
    pub difficulty: String,
    /// The game mode.
    pub mode: String,
    /// When the play started (Unix seconds, from the info's timestamp; 0 if unknown).
    pub started: u64,
    /// Still being played.
    pub live: bool,
    /// Song seconds so far (live), or of the whole stream (ended).
    pub duration: f64,
    /// Viewers attached.
    pub viewers: u64,
    /// Bytes of the stream.
    pub bytes: u64,
}

impl Entry {
    /// An entry for session `name` from its stream header (`None`: not yet sent, or
    /// unreadable: empty strings).
    pub fn new(name: &str, header: Option<&StreamHeader>) -> Entry {
        let text = |f: fn(&bsor_stream_core::bsor::Info) -> &bsor_stream_core::bsor::BsorString| {
            header.map_or_else(String::new, |h| f(&h.info).to_string_lossy())
        };
        Entry {
            name: name.to_string(),
            player: text(|i| &i.player_name),
            player_id: text(|i| &i.player_id),
            song: text(|i| &i.song_name),
            song_hash: text(|i| &i.hash),
            difficulty: text(|i| &i.difficulty),
            mode: text(|i| &i.mode),
            started: header.map_or(0, |h| started(&h.info.timestamp.to_string_lossy())),
            live: false,
            duration: 0.0,
            viewers: 0,
            bytes: 0,
        }
    }
}

/// The info's timestamp (Unix seconds as text) as a number; 0 when it is not one.
pub fn started(timestamp: &str) -> u64 {
    timestamp.trim().parse().unwrap_or(0)
}

/// Song seconds as JSON can carry them (a non-finite or negative time is 0).
pub fn seconds(t: f32) -> f64 {
    if t.is_finite() && t > 0.0 {
        f64::from(t)
    } else {
        0.0
    }
}

/// The `GET /sessions` body: `live` entries first (by name), then `archived` ones newest
/// first as given, skipping an archived entry whose name a live one has, at most
/// [`MAX_SESSIONS`] in all.
pub fn session_list(mut live: Vec<Entry>, archived: Vec<Entry>) -> String {
    live.sort_by(|a, b| a.name.cmp(&b.name));
    live.truncate(MAX_SESSIONS);
    let names: std::collections::HashSet<String> = live.iter().map(|e| e.name.clone()).collect();
    let room = MAX_SESSIONS - live.len();
    let rest = archived
        .into_iter()
        .filter(|e| !names.contains(&e.name))
        .take(room);
    let sessions: Vec<Entry> = live.into_iter().chain(rest).collect();
    #[derive(Serialize)]
    struct Body {
        sessions: Vec<Entry>,
    }
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_string(&Body { sessions }).unwrap_or_else(|_| "{\"sessions\":[]}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_assets_sessions_and_replays() {
        assert_eq!(route("/"), Target::Asset("index.html"));
        assert_eq!(route("/app.js"), Target::Asset("app.js"));
        assert_eq!(route("/sessions"), Target::Sessions);
        assert_eq!(route("/replays/demo.bsors"), Target::Replay("demo"));
        assert_eq!(
            route("/sessions/demo/events"),
            Target::SessionEvents("demo")
        );
        for bad in [
            "/sessions/",
            "/sessions/demo",
            "/sessions/../events",
            "/sessions/a/b/events",
            "/sessions/%2e/events",
        ] {
            assert_eq!(route(bad), Target::BadName, "{bad}");
        }
        assert_eq!(route("/replays/a.b_c-1.bsors"), Target::Replay("a.b_c-1"));
    }

    #[test]
    fn traversal_and_bad_names_name_nothing() {
        for bad in [
            "/..%2f",
            "/..%2fetc%2fpasswd",
            "/replays/../x",
            "/replays/..%2fx.bsors",
            "/replays/...bsors",
            "/replays/.bsors",
            "/replays/a b.bsors",
            "/replays/demo",
            "/replays/demo.bsor",
            "/replays/x/y.bsors",
            "/.hidden",
            "/a/b",
            "//etc/passwd",
            "/%2e%2e/x",
        ] {
            assert_eq!(route(bad), Target::BadName, "{bad}");
        }
        let long = format!("/replays/{}.bsors", "a".repeat(65));
        assert_eq!(route(&long), Target::BadName);
        let ok = format!("/replays/{}.bsors", "a".repeat(64));
        assert!(matches!(route(&ok), Target::Replay(_)));
    }

    #[test]
    fn maps_are_named_by_a_hash_in_any_case() {
        let hash = "0123456789abcdef0123456789ABCDEF01234567";
        assert_eq!(
            route(&format!("/maps/{hash}.zip")),
            Target::Map(hash.to_ascii_lowercase())
        );
        for bad in [
            "/maps/".to_string(),
            "/maps/.zip".to_string(),
            format!("/maps/{hash}"),
            format!("/maps/{hash}.ZIP"),
            format!("/maps/{}.zip", &hash[1..]),
            format!("/maps/{hash}0.zip"),
            format!("/maps/{}g.zip", &hash[1..]),
            "/maps/../../etc/passwd.zip".to_string(),
            format!("/maps/..%2f{}.zip", &hash[4..]),
            format!("/maps/x/{hash}.zip"),
        ] {
            assert_eq!(route(&bad), Target::BadName, "{bad}");
        }
        assert_eq!(content_type("a.zip"), "application/zip");
    }

    #[test]
    fn content_types_follow_the_contract() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("a.js"), "text/javascript");
        assert_eq!(content_type("a.mjs"), "text/javascript");
        assert_eq!(content_type("a.css"), "text/css");
        assert_eq!(content_type("a.wasm"), "application/wasm");
        assert_eq!(content_type("a.svg"), "image/svg+xml");
        assert_eq!(content_type("a.png"), "image/png");
        assert_eq!(content_type("a.json"), "application/json");
        assert_eq!(content_type("a.bin"), "application/octet-stream");
    }

    #[test]
    fn ranges_first_middle_suffix_open_and_unsatisfiable() {
        let part = |first, last| Ranged::Part { first, last };
        assert_eq!(parse_range("bytes=0-99", 1000), part(0, 99));
        assert_eq!(parse_range("bytes=100-199", 1000), part(100, 199));
        assert_eq!(parse_range("bytes=-16", 1000), part(984, 999));
        assert_eq!(parse_range("bytes=-5000", 1000), part(0, 999));
        assert_eq!(parse_range("bytes=900-", 1000), part(900, 999));
        assert_eq!(parse_range("bytes=900-5000", 1000), part(900, 999));
        assert_eq!(parse_range("bytes=1000-", 1000), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=5000-6000", 1000), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 1000), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=-1", 0), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Ranged::Unsatisfiable);
    }

    #[test]
    fn odd_ranges_give_the_whole_file() {
        for h in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=5-1",
            "bytes=-",
            "bytes=a-b",
            "bytes=+1-2",
            "bytes=0x10-",
            "bytes 0-1",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(parse_range(h, 1000), Ranged::Whole, "{h}");
        }
        let huge = format!("bytes={}", "0-1,".repeat(10_000));
        assert_eq!(parse_range(&huge, 1000), Ranged::Whole);
    }

    #[test]
    fn conditions_in_the_rfc_order() {
        let tag = etag(1000, 12345);
        let stale = etag(999, 12345);
        let c = |range, if_range, if_none_match| Conditions {
            range,
            if_range,
            if_none_match,
        };
        assert_eq!(plan(&c(None, None, None), 1000, &tag), Plan::Whole);
        assert_eq!(
            plan(&c(Some("bytes=10-19"), None, None), 1000, &tag),
            Plan::Part {
                first: 10,
                last: 19
            }
        );
        assert_eq!(
            plan(&c(Some("bytes=10-19"), Some(&tag), None), 1000, &tag),
            Plan::Part {
                first: 10,
                last: 19
            }
        );
        // A stale or weak If-Range, or a date: the whole file.
        assert_eq!(
            plan(&c(Some("bytes=10-19"), Some(&stale), None), 1000, &tag),
            Plan::Whole
        );
        let weak = format!("W/{tag}");
        assert_eq!(
            plan(&c(Some("bytes=10-19"), Some(&weak), None), 1000, &tag),
            Plan::Whole
        );
        assert_eq!(
            plan(
                &c(
                    Some("bytes=10-19"),
                    Some("Tue, 24 Nov 2026 06:00:00 GMT"),
                    None
                ),
                1000,
                &tag
            ),
            Plan::Whole
        );
        // If-None-Match wins over everything, with weak comparison and lists.
        assert_eq!(
            plan(&c(Some("bytes=10-19"), None, Some(&tag)), 1000, &tag),
            Plan::NotModified
        );
        let list = format!("\"x\", W/{tag}");
        assert_eq!(
            plan(&c(None, None, Some(&list)), 1000, &tag),
            Plan::NotModified
        );
        assert_eq!(
            plan(&c(None, None, Some("*")), 1000, &tag),
            Plan::NotModified
        );
        assert_eq!(plan(&c(None, None, Some(&stale)), 1000, &tag), Plan::Whole);
        assert_eq!(
            plan(&c(Some("bytes=2000-"), None, None), 1000, &tag),
            Plan::Unsatisfiable
        );
    }

    #[test]
    fn etags_are_strong_and_change_with_the_file() {
        let t = etag(1000, 1);
        assert!(t.starts_with('"') && t.ends_with('"'));
        assert_ne!(t, etag(1000, 2));
        assert_ne!(t, etag(1001, 1));
        assert_ne!(asset_etag(b"a"), asset_etag(b"b"));
    }

    fn entry(name: &str, live: bool) -> Entry {
        Entry {
            live,
            ..Entry::new(name, None)
        }
    }

    #[test]
    fn the_list_puts_live_first_and_is_bounded() {
        let live = vec![entry("b", true), entry("a", true)];
        let archived = vec![entry("new", false), entry("a", false), entry("old", false)];
        let json: serde_json::Value = serde_json::from_str(&session_list(live, archived)).unwrap();
        let names: Vec<&str> = json["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "new", "old"]);
        let first = &json["sessions"][0];
        for key in [
            "name",
            "player",
            "playerId",
            "song",
            "songHash",
            "difficulty",
            "mode",
            "started",
            "live",
            "duration",
            "viewers",
            "bytes",
        ] {
            assert!(first.get(key).is_some(), "{key} missing: {first}");
        }
        assert_eq!(first["live"], true);
        let many: Vec<Entry> = (0..1500).map(|i| entry(&format!("s{i}"), false)).collect();
        let json: serde_json::Value =
            serde_json::from_str(&session_list(vec![entry("l", true)], many)).unwrap();
        assert_eq!(json["sessions"].as_array().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn markup_in_names_stays_a_json_string() {
        let mut e = entry("x", false);
        e.player = "<img src=x onerror=alert(1)>\"".into();
        let body = session_list(vec![], vec![e]);
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            json["sessions"][0]["player"],
            "<img src=x onerror=alert(1)>\""
        );
    }

    #[test]
    fn timestamps_and_times() {
        assert_eq!(started("1700000000"), 1_700_000_000);
        assert_eq!(started(" 12 "), 12);
        assert_eq!(started("soon"), 0);
        assert_eq!(started("-5"), 0);
        assert_eq!(seconds(f32::NAN), 0.0);
        assert_eq!(seconds(-1.0), 0.0);
        assert_eq!(seconds(2.5), 2.5);
    }
}
