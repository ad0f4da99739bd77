//! Regression tests for what the `relay_session` fuzz target found: queues that grew
//! without bound (Pongs, Acks, relay Pings, chunks past a queue full of control messages),
//! a stream header dropped by a skip, ended sessions never forgotten, and a second Error.

use bsor_stream_core::net::relay::{ConnId, Relay, RelayAction, RelayConfig, Tokens};
use bsor_stream_core::net::wire::{EndReason, Message, Role, ViewMode};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{synth, transcode};
use bytes::Bytes;

/// Small queues; no flood limit, so that a peer that never reads is what is tested (the
/// flood limit has its own tests in core/tests/it/relay.rs).
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

/// A real stream header (the relay refuses anything else).
fn header() -> Bytes {
    let r = synth::replay(synth::Settings {
        seed: 1,
        seconds: 0.1,
        fps: 60,
    });
    let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (_, len, _) = split_stream(&s).unwrap();
    Bytes::copy_from_slice(&s[..len])
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
    r.receive(p, Message::StreamHeader(header()), 0);
    p
}

fn viewer(r: &mut Relay, mode: ViewMode) -> ConnId {
    let v = hello(r, Role::Viewer);
    let sub = Message::Subscribe {
        session: "s".into(),
        mode,
        wait_ms: 1000,
        from: 0,
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
    while let Some(e) = r.poll_action() {
        if let RelayAction::Close(c) = e {
            closed.push(c);
        }
    }
    for c in [p, live, complete] {
        assert!(closed.contains(&c), "{c} not closed");
        r.disconnect(c, 3);
    }
    r.handle_timeout(4);
    assert_eq!(r.sessions(), 0, "the ended session is still held");
}

/// Pings every 50 ms, closes only after a minute of silence: many pings fit in between.
fn pinging() -> RelayConfig {
    RelayConfig {
        ping_interval_ms: 50,
        idle_timeout_ms: 60_000,
        ..config()
    }
}

fn count(got: &[Message], pred: impl Fn(&Message) -> bool) -> usize {
    got.iter().filter(|m| pred(m)).count()
}

#[test]
fn a_silent_peer_that_never_reads_has_one_relay_ping_waiting() {
    // What relay_session found (fuzz/regressions/relay_session/ping-pile-up): a publisher
    // that says nothing after Publish and reads nothing had a relay Ping queued at every
    // ping interval until the idle timeout, a minute's worth of them.
    let mut r = Relay::new(pinging(), Tokens::parse("t"));
    let p = hello(&mut r, Role::Publisher);
    let publish = Message::Publish {
        session: "s".into(),
        token: "t".into(),
        resume: false,
        publisher_key: [1; 16],
    };
    r.receive(p, publish, 0);
    for t in 1..1000 {
        r.handle_timeout(t * 50);
    }
    // Hello, Resume and one Ping.
    assert_eq!(r.queued(p), 3, "messages waiting");
    let got = drain(&mut r, p);
    assert!(matches!(got[0], Message::Hello { .. }));
    assert_eq!(got[1], Message::Resume(0));
    assert!(matches!(got[2], Message::Ping(_)));
    // Once it has read that one, it is pinged again at the next interval: keepalive goes on.
    r.handle_timeout(1000 * 50);
    assert!(matches!(drain(&mut r, p)[..], [Message::Ping(_)]));
    // And it is still closed when it stays silent for the idle timeout.
    r.handle_timeout(60_001);
    let got = drain(&mut r, p);
    assert!(matches!(got.last(), Some(Message::Error { .. })), "{got:?}");
}

#[test]
fn a_publisher_whose_acks_alternate_with_pongs_and_pings_has_one_ack_waiting() {
    // An Ack that is no longer last in the queue (a Pong or a relay Ping came after it) is
    // still the one that waits: the next chunk raises it instead of queueing another.
    let mut r = Relay::new(pinging(), Tokens::parse("t"));
    let p = publisher(&mut r);
    for seq in 0..100u32 {
        let t = u64::from(seq) * 60;
        r.receive(p, Message::Chunk(chunk(seq, seq % 10 == 0)), t);
        r.receive(p, Message::Ping(u64::from(seq)), t);
        // Silent for a ping interval (its chunks are heard, so its deadline comes after a gap).
        r.handle_timeout(t + 55);
    }
    let got = drain(&mut r, p);
    let acks: Vec<&Message> = got
        .iter()
        .filter(|m| matches!(m, Message::Ack(_)))
        .collect();
    assert_eq!(acks, [&Message::Ack(99)], "{got:?}");
    assert_eq!(count(&got, |m| matches!(m, Message::Pong(_))), 1);
    assert!(count(&got, |m| matches!(m, Message::Ping(_))) <= 1);
    // Hello, Resume, Ack, Pong and at most one Ping.
    assert!(got.len() <= 5, "{got:?}");
}

#[test]
fn a_small_queue_full_of_control_messages_takes_no_chunk_past_its_limit() {
    // A live queue of 2 messages already holds Hello and the stream header; the viewer pings
    // (a Pong waits) and is pinged (a Ping waits). Chunks, keyframes included, are skipped
    // while it reads nothing: before, the keyframe that ended a skip went in anyway, with
    // its Skipped notice, past the limit.
    let mut r = Relay::new(
        RelayConfig {
            viewer_queue_messages: 2,
            ..pinging()
        },
        Tokens::parse("t"),
    );
    let p = publisher(&mut r);
    let v = viewer(&mut r, ViewMode::Live);
    r.receive(v, Message::Ping(7), 0);
    r.handle_timeout(50);
    assert_eq!(r.queued(v), 4, "Hello, header, Pong, Ping");
    for seq in 0..=20 {
        r.receive(p, Message::Chunk(chunk(seq, seq % 5 == 0)), 60);
        assert_eq!(r.queued(v), 4, "chunk {seq} went past the queue's limit");
    }
    r.receive(p, Message::End(EndReason::Finished), 60);
    let got = drain(&mut r, v);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(matches!(got[0], Message::Hello { .. }));
    assert!(matches!(got[1], Message::StreamHeader(_)));
    assert_eq!(got[2], Message::Pong(7));
    assert!(matches!(got[3], Message::Ping(_)));
    assert_eq!(got[4], Message::End(EndReason::Finished));
}

#[test]
fn a_viewer_that_reads_again_after_a_skip_resumes_at_the_next_keyframe() {
    // The other side of the rule above: once it has read what waited, the next keyframe
    // chunk goes in, after a Skipped notice counting every chunk it missed.
    let mut r = Relay::new(
        RelayConfig {
            viewer_queue_messages: 2,
            ..config()
        },
        Tokens::parse("t"),
    );
    let p = publisher(&mut r);
    let v = viewer(&mut r, ViewMode::Live);
    for seq in 0..7 {
        r.receive(p, Message::Chunk(chunk(seq, seq % 5 == 0)), 1);
    }
    assert_eq!(r.queued(v), 2, "Hello and header only");
    drain(&mut r, v);
    for seq in 7..11 {
        r.receive(p, Message::Chunk(chunk(seq, seq % 5 == 0)), 1);
    }
    let got = drain(&mut r, v);
    assert_eq!(
        got[0],
        Message::Skipped {
            chunks: 10,
            bytes: 10 * chunk(0, true).len() as u64
        }
    );
    assert!(matches!(&got[1], Message::Chunk(c) if seq_of(c) == 10));
    assert_eq!(got.len(), 2);
}

#[test]
fn a_closing_connection_gets_no_second_error() {
    // The relay closes a flooding viewer; bytes it had sent already then fail to decode in
    // the shell, which reports them. The Error already waiting stays the last message.
    let mut r = Relay::new(
        RelayConfig {
            flood_rate: 1,
            flood_burst: 3,
            ..RelayConfig::default()
        },
        Tokens::parse("t"),
    );
    let v = hello(&mut r, Role::Viewer);
    for n in 0..10 {
        r.receive(v, Message::Ping(n), 0);
    }
    r.reject(
        v,
        &bsor_stream_core::net::wire::WireError::UnknownMessage(0x77),
    );
    let got = drain(&mut r, v);
    let errors = count(&got, |m| matches!(m, Message::Error { .. }));
    assert_eq!(errors, 1, "{got:?}");
    assert!(matches!(got.last(), Some(Message::Error { .. })));
}

#[test]
fn a_queue_limit_of_zero_counts_as_one() {
    // A keyframe goes in only while the queue is under its limit; with a limit of 0 taken
    // literally no chunk would ever go, even to a viewer that reads everything.
    let mut r = Relay::new(
        RelayConfig {
            viewer_queue_messages: 0,
            ..config()
        },
        Tokens::parse("t"),
    );
    let p = publisher(&mut r);
    let v = viewer(&mut r, ViewMode::Live);
    drain(&mut r, v);
    r.receive(p, Message::Chunk(chunk(0, true)), 1);
    let got = drain(&mut r, v);
    assert!(
        matches!(got.last(), Some(Message::Chunk(c)) if seq_of(c) == 0),
        "{got:?}"
    );
}
