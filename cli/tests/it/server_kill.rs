//! `serve --store` killed with SIGKILL in the middle of an upload (`proto-spec/http.md`
//! §8.3), run as a user would on 127.0.0.1: while the body is still arriving; as soon as
//! the whole body is sent; and once the upload's lease is in the index (so after the
//! server read and parsed the whole body, before it committed and answered). Started again
//! on the same store and index, the server holds each replay whole and listed, or not at
//! all; no index row points at a missing blob; and once the sweeper has run (leases of
//! 1 s, a sweep a second) no blob is left that no row points at, and no lease.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bsor_stream::server::{plan, Index};
use bsor_stream::{bsor, synth};

/// The player synthetic replays are recorded by, and its upload token.
const PLAYER: &str = "76561190000000000";
const TOKEN: &str = "up";

struct Serve {
    child: Child,
    ws: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// SIGKILL, and the process reaped.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// `serve` on 127.0.0.1 with the replay server's store in `dir/store` (its SQLite index in
/// it), 1 s leases and a sweep every second.
fn serve(dir: &Path) -> Serve {
    let tokens = dir.join("tokens.txt");
    std::fs::write(&tokens, format!("tok\nplayer:{PLAYER}:{TOKEN}\n")).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(["serve", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&tokens)
        .arg("--store")
        .arg(dir.join("store"))
        .args(["--lease-seconds", "1", "--sweep-seconds", "1"])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ws = line
        .trim()
        .split_once(" ws=")
        .map(|(_, ws)| ws.to_string())
        .expect(&line);
    Serve { child, ws }
}

/// A distinct 4-minute synthetic replay (about 2 MB of BSOR).
fn replay(seed: u64) -> Vec<u8> {
    let r = synth::replay(synth::Settings {
        seed,
        seconds: 240.0,
        fps: 90,
    });
    bsor::to_vec(&r).unwrap()
}

/// An upload's connection with its request head sent.
fn start_upload(addr: &str, len: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /replays HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// A GET's status and body.
fn get(addr: &str, target: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let status = String::from_utf8_lossy(&all[..end])
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (status, all[end..].to_vec())
}

/// Every file under `dir`, as paths relative to it.
fn files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p: PathBuf = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// What is wrong with the store and index as they stand: rows whose blob is missing,
/// blobs (and statements) no row points at, leases left.
fn leftovers(rt: &tokio::runtime::Runtime, store: &Path) -> Vec<String> {
    rt.block_on(async {
        let url = format!("sqlite://{}", store.join("index.sqlite").display());
        let index = Index::open(&url).await.unwrap();
        let rows = index.blobs(1000).await.unwrap();
        let leases = index.expired(i64::MAX, 1000).await.unwrap();
        index.close().await;
        let mut wrong = Vec::new();
        for b in &rows {
            if !store.join(b).is_file() {
                wrong.push(format!("row -> missing blob {b}"));
            }
        }
        for f in files(store) {
            if f.starts_with("index.sqlite") {
                continue;
            }
            let blob = f.strip_suffix(".statement.json").unwrap_or(&f);
            if !rows.iter().any(|r| r == blob) {
                wrong.push(format!("orphan file {f}"));
            }
        }
        for l in leases {
            wrong.push(format!("lease left on {l}"));
        }
        wrong
    })
}

#[test]
fn a_server_killed_mid_upload_leaves_each_replay_whole_or_absent() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut uploads = Vec::new();

    // 1. Killed while the body is arriving: half of it sent, the rest never.
    let srv = serve(dir.path());
    let bytes = replay(1);
    let mut s = start_upload(&srv.ws, bytes.len());
    s.write_all(&bytes[..bytes.len() / 2]).unwrap();
    srv.kill();
    drop(s);
    uploads.push(bytes);

    // 2. Killed as soon as the whole body is sent (the server may be reading it, parsing
    // it, or storing it).
    let srv = serve(dir.path());
    let bytes = replay(2);
    let mut s = start_upload(&srv.ws, bytes.len());
    s.write_all(&bytes).unwrap();
    srv.kill();
    drop(s);
    uploads.push(bytes);

    // 3. Killed once the upload's lease is written (seen in the index), before its commit:
    // the blob may be written or not, the row is not; tried with up to 6 replays until the
    // lease is seen before the commit.
    let url = format!("sqlite://{}", store.join("index.sqlite").display());
    let index = rt.block_on(Index::open(&url)).unwrap();
    let mut leased = false;
    for seed in 10..16 {
        let old = rt.block_on(index.expired(i64::MAX, 1000)).unwrap();
        let srv = serve(dir.path());
        let bytes = replay(seed);
        let id = plan::replay_id(&bytes);
        let mut s = start_upload(&srv.ws, bytes.len());
        s.write_all(&bytes).unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let seen = loop {
            let now = rt.block_on(index.expired(i64::MAX, 1000)).unwrap();
            if now.iter().any(|l| !old.contains(l)) {
                break true;
            }
            if rt.block_on(index.get(&id)).unwrap().is_some() {
                break false;
            }
            assert!(
                Instant::now() < until,
                "the upload neither leased nor committed"
            );
        };
        srv.kill();
        drop(s);
        uploads.push(bytes);
        if seen {
            leased = true;
            break;
        }
    }
    rt.block_on(index.close());
    assert!(leased, "no kill landed between a lease and its commit");

    // Started again on the same store and index.
    let srv = serve(dir.path());
    for bytes in &uploads {
        let id = plan::replay_id(bytes);
        let (status, body) = get(&srv.ws, &format!("/replays/{id}"));
        let (_, list) = get(&srv.ws, &format!("/replays?player={PLAYER}&limit=100"));
        let listed = String::from_utf8_lossy(&list).contains(&id);
        match status {
            200 => {
                assert!(body == *bytes, "replay {id} is there but not whole");
                assert!(listed, "replay {id} is there but not listed");
            }
            404 => assert!(!listed, "replay {id} is listed but absent"),
            other => panic!("replay {id}: status {other}"),
        }
    }
    // The sweeper (every second, leases of 1 s) clears what the kills left.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let wrong = leftovers(&rt, &store);
        if wrong.is_empty() {
            break;
        }
        assert!(Instant::now() < until, "left after the sweeps: {wrong:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    srv.kill();
}
