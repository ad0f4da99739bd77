//! What the replay server promises a careless or hostile client (proto-spec/http.md §8.2,
//! §8.3), on 127.0.0.1: a body over the limit gets its `413` as soon as the limit is passed,
//! chunked or not, whatever its chunks' sizes; and an acknowledged upload's blob is on disk
//! (synced) before its index row names it.

use std::sync::Arc;
use std::time::Duration;

use bsor_stream_server::admission::{PATIENCE, RECLAIM_AFTER};
use bsor_stream_server::{Config, Index, ReplayServer, Store, Uploaders};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::replay_http;
use replay_http::*;

async fn open(dir: &std::path::Path, config: Config) -> Arc<ReplayServer> {
    let store = Store::directory(&dir.join("store")).unwrap();
    let url = format!("sqlite://{}", dir.join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    ReplayServer::new(store, index, config, Uploaders::parse(TOKENS))
}

/// Sends a chunked upload of `total` body bytes in chunks of `chunk` bytes, as fast as the
/// server reads; returns the status line the server answered with, if any.
async fn chunked(addr: std::net::SocketAddr, total: usize, chunk: usize) -> Option<String> {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /replays HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer tok1\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    let writer = tokio::spawn(async move {
        let data = vec![b'x'; chunk];
        let mut framed = Vec::new();
        framed.extend_from_slice(format!("{chunk:x}\r\n").as_bytes());
        framed.extend_from_slice(&data);
        framed.extend_from_slice(b"\r\n");
        let mut sent = 0;
        while sent < total {
            if wr.write_all(&framed).await.is_err() {
                return wr;
            }
            sent += chunk;
        }
        let _ = wr.write_all(b"0\r\n\r\n").await;
        // Held open until the reply is read: a closed write side aborts the request.
        std::future::pending::<()>().await;
        wr
    });
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
        if reply.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    writer.abort();
    let text = String::from_utf8_lossy(&reply).to_string();
    text.lines().next().map(str::to_string)
}

/// A chunked body over the limit is refused `413` once the limit is passed, with large
/// chunks and with one-byte chunks (whose framing is five times the data): the framing does
/// not count against the limit, so reading never stalls short of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_gets_its_413() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_body: 256 << 10,
        ..Config::default()
    };
    let addr = listen(open(dir.path(), config).await).await;
    for (total, chunk) in [(1 << 20, 16 << 10), (300 << 10, 1), (300 << 10, 7)] {
        let status = tokio::time::timeout(Duration::from_secs(20), chunked(addr, total, chunk))
            .await
            .unwrap_or_else(|_| panic!("no answer within 20 s ({total} bytes in {chunk})"));
        let status = status.expect("a status line");
        assert!(
            status.contains(" 413 "),
            "{status} ({total} bytes in {chunk})"
        );
    }
    // A chunked body within the limit is read whole (and refused for what it is, a body
    // of x's: not a replay).
    for chunk in [1, 4096] {
        let status = chunked(addr, 200 << 10, chunk)
            .await
            .expect("a status line");
        assert!(status.contains(" 400 "), "{status}");
    }
}

/// Opens a raw connection and sends `head` (and `body`), without reading: a client that
/// asked and went quiet.
async fn quiet(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(body).await.unwrap();
    sock
}

/// Reads a reply's status line from `sock`.
async fn status_of(sock: &mut TcpStream) -> u16 {
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while !reply.windows(2).any(|w| w == b"\r\n") {
        match tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => reply.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&reply)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Expensive replies are admitted, not queued: with one rebuild and one export per address,
/// a client that holds a download unread gets the next one refused `503` `busy` with
/// `Retry-After`, and the share comes back when that client leaves (the work stops with it,
/// even while its pace holds the next piece).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expensive_replies_are_admitted_per_address_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    // A slow pace (64 KiB a second) keeps a held reply in progress, whatever the socket
    // buffers could take.
    let mut config = Config {
        download_span: 16 << 10,
        address_rate: 64 << 10,
        ..Config::default()
    };
    config.caps.rebuilds_per_address = 1;
    config.caps.exports_per_address = 1;
    let srv = open(dir.path(), config).await;
    let addr = listen(srv.clone()).await;
    let bytes = bsor_stream_core::bsor::to_vec(&play(21, 240.0, "p1")).unwrap();
    let id = created(&srv, &bytes, "p1").await.id;
    for (what, path) in [
        ("BSOR", format!("/replays/{id}")),
        ("JSON", format!("/replays/{id}?format=json")),
        ("stream", format!("/replays/{id}?format=bsors")),
    ] {
        // Held: the reply's head is read, its body is not.
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut held = quiet(addr, &head, b"").await;
        assert_eq!(status_of(&mut held).await, 200, "{what}");
        let second = request(addr, "GET", &path, &[], b"").await;
        assert_refusal(&second, 503, "busy");
        assert_eq!(second.header("retry-after"), Some("1"), "{what}");
        // Other work from the same address is not held up: a HEAD and the events.
        let h = request(addr, "HEAD", &path, &[], b"").await;
        assert_eq!(h.status, 200, "{what}");
        drop(held);
        // The share comes back once the server notices the peer left.
        assert!(
            all_given_back(&srv).await,
            "{what}: the share was not given back after the client left"
        );
        let mut again = quiet(addr, &head, b"").await;
        assert_eq!(status_of(&mut again).await, 200, "{what}");
        drop(again);
        assert!(all_given_back(&srv).await, "{what}: a share was kept");
    }
}

