//! The relay over real sockets on 127.0.0.1 (TCP and WebSocket): publishers, viewers,
//! offenders and the archive, each test bounded in time.

use std::path::PathBuf;
use std::time::Duration;

use bsor_stream_core::net::relay::{RelayConfig, Tokens};
use bsor_stream_core::net::wire::{
    EndReason, ErrorCode, Message, Role, ViewMode, DEFAULT_MAX_FRAME,
};
use bsor_stream_core::stream::{split_stream, Profile, Settings};
use bsor_stream_core::{bsor, synth, transcode};
use bsor_stream_relay::server::{MessageSink, MessageStream, Server, ServerConfig};
use bsor_stream_relay::{tcp, ws};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every test's bound.
const LIMIT: Duration = Duration::from_secs(60);

/// A synthetic song encoded as a finished live stream: the replay, the whole file (header,
/// chunks, trailer, index, footer), the header and the chunks (trailer and index included).
struct Song {
    bsor: Vec<u8>,
    file: Vec<u8>,
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
        bsor: bsor::to_vec(&r).unwrap(),
        header: Bytes::copy_from_slice(&file[..header_len]),
        chunks: spans
            .iter()
            .map(|c| Bytes::copy_from_slice(c.bytes(&file)))
            .collect(),
        file,
    }
}

impl Song {
    /// The file without its footer: what a viewer receives.
    fn streamed(&self) -> &[u8] {
        &self.file[..self.file.len() - 16]
    }
}

/// A relay on loopback: its server, TCP and WebSocket addresses.
struct Relay {
    server: Server,
    tcp: String,
    ws: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn relay(config: RelayConfig, archive: Option<PathBuf>) -> Relay {
    let server = Server::new(
        config,
        Tokens::parse("tok\nduel:duel-only\n"),
        ServerConfig {
            archive,
            ..ServerConfig::default()
        },
    )
    .unwrap();
    let t = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tcp, ws) = (
        t.local_addr().unwrap().to_string(),
        w.local_addr().unwrap().to_string(),
    );
    let tasks = vec![
        tokio::spawn(tcp::serve(t, server.clone())),
        tokio::spawn(ws::serve(w, server.clone())),
    ];
    Relay {
        server,
        tcp,
        ws,
        tasks,
    }
}

/// A fresh folder for an archive, removed with the test (pass or fail).
fn archive_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bsor-stream-net-{name}-"))
        .tempdir()
        .unwrap()
}

struct Client {
    tx: MessageSink,
    rx: MessageStream,
}

impl Client {
    async fn connect(addr: &str, websocket: bool, role: Role) -> Client {
        let (tx, rx) = if websocket {
            ws::connect(addr, DEFAULT_MAX_FRAME).await.unwrap()
        } else {
            tcp::connect(addr, DEFAULT_MAX_FRAME).await.unwrap()
        };
        let mut c = Client { tx, rx };
        c.send(Message::Hello {
            min_version: 1,
            max_version: 1,
            role,
            agent: "test".into(),
        })
        .await;
        assert!(matches!(
            c.recv().await,
            Some(Message::Hello {
                role: Role::Relay,
                ..
            })
        ));
        c
    }

    async fn send(&mut self, m: Message) {
        self.tx.send(m).await.unwrap();
    }

    /// The next message (pings answered on the way); `None` when the relay closed.
    async fn recv(&mut self) -> Option<Message> {
        loop {
            match self.rx.next().await? {
                Ok(Message::Ping(n)) => {
                    let _ = self.tx.send(Message::Pong(n)).await;
                }
                Ok(m) => return Some(m),
                Err(_) => return None,
            }
        }
    }

    async fn publisher(addr: &str, websocket: bool, session: &str, resume: bool) -> (Client, u32) {
        let mut c = Client::connect(addr, websocket, Role::Publisher).await;
        c.send(Message::Publish {
            session: session.into(),
            token: "tok".into(),
            resume,
            publisher_key: [7; 16],
        })
        .await;
        match c.recv().await {
            Some(Message::Resume(n)) => (c, n),
            other => panic!("no Resume: {other:?}"),
        }
    }

