//! TLS and WebSocket as browsers speak it, over real sockets on 127.0.0.1: publishers and
//! viewers over TLS TCP and `wss://` with a certificate the test makes (a CA and a relay
//! certificate it signs), a client that does not trust it, a plaintext client on a TLS port,
//! and the HTTP replies to bad WebSocket upgrades. Each test is bounded in time.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use bsor_stream_core::net::client::{ClientConfig, ClientEvent, Subscription};
use bsor_stream_core::net::publisher::{self, thread::Publisher, Input, Target};
use bsor_stream_core::net::relay::{RelayConfig, Tokens};
use bsor_stream_core::net::tls;
use bsor_stream_core::net::wire::{Message, Role, ViewMode, DEFAULT_MAX_FRAME};
use bsor_stream_core::stream::{split_stream, Profile, Settings};
use bsor_stream_core::{synth, transcode};
use bsor_stream_relay::publish;
use bsor_stream_relay::server::{Server, ServerConfig};
use bsor_stream_relay::viewer::{self, Endpoint};
use bsor_stream_relay::{tcp, ws};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every test's bound.
const LIMIT: Duration = Duration::from_secs(60);

/// A CA, a relay certificate for 127.0.0.1 and localhost signed by it, and an unrelated
/// CA, as PEM files in a folder removed on drop.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_cert = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap(), key)
    };
    let (ca, ca_key) = ca_cert("test CA");
    let (other, _) = ca_cert("another CA");
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let file = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: file("ca.pem", ca.pem()),
        other_ca: file("other-ca.pem", other.pem()),
        cert: file("relay.pem", leaf.pem()),
        key: file("relay.key", leaf_key.serialize_pem()),
        _dir: dir,
    }
}

/// A synthetic song as a finished live stream: the file without its footer (what a viewer
/// receives), the header and the chunks.
struct Song {
    streamed: Vec<u8>,
    header: Bytes,
    chunks: Vec<Bytes>,
}

fn song(seed: u64, seconds: f32) -> Song {
    let r = synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 90,
    });
    let file = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (_, header_len, spans) = split_stream(&file).unwrap();
    Song {
        header: Bytes::copy_from_slice(&file[..header_len]),
        chunks: spans
            .iter()
            .map(|c| Bytes::copy_from_slice(c.bytes(&file)))
            .collect(),
        streamed: file[..file.len() - 16].to_vec(),
    }
}

/// A relay on loopback with TLS on its TCP and WebSocket listeners.
struct Relay {
    tcp: String,
    ws: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The archive folder: a viewer whose subscription arrives after a fast publisher has
    /// finished (on a loaded machine) is served the ended session from it.
    _archive: tempfile::TempDir,
}

impl Drop for Relay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn tls_relay(pki: &Pki, config: RelayConfig) -> Relay {
    let archive = tempfile::tempdir().unwrap();
    let server = Server::new(
        config,
        Tokens::parse("tok\n"),
        ServerConfig {
            archive: Some(archive.path().to_path_buf()),
            ..ServerConfig::default()
        },
    )
    .unwrap();
    let tls = tls::server_config(&pki.cert, &pki.key).unwrap();
    let t = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tcp, ws) = (
        t.local_addr().unwrap().to_string(),
        w.local_addr().unwrap().to_string(),
    );
    let options = ws::WsOptions {
        tls: Some(tls.clone()),
        allowed_origins: Vec::new(),
    };
    let tasks = vec![
        tokio::spawn(tcp::serve_tls(t, server.clone(), tls)),
        tokio::spawn(ws::serve_with(w, server, options)),
    ];
    Relay {
        tcp,
        ws,
        tasks,
        _archive: archive,
    }
}

fn target(addr: &str, websocket: bool, ca: &std::path::Path, session: &str) -> Target {
    Target {
        addr: addr.into(),
        websocket,
        ca_file: Some(ca.to_path_buf()),
        session: session.into(),
        token: "tok".into(),
        key: publisher::new_key().unwrap(),
        buffer_bytes: 64 << 20,
        spill: None,
        retry_every: Duration::from_millis(100),
        max_retries: 3,
        retry_for: Duration::ZERO,
        finish_timeout: Duration::from_secs(10),
    }
}

/// Publishes the whole song with the async publisher.
async fn publish(target: Target, s: &Song) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for c in &s.chunks {
        tx.send(Input::Chunk(c.clone())).unwrap();
    }
    tx.send(Input::Finished).unwrap();
    publish::publish(target, s.header.clone(), rx, |_| {})
        .await
        .unwrap();
}

