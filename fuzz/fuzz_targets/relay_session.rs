//! The relay's sans-IO session logic (`net::relay::Relay`) under arbitrary sequences of
//! connects, messages, socket drains, disconnects and clock deadlines from several connections.
//!
//! The input is read with `arbitrary::Unstructured`: first the relay's limits (small ones,
//! so that queues overflow and backlogs roll over within a few operations), then up to 400
//! operations. Chunks are real chunks (`ChunkHeader::write_to`) whose payload names the
//! session and the connection that sent them. Checked after every operation:
//! - no panic;
//! - no connection has more messages waiting than a live viewer's queue limit plus the few
//!   control messages (Hello, StreamHeader, Skipped, Pong, the relay's Ping, End or Error)
//!   that may wait beside it, whatever it does (pings it never reads, the relay's pings it
//!   never reads, chunks it never acknowledges); on failure, what waits is printed;
//! - what a viewer receives, in order: the relay's Hello first; nothing after End or Error;
//!   one StreamHeader, before any chunk; live mode: chunks in sequence, a gap only right
//!   after `Skipped`, exactly as long as `Skipped` says, and then a keyframe chunk;
//!   complete mode: chunks in sequence without a gap and never `Skipped`;
//! - a viewer receives only its session's chunks, and only chunks sent by a connection that
//!   said `Hello` as a publisher and sent `Publish` for that session with a token the token
//!   file allows for it;
//! - at the end, once every connection is gone and the publisher timeout has passed, the
//!   relay holds no session and no queue (nothing leaks).

#![no_main]

use std::collections::HashMap;

use bsor_stream::net::relay::{ConnId, Relay, RelayAction, RelayConfig, Tokens};
use bsor_stream::net::wire::{EndReason, ErrorCode, Message, Role, ViewMode, WireError};
use bsor_stream::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream::{synth, transcode};
use bytes::Bytes;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const SESSIONS: [&str; 3] = ["a", "duel", "c"];

/// Two real stream headers (the relay refuses anything else with BadStreamHeader).
fn headers() -> &'static [Bytes; 2] {
    static HEADERS: std::sync::OnceLock<[Bytes; 2]> = std::sync::OnceLock::new();
    HEADERS.get_or_init(|| {
        let r = synth::replay(synth::Settings {
            seed: 1,
            seconds: 0.1,
            fps: 60,
        });
        let header = |profile| {
            let s = transcode::encode_replay(&r, Settings::live(profile));
            let (_, len, _) = split_stream(&s).expect("a synthetic stream splits");
            Bytes::copy_from_slice(&s[..len])
        };
        [header(Profile::Lossless), header(Profile::Fine)]
    })
}
const TOKEN_FILE: &str = "any\nduel:only\n";
const TOKENS: [&str; 4] = ["any", "only", "wrong", ""];
/// Control messages that may wait beside a full queue of chunks. The relay keeps at most
/// one of each kind waiting (Hello, Resume, Ack, StreamHeader, Skipped, Pong, its own Ping,
/// and End or Error last), and takes a live chunk only while the queue is under its limit
/// (with a Skipped notice, one over): a live viewer has at most the limit plus 4 (one over,
/// then Pong, Ping and End), a publisher at most 6 messages (Hello, Resume, Ack, Pong, Ping,
/// Error), which is the smallest limit (1) plus 5.
const SLACK: usize = 5;

/// What the harness knows of a connection: what it said, and what it received so far.
#[derive(Default)]
struct Peer {
    hello_role: Option<u8>,
    /// Session index and token index of each `Publish` it sent after its `Hello`.
    published: Vec<(usize, usize)>,
    /// Its first `Subscribe`: session index and mode.
    subscribed: Option<(usize, ViewMode)>,
    /// The next sequence number it sends as a publisher.
    next_seq: u32,
    /// Drained on `Ready` (a fast socket) or only on explicit drains (a slow one).
    fast: bool,
    gone: bool,
    // What it received.
    received: usize,
    finished: bool,
    header: bool,
    last_seq: Option<u32>,
    pending_skip: Option<u64>,
}

struct Harness {
    relay: Relay,
    config: RelayConfig,
    peers: HashMap<ConnId, Peer>,
    ids: Vec<ConnId>,
    now: u64,
}

fn allowed(session: usize, token: usize) -> bool {
    Tokens::parse(TOKEN_FILE).allows(SESSIONS[session], TOKENS[token])
}

/// A chunk of `session` from `sender`.
fn chunk(session: usize, sender: ConnId, seq: u32, keyframe: bool, filler: usize) -> Bytes {
    let kind = if keyframe {
        ChunkType::Keyframes
    } else {
        ChunkType::Frames
    };
    let mut payload = vec![session as u8];
    payload.extend_from_slice(&sender.to_le_bytes());
    payload.resize(payload.len() + filler, 0xAB);
    let mut out = Vec::new();
    ChunkHeader::new(kind, seq, seq, 1, seq as f32 * 0.1).write_to(&payload, &mut out);
    Bytes::from(out)
}