    async fn viewer(addr: &str, websocket: bool, session: &str, mode: ViewMode) -> Client {
        let mut c = Client::connect(addr, websocket, Role::Viewer).await;
        c.send(Message::Subscribe {
            session: session.into(),
            mode,
            wait_ms: 20_000,
            from: 0,
        })
        .await;
        c
    }

    /// Reads stream bytes until `End` or the connection closes: the bytes, the number of
    /// chunks, how it ended (and checks sequence numbers go up by one, no gap or duplicate).
    async fn watch(&mut self) -> (Vec<u8>, usize, Option<Message>) {
        let mut bytes = Vec::new();
        let mut chunks = 0;
        loop {
            match self.recv().await {
                Some(Message::StreamHeader(b)) => bytes.extend_from_slice(&b),
                Some(Message::Chunk(b)) => {
                    let (h, _) = bsor_stream_core::stream::ChunkHeader::parse_at(&b).unwrap();
                    assert_eq!(h.seq as usize, chunks, "no gap, no duplicate");
                    bytes.extend_from_slice(&b);
                    chunks += 1;
                }
                Some(m @ (Message::End(_) | Message::Error { .. })) => {
                    return (bytes, chunks, Some(m))
                }
                Some(other) => panic!("unexpected {other:?}"),
                None => return (bytes, chunks, None),
            }
        }
    }

    /// Waits for the error the relay closes this connection with.
    async fn closed_with(&mut self) -> Option<ErrorCode> {
        loop {
            match self.recv().await? {
                Message::Error { code, .. } => {
                    assert!(self.recv().await.is_none(), "closed after the error");
                    return Some(code);
                }
                _ => continue,
            }
        }
    }
}

/// Sends chunks `range` and waits until the relay acknowledged the last of them.
async fn publish(p: &mut Client, s: &Song, range: std::ops::Range<usize>) {
    let last = range.end as u32 - 1;
    for c in &s.chunks[range] {
        p.send(Message::Chunk(c.clone())).await;
    }
    loop {
        match p.recv().await {
            Some(Message::Ack(n)) if n >= last => return,
            Some(Message::Ack(_)) => {}
            other => panic!("expected acks, got {other:?}"),
        }
    }
}