/// Reads what is left of a reply on `sock` until the peer closes (at most 30 s).
async fn rest_of(sock: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Opens a connection with a small receive buffer and asks for `path` without reading
/// the reply: a client that holds a reply it does not take.
async fn holding(addr: std::net::SocketAddr, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 << 10).unwrap();
    let mut sock = socket.connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    sock.write_all(head.as_bytes()).await.unwrap();
    sock
}

/// A client that does not read its replies cannot keep the server's shares from one that
/// does, from however many addresses it asks: once the server's cap is full, the share of
/// the reply that has waited longest for its peer (`RECLAIM_AFTER` or more) goes to the
/// next request, and that reply is cut (short of its length, or a chunked body without its
/// last chunk, never ending as if whole). Until then, the next request waits for
/// it (up to `PATIENCE`), holding nothing, rather than being told `busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_reads_give_their_shares_to_those_who_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        download_span: 16 << 10,
        ..Config::default()
    };
    config.caps = config.caps.without_address_caps();
    config.caps.rebuilds = 2;
    config.caps.exports = 1;
    let srv = open(dir.path(), config).await;
    let addr = listen(srv.clone()).await;
    // Longer than what the socket buffers on both sides take (about 7 MB of BSOR).
    let bytes = bsor_stream_core::bsor::to_vec(&play(22, 900.0, "p1")).unwrap();
    let id = created(&srv, &bytes, "p1").await.id;
    let path = format!("/replays/{id}");

    let mut held = Vec::new();
    for _ in 0..2 {
        let mut h = holding(addr, &path).await;
        assert_eq!(status_of(&mut h).await, 200);
        held.push(h);
    }
    // Both slots are held by replies that have just begun to wait for their peers: the
    // next request waits until one has waited `RECLAIM_AFTER`, and gets its share.
    let t = std::time::Instant::now();
    let got = request(addr, "GET", &path, &[], b"").await;
    assert_eq!(got.status, 200);
    let waited = t.elapsed();
    assert!(
        waited > RECLAIM_AFTER / 2 && waited < PATIENCE + Duration::from_secs(1),
        "answered after {waited:?}"
    );
    assert!(got.body == bytes, "the reader's download is not the BSOR");
    let mut cut = 0;
    for mut h in held {
        // Read what is left: a cut reply closes short of its length.
        let rest = rest_of(&mut h).await;
        if rest.len() < bytes.len() {
            cut += 1;
        }
    }
    assert!(cut >= 1, "no held reply was cut");
    assert!(all_given_back(&srv).await, "a share was kept");

    // The JSON export (chunked): cut without its last chunk.
    let json_path = format!("{path}?format=json");
    let mut h = holding(addr, &json_path).await;
    assert_eq!(status_of(&mut h).await, 200);
    let got = request(addr, "GET", &json_path, &[], b"").await;
    assert_eq!(got.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(v["info"]["playerID"], "p1");
    let rest = rest_of(&mut h).await;
    assert!(
        !rest.ends_with(b"\r\n0\r\n\r\n"),
        "the cut export ended as if whole"
    );
    assert!(all_given_back(&srv).await, "a share was kept");
}

/// Waits (at most 5 s) until no rebuild or export share is held.
async fn all_given_back(srv: &ReplayServer) -> bool {
    for _ in 0..100 {
        if srv.admission.rebuilds.held(None).0 == 0 && srv.admission.exports.held(None).0 == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Upload bodies go to disk and cannot lock each other out: a client that sent part of a
/// large body and went silent holds only its own spool share, so a small upload (and a key
/// challenge) from another connection is answered at once; a second large body from the same
/// address over its share is refused `503` at once, not queued; the silent one is cut `408`
/// once the minimum rate lapses after the grace period, and its share comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_bodies_cannot_lock_each_other_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        max_body: 8 << 20,
        body_grace: Duration::from_secs(2),
        min_body_rate: 1 << 20,
        spool_dir: Some(dir.path().join("spool")),
        ..Config::default()
    };
    std::fs::create_dir_all(dir.path().join("spool")).unwrap();
    config.caps.spool_bytes_per_address = 6 << 20;
    let srv = open(dir.path(), config).await;
    let addr = listen(srv.clone()).await;
    // 8 MiB declared, 1 MiB sent, then silence.
    let head = format!(
        "POST /replays HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok1\r\n\
         Content-Length: {}\r\n\r\n",
        8 << 20
    );
    let started = std::time::Instant::now();
    let mut silent = quiet(addr, &head, &vec![b'x'; 1 << 20]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // What it sent is held, not what it declared.
    assert_eq!(srv.admission.spool.held(None).0, 1 << 20);
    // A small upload is answered meanwhile.
    let bytes = bsor_stream_core::bsor::to_vec(&play(22, 20.0, "p1")).unwrap();
    let t = std::time::Instant::now();
    let r = upload(addr, "tok1", &bytes).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Another 8 MiB from this address goes over its 6 MiB as it comes: refused then, not
    // queued.
    let big = format!(
        "POST /replays HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok1\r\n\
         Content-Length: {}\r\n\r\n",
        8 << 20
    );
    let second = TcpStream::connect(addr).await.unwrap();
    let (mut rx, mut tx) = second.into_split();
    let sender = tokio::spawn(async move {
        let _ = tx.write_all(big.as_bytes()).await;
        let _ = tx.write_all(&vec![b'y'; 8 << 20]).await;
        tx
    });
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), rx.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply:?}");
    drop(sender);
    // The silent body is cut with 408 after the grace period, and its share comes back.
    assert_eq!(status_of(&mut silent).await, 408);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(srv.admission.spool.held(None).0, 0);
    // Nothing is left in the spool folder.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("spool"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{} spooled files left", left.len());
}
