//! What the replay server's tests share: synthetic plays, the relay's HTTP on 127.0.0.1
//! answering `/replays`, and one request at a time over its own connection.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bsor_stream_core::bsor::{BsorString, Replay};
use bsor_stream_core::net::relay::{RelayConfig, Tokens};
use bsor_stream_core::synth;
use bsor_stream_relay::http::Assets;
use bsor_stream_relay::server::{Server, ServerConfig};
use bsor_stream_relay::ws;
use bsor_stream_server::{self as server, Record, ReplayServer, Uploaded};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The token file of the tests: a publisher, players p1 and p2, an admin.
pub const TOKENS: &str = "publisher\nplayer:p1:tok1\nplayer:p2:tok2\nadmin:root\n";

/// A replay of player `player` (`seconds` long, from `seed`).
pub fn play(seed: u64, seconds: f32, player: &str) -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 60,
    });
    r.info.player_id = BsorString::new(player);
    r
}

/// The relay's HTTP on 127.0.0.1 with `srv` answering `/replays`.
pub async fn listen(srv: Arc<ReplayServer>) -> SocketAddr {
    listen_with_maps(srv, None).await
}

/// The same, the relay serving `GET /maps/HASH.zip` from `maps` when given.
pub async fn listen_with_maps(
    srv: Arc<ReplayServer>,
    maps: Option<&std::path::Path>,
) -> SocketAddr {
    let relay = Server::new(
        RelayConfig::default(),
        Tokens::parse("publisher"),
        ServerConfig::default(),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let options = ws::WsOptions {
        tls: None,
        allowed_origins: Vec::new(),
    };
    let mut assets = Assets::new(Vec::<(String, bytes::Bytes)>::new())
        .with_mount(Arc::new(bsor_stream_server::http::Routes::new(srv)));
    if let Some(dir) = maps {
        assets = assets.with_maps(dir);
    }
    tokio::spawn(ws::serve_site(l, relay, options, assets));
    addr
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One request on its own connection (`Connection: close`), the reply read to the end.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await.unwrap();
    // A refused body may not be read: the reply can come before all of it is sent.
    let _ = sock.write_all(body).await;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), sock.read_to_end(&mut buf))
        .await
        .expect("a reply within 30 s")
        .ok();
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a reply head")
        + 4;
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers_say_chunked(&headers);
    Reply {
        status,
        body: if chunked {
            dechunk(&buf[end..])
        } else {
            buf[end..].to_vec()
        },
        headers,
    }
}

fn headers_say_chunked(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
}

/// A chunked body's data, as far as its chunks are whole (a body cut short gives what came).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size else { return out };
        b = &b[eol + 2..];
        if size == 0 || b.len() < size {
            out.extend_from_slice(&b[..size.min(b.len())]);
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..).unwrap_or(&[]);
    }
}

pub async fn upload(addr: SocketAddr, token: &str, body: &[u8]) -> Reply {
    let auth = format!("Bearer {token}");
    request(addr, "POST", "/replays", &[("Authorization", &auth)], body).await
}

pub fn assert_refusal(r: &Reply, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let j = r.json();
    assert_eq!(j["error"], code, "{j}");
    assert!(!j["reason"].as_str().unwrap().is_empty());
}

/// Stores `bytes` as an upload by `player`, which must be new: its record.
pub async fn created(srv: &ReplayServer, bytes: &[u8], player: &str) -> Record {
    let prepared = server::prepare(bytes, false, &srv.config, player).unwrap();
    let Uploaded::Created(r) = srv.upload(prepared).await.unwrap() else {
        panic!("not created");
    };
    r
}
