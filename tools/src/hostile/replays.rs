//! The hostile scenarios of the replay server (`proto-spec/http.md` §8, the review's "bad
//! input"): IDs and query values that try to leave the store or reach the SQL, absurd and
//! inverted ranges and spans, bad and missing tokens, abuse of the key registry, bodies whose
//! `Content-Length` lies, a gzip bomb, a body that trickles in, garbage and truncated bodies.
//! Each hostile request is one case on its own connection, judged by its status and its JSON
//! refusal; an honest client from 127.0.0.1 uploads and downloads replays all along, and
//! must get every one back byte for byte.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bsor_stream::bsor::{self, BsorString};
use bsor_stream::integrity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::clients::{self, Outcome};
use super::{check, each, grace, Attack, Check, Ctx};

/// The honest client's player and token.
pub const HONEST_PLAYER: &str = "honest";
const HONEST_TOKEN: &str = "honest-upload-token";
/// Another player's token, for requests on the honest player's replays and keys.
const OTHER_TOKEN: &str = "other-upload-token";
/// Named by every path that tries to leave the store: no file may ever be called so.
pub const ESCAPE: &str = "escape-S3CR3T";

/// The token file's lines the replay scenarios need (beside the relay's publisher tokens).
pub fn token_lines() -> String {
    format!("player:{HONEST_PLAYER}:{HONEST_TOKEN}\nplayer:other:{OTHER_TOKEN}\n")
}

/// One hostile request and the statuses it may get (`0`: closed without a reply).
struct Case {
    name: &'static str,
    head: String,
    body: Vec<u8>,
    accepted: &'static [u16],
    /// The body trickles in, 64 bytes every 250 ms, until the run ends.
    trickle: bool,
    /// Refused by the HTTP parser before any route (bad framing): no JSON body owed.
    framing: bool,
    /// Unanswered at the end is right (a body that went silent, a reply never read).
    held: bool,
}

fn get(name: &'static str, path: &str, host: &str, extra: &str, accepted: &'static [u16]) -> Case {
    Case {
        name,
        head: format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n"),
        body: Vec::new(),
        accepted,
        trickle: false,
        framing: false,
        held: false,
    }
}

fn send(
    name: &'static str,
    method: &str,
    path: &str,
    host: &str,
    extra: &str,
    body: Vec<u8>,
    accepted: &'static [u16],
) -> Case {
    Case {
        name,
        head: format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Length: {}\r\n{extra}\r\n",
            body.len()
        ),
        body,
        accepted,
        trickle: false,
        framing: false,
        held: false,
    }
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// A replay of the honest player, `seconds` long, from `seed`.
fn replay(seed: u64, seconds: f32) -> Vec<u8> {
    let mut r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed,
        seconds,
        fps: 60,
    });
    r.info.player_id = BsorString::new(HONEST_PLAYER);
    bsor::to_vec(&r).unwrap_or_default()
}

/// A gzip member whose deflate stream inflates to `size` zero bytes: a literal zero, then
/// matches of 258 bytes at distance 1 in one fixed-Huffman block (13 bits each, so about
/// 160 times smaller than what it makes). Made by hand because the CLI has no compressor
/// of its own; the CRC and length trailer is zeros, as a bomb need not be honest (the
/// server must stop at its limit before it would read them).
pub fn gzip_bomb(size: u64) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= v << self.n;
            self.n += n;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code: most significant bit first.
        fn code(&mut self, c: u64, n: u32) {
            let rev = (0..n).fold(0, |r, i| r | ((c >> i) & 1) << (n - 1 - i));
            self.put(rev, n);
        }
    }
    let mut b = Bits {
        out: vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // BFINAL
    b.put(1, 2); // fixed Huffman
    b.code(0b0011_0000, 8); // literal 0
    for _ in 0..size.saturating_sub(1) / 258 {
        b.code(0b1100_0101, 8); // length 258 (code 285)
        b.code(0, 5); // distance 1
    }
    b.code(0, 7); // end of block
    b.put(0, 7);
    b.out.extend_from_slice(&[0; 8]);
    b.out
}

/// What the scenarios set up first: the honest player's seed replay and key.
struct Seed {
    id: String,
    key: String,
}