impl Harness {
    fn pick(&self, u: &mut Unstructured) -> Result<ConnId> {
        if self.ids.is_empty() {
            return Ok(0);
        }
        Ok(*u.choose(&self.ids)?)
    }

    /// Takes what the relay has for `conn` (at most `max` messages) and checks it.
    fn drain(&mut self, conn: ConnId, max: usize) {
        for _ in 0..max {
            let Some(m) = self.relay.poll_outgoing(conn) else {
                return;
            };
            self.check(conn, m);
        }
    }

    fn check(&mut self, conn: ConnId, m: Message) {
        let me = self
            .peers
            .get(&conn)
            .expect("a message for an unknown connection");
        let subscribed = me.subscribed;
        let first = me.received == 0;
        assert!(!me.finished, "{conn}: {m:?} after End or Error");
        if first {
            assert!(
                matches!(
                    m,
                    Message::Hello {
                        role: Role::Relay,
                        ..
                    } | Message::Error { .. }
                        | Message::Pong(_)
                ),
                "{conn}: first message {m:?}"
            );
        }
        let chunk_info = match &m {
            Message::Chunk(c) => {
                let (h, hlen) = ChunkHeader::parse_at(c).expect("a relayed chunk parses");
                let session = usize::from(c[hlen]);
                let sender = u64::from_le_bytes(c[hlen + 1..hlen + 9].try_into().unwrap());
                Some((h, session, sender))
            }
            _ => None,
        };
        if let Some((_, session, sender)) = &chunk_info {
            let (mine, _) = subscribed.expect("a chunk to a connection that did not subscribe");
            assert_eq!(*session, mine, "{conn}: a chunk of another session");
            let s = &self.peers[sender];
            assert_eq!(s.hello_role, Some(1), "a chunk from a non-publisher");
            assert!(
                s.published
                    .iter()
                    .any(|&(sess, tok)| sess == mine && allowed(sess, tok)),
                "a chunk from a connection not allowed to publish session {mine}"
            );
        }
        let me = self.peers.get_mut(&conn).unwrap();
        me.received += 1;
        match m {
            Message::End(_) | Message::Error { .. } => me.finished = true,
            Message::StreamHeader(_) => {
                assert!(subscribed.is_some(), "{conn}: a header without Subscribe");
                assert!(!me.header, "{conn}: a second stream header");
                me.header = true;
            }
            Message::Skipped { chunks, .. } => {
                let (_, mode) = subscribed.expect("Skipped to a non-viewer");
                assert_eq!(mode, ViewMode::Live, "{conn}: Skipped in complete mode");
                *me.pending_skip.get_or_insert(0) += u64::from(chunks);
            }
            Message::Chunk(_) => {
                let (h, _, _) = chunk_info.unwrap();
                let (_, mode) = subscribed.unwrap();
                assert!(me.header, "{conn}: a chunk before the stream header");
                if let Some(last) = me.last_seq {
                    let skip = me.pending_skip.unwrap_or(0);
                    assert_eq!(
                        u64::from(h.seq),
                        u64::from(last) + 1 + skip,
                        "{conn} ({mode:?}): chunk {} after {last} and {skip} skipped",
                        h.seq
                    );
                }
                if me.pending_skip.is_some() {
                    assert_eq!(h.kind, ChunkType::Keyframes, "after Skipped, a keyframe");
                }
                me.last_seq = Some(h.seq);
                me.pending_skip = None;
            }
            _ => {}
        }
    }

    /// Handles the relay's actions as the shell would: fast connections are drained when
    /// ready; a closed one is drained whole and then disconnected.
    fn pump(&mut self) {
        while let Some(action) = self.relay.poll_action() {
            match action {
                RelayAction::Ready(c) => {
                    if self.peers.get(&c).is_some_and(|p| p.fast && !p.gone) {
                        self.drain(c, usize::MAX);
                    }
                }
                RelayAction::Close(c) => {
                    if self.peers.get(&c).is_some_and(|p| !p.gone) {
                        self.drain(c, usize::MAX);
                        self.disconnect(c);
                    }
                }
                RelayAction::ArchiveHeader(..)
                | RelayAction::ArchiveChunk(..)
                | RelayAction::SessionEnded(..)
                | RelayAction::Refused { .. } => {}
                RelayAction::Fetch(_) | RelayAction::Lookup(_) => {
                    panic!("an archive read from a relay without an archive: {action:?}")
                }
                _ => panic!("an action this harness does not know: {action:?}"),
            }
        }
    }

