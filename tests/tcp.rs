//! The relay over real TCP sockets on 127.0.0.1: a publisher and viewers, bounded in time.

use std::time::Duration;

use bsor_stream::net::relay::{RelayConfig, Tokens};
use bsor_stream::net::server::{Server, ServerConfig};
use bsor_stream::net::tcp;
use bsor_stream::net::wire::{EndReason, ErrorCode, Message, Role, ViewMode, WireCodec};
use bsor_stream::stream::{split_stream, Profile, Settings};
use bsor_stream::{bsor, synth, transcode};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

type Conn = Framed<TcpStream, WireCodec>;

async fn client(addr: std::net::SocketAddr, role: Role) -> Conn {
    let mut c = Framed::new(
        TcpStream::connect(addr).await.unwrap(),
        WireCodec::default(),
    );
    c.send(Message::Hello {
        min_version: 1,
        max_version: 1,
        role,
        agent: "test".into(),
    })
    .await
    .unwrap();
    assert!(matches!(
        c.next().await,
        Some(Ok(Message::Hello {
            role: Role::Relay,
            ..
        }))
    ));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_song_goes_from_a_publisher_to_every_viewer_over_tcp() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let r = synth::replay(synth::Settings {
            seed: 31,
            seconds: 10.0,
            fps: 90,
        });
        let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
        let (_, header_len, spans) = split_stream(&s).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let relay = Server::new(
            RelayConfig::default(),
            Tokens::parse("tok"),
            ServerConfig::default(),
        )
        .unwrap();
        let server = tokio::spawn(tcp::serve(listener, relay));

        let mut viewers = Vec::new();
        for _ in 0..3 {
            let mut v = client(addr, Role::Viewer).await;
            // Complete mode: the publisher sends faster than real time, and a live viewer
            // would (rightly) skip.
            v.send(Message::Subscribe {
                session: "s1".into(),
                mode: ViewMode::Complete,
                wait_ms: 10_000,
            })
            .await
            .unwrap();
            viewers.push(v);
        }
        let mut bad = client(addr, Role::Publisher).await;
        bad.send(Message::Publish {
            session: "s1".into(),
            token: "wrong".into(),
            resume: false,
            publisher_key: [0; 16],
        })
        .await
        .unwrap();
        assert!(matches!(
            bad.next().await,
            Some(Ok(Message::Error {
                code: ErrorCode::Unauthorized,
                ..
            }))
        ));
        assert!(bad.next().await.is_none(), "the offender is closed");

        let mut p = client(addr, Role::Publisher).await;
        p.send(Message::Publish {
            session: "s1".into(),
            token: "tok".into(),
            resume: false,
            publisher_key: [5; 16],
        })
        .await
        .unwrap();
        assert_eq!(p.next().await.unwrap().unwrap(), Message::Resume(0));
        p.send(Message::StreamHeader(Bytes::copy_from_slice(
            &s[..header_len],
        )))
        .await
        .unwrap();
        for c in &spans {
            p.send(Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))))
                .await
                .unwrap();
        }
        let sent = spans.len();
        p.send(Message::End(EndReason::Finished)).await.unwrap();

        let want = bsor::to_vec(&r).unwrap();
        for mut v in viewers {
            let mut bytes = Vec::new();
            let mut chunks = 0;
            while let Some(m) = v.next().await {
                match m.unwrap() {
                    Message::StreamHeader(b) => bytes.extend_from_slice(&b),
                    Message::Chunk(b) => {
                        bytes.extend_from_slice(&b);
                        chunks += 1;
                    }
                    Message::End(EndReason::Finished) => break,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(chunks, sent);
            let (back, rec) = transcode::decode_replay(&bytes).unwrap();
            assert!(rec.complete);
            assert!(bsor::to_vec(&back).unwrap() == want);
        }
        server.abort();
    })
    .await
    .expect("finished in time");
}