/// One request on its own connection from 127.0.0.1: the status and the body (at most
/// 4 MiB kept), or `None` when it failed or took past `deadline`.
async fn honest_request(
    addr: SocketAddr,
    head: &str,
    body: &[u8],
    deadline: Instant,
) -> Option<(u16, Vec<u8>)> {
    let work = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(head.as_bytes()).await.ok()?;
        s.write_all(body).await.ok()?;
        let mut buf = Vec::new();
        let mut piece = [0u8; 64 * 1024];
        loop {
            match s.read(&mut piece).await {
                Ok(0) | Err(_) => break,
                Ok(n) if buf.len() < 4 << 20 => buf.extend_from_slice(&piece[..n]),
                Ok(_) => {}
            }
        }
        split(&buf)
    };
    tokio::time::timeout_at(deadline, work).await.ok().flatten()
}

/// A reply's status and body.
fn split(buf: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let status = std::str::from_utf8(buf.get(9..12)?).ok()?.parse().ok()?;
    Some((status, buf[end..].to_vec()))
}

fn post(path: &str, host: &str, token: &str, len: usize, ctype: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{}\
         Content-Type: {ctype}\r\nContent-Length: {len}\r\n\r\n",
        bearer(token)
    )
}

/// Uploads the seed replay and registers the honest player's key.
async fn seed(ws: SocketAddr, deadline: Instant) -> Option<Seed> {
    let host = ws.to_string();
    let bytes = replay(1, 20.0);
    let head = post(
        "/replays",
        &host,
        HONEST_TOKEN,
        bytes.len(),
        "application/octet-stream",
    );
    let (status, body) = honest_request(ws, &head, &bytes, deadline).await?;
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    if status != 201 && status != 200 {
        return None;
    }
    let id = v["id"].as_str()?.to_string();
    let key = integrity::hex(
        integrity::SigningKey::from_bytes(&[42; 32])
            .verifying_key()
            .as_bytes(),
    );
    // Registered with its proof (http.md §8.13): a challenge, signed with the player and
    // server name the challenge names.
    let head = post(
        "/keys/challenge",
        &host,
        HONEST_TOKEN,
        0,
        "application/json",
    );
    let (status, body) = honest_request(ws, &head, b"", deadline).await?;
    let c: serde_json::Value = serde_json::from_slice(&body).ok()?;
    if status != 201 {
        return None;
    }
    let challenge: [u8; 32] = integrity::from_hex(c["challenge"].as_str()?)?
        .try_into()
        .ok()?;
    let signature = integrity::sign_key_registration(
        &integrity::SigningKey::from_bytes(&[42; 32]),
        c["player"].as_str()?,
        c["serverName"].as_str()?,
        &challenge,
    )
    .ok()?;
    let json = serde_json::json!({
        "key": key,
        "challenge": integrity::hex(&challenge),
        "signature": integrity::hex(&signature),
    })
    .to_string();
    let head = post("/keys", &host, HONEST_TOKEN, json.len(), "application/json");
    let (status, _) = honest_request(ws, &head, json.as_bytes(), deadline).await?;
    (status == 201 || status == 200).then_some(Seed { id, key })
}

