//! The client's sans-IO session logic (`net::client::Client`), publisher and viewer, under
//! arbitrary sequences of transport openings and losses, relay messages (right and wrong,
//! in and out of order), pushed chunks, finish and abandon calls, and clock steps.
//!
//! Checked after every operation:
//! - no panic;
//! - on each connection the client says `Hello` first and then `Publish` or `Subscribe`
//!   only after the relay's `Hello`; a publisher sends the stream header before any chunk,
//!   chunks in sequence order starting at or after the relay's `Resume`, and nothing after
//!   `End`;
//! - at most one `Pong` and a bounded number of control messages wait, whatever the relay
//!   sends;
//! - a viewer delivers the header at most once and chunks in increasing sequence order;
//! - once `End` or `Failed` is reported the client is closed, reports nothing more but
//!   `Disconnect`, and has no deadline.

#![no_main]

use bsor_stream::net::client::{
    Client, ClientConfig, ClientEvent, Outgoing, Publication, Subscription,
};
use bsor_stream::net::wire::{EndReason, ErrorCode, Message, Role, ViewMode};
use bsor_stream::stream::{ChunkHeader, ChunkType};
use bytes::Bytes;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fn chunk(seq: u32) -> Bytes {
    let mut out = Vec::new();
    ChunkHeader::new(ChunkType::Frames, seq, 0, 1, 0.0).write_to(&[1, 2, 3], &mut out);
    Bytes::from(out)
}

/// A message from the relay; `pushed` bounds `Resume` (a relay expects at most the chunk
/// after the last one the publisher made).
fn relay_message(u: &mut Unstructured, pushed: u32) -> Result<Message> {
    Ok(match u.int_in_range(0..=11)? {
        0 => Message::Hello {
            min_version: 1,
            max_version: 1,
            role: if u.arbitrary()? { Role::Relay } else { Role::Viewer },
            agent: "relay".into(),
        },
        1 => Message::Resume(u.int_in_range(0..=pushed)?),
        2 => Message::Ack(u.int_in_range(0..=40)?),
        3 => Message::Ping(u.arbitrary()?),
        4 => Message::Pong(u.arbitrary()?),
        5 => Message::StreamHeader(Bytes::from_static(if u.arbitrary()? { b"H1" } else { b"H2" })),
        6 => Message::Chunk(chunk(u.int_in_range(0..=40)?)),
        7 => Message::Skipped {
            chunks: u.int_in_range(0..=5)?,
            bytes: u.arbitrary()?,
        },
        8 => Message::End(if u.arbitrary()? {
            EndReason::Finished
        } else {
            EndReason::PublisherGone
        }),
        9 => Message::Error {
            code: ErrorCode::from_code(u.int_in_range(1..=15)?),
            message: "x".into(),
        },
        10 => Message::Subscribe {
            session: "s".into(),
            mode: ViewMode::Live,
            wait_ms: 0,
            from: u.int_in_range(0..=3)?,
        },
        _ => Message::Publish {
            session: "s".into(),
            token: "t".into(),
            resume: false,
            publisher_key: [0; 16],
        },
    })
}

/// What the harness tracks of the current connection, from what the client sent on it.
#[derive(Default)]
struct Wire {
    #[allow(dead_code)]
    open: bool,
    hello_sent: bool,
    relay_hello: bool,
    request_sent: bool,
    resume: Option<u32>,
    header_sent: bool,
    last_seq: Option<u32>,
    ended: bool,
}