fn decodes_to(bytes: &[u8], want: &[u8]) {
    let (back, rec) = transcode::decode_replay(bytes).unwrap();
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&back).unwrap() == want, "byte-identical BSOR");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_song_goes_from_a_publisher_to_every_viewer_and_a_wrong_token_is_refused() {
    tokio::time::timeout(LIMIT, async {
        let s = song(31, 10.0);
        let r = relay(RelayConfig::default(), None).await;
        let mut viewers = Vec::new();
        for _ in 0..3 {
            // Complete mode: the publisher sends faster than real time, and a live viewer
            // would (rightly) skip.
            viewers.push(Client::viewer(&r.tcp, false, "s1", ViewMode::Complete).await);
        }
        for (token, session) in [("wrong", "s1"), ("duel-only", "s1")] {
            let mut bad = Client::connect(&r.tcp, false, Role::Publisher).await;
            bad.send(Message::Publish {
                session: session.into(),
                token: token.into(),
                resume: false,
                publisher_key: [0; 16],
            })
            .await;
            assert_eq!(bad.closed_with().await, Some(ErrorCode::Unauthorized));
        }
        let (mut p, from) = Client::publisher(&r.tcp, false, "s1", false).await;
        assert_eq!(from, 0);
        p.send(Message::StreamHeader(s.header.clone())).await;
        publish(&mut p, &s, 0..s.chunks.len()).await;
        p.send(Message::End(EndReason::Finished)).await;
        for mut v in viewers {
            let (bytes, chunks, end) = v.watch().await;
            assert_eq!(end, Some(Message::End(EndReason::Finished)));
            assert_eq!(chunks, s.chunks.len());
            assert!(bytes == s.streamed());
            decodes_to(&bytes, &s.bsor);
        }
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_killed_mid_song_resumes_without_gap_or_duplicate() {
    tokio::time::timeout(LIMIT, async {
        let s = song(32, 12.0);
        let big = RelayConfig {
            viewer_queue_messages: 100_000,
            viewer_queue_bytes: 256 << 20,
            ..RelayConfig::default()
        };
        let r = relay(big, None).await;
        let mut live = Client::viewer(&r.tcp, false, "s1", ViewMode::Live).await;
        let mut complete = Client::viewer(&r.ws, true, "s1", ViewMode::Complete).await;
        let (mut p, _) = Client::publisher(&r.tcp, false, "s1", false).await;
        p.send(Message::StreamHeader(s.header.clone())).await;
        let half = s.chunks.len() / 2;
        publish(&mut p, &s, 0..half).await;
        // Killed: a few more chunks go out, and the socket is dropped without End.
        for c in &s.chunks[half..half + 3] {
            p.send(Message::Chunk(c.clone())).await;
        }
        drop(p);
        // The same publisher (same key) comes back and resends a little too much.
        let (mut back, from) = Client::publisher(&r.tcp, false, "s1", true).await;
        assert!(
            (half as u32..=half as u32 + 3).contains(&from),
            "resume at {from}"
        );
        back.send(Message::StreamHeader(s.header.clone())).await;
        let again = from as usize - 2;
        publish(&mut back, &s, again..s.chunks.len()).await;
        back.send(Message::End(EndReason::Finished)).await;
        for v in [&mut live, &mut complete] {
            let (bytes, chunks, end) = v.watch().await;
            assert_eq!(end, Some(Message::End(EndReason::Finished)));
            assert_eq!(chunks, s.chunks.len());
            decodes_to(&bytes, &s.bsor);
        }
    })
    .await
    .expect("finished in time");
}

/// A raw TCP connection that has said Hello as a viewer and subscribed.
async fn raw_viewer(addr: &str, session: &str) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut out = BytesMut::new();
    Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Viewer,
        agent: "raw".into(),
    }
    .encode(&mut out);
    Message::Subscribe {
        session: session.into(),
        mode: ViewMode::Live,
        wait_ms: 1000,
        from: 0,
    }
    .encode(&mut out);
    sock.write_all(&out).await.unwrap();
    sock
}

/// Reads a raw connection to its end: the error code it was closed with.
async fn raw_error(mut sock: TcpStream) -> Option<ErrorCode> {
    let mut buf = BytesMut::new();
    let mut codec = bsor_stream_core::net::wire::WireCodec::default();
    let mut code = None;
    loop {
        while let Ok(Some(m)) = codec.decode_from(&mut buf) {
            if let Message::Error { code: c, .. } = m {
                code = Some(c);
            }
        }
        let mut piece = [0u8; 4096];
        match sock.read(&mut piece).await {
            Ok(0) | Err(_) => return code,
            Ok(n) => buf.extend_from_slice(&piece[..n]),
        }
    }
}

// Long: one relay, the offenders and the bystander they must not disturb, end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bad_and_flooding_connections_close_only_themselves() {
    tokio::time::timeout(LIMIT, async {
        let (a, b) = (song(33, 8.0), song(34, 8.0));
        let r = relay(
            RelayConfig {
                viewer_queue_messages: 100_000,
                viewer_queue_bytes: 256 << 20,
                ..RelayConfig::default()
            },
            None,
        )
        .await;
        let mut va = Client::viewer(&r.tcp, false, "a", ViewMode::Live).await;
        let mut vb = Client::viewer(&r.ws, true, "b", ViewMode::Live).await;
        let (mut pa, _) = Client::publisher(&r.tcp, false, "a", false).await;
        let (mut pb, _) = Client::publisher(&r.ws, true, "b", false).await;
        pa.send(Message::StreamHeader(a.header.clone())).await;
        pb.send(Message::StreamHeader(b.header.clone())).await;
        publish(&mut pa, &a, 0..10).await;
        publish(&mut pb, &b, 0..10).await;

        // A viewer of session a announces a frame over the limit: refused from its length.
        let mut huge = raw_viewer(&r.tcp, "a").await;
        let mut f = BytesMut::new();
        f.put_u32_le(DEFAULT_MAX_FRAME + 1);
        f.put_u8(0x0A);
        huge.write_all(&f).await.unwrap();
        assert_eq!(raw_error(huge).await, Some(ErrorCode::FrameTooLarge));
        // An unknown message type; a body that does not parse.
        for (kind, body) in [(0x7Fu8, &b"??"[..]), (0x0A, &b"short"[..])] {
            let mut bad = raw_viewer(&r.tcp, "a").await;
            let mut f = BytesMut::new();
            f.put_u32_le(1 + body.len() as u32);
            f.put_u8(kind);
            f.put_slice(body);
            bad.write_all(&f).await.unwrap();
            let want = if kind == 0x7F {
                ErrorCode::UnknownMessage
            } else {
                ErrorCode::Malformed
            };
            assert_eq!(raw_error(bad).await, Some(want));
        }
        // Over WebSocket: a text message; a binary message over the limit.
        {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/", r.ws))
                .await
                .unwrap();
            use tokio_tungstenite::tungstenite::Message as W;
            ws.send(W::text("hello?")).await.unwrap();
            let mut code = None;
            while let Some(Ok(m)) = ws.next().await {
                if let W::Binary(b) = m {
                    if let Ok(Message::Error { code: c, .. }) =
                        bsor_stream_core::net::wire::decode_frame(b, DEFAULT_MAX_FRAME)
                    {
                        code = Some(c);
                    }
                }
            }
            assert_eq!(code, Some(ErrorCode::Malformed));
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/", r.ws))
                .await
                .unwrap();
            let mut big = BytesMut::new();
            big.put_u32_le(DEFAULT_MAX_FRAME + 1);
            big.put_u8(0x0A);
            big.resize(DEFAULT_MAX_FRAME as usize + 5 + 4, 0);
            let _ = ws.send(W::binary(big.freeze())).await;
            let mut code = None;
            while let Some(Ok(m)) = ws.next().await {
                if let W::Binary(b) = m {
                    if let Ok(Message::Error { code: c, .. }) =
                        bsor_stream_core::net::wire::decode_frame(b, DEFAULT_MAX_FRAME)
                    {
                        code = Some(c);
                    }
                }
            }
            assert_eq!(code, Some(ErrorCode::FrameTooLarge));
        }
        // A viewer that pings nonstop.
        let mut loud = Client::viewer(&r.tcp, false, "a", ViewMode::Live).await;
        let flood = async {
            for n in 0..10_000 {
                if loud.tx.send(Message::Ping(n)).await.is_err() {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), flood)
            .await
            .unwrap();
        assert_eq!(loud.closed_with().await, Some(ErrorCode::Flood));
        // A publisher of its own session sends a chunk whose payload is damaged.
        let mut frame = BytesMut::new();
        Message::Chunk(a.chunks[0].clone()).encode(&mut frame);
        let last = frame.len() - 1;
        frame[last] ^= 0xFF;
        let mut raw = TcpStream::connect(&r.tcp).await.unwrap();
        let mut hs = BytesMut::new();
        Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Publisher,
            agent: "raw".into(),
        }
        .encode(&mut hs);
        Message::Publish {
            session: "d".into(),
            token: "tok".into(),
            resume: false,
            publisher_key: [1; 16],
        }
        .encode(&mut hs);
        Message::StreamHeader(a.header.clone()).encode(&mut hs);
        raw.write_all(&hs).await.unwrap();
        raw.write_all(&frame).await.unwrap();
        assert_eq!(raw_error(raw).await, Some(ErrorCode::MalformedChunk));

        // Both sessions and their viewers carried on.
        publish(&mut pa, &a, 10..a.chunks.len()).await;
        publish(&mut pb, &b, 10..b.chunks.len()).await;
        pa.send(Message::End(EndReason::Finished)).await;
        pb.send(Message::End(EndReason::Finished)).await;
        for (v, s) in [(&mut va, &a), (&mut vb, &b)] {
            let (bytes, chunks, end) = v.watch().await;
            assert_eq!(end, Some(Message::End(EndReason::Finished)));
            assert_eq!(chunks, s.chunks.len());
            decodes_to(&bytes, &s.bsor);
        }
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_and_one_that_answers_pings_stays() {
    tokio::time::timeout(LIMIT, async {
        let r = relay(
            RelayConfig {
                idle_timeout_ms: 600,
                ping_interval_ms: 200,
                ..RelayConfig::default()
            },
            None,
        )
        .await;
        let mut answering = Client::viewer(&r.tcp, false, "later", ViewMode::Live).await;
        let silent = raw_viewer(&r.tcp, "later").await;
        let (code, still) = tokio::join!(raw_error(silent), async {
            // Reading (and so answering pings) for 1.5 s: nothing but pings arrive.
            tokio::time::timeout(Duration::from_millis(1500), answering.recv())
                .await
                .is_err()
        });
        assert_eq!(code, Some(ErrorCode::Timeout));
        assert!(still, "the answering viewer is still connected");
        answering.send(Message::Ping(5)).await;
        assert_eq!(answering.recv().await, Some(Message::Pong(5)));
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_is_readable_while_live_equals_what_viewers_got_and_serves_them_later() {
    tokio::time::timeout(LIMIT, async {
        let s = song(35, 12.0);
        let scratch = archive_dir("archive");
        let dir = scratch.path().to_path_buf();
        let config = RelayConfig {
            backlog_chunks: 8,
            ..RelayConfig::default()
        };
        let r = relay(config, Some(dir.clone())).await;
        let file = dir.join("song.bsors");
        let mut first = Client::viewer(&r.tcp, false, "song", ViewMode::Complete).await;
        let (mut p, _) = Client::publisher(&r.ws, true, "song", false).await;
        p.send(Message::StreamHeader(s.header.clone())).await;
        let half = s.chunks.len() / 2;
        publish(&mut p, &s, 0..half).await;
        // Readable while live: a prefix of the stream that decodes what it holds.
        let live = std::fs::read(&file).unwrap();
        assert!(s.file.starts_with(&live) && live.len() > s.header.len());
        let (part, rec) = transcode::decode_replay(&live).unwrap();
        assert!(!rec.complete && !part.frames.is_empty());
        // A complete viewer joining now, far behind the 8-chunk backlog, reads the archive.
        let mut late = Client::viewer(&r.ws, true, "song", ViewMode::Complete).await;
        publish(&mut p, &s, half..s.chunks.len()).await;
        p.send(Message::End(EndReason::Finished)).await;
        let mut got = Vec::new();
        for v in [&mut first, &mut late] {
            let (bytes, chunks, end) = v.watch().await;
            assert_eq!(end, Some(Message::End(EndReason::Finished)));
            assert_eq!(chunks, s.chunks.len());
            got.push(bytes);
        }
        assert!(got[0] == got[1]);
        // Complete at the end: the publisher's file byte for byte (footer included), and
        // what the viewers received is all of it before the footer.
        let mut archived = Vec::new();
        for _ in 0..100 {
            archived = std::fs::read(&file).unwrap();
            if archived.len() == s.file.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(archived == s.file, "the archive is the published file");
        assert!(got[0] == archived[..archived.len() - 16]);
        decodes_to(&archived, &s.bsor);
        // Once everyone left, the relay forgets the session; a viewer coming later (live
        // mode, even) gets the whole stream from the archive.
        drop((first, late));
        for _ in 0..200 {
            if r.server.sessions() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(r.server.sessions(), 0);
        let mut again = Client::viewer(&r.tcp, false, "song", ViewMode::Live).await;
        let (bytes, _, end) = again.watch().await;
        assert_eq!(end, Some(Message::End(EndReason::Finished)));
        assert!(bytes == s.streamed());
        // And so does one of a new relay on the same archive.
        drop(r);
        let r2 = relay(RelayConfig::default(), Some(dir.clone())).await;
        let mut after = Client::viewer(&r2.ws, true, "song", ViewMode::Complete).await;
        let (bytes, _, end) = after.watch().await;
        assert_eq!(end, Some(Message::End(EndReason::Finished)));
        assert!(bytes == s.streamed());
        r2.server.shutdown().unwrap();
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_and_tcp_viewers_receive_identical_bytes() {
    tokio::time::timeout(LIMIT, async {
        let s = song(36, 8.0);
        let r = relay(RelayConfig::default(), None).await;
        let mut over_ws = Client::viewer(&r.ws, true, "s", ViewMode::Complete).await;
        let mut over_tcp = Client::viewer(&r.tcp, false, "s", ViewMode::Complete).await;
        let (mut p, _) = Client::publisher(&r.ws, true, "s", false).await;
        p.send(Message::StreamHeader(s.header.clone())).await;
        publish(&mut p, &s, 0..s.chunks.len()).await;
        p.send(Message::End(EndReason::Finished)).await;
        let (a, na, ea) = over_ws.watch().await;
        let (b, nb, eb) = over_tcp.watch().await;
        assert_eq!((na, nb), (s.chunks.len(), s.chunks.len()));
        assert_eq!(ea, Some(Message::End(EndReason::Finished)));
        assert_eq!(eb, ea);
        assert!(a == b && a == s.streamed());
        decodes_to(&a, &s.bsor);
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_closed_and_the_others_go_on() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let server = Server::new(
            RelayConfig::default(),
            Tokens::parse("tok"),
            ServerConfig {
                max_connections: 2,
                ..ServerConfig::default()
            },
        )
        .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(tcp::serve(l, server));
        let hello = || Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: "test".into(),
        };
        let greet = |addr: String| async move {
            let (mut tx, mut rx) = tcp::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
            let _ = tx.send(hello()).await;
            let answer = rx.next().await;
            (tx, rx, answer)
        };
        let a = greet(addr.clone()).await;
        let b = greet(addr.clone()).await;
        assert!(matches!(a.2, Some(Ok(Message::Hello { .. }))));
        assert!(matches!(b.2, Some(Ok(Message::Hello { .. }))));
        let c = greet(addr.clone()).await;
        assert!(c.2.is_none() || matches!(c.2, Some(Err(_))), "{:?}", c.2);
        // One leaves: there is room again.
        drop(a);
        let mut again = None;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let d = greet(addr.clone()).await;
            if matches!(d.2, Some(Ok(Message::Hello { .. }))) {
                again = Some(d);
                break;
            }
        }
        assert!(again.is_some(), "a place came free");
        // The second connection was never disturbed.
        let (mut tx, mut rx, _) = b;
        tx.send(Message::Ping(7)).await.unwrap();
        assert!(matches!(rx.next().await, Some(Ok(Message::Pong(7)))));
        task.abort();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_deadline_fires_on_time_on_an_idle_relay() {
    // Nothing else is timed when the connection comes, so the server's timer must be woken
    // by the relay's new deadline, and fire at it rather than at a later tick.
    tokio::time::timeout(LIMIT, async {
        let r = relay(
            RelayConfig {
                handshake_timeout_ms: 150,
                ..RelayConfig::default()
            },
            None,
        )
        .await;
        let start = std::time::Instant::now();
        let quiet = TcpStream::connect(&r.tcp).await.unwrap();
        assert_eq!(raw_error(quiet).await, Some(ErrorCode::Timeout));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(150), "closed early: {took:?}");
        assert!(took < Duration::from_secs(2), "closed late: {took:?}");
    })
    .await
    .expect("finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_connections_are_told_and_closed_while_a_viewer_goes_on() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let server = capped_server(2);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(tcp::serve(l, server));
        let hello = viewer_hello();
        let (mut tx, mut rx) = tcp::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
        tx.send(hello.clone()).await.unwrap();
        assert!(matches!(rx.next().await, Some(Ok(Message::Hello { .. }))));
        // A frame of 64 KiB before the handshake is done: refused from its length (the
        // relay's limit is 1 KiB until a connection is a publisher), nothing buffered.
        let mut raw = TcpStream::connect(&addr).await.unwrap();
        raw.write_all(&(64u32 << 10).to_le_bytes()).await.unwrap();
        raw.write_all(&[0x05; 100]).await.unwrap();
        let mut got = Vec::new();
        raw.read_to_end(&mut got).await.unwrap();
        let answer = tcp_codec_decode(&got);
        assert!(
            matches!(
                answer,
                Some(Message::Error {
                    code: ErrorCode::FrameTooLarge,
                    ..
                })
            ),
            "{answer:?}"
        );
        // Two from 127.0.0.1 are open (the viewer and one more); a third is over budget.
        let (_keep, _keep_rx) = tcp::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (_over_tx, mut over_rx) = tcp::connect(&addr, DEFAULT_MAX_FRAME).await.unwrap();
        match over_rx.next().await {
            Some(Ok(Message::Error { code, .. })) => assert_eq!(code, ErrorCode::OverBudget),
            other => panic!("{other:?}"),
        }
        assert!(over_rx.next().await.is_none(), "closed after the error");
        // The first viewer was never disturbed.
        tx.send(Message::Ping(9)).await.unwrap();
        assert!(matches!(rx.next().await, Some(Ok(Message::Pong(9)))));
        task.abort();
    })
    .await
    .unwrap();
}

/// A server whose relay allows `per_address` connections from one address.
fn capped_server(per_address: usize) -> Server {
    Server::new(
        RelayConfig {
            connections_per_address: per_address,
            ..RelayConfig::default()
        },
        Tokens::parse("tok"),
        ServerConfig::default(),
    )
    .unwrap()
}

fn viewer_hello() -> Message {
    Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Viewer,
        agent: "test".into(),
    }
}

/// The first message in `bytes`, if any.
fn tcp_codec_decode(bytes: &[u8]) -> Option<Message> {
    let mut b = BytesMut::from(bytes);
    bsor_stream_core::net::wire::WireCodec::default()
        .decode_from(&mut b)
        .ok()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_from_one_address_are_held_to_the_per_address_cap() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let server = capped_server(2);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(ws::serve(l, server));
        // Two connections that never send their upgrade request hold both places.
        let mut stalled = Vec::new();
        for _ in 0..2 {
            stalled.push(TcpStream::connect(&addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A third is closed at once, without a word: nothing can be said before its upgrade.
        let mut third = TcpStream::connect(&addr).await.unwrap();
        let mut got = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(2), third.read_to_end(&mut got))
            .await
            .expect("closed long before the handshake timeout")
            .unwrap_or(0);
        assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&got));
        // Once one of them leaves, an upgrade from that address goes through.
        drop(stalled.pop());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (mut tx, mut rx) = ws::connect(&format!("ws://{addr}/"), DEFAULT_MAX_FRAME)
            .await
            .unwrap();
        tx.send(viewer_hello()).await.unwrap();
        assert!(matches!(rx.next().await, Some(Ok(Message::Hello { .. }))));
        task.abort();
    })
    .await
    .unwrap();
}