    fn disconnect(&mut self, c: ConnId) {
        if let Some(p) = self.peers.get_mut(&c) {
            p.gone = true;
        }
        self.relay.disconnect(c, self.now);
    }

    fn send(&mut self, c: ConnId, m: Message) {
        if let Some(p) = self.peers.get_mut(&c) {
            if p.gone {
                return;
            }
            match &m {
                Message::Hello { role, .. } if p.hello_role.is_none() => {
                    p.hello_role = Some(match role {
                        Role::Relay => 0,
                        Role::Publisher => 1,
                        Role::Viewer => 2,
                        _ => unreachable!("a role the relay does not speak"),
                    })
                }
                Message::Subscribe { session, mode, .. } if p.subscribed.is_none() => {
                    let i = SESSIONS.iter().position(|s| s == session).unwrap();
                    p.subscribed = Some((i, *mode));
                }
                _ => {}
            }
        }
        self.relay.receive(c, m, self.now);
    }

    // Long: one short arm per operation the fuzzer may choose, best read side by side.
    fn step(&mut self, u: &mut Unstructured) -> Result<()> {
        self.now += u64::from(u.int_in_range(0u8..=3)?);
        match u.int_in_range(0u8..=14)? {
            0 => {
                let c = self.relay.connect(self.now);
                let fast = u.arbitrary()?;
                self.peers.insert(
                    c,
                    Peer {
                        fast,
                        ..Peer::default()
                    },
                );
                self.ids.push(c);
            }
            1 => {
                let c = self.pick(u)?;
                let role = match u.int_in_range(0u8..=2)? {
                    0 => Role::Relay,
                    1 => Role::Publisher,
                    _ => Role::Viewer,
                };
                let (min_version, max_version) = *u.choose(&[(1, 1), (0, 3), (2, 5)])?;
                self.send(
                    c,
                    Message::Hello {
                        min_version,
                        max_version,
                        role,
                        agent: "fuzz".into(),
                    },
                );
            }
            2 => {
                let c = self.pick(u)?;
                let session = u.choose_index(SESSIONS.len())?;
                let token = u.choose_index(TOKENS.len())?;
                let resume = u.arbitrary()?;
                let key = [u.int_in_range(0u8..=1)?; 16];
                if let Some(p) = self.peers.get_mut(&c) {
                    if p.hello_role.is_some() && !p.gone {
                        p.published.push((session, token));
                    }
                }
                self.send(
                    c,
                    Message::Publish {
                        session: SESSIONS[session].into(),
                        token: TOKENS[token].into(),
                        resume,
                        publisher_key: key,
                    },
                );
            }
            3 => {
                let c = self.pick(u)?;
                let session = SESSIONS[u.choose_index(SESSIONS.len())?].into();
                let mode = if u.arbitrary()? {
                    ViewMode::Live
                } else {
                    ViewMode::Complete
                };
                let wait_ms = *u.choose(&[0, 20, 10_000])?;
                self.send(
                    c,
                    Message::Subscribe {
                        session,
                        mode,
                        wait_ms,
                        from: 0,
                    },
                );
            }
            4 => {
                let c = self.pick(u)?;
                let h = u.choose(headers())?.clone();
                self.send(c, Message::StreamHeader(h));
            }
            5 => {
                let c = self.pick(u)?;
                let Some(p) = self.peers.get(&c) else {
                    return Ok(());
                };
                // The session it published last (a viewer's chunk names its own session).
                let session = p.published.last().map_or(0, |x| x.0);
                let seq = if u.ratio(7u8, 8)? {
                    p.next_seq
                } else {
                    u32::from(u.arbitrary::<u8>()?)
                };
                let keyframe = u.ratio(1u8, 4)?;
                let filler = usize::from(u.int_in_range(0u8..=200)?);
                if let Some(p) = self.peers.get_mut(&c) {
                    p.next_seq = seq.wrapping_add(1);
                }
                self.send(c, Message::Chunk(chunk(session, c, seq, keyframe, filler)));
            }
            6 => {
                let c = self.pick(u)?;
                let reason = if u.arbitrary()? {
                    EndReason::Finished
                } else {
                    EndReason::PublisherGone
                };
                self.send(c, Message::End(reason));
            }
            7 => {
                let c = self.pick(u)?;
                let n = u.arbitrary()?;
                self.send(c, Message::Ping(n));
            }
            8 => {
                let c = self.pick(u)?;
                let m = match u.int_in_range(0u8..=4)? {
                    0 => Message::Ack(u.arbitrary()?),
                    1 => Message::Resume(u.arbitrary()?),
                    2 => Message::Pong(u.arbitrary()?),
                    3 => Message::Skipped {
                        chunks: 1,
                        bytes: 2,
                    },
                    _ => Message::Error {
                        code: ErrorCode::Internal,
                        message: "x".into(),
                    },
                };
                self.send(c, m);
            }
            9 => {
                let c = self.pick(u)?;
                let n = usize::from(u.int_in_range(0u8..=8)?);
                if self.peers.get(&c).is_some_and(|p| !p.gone) {
                    self.drain(c, n);
                }
            }
            10 => {
                for c in self.ids.clone() {
                    if !self.peers[&c].gone {
                        self.drain(c, usize::MAX);
                    }
                }
            }
            11 => {
                let c = self.pick(u)?;
                if self.peers.get(&c).is_some_and(|p| !p.gone) {
                    self.disconnect(c);
                }
            }
            12 => {
                if u.arbitrary()? {
                    self.now += u64::from(u.int_in_range(0u16..=2000)?);
                } else if let Some(d) = self.relay.poll_timeout() {
                    // Up to just before the earliest deadline nothing is due; then to it.
                    if d > self.now {
                        self.pump();
                        self.relay.handle_timeout(d - 1);
                        let acted = self.relay.poll_action();
                        assert_eq!(acted, None, "handle_timeout before the deadline acted");
                    }
                    self.now = self.now.max(d);
                }
                self.relay.handle_timeout(self.now);
            }
            13 => {
                let c = self.pick(u)?;
                if self.peers.get(&c).is_some_and(|p| !p.gone) {
                    self.relay.reject(c, &WireError::UnknownMessage(0x77));
                }
            }
            _ => {
                // A chunk whose header does not parse.
                let c = self.pick(u)?;
                let junk: Vec<u8> = (0..u.int_in_range(0u8..=20)?).collect();
                self.send(c, Message::Chunk(Bytes::from(junk)));
            }
        }
        self.pump();
        self.check_bounds();
        Ok(())
    }