/// The requests of `server-requests`: paths, queries, SQL, ranges, spans, tokens, keys.
fn request_cases(host: &str, s: &Seed) -> Vec<Case> {
    let id = &s.id;
    let key = &s.key;
    let long = "a".repeat(6000);
    let other = bearer(OTHER_TOKEN);
    let honest = bearer(HONEST_TOKEN);
    let bad = bearer("not-a-token-S3CR3T");
    vec![
        get(
            "`..` as an ID",
            &format!("/replays/../{ESCAPE}"),
            host,
            "",
            &[404, 400],
        ),
        get(
            "`%2e%2e` in an ID",
            &format!("/replays/%2e%2e%2f{ESCAPE}"),
            host,
            "",
            &[404],
        ),
        get(
            "`..%2f` to the index",
            "/replays/..%2findex.sqlite",
            host,
            "",
            &[404],
        ),
        get(
            "`..` under an ID",
            &format!("/replays/{id}/../../{ESCAPE}"),
            host,
            "",
            &[404, 400],
        ),
        get(
            "NUL in an ID",
            &format!("/replays/{id}%00"),
            host,
            "",
            &[404],
        ),
        get(
            "a 6,000-byte ID",
            &format!("/replays/{long}"),
            host,
            "",
            &[404, 414, 431],
        ),
        get(
            "`..` as a query value",
            &format!("/replays?player=..%2f..%2f{ESCAPE}"),
            host,
            "",
            &[400],
        ),
        get(
            "`%2e%2e` as a format",
            &format!("/replays/{id}?format=%2e%2e"),
            host,
            "",
            &[400],
        ),
        get(
            "NUL in a query value",
            "/replays?map=a%00b",
            host,
            "",
            &[400],
        ),
        get(
            "a 6,000-byte query value",
            &format!("/replays?map={long}"),
            host,
            "",
            &[400, 414, 431],
        ),
        get(
            "SQL quote in a search",
            "/replays?player=1'%20OR%20'1'='1",
            host,
            "",
            &[400],
        ),
        get(
            "SQL `;` in a search",
            "/replays?mode=x;DROP%20TABLE%20replays",
            host,
            "",
            &[400],
        ),
        get(
            "SQL comment, plain characters",
            "/replays?player=x--&difficulty=1.0-",
            host,
            "",
            &[200],
        ),
        get(
            "SQL in limit",
            "/replays?limit=1%20OR%201=1",
            host,
            "",
            &[400],
        ),
        get("a forged cursor", "/replays?cursor=zzzz", host, "", &[400]),
        get(
            "a key given twice",
            "/replays?player=a&player=b",
            host,
            "",
            &[400],
        ),
        get(
            "a range past the end",
            &format!("/replays/{id}"),
            host,
            "Range: bytes=999999999-\r\n",
            &[416],
        ),
        get(
            "an inverted range",
            &format!("/replays/{id}"),
            host,
            "Range: bytes=500-100\r\n",
            &[200, 416],
        ),
        get(
            "a range over u64",
            &format!("/replays/{id}"),
            host,
            "Range: bytes=0-99999999999999999999999\r\n",
            &[200, 416],
        ),
        get(
            "a thousand ranges",
            &format!("/replays/{id}"),
            host,
            &format!("Range: bytes={}\r\n", vec!["0-0"; 1000].join(",")),
            &[200, 206, 416, 431],
        ),
        get(
            "an inverted span",
            &format!("/replays/{id}/frames?from=9&to=1"),
            host,
            "",
            &[400],
        ),
        get(
            "a negative span",
            &format!("/replays/{id}/frames?from=-1"),
            host,
            "",
            &[400],
        ),
        get(
            "an infinite span",
            &format!("/replays/{id}/frames?to=1e39"),
            host,
            "",
            &[400],
        ),
        get(
            "a NaN span",
            &format!("/replays/{id}/frames?from=NaN"),
            host,
            "",
            &[400],
        ),
        send(
            "a delete without a token",
            "DELETE",
            &format!("/replays/{id}"),
            host,
            "",
            Vec::new(),
            &[401],
        ),
        send(
            "a delete with a bad token",
            "DELETE",
            &format!("/replays/{id}"),
            host,
            &bad,
            Vec::new(),
            &[401],
        ),
        send(
            "a delete with Basic auth",
            "DELETE",
            &format!("/replays/{id}"),
            host,
            "Authorization: Basic aG9uZXN0OngK\r\n",
            Vec::new(),
            &[401],
        ),
        send(
            "a delete by another player",
            "DELETE",
            &format!("/replays/{id}"),
            host,
            &other,
            Vec::new(),
            &[403],
        ),
        send(
            "an empty bearer",
            "DELETE",
            &format!("/replays/{id}"),
            host,
            "Authorization: Bearer \r\n",
            Vec::new(),
            &[401],
        ),
        get("reviews by a player", "/reviews", host, &honest, &[403]),
        send(
            "a PUT on a replay",
            "PUT",
            &format!("/replays/{id}"),
            host,
            &honest,
            b"x".to_vec(),
            &[405],
        ),
        send(
            "keys: another player's key, without proof",
            "POST",
            "/keys",
            host,
            &other,
            format!("{{\"key\": \"{key}\"}}").into_bytes(),
            &[400],
        ),
        send(
            "keys: another player's key, a made-up challenge and signature",
            "POST",
            "/keys",
            host,
            &other,
            format!(
                "{{\"key\": \"{key}\", \"challenge\": \"{}\", \"signature\": \"{}\"}}",
                "ab".repeat(32),
                "cd".repeat(64)
            )
            .into_bytes(),
            &[403],
        ),
        send(
            "keys: not JSON",
            "POST",
            "/keys",
            host,
            &honest,
            b"key=1".to_vec(),
            &[400],
        ),
        send(
            "keys: 31 bytes",
            "POST",
            "/keys",
            host,
            &honest,
            format!("{{\"key\": \"{}\"}}", &key[..62]).into_bytes(),
            &[400],
        ),
        send(
            "keys: not hex",
            "POST",
            "/keys",
            host,
            &honest,
            format!("{{\"key\": \"{}\"}}", "zz".repeat(32)).into_bytes(),
            &[400],
        ),
        send(
            "keys: a 64 KiB body",
            "POST",
            "/keys",
            host,
            &honest,
            vec![b' '; 64 << 10],
            &[413, 0],
        ),
        send(
            "keys: no token",
            "POST",
            "/keys",
            host,
            "",
            format!("{{\"key\": \"{key}\"}}").into_bytes(),
            &[401],
        ),
        send(
            "keys: a bad token",
            "POST",
            "/keys",
            host,
            &bad,
            format!("{{\"key\": \"{key}\"}}").into_bytes(),
            &[401],
        ),
        send(
            "keys: revoke by another player",
            "DELETE",
            &format!("/keys/{key}"),
            host,
            &other,
            Vec::new(),
            &[403],
        ),
        send(
            "keys: revoke `..`",
            "DELETE",
            &format!("/keys/..%2f..%2f{ESCAPE}"),
            host,
            &honest,
            Vec::new(),
            &[400],
        ),
        get(
            "keys: SQL in the player",
            "/keys?player='%20OR%201=1",
            host,
            "",
            &[400],
        ),
        get("keys: no player", "/keys", host, "", &[400]),
        get(
            "keys: GET of a key",
            &format!("/keys/{key}"),
            host,
            "",
            &[405],
        ),
        get(
            "verify `..`",
            &format!("/replays/..%2f{ESCAPE}/verify"),
            host,
            "",
            &[404],
        ),
    ]
}

