//! The relay's budgets, driven without sockets: each offender gets `OverBudget` and is
//! closed, while an honest viewer in the same relay still gets every chunk.

use std::net::{IpAddr, Ipv4Addr};

use bsor_stream_core::net::relay::{ConnId, Relay, RelayAction, RelayConfig, Tokens};
use bsor_stream_core::net::wire::{ErrorCode, Message, Role, ViewMode};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{synth, transcode};
use bytes::Bytes;

fn header() -> Bytes {
    let r = synth::replay(synth::Settings {
        seed: 3,
        seconds: 0.1,
        fps: 60,
    });
    let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (_, len, _) = split_stream(&s).unwrap();
    Bytes::copy_from_slice(&s[..len])
}

/// A frame chunk of `size` payload bytes (one frame per 256 bytes, within its limit).
fn chunk(seq: u32, size: usize) -> Bytes {
    let kind = if seq % 4 == 0 {
        ChunkType::Keyframes
    } else {
        ChunkType::Frames
    };
    let frames = (size / 256 + 1) as u32;
    let mut out = Vec::new();
    ChunkHeader::new(kind, seq, 0, frames, 0.0).write_to(&vec![seq as u8; size], &mut out);
    Bytes::from(out)
}

fn addr(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

fn hello(r: &mut Relay, from: IpAddr, role: Role) -> ConnId {
    let c = r.connect_from(0, from);
    let hello = Message::Hello {
        min_version: 1,
        max_version: 1,
        role,
        agent: "test".into(),
    };
    r.receive(c, hello, 0);
    c
}

fn publisher(r: &mut Relay, from: IpAddr, session: &str) -> ConnId {
    let p = hello(r, from, Role::Publisher);
    let publish = Message::Publish {
        session: session.into(),
        token: "t".into(),
        resume: false,
        publisher_key: [1; 16],
    };
    r.receive(p, publish, 0);
    r.receive(p, Message::StreamHeader(header()), 0);
    p
}

fn viewer(r: &mut Relay, from: IpAddr, session: &str) -> ConnId {
    let v = hello(r, from, Role::Viewer);
    let sub = Message::Subscribe {
        session: session.into(),
        mode: ViewMode::Live,
        wait_ms: 1000,
        from: 0,
    };
    r.receive(v, sub, 0);
    v
}

fn drain(r: &mut Relay, c: ConnId) -> Vec<Message> {
    std::iter::from_fn(|| r.poll_outgoing(c)).collect()
}

fn error_of(got: &[Message]) -> Option<ErrorCode> {
    got.iter().find_map(|m| match m {
        Message::Error { code, .. } => Some(*code),
        _ => None,
    })
}

fn closed(r: &mut Relay) -> Vec<ConnId> {
    std::iter::from_fn(|| r.poll_action())
        .filter_map(|a| match a {
            RelayAction::Close(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn chunks_of(got: &[Message]) -> Vec<Bytes> {
    got.iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn connections_past_the_per_address_cap_are_over_budget_and_others_are_not() {
    let mut r = Relay::new(
        RelayConfig {
            connections_per_address: 3,
            ..RelayConfig::default()
        },
        Tokens::parse("t"),
    );
    let p = publisher(&mut r, addr(1), "s");
    let honest = viewer(&mut r, addr(1), "s");
    let mut hostile = Vec::new();
    for _ in 0..3 {
        hostile.push(r.connect_from(0, addr(2)));
    }
    let _ = closed(&mut r);
    let extra = r.connect_from(0, addr(2));
    assert_eq!(closed(&mut r), vec![extra]);
    assert_eq!(error_of(&drain(&mut r, extra)), Some(ErrorCode::OverBudget));
    // The three before it, and the other address, are untouched; once one leaves, a new
    // connection from the address is let in.
    for h in &hostile {
        assert_eq!(error_of(&drain(&mut r, *h)), None);
    }
    r.disconnect(extra, 1);
    r.disconnect(hostile[0], 1);
    let next = r.connect_from(1, addr(2));
    assert!(closed(&mut r).is_empty());
    assert_eq!(error_of(&drain(&mut r, next)), None);
    // A third connection from the honest address is still let in, and the viewer gets all.
    let third = viewer(&mut r, addr(1), "s");
    for seq in 0..8 {
        r.receive(p, Message::Chunk(chunk(seq, 1000)), 2);
    }
    assert!(closed(&mut r).is_empty());
    for v in [honest, third] {
        let got = drain(&mut r, v);
        assert_eq!(chunks_of(&got).len(), 8, "{got:?}");
    }
}

#[test]
fn backlogs_are_bounded_in_bytes_and_a_publisher_past_the_relays_budget_is_over_budget() {
    let mut r = Relay::new(
        RelayConfig {
            backlog_bytes: 10_000,
            total_backlog_bytes: 25_000,
            viewer_queue_bytes: 1 << 20,
            ..RelayConfig::default()
        },
        Tokens::parse("t"),
    );
    let honest_p = publisher(&mut r, addr(1), "honest");
    let honest_v = viewer(&mut r, addr(1), "honest");
    let mut sent = Vec::new();
    for seq in 0..20 {
        let c = chunk(seq, 2_000);
        sent.push(c.clone());
        r.receive(honest_p, Message::Chunk(c), 1);
        // The session keeps at most 10,000 bytes of chunks, however many it is sent.
        assert!(r.backlog_bytes() <= 10_000, "{}", r.backlog_bytes());
    }
    // A second publisher sending large chunks: its own backlog is capped the same way...
    let big_p = publisher(&mut r, addr(2), "big");
    for seq in 0..5 {
        r.receive(big_p, Message::Chunk(chunk(seq, 9_000)), 2);
        assert!(r.backlog_bytes() <= 25_000, "{}", r.backlog_bytes());
    }
    let _ = closed(&mut r);
    // ...and a third, whose chunk no longer fits what the relay keeps for all sessions
    // (the others hold 10,000 + 9,000 bytes), is over budget.
    let third = publisher(&mut r, addr(3), "third");
    r.receive(third, Message::Chunk(chunk(0, 9_000)), 3);
    assert_eq!(closed(&mut r), vec![third]);
    assert_eq!(error_of(&drain(&mut r, third)), Some(ErrorCode::OverBudget));
    // The honest viewer got every chunk, in order, and its publisher goes on.
    r.receive(honest_p, Message::Chunk(chunk(20, 100)), 4);
    sent.push(chunk(20, 100));
    let got = drain(&mut r, honest_v);
    assert_eq!(error_of(&got), None);
    assert!(chunks_of(&got) == sent);
}

#[test]
fn only_a_publisher_may_send_large_frames() {
    let mut r = Relay::new(RelayConfig::default(), Tokens::parse("t"));
    let c = r.connect_from(0, addr(1));
    assert_eq!(r.frame_limit(c), 1024);
    let v = viewer(&mut r, addr(1), "s");
    assert_eq!(r.frame_limit(v), 1024);
    let p = publisher(&mut r, addr(1), "s");
    assert_eq!(r.frame_limit(p), 8 << 20);
}