/// Watches `session` in complete mode: the bytes, or the client's error.
async fn watch(endpoint: Endpoint, session: &str, retries: u32) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let sub = Subscription {
        session: session.into(),
        mode: ViewMode::Complete,
        wait_ms: 20_000,
    };
    let mut config = ClientConfig::default();
    config.max_retries = retries;
    config.retry_every_ms = 100;
    let on = |e: ClientEvent| {
        if let ClientEvent::Header(b) | ClientEvent::Chunk(b) = e {
            bytes.extend_from_slice(&b);
        }
        ControlFlow::Continue(())
    };
    match viewer::watch_at(&endpoint, sub, config, on).await {
        Ok(true) => Ok(bytes),
        Ok(false) => Err("stopped before the end".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn endpoint(addr: &str, websocket: bool, ca: &std::path::Path) -> Endpoint {
    Endpoint {
        addr: addr.into(),
        websocket,
        tls: Some(tls::client_config(ca).unwrap()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_song_goes_over_tls_tcp_and_wss_both_ways() {
    tokio::time::timeout(LIMIT, async {
        let pki = pki();
        let relay = tls_relay(&pki, RelayConfig::default()).await;
        let s = song(1, 6.0);
        // TLS TCP in, wss out; then wss in, TLS TCP out.
        for (session, in_ws) in [("tcp-in", false), ("wss-in", true)] {
            let (pub_addr, view_addr) = if in_ws {
                (&relay.ws, &relay.tcp)
            } else {
                (&relay.tcp, &relay.ws)
            };
            let viewing = tokio::spawn(watch(endpoint(view_addr, !in_ws, &pki.ca), session, 3));
            publish(target(pub_addr, in_ws, &pki.ca, session), &s).await;
            let got = viewing.await.unwrap().unwrap();
            assert!(got == s.streamed, "{session}: the viewer got every byte");
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thread_publisher_of_the_live_sink_publishes_over_tls() {
    tokio::time::timeout(LIMIT, async {
        let pki = pki();
        let relay = tls_relay(&pki, RelayConfig::default()).await;
        let s = song(2, 6.0);
        let viewing = tokio::spawn(watch(endpoint(&relay.tcp, false, &pki.ca), "live", 3));
        let t = target(&relay.tcp, false, &pki.ca, "live");
        let (header, chunks) = (s.header.clone(), s.chunks.clone());
        let published = tokio::task::spawn_blocking(move || {
            let p = Publisher::spawn("test-live", t, header, |_| {}).unwrap();
            for c in chunks {
                p.send(c);
            }
            p.finish(true)
        });
        published.await.unwrap().unwrap();
        assert!(viewing.await.unwrap().unwrap() == s.streamed);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_trust_the_certificate_fails_saying_so() {
    tokio::time::timeout(LIMIT, async {
        let pki = pki();
        let relay = tls_relay(&pki, RelayConfig::default()).await;
        for (addr, websocket) in [(&relay.tcp, false), (&relay.ws, true)] {
            let err = watch(endpoint(addr, websocket, &pki.other_ca), "x", 0)
                .await
                .unwrap_err();
            assert!(
                err.contains("certificate") && err.contains("UnknownIssuer"),
                "{err}"
            );
        }
        // The thread publisher says so too, and a CA file that is not there is named.
        let t = target(&relay.tcp, false, &pki.other_ca, "x");
        let err = tokio::task::spawn_blocking(move || {
            let t = Target {
                max_retries: 0,
                ..t
            };
            Publisher::spawn("test-untrusted", t, Bytes::from_static(b"h"), |_| {})
                .unwrap()
                .finish(true)
                .unwrap_err()
                .to_string()
        })
        .await
        .unwrap();
        assert!(err.contains("UnknownIssuer"), "{err}");
        let missing = pki.ca.with_file_name("missing.pem");
        let t = target(&relay.tcp, false, &missing, "x");
        let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let err = publish::publish(t, Bytes::from_static(b"h"), rx, |_| {})
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.pem"), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_silent_clients_on_a_tls_port_are_closed_alone() {
    tokio::time::timeout(LIMIT, async {
        let pki = pki();
        let config = RelayConfig {
            handshake_timeout_ms: 500,
            ..RelayConfig::default()
        };
        let relay = tls_relay(&pki, config).await;
        let s = song(3, 4.0);
        // A viewer over TLS waits for the session while the offenders come and go.
        let viewing = tokio::spawn(watch(endpoint(&relay.tcp, false, &pki.ca), "calm", 3));
        // A plaintext client's Hello is not a TLS record: the relay closes it.
        let (mut tx, mut rx) = tcp::connect(&relay.tcp, DEFAULT_MAX_FRAME).await.unwrap();
        let _ = tx
            .send(Message::Hello {
                min_version: 1,
                max_version: 1,
                role: Role::Viewer,
                agent: "plain".into(),
            })
            .await;
        let answer = tokio::time::timeout(Duration::from_secs(5), rx.next())
            .await
            .expect("closed within 5 s");
        assert!(!matches!(answer, Some(Ok(_))), "{answer:?}");
        // A client that says nothing is closed after the handshake timeout, on both ports.
        for addr in [&relay.tcp, &relay.ws] {
            let mut silent = TcpStream::connect(addr).await.unwrap();
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
                .await
                .expect("closed within 5 s");
            assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        }
        publish(target(&relay.tcp, false, &pki.ca, "calm"), &s).await;
        assert!(viewing.await.unwrap().unwrap() == s.streamed);
    })
    .await
    .unwrap();
}

/// Sends a raw upgrade request with `extra` header lines to `addr` and returns the reply
/// (its head, for a 101; all of it otherwise).
async fn upgrade_reply(addr: &str, request_line: &str, extra: &[String]) -> String {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{request_line}\r\nHost: {addr}\r\n");
    for h in extra {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("a reply within 5 s")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if reply.starts_with(b"HTTP/1.1 101") && reply.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8(reply).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_websocket_upgrades_get_http_errors_and_good_ones_the_subprotocol() {
    tokio::time::timeout(LIMIT, async {
        let server = Server::new(
            RelayConfig::default(),
            Tokens::parse("tok\n"),
            ServerConfig::default(),
        )
        .unwrap();
        let serve = |origins: Vec<String>| {
            let server = server.clone();
            async move {
                let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = l.local_addr().unwrap().to_string();
                let options = ws::WsOptions {
                    tls: None,
                    allowed_origins: origins,
                };
                (addr, tokio::spawn(ws::serve_with(l, server, options)))
            }
        };
        let (addr, task) = serve(Vec::new()).await;
        let (listed, listed_task) = serve(vec!["https://player.example".into()]).await;
        let upgrade = [
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ];
        let with = |more: &[&str]| -> Vec<String> {
            upgrade.iter().chain(more).map(|h| h.to_string()).collect()
        };
        let get = "GET / HTTP/1.1";
        let v13 = "Sec-WebSocket-Version: 13";
        let same_origin = format!("Origin: http://{addr}");
        let cases: Vec<(&str, String, Vec<String>, &str, &str)> = vec![
            (
                // (A plain GET is the relay's HTTP now: http.md.)
                "not a WebSocket upgrade",
                addr.clone(),
                vec!["Upgrade: h2c".into(), "Connection: Upgrade".into()],
                "400",
                "not a WebSocket upgrade",
            ),
            (
                "wrong version",
                addr.clone(),
                with(&["Sec-WebSocket-Version: 8"]),
                "400",
                "version",
            ),
            (
                "foreign origin",
                addr.clone(),
                with(&[v13, "Origin: https://evil.example"]),
                "403",
                "origin https://evil.example is not allowed",
            ),
            (
                "no subprotocol of ours",
                addr.clone(),
                with(&[v13, "Sec-WebSocket-Protocol: chat, superchat"]),
                "400",
                "bsor-stream.v1",
            ),
            (
                "same origin and the subprotocol",
                addr.clone(),
                with(&[
                    v13,
                    &same_origin,
                    "Sec-WebSocket-Protocol: chat, bsor-stream.v1",
                ]),
                "101",
                "Sec-WebSocket-Protocol: bsor-stream.v1",
            ),
            (
                "no Origin",
                addr.clone(),
                with(&[v13]),
                "101",
                "Upgrade: websocket",
            ),
            (
                "the same host, not listed",
                listed.clone(),
                with(&[v13, "Origin: http://127.0.0.1"]),
                "403",
                "not allowed",
            ),
            (
                "listed origin",
                listed.clone(),
                with(&[v13, "Origin: https://player.example"]),
                "101",
                "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
            ),
        ];
        for (what, to, headers, status, says) in cases {
            let reply = upgrade_reply(&to, get, &headers).await;
            assert!(
                reply.starts_with(&format!("HTTP/1.1 {status} ")),
                "{what}: {reply}"
            );
            // Header names in any case (the relay's HTTP stack sends them lowercase).
            let lower = reply.to_ascii_lowercase();
            assert!(
                lower.contains(&says.to_ascii_lowercase()),
                "{what}: {reply}"
            );
            if status != "101" {
                assert!(
                    lower.contains("content-type: text/plain"),
                    "{what}: {reply}"
                );
            }
        }
        // Not HTTP at all.
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        sock.write_all(b"\x00\x00\x00\x05hello\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), sock.read_to_string(&mut reply))
            .await
            .expect("a reply within 5 s");
        assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
        // The library's own client asks for the subprotocol and gets it.
        let (mut tx, mut rx) = ws::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
        tx.send(Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: "test".into(),
        })
        .await
        .unwrap();
        assert!(matches!(rx.next().await, Some(Ok(Message::Hello { .. }))));
        task.abort();
        listed_task.abort();
    })
    .await
    .unwrap();
}