// Long: one match arm per operation the harness can apply.
fn run(u: &mut Unstructured) -> Result<()> {
    let publisher: bool = u.arbitrary()?;
    let mut config = ClientConfig::default();
    config.max_retries = u.int_in_range(0..=3)?;
    let mut now = 0u64;
    let mut c = if publisher {
        let publication = Publication {
            session: "s".into(),
            token: "t".into(),
            key: [7; 16],
            header: Bytes::from_static(b"HEADER"),
            buffer_bytes: u.int_in_range(20..=400)?,
        };
        Client::publisher(config, publication, now)
    } else {
        let mode = if u.arbitrary()? { ViewMode::Live } else { ViewMode::Complete };
        let sub = Subscription { session: "s".into(), mode, wait_ms: 0 };
        Client::viewer(config, sub, now)
    };
    let mut wire = Wire::default();
    let (mut pushed, mut done, mut header_seen) = (0u32, false, false);
    let mut last_delivered: Option<u32> = None;
    let mut connect_asked = false;
    for _ in 0..u.int_in_range(0..=300)? {
        match u.int_in_range(0..=7)? {
            // The shell opens a transport only when the client asked for one.
            0 if connect_asked => {
                connect_asked = false;
                c.connected(now);
                wire = Wire { open: true, ..Wire::default() };
            }
            0 => {}
            1 => {
                connect_asked = false;
                c.connection_lost(now, "fuzz");
                wire.open = false;
            }
            2 | 3 => {
                let m = relay_message(u, pushed)?;
                if let Message::Hello { role: Role::Relay, .. } = m {
                    // A relay answers a Hello it has received: not before the client's
                    // went out.
                    if !wire.hello_sent {
                        continue;
                    }
                    wire.relay_hello = true;
                }
                if let Message::Resume(n) = m {
                    wire.resume.get_or_insert(n);
                }
                c.handle_message(m, now);
            }
            4 => {
                if c.push_chunk(chunk(pushed)).is_ok() {
                    pushed += 1;
                }
            }
            5 => {
                if u.arbitrary()? {
                    c.finish(now);
                } else if u.ratio(1, 8)? {
                    c.abandon();
                }
            }
            6 => {
                now += u.int_in_range(0..=20_000)?;
                c.handle_timeout(now);
            }
            _ => {
                let limit = u.int_in_range(0..=50)?;
                for _ in 0..limit {
                    let Some(Outgoing::Message(m)) = c.poll_transmit() else {
                        break;
                    };
                    check_sent(&mut wire, &m, publisher);
                }
            }
        }
        while let Some(e) = c.poll_event() {
            assert!(!done || e == ClientEvent::Disconnect, "{e:?} after the end");
            match e {
                ClientEvent::End(_) | ClientEvent::Failed(_) => done = true,
                ClientEvent::Disconnect => wire.open = false,
                ClientEvent::Connect => connect_asked = true,
                ClientEvent::Header(_) => {
                    assert!(!header_seen, "a second header");
                    header_seen = true;
                }
                ClientEvent::Chunk(b) => {
                    let seq = ChunkHeader::parse_at(&b).unwrap().0.seq;
                    assert!(last_delivered.is_none_or(|l| seq > l), "chunk {seq} after {last_delivered:?}");
                    last_delivered = Some(seq);
                }
                _ => {}
            }
        }
        if done {
            assert!(c.is_closed() && c.poll_timeout().is_none());
        }
    }
    Ok(())
}

fn check_sent(wire: &mut Wire, m: &Message, publisher: bool) {
    assert!(!wire.ended, "{m:?} after End");
    match m {
        Message::Hello { .. } => {
            assert!(!wire.hello_sent, "a second Hello");
            wire.hello_sent = true;
        }
        Message::Publish { .. } | Message::Subscribe { .. } => {
            assert!(wire.relay_hello, "a request before the relay's Hello");
            assert!(matches!(m, Message::Publish { .. }) == publisher);
            wire.request_sent = true;
        }
        Message::Pong(_) => {}
        Message::StreamHeader(_) => {
            assert!(publisher && wire.request_sent && !wire.header_sent);
            wire.header_sent = true;
        }
        Message::Chunk(b) => {
            assert!(wire.header_sent, "a chunk before the header");
            let seq = ChunkHeader::parse_at(b).unwrap().0.seq;
            if let Some(r) = wire.resume {
                assert!(seq >= r, "chunk {seq} although the relay expects {r}");
            }
            if let Some(l) = wire.last_seq {
                assert!(seq > l, "chunk {seq} after {l}");
            }
            wire.last_seq = Some(seq);
        }
        Message::End(_) => wire.ended = true,
        m => panic!("the client sent {m:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
