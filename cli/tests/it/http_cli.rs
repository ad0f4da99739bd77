//! `serve`'s HTTP on its WebSocket address (`proto-spec/http.md`), run as a user would,
//! on 127.0.0.1: the embedded page (every file of `web/` but its README, with its bytes),
//! `/sessions` with a live and an archived session, archived replays by byte ranges and
//! entity tags, 409 for a live one, 400 for bad names and traversal, and the WebSocket on
//! the same port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

/// A reply: status, headers (names lowercase), body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on its own connection (`Connection: close`), the target sent as it is.
pub(crate) fn get(addr: &str, method: &str, target: &str, extra: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head")
        + 4;
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: all[end..].to_vec(),
    }
}

struct Relay {
    child: Child,
    tcp: String,
    ws: String,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Relay {
    serve_with(dir, &[])
}

/// The player the synthetic replays name.
const SYNTH_PLAYER: &str = "76561190000000000";

/// The relay's token file: `tok` publishes any session (and grants no player), `ptok`
/// publishes as and uploads for the synthetic replays' player, `otok` for another player,
/// `stok` publishes session `song` only.
const TOKEN_FILE: &str = "tok\nplayer:76561190000000000:ptok\nplayer:42:otok\nsong:stok\n";

/// `serve` on 127.0.0.1 with an archive in `dir`, and `extra` options.
fn serve_with(dir: &Path, extra: &[&str]) -> Relay {
    let tokens = dir.join("tokens.txt");
    std::fs::write(&tokens, TOKEN_FILE).unwrap();
    let log = std::fs::File::create(dir.join("relay.log")).unwrap();
    let mut child = bin()
        .args(["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&tokens)
        .arg("--archive")
        .arg(dir.join("archive"))
        .args(extra)
        .env("RUST_LOG", "info,bsor_stream_relay::http=debug")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (tcp, ws) = line
        .trim()
        .strip_prefix("listening tcp=")
        .and_then(|r| r.split_once(" ws="))
        .expect(&line);
    Relay {
        tcp: tcp.to_string(),
        ws: ws.to_string(),
        child,
    }
}

pub(crate) fn synth(dir: &Path, name: &str, seconds: &str) -> std::path::PathBuf {
    let replay = dir.join(name);
    let out = bin()
        .args(["synth", "--seconds", seconds, "-o"])
        .arg(&replay)
        .output()
        .unwrap();
    assert!(out.status.success());
    replay
}

fn sessions(addr: &str) -> serde_json::Value {
    let r = get(addr, "GET", "/sessions", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap()
}

fn entry<'a>(list: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn every_file_of_web_is_served_with_its_bytes_and_policy() {
    let dir = tempfile::tempdir().unwrap();
    let relay = serve(dir.path());
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let mut served = 0;
    for e in std::fs::read_dir(&web).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name == "README.md" || name.starts_with('.') || !e.file_type().unwrap().is_file() {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        let r = get(&relay.ws, "GET", &format!("/{name}"), &[]);
        assert_eq!(r.status, 200, "{name}");
        assert!(r.body == bytes, "{name}: other bytes served");
        assert!(
            r.header("content-security-policy")
                .is_some_and(|c| c.contains("script-src 'self' 'wasm-unsafe-eval'")),
            "{name}: {:?}",
            r.headers
        );
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        if name == "index.html" {
            let root = get(&relay.ws, "GET", "/", &[]);
            assert!(root.body == bytes);
            assert_eq!(
                root.header("content-type"),
                Some("text/html; charset=utf-8")
            );
        }
        served += 1;
    }
    // README.md is not served; nor is anything outside web/.
    assert_eq!(get(&relay.ws, "GET", "/README.md", &[]).status, 404);
    // What web/ holds on this branch decides how many (none but the README is fine).
    let _ = served;
}

#[test]
fn sessions_replays_ranges_and_the_websocket_share_one_port() {
    let dir = tempfile::tempdir().unwrap();
    let relay = serve(dir.path());
    let short = synth(dir.path(), "short.bsor", "4");
    let long = synth(dir.path(), "long.bsor", "60");
    // An archived session: published whole, ended.
    let published = bin()
        .arg("publish")
        .arg(&short)
        .args(["--to", &relay.tcp, "--session", "done", "--token", "tok"])
        .args(["--speed", "0"])
        .output()
        .unwrap();
    assert!(published.status.success());
    // A live session, played in real time while the test runs.
    let mut live = bin()
        .arg("publish")
        .arg(&long)
        .args(["--to", &relay.tcp, "--session", "playing", "--token", "tok"])
        .args(["--speed", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let list = loop {
        let list = sessions(&relay.ws);
        let ready = entry(&list, "playing").is_some_and(|e| e["duration"].as_f64() > Some(0.0))
            && entry(&list, "done").is_some();
        if ready || Instant::now() > deadline {
            break list;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let playing = entry(&list, "playing").expect("the live session is listed");
    let done = entry(&list, "done").expect("the archived session is listed");
    assert_eq!(list["sessions"][0]["name"], "playing", "live first: {list}");
    assert_eq!(playing["live"], true);
    assert!(playing["duration"].as_f64().unwrap() > 0.0, "{playing}");
    assert!(playing["bytes"].as_u64().unwrap() > 0, "{playing}");
    assert_eq!(done["live"], false);
    let archived = std::fs::read(dir.path().join("archive/done.bsors")).unwrap();
    let len = archived.len() as u64;
    assert_eq!(done["bytes"].as_u64(), Some(len));
    let duration = done["duration"].as_f64().unwrap();
    assert!((3.0..4.5).contains(&duration), "{done}");
    for e in [playing, done] {
        assert!(!e["player"].as_str().unwrap().is_empty(), "{e}");
        assert!(e["started"].as_u64().is_some() && e["viewers"].as_u64().is_some());
        for k in ["playerId", "song", "songHash", "difficulty", "mode"] {
            assert!(e[k].is_string(), "{k}: {e}");
        }
    }

    // The whole file, then ranges of it.
    let whole = get(&relay.ws, "GET", "/replays/done.bsors", &[]);
    assert_eq!(whole.status, 200);
    assert!(whole.body == archived);
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    let tag = whole.header("etag").unwrap().to_string();
    assert!(tag.starts_with('"'), "a strong ETag: {tag}");
    let range = |spec: &str, extra: &[(&str, &str)]| {
        let mut h = vec![("Range", spec)];
        h.extend_from_slice(extra);
        get(&relay.ws, "GET", "/replays/done.bsors", &h)
    };
    let mid = len / 2;
    for (spec, first, last) in [
        ("bytes=0-99".to_string(), 0, 99),
        (format!("bytes={mid}-{}", mid + 9), mid, mid + 9),
        ("bytes=-16".to_string(), len - 16, len - 1),
        (format!("bytes={}-", len - 100), len - 100, len - 1),
    ] {
        let r = range(&spec, &[]);
        assert_eq!(r.status, 206, "{spec}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {first}-{last}/{len}").as_str())
        );
        assert!(r.body == archived[first as usize..=last as usize], "{spec}");
    }
    let r = range(&format!("bytes={len}-"), &[]);
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );
    // A stale If-Range: the whole file; the current one: the range.
    let r = range("bytes=0-9", &[("If-Range", "\"stale\"")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len() as u64, len);
    assert_eq!(range("bytes=0-9", &[("If-Range", &tag)]).status, 206);
    let r = get(
        &relay.ws,
        "GET",
        "/replays/done.bsors",
        &[("If-None-Match", &tag)],
    );
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = get(&relay.ws, "HEAD", "/replays/done.bsors", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));
    assert!(r.body.is_empty());

    // A live session's replay, unknown ones, bad names, traversal.
    assert_eq!(
        get(&relay.ws, "GET", "/replays/playing.bsors", &[]).status,
        409
    );
    assert_eq!(
        get(&relay.ws, "GET", "/replays/nobody.bsors", &[]).status,
        404
    );
    for bad in [
        "/replays/..bsors",
        "/replays/a%20b.bsors",
        "/replays/../archive/done.bsors",
        "/replays/..%2farchive%2fdone.bsors",
        "/..%2ftokens.txt",
        "/../tokens.txt",
        "/replays/done.bsors/..",
    ] {
        let r = get(&relay.ws, "GET", bad, &[]);
        assert!(r.status == 400 || r.status == 404, "{bad}: {}", r.status);
        assert!(!r.body.windows(3).any(|w| w == b"tok"), "{bad}");
    }

    // The WebSocket on the same port: the archived session watched whole.
    let watched = dir.path().join("watched.bsors");
    let w = bin()
        .args([
            "watch",
            &relay.ws,
            "--ws",
            "--session",
            "done",
            "--wait",
            "10",
            "-o",
        ])
        .arg(&watched)
        .output()
        .unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    assert!(std::fs::read(&watched).unwrap() == archived);

    let _ = live.kill();
    let _ = live.wait();
    drop(relay);
    // The log says which ranges were served.
    let log = std::fs::read_to_string(dir.path().join("relay.log")).unwrap();
    assert!(log.contains("served done bytes 0-99"), "{log}");
    assert!(
        log.contains(&format!("served done bytes {}-{}", len - 16, len - 1)),
        "{log}"
    );
}

#[test]
fn demo_prints_the_url_of_its_session_and_serves_it_there() {
    let mut demo = bin()
        .args(["demo", "--speed", "4", "--exit"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("open ").map(str::to_string))
        .expect("an `open URL` line");
    let addr = url
        .strip_prefix("http://")
        .and_then(|r| r.strip_suffix("/?session=demo"))
        .expect(&url)
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{url}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = loop {
        let list = sessions(&addr);
        let live = entry(&list, "demo").is_some_and(|e| e["live"] == true);
        if live || Instant::now() > deadline {
            break live;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(live, "the demo session is listed live at {addr}");
    let page = get(&addr, "GET", "/?session=demo", &[]);
    let has_page = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../web/index.html")
        .exists();
    assert_eq!(page.status, if has_page { 200 } else { 404 });
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(demo.wait().unwrap().success());
    assert!(
        rest.iter().any(|l| l.starts_with("sizes: BSOR")),
        "{rest:?}"
    );
}

#[test]
fn a_finished_session_moves_into_the_replay_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let relay = serve_with(dir.path(), &["--store", store.to_str().unwrap()]);
    let song = synth(dir.path(), "song.bsor", "6");
    let published = bin()
        .arg("publish")
        .arg(&song)
        .args(["--to", &relay.tcp, "--session", "song", "--token", "ptok"])
        .args(["--speed", "0"])
        .output()
        .unwrap();
    assert!(published.status.success());
    // Stored once the session ends: found by search, the BSOR back byte for byte.
    let listed = stored_replays(&relay.ws, 1);
    let id = listed[0]["id"].as_str().unwrap();
    let back = get(&relay.ws, "GET", &format!("/replays/{id}"), &[]);
    assert_eq!(back.status, 200);
    assert!(
        back.body == std::fs::read(&song).unwrap(),
        "the stored session's BSOR differs from the published one"
    );
    // The relay's own archive still serves the session.
    assert_eq!(
        get(&relay.ws, "GET", "/replays/song.bsors", &[]).status,
        200
    );
}

#[test]
fn a_finished_session_is_dated_by_the_relays_own_witness() {
    use bsor_stream::integrity::witness::{parse_file, Statement};
    let dir = tempfile::tempdir().unwrap();
    let (player, witness) = (dir.path().join("p.key"), dir.path().join("w.key"));
    for key in [&player, &witness] {
        let made = bin().arg("keygen").arg("-o").arg(key).output().unwrap();
        assert!(made.status.success());
    }
    let store = dir.path().join("store");
    let relay = serve_with(
        dir.path(),
        &[
            "--store",
            store.to_str().unwrap(),
            "--witness-key",
            witness.to_str().unwrap(),
        ],
    );
    let song = synth(dir.path(), "song.bsor", "6");
    let published = bin()
        .arg("publish")
        .arg(&song)
        .args(["--to", &relay.tcp, "--session", "song", "--token", "ptok"])
        .args(["--speed", "0", "--key"])
        .arg(&player)
        .output()
        .unwrap();
    assert!(published.status.success());
    let listed = stored_replays(&relay.ws, 1);
    // Its existed-by time is the statement on the final checkpoint in the archive's
    // .witness sibling, before it was stored: the relay's own key is trusted, and only the
    // final checkpoint dates the whole play.
    let file = std::fs::read(dir.path().join("archive/song.witness")).unwrap();
    let finals: Vec<u64> = parse_file(&file)
        .records
        .iter()
        .map(|r| Statement::parse(r).unwrap())
        .filter(|s| s.subject == bsor_stream::integrity::witness::Subject::Final)
        .map(|s| s.time_ms)
        .collect();
    assert_eq!(finals.len(), 1);
    assert_eq!(listed[0]["existedBy"], finals[0]);
    assert!(listed[0]["uploaded"].as_u64().unwrap() >= finals[0]);
    assert_eq!(listed[0]["signed"], true);
}

#[test]
fn a_trusted_witness_key_that_is_not_one_names_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.txt");
    std::fs::write(&tokens, "tok\n").unwrap();
    let out = bin()
        .args(["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&tokens)
        .arg("--store")
        .arg(dir.path().join("store"))
        .args(["--trust-witness", "abc"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--trust-witness abc"), "{err}");
    assert!(out.stdout.is_empty(), "it listened before refusing the key");
}

/// The replays `GET /replays` lists once `n` finished sessions are stored (waiting up to
/// 30 s for them): exactly `n`.
pub(crate) fn stored_replays(ws: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let r = get(ws, "GET", "/replays", &[]);
        assert_eq!(r.status, 200);
        let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let listed = j["replays"].as_array().unwrap().clone();
        if listed.len() >= n || Instant::now() > deadline {
            break listed;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        listed.len(),
        n,
        "the finished sessions were not stored: {listed:?}"
    );
    listed
}

/// Publishes `song` as session `session` with `token`, to its end.
fn publish_song(relay: &Relay, song: &Path, session: &str, token: &str) {
    let published = bin()
        .arg("publish")
        .arg(song)
        .args(["--to", &relay.tcp, "--session", session, "--token", token])
        .args(["--speed", "0"])
        .output()
        .unwrap();
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
}

/// Waits until the relay's log in `dir` says a finished session was not stored.
fn wait_not_stored(dir: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = std::fs::read_to_string(dir.join("relay.log")).unwrap_or_default();
        if log.contains("not stored") || Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn replay_count(ws: &str) -> usize {
    let r = get(ws, "GET", "/replays", &[]);
    assert_eq!(r.status, 200);
    let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    j["replays"].as_array().unwrap().len()
}

/// A POST of `body` to `/replays` with `token`: the status.
fn post_replay(addr: &str, token: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /replays HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    String::from_utf8_lossy(&all)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_session_token_publishing_another_players_header_is_archived_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let relay = serve_with(dir.path(), &["--store", store.to_str().unwrap()]);
    let song = synth(dir.path(), "song.bsor", "6");
    // `song:stok` opens session `song` only and grants no player: the header's player is
    // not this publisher's.
    publish_song(&relay, &song, "song", "stok");
    let log = wait_not_stored(dir.path());
    assert!(log.contains("not stored"), "{log}");
    assert!(dir.path().join("archive/song.bsors").exists());
    assert_eq!(
        get(&relay.ws, "GET", "/replays/song.bsors", &[]).status,
        200
    );
    assert_eq!(replay_count(&relay.ws), 0);
    // The player's own upload of the play is theirs.
    let bytes = std::fs::read(&song).unwrap();
    assert_eq!(post_replay(&relay.ws, "ptok", &bytes), 201);
    let listed = stored_replays(&relay.ws, 1);
    assert_eq!(listed[0]["player"], SYNTH_PLAYER);
}

#[test]
fn a_player_token_publishing_its_own_header_is_stored_as_its_replay() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let relay = serve_with(dir.path(), &["--store", store.to_str().unwrap()]);
    let song = synth(dir.path(), "song.bsor", "6");
    // A `player:` line publishes any session name.
    publish_song(&relay, &song, "any-name", "ptok");
    let listed = stored_replays(&relay.ws, 1);
    assert_eq!(listed[0]["player"], SYNTH_PLAYER);
}

#[test]
fn a_player_token_publishing_another_players_header_is_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let relay = serve_with(dir.path(), &["--store", store.to_str().unwrap()]);
    let song = synth(dir.path(), "song.bsor", "6");
    publish_song(&relay, &song, "song", "otok");
    let log = wait_not_stored(dir.path());
    assert!(log.contains("not stored"), "{log}");
    assert!(dir.path().join("archive/song.bsors").exists());
    assert_eq!(replay_count(&relay.ws), 0);
    // A session-wide token (no player) is archived and not stored either.
    let song2 = synth(dir.path(), "song2.bsor", "5");
    publish_song(&relay, &song2, "other", "tok");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(replay_count(&relay.ws), 0);
}

/// `keys register` against a real `serve`: the key registered to the token's player with a
/// proof (listed proven); a name the server does not go by is refused by the client before
/// anything is signed for it; the key cannot then be registered to another player.
#[test]
fn keys_register_proves_the_key_to_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("p.key");
    let made = bin().arg("keygen").arg("-o").arg(&key).output().unwrap();
    assert!(made.status.success());
    let public = String::from_utf8(made.stdout).unwrap().trim().to_string();
    let store = dir.path().join("store");
    let relay = serve_with(
        dir.path(),
        &[
            "--store",
            store.to_str().unwrap(),
            "--server-name",
            "127.0.0.1",
        ],
    );
    let url = format!("http://{}", relay.ws);
    let token = |name: &str, t: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, format!("{t}\n")).unwrap();
        f
    };
    let (p1, p42) = (token("p1.tok", "ptok"), token("p42.tok", "otok"));
    let register = |tok: &Path, extra: &[&str]| {
        bin()
            .args(["keys", "register", "--key"])
            .arg(&key)
            .args(["--server", &url, "--token-file"])
            .arg(tok)
            .args(extra)
            .output()
            .unwrap()
    };
    // A server name other than the one the server goes by: refused, nothing registered.
    let out = register(&p1, &["--server-name", "elsewhere.example"]);
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    let out = register(&p1, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = get(&relay.ws, "GET", "/keys?player=76561190000000000", &[]);
    assert_eq!(listed.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    assert_eq!(v["keys"][0]["key"], public.as_str(), "{v}");
    assert_eq!(v["keys"][0]["proven"], true, "{v}");
    // Another player holding the key file still cannot take a proven key.
    let out = register(&p42, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("key-taken"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `serve --maps DIR`: `GET /maps/HASH.zip` serves `DIR/HASH.zip` (the hash in any case, by
/// ranges); a missing map is a `404`, a bad hash a `400`; a --maps that is not a folder is the
/// command line's error, before any port is bound.
#[test]
fn serve_maps_serves_zips_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let maps = dir.path().join("maps");
    std::fs::create_dir(&maps).unwrap();
    let hash = "3585b3438a5b78deafaaa9d8fba9a9e88556d218";
    let zip: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(maps.join(format!("{hash}.zip")), &zip).unwrap();
    let relay = serve_with(dir.path(), &["--maps", maps.to_str().unwrap()]);
    let upper = hash.to_ascii_uppercase();
    let r = get(&relay.ws, "GET", &format!("/maps/{upper}.zip"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, zip);
    assert_eq!(r.header("content-type"), Some("application/zip"));
    let part = get(
        &relay.ws,
        "GET",
        &format!("/maps/{hash}.zip"),
        &[("Range", "bytes=10-19")],
    );
    assert_eq!((part.status, part.body.as_slice()), (206, &zip[10..20]));
    let missing = format!("/maps/{}.zip", "0".repeat(40));
    assert_eq!(get(&relay.ws, "GET", &missing, &[]).status, 404);
    assert_eq!(get(&relay.ws, "GET", "/maps/..%2fx.zip", &[]).status, 400);
    drop(relay);

    let tokens = dir.path().join("tokens.txt");
    let out = bin()
        .args([
            "serve",
            "--tcp",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--token-file",
        ])
        .arg(&tokens)
        .arg("--maps")
        .arg(dir.path().join("no-such-folder"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a folder"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A mirror template without {hash}, or https without the CAs to trust: refused.
    for bad in [
        "http://127.0.0.1:9/zips/x.zip",
        "https://127.0.0.1:9/{hash}.zip",
    ] {
        let out = bin()
            .args([
                "serve",
                "--tcp",
                "127.0.0.1:0",
                "--ws",
                "127.0.0.1:0",
                "--token-file",
            ])
            .arg(&tokens)
            .arg("--maps")
            .arg(&maps)
            .args(["--map-url", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--map-url"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
