//! Regression tests for what the `relay_session` fuzz target found: queues that grew
//! without bound, a stream header dropped by a skip, and ended sessions never forgotten.

use bsor_stream::net::relay::{ConnId, Relay, RelayConfig, RelayEvent, Tokens};
use bsor_stream::net::wire::{EndReason, Message, Role, ViewMode};
use bsor_stream::stream::{ChunkHeader, ChunkType};
use bytes::Bytes;

/// Small queues; no flood limit, so that a peer that never reads is what is tested (the
/// flood limit has its own tests in tests/relay.rs).
fn config() -> RelayConfig {
    RelayConfig {
        viewer_queue_messages: 8,
        flood_burst: u32::MAX / 1000,
        ..RelayConfig::default()
    }
}

fn chunk(seq: u32, keyframe: bool) -> Bytes {
    let kind = if keyframe {
        ChunkType::Keyframes
    } else {
        ChunkType::Frames
    };
    let mut out = Vec::new();
    ChunkHeader::new(kind, seq, seq, 1, seq as f32 * 0.1).write_to(&[seq as u8; 40], &mut out);
    Bytes::from(out)
}

fn seq_of(c: &[u8]) -> u32 {
    ChunkHeader::parse_at(c).unwrap().0.seq
}

fn hello(r: &mut Relay, role: Role) -> ConnId {
    let c = r.connect(0);
    let agent = "test".into();
    r.receive(
        c,
        Message::Hello {
            min_version: 1,
            max_version: 1,
            role,
            agent,
        },
        0,
    );
    c
}

fn publisher(r: &mut Relay) -> ConnId {
    let p = hello(r, Role::Publisher);
    let publish = Message::Publish {
        session: "s".into(),
        token: "t".into(),
        resume: false,
        publisher_key: [1; 16],
    };
    r.receive(p, publish, 0);
    r.receive(p, Message::StreamHeader(Bytes::from_static(b"header")), 0);
    p
}

fn viewer(r: &mut Relay, mode: ViewMode) -> ConnId {
    let v = hello(r, Role::Viewer);
    let sub = Message::Subscribe {
        session: "s".into(),
        mode,
        wait_ms: 1000,
    };
    r.receive(v, sub, 0);
    v
}

fn drain(r: &mut Relay, c: ConnId) -> Vec<Message> {
    std::iter::from_fn(|| r.poll_outgoing(c)).collect()
}

#[test]
fn a_connection_that_pings_and_never_reads_has_one_pong_waiting() {
    let mut r = Relay::new(config(), Tokens::parse("t"));
    let v = hello(&mut r, Role::Viewer);
    for n in 0..10_000 {
        r.receive(v, Message::Ping(n), 1);
    }
    assert!(r.queued(v) <= 2, "{} messages waiting", r.queued(v));
    let got = drain(&mut r, v);
    assert!(matches!(got[0], Message::Hello { .. }));
    assert_eq!(got[1..], [Message::Pong(9_999)]);
}

#[test]
fn a_publisher_that_never_reads_acks_has_one_ack_waiting() {
    let mut r = Relay::new(config(), Tokens::parse("t"));
    let p = publisher(&mut r);
    for seq in 0..1000 {
        r.receive(p, Message::Chunk(chunk(seq, seq % 10 == 0)), 1);
    }
    assert!(r.queued(p) <= 3, "{} messages waiting", r.queued(p));
    let got = drain(&mut r, p);
    assert_eq!(got.last(), Some(&Message::Ack(999)));
    assert!(got.iter().any(|m| *m == Message::Resume(0)));
}

#[test]
fn a_viewer_that_falls_behind_before_reading_keeps_its_stream_header() {
    let mut r = Relay::new(config(), Tokens::parse("t"));
    let p = publisher(&mut r);
    let v = viewer(&mut r, ViewMode::Live);
    // Nothing is read: the header, then chunks past the queue's 8 messages.
    for seq in 0..25 {
        r.receive(p, Message::Chunk(chunk(seq, seq % 10 == 0)), 1);
    }
    let got = drain(&mut r, v);
    let header = got
        .iter()
        .position(|m| matches!(m, Message::StreamHeader(_)));
    let first_chunk = got.iter().position(|m| matches!(m, Message::Chunk(_)));
    assert!(header.is_some(), "the stream header was dropped: {got:?}");
    assert!(header < first_chunk);
    // Hello, header, then one skip notice and the keyframe group of chunk 20.
    let seqs: Vec<u32> = got
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(seq_of(c)),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [20, 21, 22, 23, 24]);
    let skipped: Vec<u32> = got
        .iter()
        .filter_map(|m| match m {
            Message::Skipped { chunks, .. } => Some(*chunks),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, [20], "one notice, for every chunk before 20");
}

#[test]
fn a_late_joiner_whose_group_overflows_its_queue_starts_at_the_next_keyframe() {
    let mut r = Relay::new(config(), Tokens::parse("t"));
    let p = publisher(&mut r);
    // A keyframe group of 30 chunks: more than the queue's 8.
    for seq in 0..30 {
        r.receive(p, Message::Chunk(chunk(seq, seq == 0)), 1);
    }
    let v = viewer(&mut r, ViewMode::Live);
    assert!(r.queued(v) <= 8, "{} messages waiting", r.queued(v));
    r.receive(p, Message::Chunk(chunk(30, false)), 2);
    r.receive(p, Message::Chunk(chunk(31, true)), 2);
    let got = drain(&mut r, v);
    assert!(matches!(got[0], Message::Hello { .. }));
    assert!(matches!(got[1], Message::StreamHeader(_)));
    assert_eq!(
        got[2],
        Message::Skipped {
            chunks: 31,
            bytes: 31 * chunk(0, true).len() as u64
        }
    );
    assert!(matches!(&got[3], Message::Chunk(c) if seq_of(c) == 31));
    assert_eq!(got.len(), 4);
}

#[test]
fn an_ended_session_is_forgotten_once_its_viewers_leave() {
    let mut r = Relay::new(config(), Tokens::parse("t"));
    let p = publisher(&mut r);
    let live = viewer(&mut r, ViewMode::Live);
    let complete = viewer(&mut r, ViewMode::Complete);
    r.receive(p, Message::Chunk(chunk(0, true)), 1);
    r.receive(p, Message::End(EndReason::Finished), 2);
    for c in [live, complete] {
        let got = drain(&mut r, c);
        assert_eq!(got.last(), Some(&Message::End(EndReason::Finished)));
    }
    // The shell closes what the relay asked it to close.
    let mut closed = Vec::new();
    while let Some(e) = r.poll_event() {
        if let RelayEvent::Close(c) = e {
            closed.push(c);
        }
    }
    for c in [p, live, complete] {
        assert!(closed.contains(&c), "{c} not closed");
        r.disconnect(c, 3);
    }
    r.tick(4);
    assert_eq!(r.sessions(), 0, "the ended session is still held");
}