/// The bodies of `server-bodies`: lying lengths, a gzip bomb, a trickle, garbage, cuts.
fn body_cases(host: &str, bomb: &Arc<Vec<u8>>, whole: &[u8]) -> Vec<Case> {
    let honest = bearer(HONEST_TOKEN);
    // An upload with no body whose head says `Content-Length: length`.
    let claimed = |name: &'static str, length: &str, accepted: &'static [u16]| {
        let mut c = send(
            name,
            "POST",
            "/replays",
            host,
            &honest,
            Vec::new(),
            accepted,
        );
        c.head = c
            .head
            .replace("Content-Length: 0", &format!("Content-Length: {length}"));
        c
    };
    let forged = claimed("a forged 1 TB Content-Length", "1099511627776", &[413]);
    let over = claimed(
        "a Content-Length 1 over 32 MiB",
        &((32u64 << 20) + 1).to_string(),
        &[413],
    );
    let mut negative = claimed("a negative Content-Length", "-1", &[400]);
    negative.framing = true;
    let mut trickle = claimed("a body that trickles in", "1000000", &[408]);
    trickle.trickle = true;
    let gz = format!("{honest}Content-Encoding: gzip\r\n");
    vec![
        forged,
        over,
        negative,
        trickle,
        send(
            "a gzip bomb (65 MiB of zeros)",
            "POST",
            "/replays",
            host,
            &gz,
            bomb.to_vec(),
            &[413],
        ),
        send(
            "a gzip bomb by its magic only",
            "POST",
            "/replays",
            host,
            &honest,
            bomb.to_vec(),
            &[413],
        ),
        send(
            "a truncated gzip body",
            "POST",
            "/replays",
            host,
            &gz,
            bomb[..1000].to_vec(),
            &[400],
        ),
        send(
            "Content-Encoding br",
            "POST",
            "/replays",
            host,
            &format!("{honest}Content-Encoding: br\r\n"),
            whole.to_vec(),
            &[415],
        ),
        send(
            "a Bsor-Witness header that is not base64",
            "POST",
            "/replays",
            host,
            &format!("{honest}Bsor-Witness: %%not base64%%\r\n"),
            whole.to_vec(),
            &[400],
        ),
        send(
            "64 KiB of garbage",
            "POST",
            "/replays",
            host,
            &honest,
            b"GARBAGE!".repeat(8192),
            &[400],
        ),
        send(
            "a BSOR cut in half",
            "POST",
            "/replays",
            host,
            &honest,
            whole[..whole.len() / 2].to_vec(),
            &[400],
        ),
        send(
            "a BSOR without a token",
            "POST",
            "/replays",
            host,
            "",
            whole.to_vec(),
            &[401],
        ),
        send(
            "a BSOR with a bad token",
            "POST",
            "/replays",
            host,
            &bearer("S3CR3T"),
            whole.to_vec(),
            &[401],
        ),
        send(
            "a BSOR by another player",
            "POST",
            "/replays",
            host,
            &bearer(OTHER_TOKEN),
            whole.to_vec(),
            &[403],
        ),
        send(
            "a JSON that is no legacy replay",
            "POST",
            "/replays",
            host,
            &honest,
            b"{\"frames\": [1, 2, ".to_vec(),
            &[400],
        ),
    ]
}