    fn check_bounds(&mut self) {
        let limit = self.config.viewer_queue_messages + SLACK;
        for c in self.ids.clone() {
            let q = self.relay.queued(c);
            if q > limit {
                // Say what piles up (chunks by sequence number, not their bytes).
                let waiting: Vec<String> = std::iter::from_fn(|| self.relay.poll_outgoing(c))
                    .take(q)
                    .map(|m| match m {
                        Message::Chunk(b) => match ChunkHeader::parse_at(&b) {
                            Some((h, _)) => format!("Chunk({})", h.seq),
                            None => "Chunk(?)".into(),
                        },
                        Message::StreamHeader(_) => "StreamHeader".into(),
                        m => format!("{m:?}"),
                    })
                    .collect();
                panic!("{c}: {q} messages waiting, over {limit}: {waiting:?}");
            }
            if self.peers[&c].gone {
                assert_eq!(q, 0, "{c}: messages kept for a closed connection");
            }
        }
    }
}

fn config(u: &mut Unstructured) -> Result<RelayConfig> {
    Ok(RelayConfig {
        viewer_queue_messages: *u.choose(&[1, 2, 4, 64])?,
        viewer_queue_bytes: *u.choose(&[100, 600, 4 << 20])?,
        backlog_chunks: *u.choose(&[0, 1, 3, 16])?,
        publisher_timeout_ms: *u.choose(&[50, 3000])?,
        handshake_timeout_ms: *u.choose(&[100, 5000])?,
        idle_timeout_ms: *u.choose(&[200, 60_000])?,
        ping_interval_ms: *u.choose(&[50, 15_000])?,
        flood_rate: *u.choose(&[1, 50, 1_000_000])?,
        flood_burst: *u.choose(&[1, 200, 1_000_000])?,
        // No archive: the harness plays no file system (archive reads have tests of their
        // own in core/tests/it/relay.rs and relay/tests/it/tcp.rs).
        ..RelayConfig::default()
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else {
        return;
    };
    let mut h = Harness {
        relay: Relay::new(config, Tokens::parse(TOKEN_FILE)),
        config,
        peers: HashMap::new(),
        ids: Vec::new(),
        now: 0,
    };
    for _ in 0..400 {
        if u.is_empty() || h.step(&mut u).is_err() {
            break;
        }
    }
    // Everyone leaves; once the publisher timeout has passed, nothing is left.
    for c in h.ids.clone() {
        if !h.peers[&c].gone {
            h.disconnect(c);
        }
    }
    h.pump();
    for _ in 0..2 {
        h.now += config.publisher_timeout_ms + 1;
        h.relay.handle_timeout(h.now);
        h.pump();
    }
    assert_eq!(h.relay.sessions(), 0, "sessions left after everyone left");
    for &c in &h.ids {
        assert_eq!(h.relay.queued(c), 0);
    }
});
