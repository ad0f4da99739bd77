//! What the replay server promises a careless or hostile client (proto-spec/http.md §8.2,
//! §8.3), on 127.0.0.1: a body over the limit gets its `413` as soon as the limit is passed,
//! chunked or not, whatever its chunks' sizes; and an acknowledged upload's blob is on disk
//! (synced) before its index row names it.

#![cfg(feature = "server")]

use std::sync::Arc;
use std::time::Duration;

use bsor_stream::server::{Config, Index, ReplayServer, Store, Uploaders};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "common/replay_http.rs"]
mod replay_http;
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