/// Sends one case and reads its reply: the status (`0` closed without one) and whether a
/// refusal's body was `{"error", "reason"}`; `None` while no reply came by `deadline`.
async fn run_case(s: &mut TcpStream, case: &Case, deadline: Instant) -> Option<(u16, bool)> {
    let mut buf = Vec::new();
    let mut piece = [0u8; 16 * 1024];
    if s.write_all(case.head.as_bytes()).await.is_err() {
        return Some((0, true));
    }
    if case.trickle {
        // 64 bytes every 250 ms, reading meanwhile for an answer.
        let bytes = [b'x'; 64];
        loop {
            if Instant::now() >= deadline {
                return None;
            }
            let _ = s.write_all(&bytes).await;
            match tokio::time::timeout(Duration::from_millis(250), s.read(&mut piece)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    buf.extend_from_slice(&piece[..n]);
                    break;
                }
                Err(_) => {}
            }
        }
    } else {
        // A refused body may not be read: the reply can come before all of it is sent.
        let _ = s.write_all(&case.body).await;
    }
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut piece)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) if buf.len() < 1 << 20 => buf.extend_from_slice(&piece[..n]),
            Ok(Ok(_)) => {}
        }
    }
    let Some((status, body)) = split(&buf) else {
        return Some((0, true));
    };
    let json = status < 400
        || serde_json::from_slice::<serde_json::Value>(&body)
            .is_ok_and(|v| v["error"].is_string() && v["reason"].is_string());
    Some((status, json))
}

/// The honest client's tally.
#[derive(Default)]
struct Tally {
    round_trips: AtomicU64,
    wrong: AtomicU64,
    busy: AtomicU64,
    /// The requests told busy, by what they asked for and the reason they were given.
    busy_at: Mutex<BTreeMap<String, u64>>,
    failed: AtomicU64,
    /// Seconds each honest request took, answered or not.
    latencies: Mutex<Vec<f64>>,
}

impl Tally {
    fn took(&self, since: Instant) {
        if let Ok(mut l) = self.latencies.lock() {
            l.push(since.elapsed().as_secs_f64());
        }
    }

    fn busy(&self, what: &'static str, body: &[u8]) {
        self.busy.fetch_add(1, Ordering::Relaxed);
        let reason = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["reason"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
        let reason: String = reason.chars().take(80).collect();
        if let Ok(mut b) = self.busy_at.lock() {
            *b.entry(format!("{what}: {reason}")).or_default() += 1;
        }
    }

    /// Which requests were told busy and why, e.g. " (BSOR: the server's rebuild slots are
    /// all taken … 2)".
    fn busy_list(&self) -> String {
        let b = self.busy_at.lock().map(|b| b.clone()).unwrap_or_default();
        if b.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = b.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!(" ({})", parts.join(", "))
    }
}

/// Uploads distinct replays as the honest player and reads each back (BSOR, events,
/// verify) until `until`, one request at a time from 127.0.0.1.
async fn honest(ws: SocketAddr, until: Instant, tally: Arc<Tally>) {
    let host = ws.to_string();
    let mut seed = 1000;
    while Instant::now() < until {
        seed += 1;
        let bytes = replay(seed, 10.0);
        let deadline = Instant::now() + Duration::from_secs(20);
        let head = post(
            "/replays",
            &host,
            HONEST_TOKEN,
            bytes.len(),
            "application/octet-stream",
        );
        let t = Instant::now();
        let up = honest_request(ws, &head, &bytes, deadline).await;
        tally.took(t);
        let id = match &up {
            Some((201 | 200, body)) => serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_string)),
            Some((503, body)) => {
                tally.busy("upload", body);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            _ => None,
        };
        let Some(id) = id else {
            tally.failed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut ok = true;
        for (what, path, want) in [
            ("BSOR", format!("/replays/{id}"), Some(&bytes)),
            ("events", format!("/replays/{id}/events"), None),
            ("verify", format!("/replays/{id}/verify"), None),
        ] {
            let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            let t = Instant::now();
            let got = honest_request(ws, &head, b"", deadline).await;
            tally.took(t);
            match got {
                Some((200, body)) if want.is_none_or(|w| *w == body) => {}
                Some((200, _)) => {
                    tally.wrong.fetch_add(1, Ordering::Relaxed);
                    ok = false;
                }
                Some((503, body)) => {
                    tally.busy(what, &body);
                    ok = false;
                }
                _ => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    ok = false;
                }
            }
        }
        if ok {
            tally.round_trips.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `server-requests` and `server-bodies`: every connection sends one case (in turn), while
/// the honest client uploads and reads back.
pub async fn attack(ctx: &Ctx, bodies: bool) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        let mut a = Attack::default();
        a.checks
            .push(check(false, "no WebSocket address (give --relay-ws)"));
        return a;
    };
    let until = grace(ctx);
    let Some(seeded) = seed(ws, until).await else {
        let mut a = Attack::default();
        a.checks.push(check(
            false,
            "the honest seed upload and key registration failed (is the server on --store, \
             with the scenario's tokens?)",
        ));
        return a;
    };
    let host = ws.to_string();
    let cases = Arc::new(if bodies {
        let bomb = Arc::new(gzip_bomb(65 << 20));
        body_cases(&host, &bomb, &replay(2, 20.0))
    } else {
        request_cases(&host, &seeded)
    });
    let tally = Arc::new(Tally::default());
    let honest_task = tokio::spawn(honest(ws, ctx.until, tally.clone()));
    let per_case: Arc<Vec<Mutex<BTreeMap<u16, u64>>>> =
        Arc::new((0..cases.len()).map(|_| Mutex::default()).collect());
    let not_json: Arc<Mutex<BTreeMap<&'static str, u64>>> = Arc::default();
    let (c2, p2, j2) = (cases.clone(), per_case.clone(), not_json.clone());
    let attack_until = ctx.until;
    let mut a = each(ctx, ctx.n, ws, move |i, mut s| {
        let (cases, per_case, not_json) = (c2.clone(), p2.clone(), j2.clone());
        async move {
            let k = i % cases.len();
            let deadline = if cases[k].trickle {
                attack_until
            } else {
                until
            };
            let Some((status, json)) = run_case(&mut s, &cases[k], deadline).await else {
                if cases[k].trickle {
                    if let Ok(mut m) = per_case[k].lock() {
                        // Still trickling at the end, unanswered: as it should be.
                        *m.entry(408).or_default() += 1;
                    }
                    return Outcome::Answered("still trickling, unanswered at the end");
                }
                return Outcome::Open;
            };
            if !json && !cases[k].framing {
                if let Ok(mut m) = not_json.lock() {
                    *m.entry(cases[k].name).or_default() += 1;
                }
            }
            if let Ok(mut m) = per_case[k].lock() {
                *m.entry(status).or_default() += 1;
            }
            Outcome::Answered("a status or a close")
        }
    })
    .await;
    let _ = honest_task.await;
    for (k, case) in cases.iter().enumerate() {
        a.checks.push(clients::statuses(
            case.name,
            case.accepted,
            &per_case[k],
            k < ctx.n,
        ));
    }
    let bare = not_json.lock().map(|m| m.clone()).unwrap_or_default();
    let named: Vec<String> = bare.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    a.checks.push(check(
        bare.is_empty(),
        format!(
            "refusals without a JSON {{error, reason}} body: {}",
            if named.is_empty() {
                "none".to_string()
            } else {
                named.join(", ")
            }
        ),
    ));
    a.checks.extend(judge_honest(&tally));
    a
}

/// `server-exhaust`: a 1-hour replay stored, then every connection one case of the
/// amplifying and locking attacks, while the honest client uploads and reads back from
/// 127.0.0.1 (its latencies judged).
pub async fn exhaust(ctx: &Ctx) -> Attack {
    let Some(ws) = ctx.relay.ws else {
        let mut a = Attack::default();
        a.checks
            .push(check(false, "no WebSocket address (give --relay-ws)"));
        return a;
    };
    let until = grace(ctx);
    let host = ws.to_string();
    // The 1-hour replay, another player's (about 20 MB of BSOR).
    let big = {
        let mut r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
            seed: 77,
            seconds: 3600.0,
            fps: 60,
        });
        r.info.player_id = BsorString::new("other");
        bsor::to_vec(&r).unwrap_or_default()
    };
    let head = post(
        "/replays",
        &host,
        OTHER_TOKEN,
        big.len(),
        "application/octet-stream",
    );
    let setup = Instant::now() + Duration::from_secs(120);
    let big_id = match honest_request(ws, &head, &big, setup).await {
        Some((201 | 200, body)) => serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string)),
        _ => None,
    };
    let Some(big_id) = big_id else {
        let mut a = Attack::default();
        a.checks.push(check(
            false,
            "the 1-hour replay's upload failed (is the server on --store?)",
        ));
        return a;
    };
    drop(big);
    let path = format!("/replays/{big_id}");
    let mut cases = vec![
        get(
            "JSON export, never read",
            &format!("{path}?format=json"),
            &host,
            "",
            &[200, 503],
        ),
        {
            let mut c = get(
                "HEAD of the JSON export",
                &format!("{path}?format=json"),
                &host,
                "",
                &[200, 503],
            );
            c.head = c.head.replacen("GET", "HEAD", 1);
            c
        },
        get(
            "one byte of the BSOR",
            &path,
            &host,
            "Range: bytes=0-0\r\n",
            &[206, 503],
        ),
        get("whole BSOR, never read", &path, &host, "", &[200, 503]),
        {
            let mut c = Case {
                name: "32 MiB declared, 1 MiB sent, silence",
                head: post(
                    "/replays",
                    &host,
                    HONEST_TOKEN,
                    32 << 20,
                    "application/octet-stream",
                ),
                body: vec![b'x'; 1 << 20],
                accepted: &[408, 503],
                trickle: false,
                framing: false,
                held: true,
            };
            c.head = c.head.replace("Connection: close\r\n", "");
            c
        },
    ];
    // The large bodies, on the first connections only (each is 32 MiB or more on the wire).
    let large = vec![
        Case {
            name: "32 MiB sent whole as a chunked body, then silence",
            head: format!(
                "POST /replays HTTP/1.1\r\nHost: {host}\r\n{}Transfer-Encoding: chunked\r\n\r\n",
                bearer(HONEST_TOKEN)
            ),
            body: chunked_body(32 << 20, false),
            accepted: &[408, 413, 503],
            trickle: false,
            framing: false,
            held: true,
        },
        Case {
            name: "40 MiB chunked",
            head: format!(
                "POST /replays HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{}\
                 Transfer-Encoding: chunked\r\n\r\n",
                bearer(HONEST_TOKEN)
            ),
            body: chunked_body(40 << 20, true),
            accepted: &[413, 503],
            trickle: false,
            framing: false,
            held: false,
        },
    ];
    let small = cases.len();
    cases.extend(large);
    let cases = Arc::new(cases);
    let tally = Arc::new(Tally::default());
    let honest_task = tokio::spawn(honest(ws, ctx.until, tally.clone()));
    let per_case: Arc<Vec<Mutex<BTreeMap<u16, u64>>>> =
        Arc::new((0..cases.len()).map(|_| Mutex::default()).collect());
    let (c2, p2) = (cases.clone(), per_case.clone());
    let attack_until = ctx.until;
    let mut a = each(ctx, ctx.n, ws, move |i, mut s| {
        let (cases, per_case) = (c2.clone(), p2.clone());
        async move {
            let k = if i < 2 * (cases.len() - small) {
                small + i % (cases.len() - small)
            } else {
                i % small
            };
            let case = &cases[k];
            let deadline = if case.held { attack_until } else { until };
            match run_case(&mut s, case, deadline).await {
                Some((status, _)) => {
                    if let Ok(mut m) = per_case[k].lock() {
                        *m.entry(status).or_default() += 1;
                    }
                    Outcome::Answered("a status or a close")
                }
                None if case.held => {
                    if let Ok(mut m) = per_case[k].lock() {
                        // Held open to the end, as it should be (counted as its first
                        // accepted status).
                        *m.entry(case.accepted[0]).or_default() += 1;
                    }
                    Outcome::Answered("held open to the end")
                }
                None => Outcome::Open,
            }
        }
    })
    .await;
    let _ = honest_task.await;
    for (k, case) in cases.iter().enumerate() {
        a.checks.push(clients::statuses(
            case.name,
            case.accepted,
            &per_case[k],
            k < ctx.n,
        ));
    }
    a.checks.extend(judge_honest(&tally));
    let mut l = tally
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    l.sort_by(f64::total_cmp);
    let p99 = l
        .get(((l.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::INFINITY);
    let busy = tally.busy.load(Ordering::Relaxed);
    a.checks.push(check(
        p99 < 1.0 && busy == 0,
        format!(
            "honest requests: p99 {:.0} ms over {} (< 1,000 ms), {busy} told busy{}",
            p99 * 1e3,
            l.len(),
            tally.busy_list()
        ),
    ));
    a
}

/// A chunked body of `size` data bytes in 1 MiB chunks; with its last chunk when `ends`.
fn chunked_body(size: usize, ends: bool) -> Vec<u8> {
    let chunk = 1 << 20;
    let mut out = Vec::with_capacity(size + size / chunk * 16 + 8);
    let data = vec![b'x'; chunk];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk);
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&data[..n]);
        out.extend_from_slice(b"\r\n");
        left -= n;
    }
    if ends {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    out
}

fn judge_honest(t: &Tally) -> Vec<Check> {
    let (ok, wrong, busy, failed) = (
        t.round_trips.load(Ordering::Relaxed),
        t.wrong.load(Ordering::Relaxed),
        t.busy.load(Ordering::Relaxed),
        t.failed.load(Ordering::Relaxed),
    );
    vec![check(
        ok > 0 && wrong == 0 && failed == 0,
        format!(
            "honest client: {ok} uploads read back whole (BSOR byte for byte, events, \
                 verify), {wrong} wrong, {failed} failed, {busy} told busy (503)"
        ),
    )]
}

/// After the server ended: nothing named by a traversal exists in its folder or beside
/// it, and the store holds only the index and blobs under `replays/` and `reviews/`.
pub fn store_checks(dir: &Path, store: &Path) -> Vec<Check> {
    let mut escaped = Vec::new();
    let mut odd = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.to_string_lossy().contains(ESCAPE) {
                escaped.push(p.display().to_string());
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            if let Ok(rel) = p.strip_prefix(store) {
                let rel = rel.to_string_lossy();
                let fine = rel.is_empty()
                    || rel.starts_with("index.sqlite")
                    || rel == "replays"
                    || rel == "reviews"
                    // The spool's folder, empty once every request ended.
                    || rel == "spool"
                    || ((rel.starts_with("replays/") || rel.starts_with("reviews/"))
                        && (rel.ends_with(".bsors") || rel.ends_with(".statement.json")));
                if !fine {
                    odd.push(rel.into_owned());
                }
            }
        }
    }
    // Beside the folder too (the system's temporary directory).
    if let Some(parent) = dir.parent() {
        for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().contains(ESCAPE) {
                escaped.push(e.path().display().to_string());
            }
        }
    }
    vec![
        check(
            escaped.is_empty(),
            format!(
                "no file named by a traversal exists ({})",
                escaped.join(", ")
            ),
        ),
        check(
            odd.is_empty(),
            format!(
                "the store holds only its index and blobs ({})",
                odd.join(", ")
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bomb_inflates_to_its_size() {
        // The library's inflater, bounded above the size: it reads the whole block.
        let bomb = super::gzip_bomb(1 << 20);
        assert!(bomb.len() < 8 << 10, "{}", bomb.len());
        match bsor_stream::server::inflate(&bomb, 2 << 20) {
            // The zero trailer fails the CRC once the block is read: all of it was there.
            Err(e) => assert_eq!(e.code, "bad-encoding", "{}", e.reason),
            Ok(v) => panic!("a bomb with a zero CRC inflated to {} bytes", v.len()),
        }
        let stopped = bsor_stream::server::inflate(&bomb, 100 << 10).unwrap_err();
        assert_eq!(stopped.cause, bsor_stream::server::Cause::TooLarge);
    }
}
