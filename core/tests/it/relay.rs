//! The relay's session logic, driven without sockets.

use std::collections::{HashMap, HashSet};

use bsor_stream_core::net::archive;
use bsor_stream_core::net::relay::{
    Archived, ConnId, Relay, RelayAction, RelayConfig, ResumeKey, Tokens,
};
use bsor_stream_core::net::wire::{EndReason, ErrorCode, Message, Role, ViewMode};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{bsor, synth, transcode};
use bytes::Bytes;

/// A 20-second live stream, cut into its header and chunks (the footer left out).
fn stream() -> (bsor::Replay, Bytes, Vec<Bytes>) {
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 20.0,
        fps: 60,
    });
    let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (header, chunks) = header_and_chunks(&s);
    (r, header, chunks)
}

/// A stream's header and its chunks, as a publisher sends them.
fn header_and_chunks(s: &[u8]) -> (Bytes, Vec<Bytes>) {
    let (_, header_len, spans) = split_stream(s).unwrap();
    let chunks = spans
        .iter()
        .map(|c| Bytes::copy_from_slice(c.bytes(s)))
        .collect();
    (Bytes::copy_from_slice(&s[..header_len]), chunks)
}

fn kind(c: &[u8]) -> ChunkType {
    ChunkHeader::parse_at(c).unwrap().0.kind
}

/// A relay and what each connection has received; `slow` connections are not drained.
struct Net {
    relay: Relay,
    inbox: HashMap<ConnId, Vec<Message>>,
    closed: Vec<ConnId>,
    slow: Vec<ConnId>,
    now: u64,
    /// What the shell would have written to each session's archive file.
    archive: HashMap<String, Vec<u8>>,
    /// Archive reads the shell was asked for.
    fetches: usize,
    /// What the shell would have written to each session's `.witness` file.
    witness: HashMap<String, Vec<u8>>,
    /// Each session's key file, as the shell would have written it.
    keys: HashMap<String, Vec<u8>>,
    /// Sessions whose archive ended finished (the harness writes no footer).
    finished: HashSet<String>,
    /// Archive files reopened after a restart, and the length each was cut to.
    reopened: Vec<(String, u64)>,
    /// Backlogs read back from an archive file for a resumable session: the session, and
    /// the chunks and bytes read.
    backlog_reads: Vec<(String, usize, usize)>,
    config: RelayConfig,
}

/// The token file of the harness: `sekrit` for any session, `only-duel` for `duel`, and
/// two players' tokens.
const TOKENS: &str = "sekrit\nduel:only-duel\nplayer:p1:tok1\nplayer:p2:tok2\n";

impl Net {
    fn new(config: RelayConfig) -> Net {
        Net {
            relay: Relay::new(config, Tokens::parse(TOKENS)),
            inbox: HashMap::new(),
            closed: Vec::new(),
            slow: Vec::new(),
            now: 0,
            archive: HashMap::new(),
            fetches: 0,
            witness: HashMap::new(),
            keys: HashMap::new(),
            finished: HashSet::new(),
            reopened: Vec::new(),
            backlog_reads: Vec::new(),
            config,
        }
    }

    /// The relay is killed and started again: a new relay, and only the files remain.
    fn restart(&mut self) {
        self.relay = Relay::new(self.config, Tokens::parse(TOKENS));
        self.inbox.clear();
        self.closed.clear();
        self.slow.clear();
    }

    fn pump(&mut self) {
        while let Some(action) = self.relay.poll_action() {
            match action {
                RelayAction::Ready(c) => self.drain(c),
                RelayAction::Close(c) => {
                    self.drain(c);
                    self.closed.push(c);
                }
                // The shell's part, with a byte vector for each file.
                RelayAction::ArchiveHeader(s, b) => {
                    self.archive.insert(s, b.to_vec());
                }
                RelayAction::ArchiveChunk(s, b) => {
                    self.archive.entry(s).or_default().extend_from_slice(&b);
                }
                RelayAction::Fetch(f) => {
                    self.fetches += 1;
                    let file = &self.archive[&f.session];
                    let mut at = f.offset as usize;
                    let mut got = Vec::new();
                    while got.len() < f.max_chunks {
                        let Some((h, hlen)) = file.get(at..).and_then(ChunkHeader::parse_at) else {
                            break;
                        };
                        let len = hlen + h.len as usize;
                        got.push(Bytes::copy_from_slice(&file[at..at + len]));
                        at += len;
                    }
                    self.relay.fetched(f.conn, f.seq, Ok(got), self.now);
                }
                RelayAction::Lookup(s) => {
                    let finished = self.finished.contains(&s);
                    let key = self.keys.get(&s).and_then(|k| ResumeKey::parse(k));
                    let found = self.archive.get(&s).map(|file| {
                        let (_, header_len, _) = split_stream(file).unwrap();
                        // Whole chunks in sequence, as archive::scan counts them.
                        let (mut end, mut chunks, mut index_at) = (header_len, 0, None);
                        while let Some((h, hlen)) = file.get(end..).and_then(ChunkHeader::parse_at)
                        {
                            let next = end + hlen + h.len as usize;
                            if h.seq != chunks || next > file.len() {
                                break;
                            }
                            index_at = (h.kind == ChunkType::Index).then_some(end as u64);
                            chunks += 1;
                            end = next;
                        }
                        let mut a = Archived {
                            header: Bytes::copy_from_slice(&file[..header_len]),
                            chunks,
                            end: end as u64,
                            index_at,
                            finished,
                            key: key.filter(|_| !finished),
                            key_chunk: None,
                            backlog: Vec::new(),
                        };
                        if a.key.is_some() {
                            // Resumable: the shell reads the backlog back, with the archive's
                            // own functions on the file as it stands.
                            let tmp = tempfile::NamedTempFile::new().unwrap();
                            std::fs::write(tmp.path(), file).unwrap();
                            let limits = self.relay.backlog_limits();
                            let (_, span) =
                                archive::scan_backlog(tmp.path(), limits).unwrap().unwrap();
                            archive::read_backlog(tmp.path(), &span, &mut a).unwrap();
                            self.backlog_reads
                                .push((s.clone(), span.len(), span.bytes()));
                        }
                        a
                    });
                    self.relay.restored(&s, found, self.now);
                }
                RelayAction::ArchiveKey(s, k) => {
                    self.keys.insert(s, k.to_bytes());
                }
                RelayAction::ArchiveReopen { session, end, .. } => {
                    let file = self.archive.get_mut(&session).unwrap();
                    file.truncate(end as usize);
                    self.reopened.push((session, end));
                }
                RelayAction::SessionEnded(s, reason) => {
                    self.keys.remove(&s);
                    if reason == EndReason::Finished {
                        self.finished.insert(s);
                    }
                }
                RelayAction::ArchiveWitness(s, b) => {
                    let file = self.witness.entry(s).or_default();
                    file.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    file.extend_from_slice(&b);
                }
                RelayAction::Refused { .. } => {}
            }
        }
    }

    fn drain(&mut self, c: ConnId) {
        if self.slow.contains(&c) {
            return;
        }
        while let Some(m) = self.relay.poll_outgoing(c) {
            self.inbox.entry(c).or_default().push(m);
        }
    }

    fn send(&mut self, c: ConnId, m: Message) {
        self.now += 1;
        self.relay.receive(c, m, self.now);
        self.pump();
    }

    fn client(&mut self, role: Role) -> ConnId {
        let c = self.relay.connect(self.now);
        self.send(
            c,
            Message::Hello {
                min_version: 1,
                max_version: 1,
                role,
                agent: "test".into(),
            },
        );
        c
    }

    fn publisher(&mut self, session: &str, token: &str, resume: bool, key: u8) -> ConnId {
        let c = self.client(Role::Publisher);
        self.send(
            c,
            Message::Publish {
                session: session.into(),
                token: token.into(),
                resume,
                publisher_key: [key; 16],
            },
        );
        c
    }

    fn viewer(&mut self, session: &str, mode: ViewMode) -> ConnId {
        let c = self.client(Role::Viewer);
        self.send(
            c,
            Message::Subscribe {
                session: session.into(),
                mode,
                wait_ms: 5_000,
                from: 0,
            },
        );
        c
    }

    /// What a connection received, as stream bytes (header and chunks), and the rest.
    fn received(&self, c: ConnId) -> (Vec<u8>, Vec<Message>) {
        let mut bytes = Vec::new();
        let mut other = Vec::new();
        for m in self.inbox.get(&c).into_iter().flatten() {
            match m {
                Message::StreamHeader(b) | Message::Chunk(b) => bytes.extend_from_slice(b),
                m => other.push(m.clone()),
            }
        }
        (bytes, other)
    }

    fn error_of(&self, c: ConnId) -> Option<ErrorCode> {
        self.inbox.get(&c)?.iter().find_map(|m| match m {
            Message::Error { code, .. } => Some(*code),
            _ => None,
        })
    }
}

fn decode(bytes: &[u8]) -> (bsor::Replay, transcode::Recovery) {
    transcode::decode_replay(bytes).unwrap()
}

#[test]
fn viewers_receive_identical_bytes_and_a_late_joiner_decodes_from_its_first_chunk() {
    let (r, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("song", "sekrit", false, 1);
    assert_eq!(net.inbox[&p].last(), Some(&Message::Resume(0)));
    let early: Vec<ConnId> = (0..5).map(|_| net.viewer("song", ViewMode::Live)).collect();
    net.send(p, Message::StreamHeader(header.clone()));
    let half = chunks.len() / 2;
    for c in &chunks[..half] {
        net.send(p, Message::Chunk(c.clone()));
    }
    let late = net.viewer("song", ViewMode::Live);
    for c in &chunks[half..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.send(p, Message::End(EndReason::Finished));
    let (first, rest) = net.received(early[0]);
    for v in &early[1..] {
        assert!(net.received(*v).0 == first, "identical bytes");
    }
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    let (back, rec) = decode(&first);
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&back).unwrap() == bsor::to_vec(&r).unwrap());
    // The late joiner's first chunk is a keyframe chunk, and everything from it decodes.
    let first_chunk = net.inbox[&late].iter().find_map(|m| match m {
        Message::Chunk(c) => Some(c.clone()),
        _ => None,
    });
    assert_eq!(first_chunk.map(|c| kind(&c)), Some(ChunkType::Keyframes));
    let (back, rec) = decode(&net.received(late).0);
    assert!(
        rec.damage.iter().all(|d| d.what().contains("sequence")),
        "{:?}",
        rec.damage
    );
    assert!(back.frames.len() > r.frames.len() / 3 && back.frames.len() < r.frames.len());
    // Acks for every chunk.
    let acks = net.inbox[&p]
        .iter()
        .filter(|m| matches!(m, Message::Ack(_)))
        .count();
    assert_eq!(acks, chunks.len());
}

#[test]
fn a_slow_live_viewer_skips_to_a_keyframe_and_the_others_lose_nothing() {
    let (_, header, chunks) = stream();
    let config = RelayConfig {
        viewer_queue_messages: 8,
        ..RelayConfig::default()
    };
    let mut net = Net::new(config);
    let p = net.publisher("song", "sekrit", false, 1);
    let fast = net.viewer("song", ViewMode::Live);
    let slow = net.viewer("song", ViewMode::Live);
    net.slow.push(slow);
    net.send(p, Message::StreamHeader(header));
    for c in &chunks[..60] {
        net.send(p, Message::Chunk(c.clone()));
    }
    assert!(
        net.relay.queued(slow) <= 8,
        "bounded: {}",
        net.relay.queued(slow)
    );
    net.slow.clear();
    net.drain(slow);
    for c in &chunks[60..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    let skipped = net.inbox[&slow].iter().find_map(|m| match m {
        Message::Skipped { chunks, .. } => Some(*chunks),
        _ => None,
    });
    assert!(skipped.is_some_and(|n| n > 0), "told how much it skipped");
    // After the notice comes a keyframe chunk.
    let at = net.inbox[&slow]
        .iter()
        .position(|m| matches!(m, Message::Skipped { .. }))
        .unwrap();
    let Message::Chunk(next) = &net.inbox[&slow][at + 1] else {
        panic!()
    };
    assert_eq!(kind(next), ChunkType::Keyframes);
    let got = net.inbox[&fast]
        .iter()
        .filter(|m| matches!(m, Message::Chunk(_)))
        .count();
    assert_eq!(got, chunks.len(), "the fast viewer lost nothing");
}

#[test]
fn a_stalled_complete_viewer_still_gets_every_chunk() {
    let (r, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("song", "sekrit", false, 1);
    let v = net.viewer("song", ViewMode::Complete);
    net.slow.push(v);
    net.send(p, Message::StreamHeader(header));
    for c in &chunks {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.send(p, Message::End(EndReason::Finished));
    net.slow.clear();
    net.drain(v);
    let (bytes, rest) = net.received(v);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    let (back, rec) = decode(&bytes);
    assert!(rec.complete);
    assert!(bsor::to_vec(&back).unwrap() == bsor::to_vec(&r).unwrap());
    // Beyond the backlog, it is told so instead of skipping in silence.
    let mut net = Net::new(RelayConfig {
        backlog_chunks: 10,
        ..RelayConfig::default()
    });
    let p = net.publisher("song", "sekrit", false, 1);
    let v = net.viewer("song", ViewMode::Complete);
    net.slow.push(v);
    let (_, header, chunks) = stream();
    net.send(p, Message::StreamHeader(header));
    for c in &chunks[..50] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.slow.clear();
    net.drain(v);
    assert_eq!(net.error_of(v), Some(ErrorCode::BacklogExceeded));
}

#[test]
fn a_publisher_that_reconnects_resumes_without_gap_or_duplicate() {
    let (r, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("song", "sekrit", false, 7);
    let v = net.viewer("song", ViewMode::Live);
    net.send(p, Message::StreamHeader(header.clone()));
    for c in &chunks[..30] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.relay.disconnect(p, net.now);
    // Another publisher may not take the session; the same one (same key) may.
    let thief = net.publisher("song", "sekrit", true, 9);
    assert_eq!(net.error_of(thief), Some(ErrorCode::SessionBusy));
    let back = net.publisher("song", "sekrit", true, 7);
    assert_eq!(net.inbox[&back].last(), Some(&Message::Resume(30)));
    // It resends a little too much: duplicates are acknowledged and dropped.
    net.send(back, Message::StreamHeader(header));
    for c in &chunks[25..] {
        net.send(back, Message::Chunk(c.clone()));
    }
    net.send(back, Message::End(EndReason::Finished));
    let (bytes, _) = net.received(v);
    let (got, rec) = decode(&bytes);
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&got).unwrap() == bsor::to_vec(&r).unwrap());
}

#[test]
fn a_publisher_that_never_returns_ends_the_session() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig {
        publisher_timeout_ms: 1000,
        ..RelayConfig::default()
    });
    let p = net.publisher("song", "sekrit", false, 1);
    let v = net.viewer("song", ViewMode::Live);
    net.send(p, Message::StreamHeader(header));
    net.send(p, Message::Chunk(chunks[0].clone()));
    net.relay.disconnect(p, net.now);
    net.relay.handle_timeout(net.now + 500);
    net.pump();
    assert!(!net.closed.contains(&v));
    net.relay.handle_timeout(net.now + 1500);
    net.pump();
    assert_eq!(
        net.received(v).1.last(),
        Some(&Message::End(EndReason::PublisherGone))
    );
    assert!(net.closed.contains(&v));
}

#[test]
fn bad_requests_close_only_the_offender() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("song", "sekrit", false, 1);
    let v = net.viewer("song", ViewMode::Live);
    net.send(p, Message::StreamHeader(header));
    // A wrong token; a token for another session; a good per-session token.
    let wrong = net.publisher("other", "nope", false, 2);
    assert_eq!(net.error_of(wrong), Some(ErrorCode::Unauthorized));
    let elsewhere = net.publisher("other", "only-duel", false, 2);
    assert_eq!(net.error_of(elsewhere), Some(ErrorCode::Unauthorized));
    let duel = net.publisher("duel", "only-duel", false, 3);
    assert_eq!(net.inbox[&duel].last(), Some(&Message::Resume(0)));
    // A viewer may not publish; a message out of order closes it.
    let bold = net.client(Role::Viewer);
    net.send(
        bold,
        Message::Publish {
            session: "song".into(),
            token: "sekrit".into(),
            resume: false,
            publisher_key: [0; 16],
        },
    );
    assert_eq!(net.error_of(bold), Some(ErrorCode::UnexpectedMessage));
    // A chunk out of sequence closes the publisher but not the session or its viewers.
    net.send(p, Message::Chunk(chunks[3].clone()));
    assert_eq!(net.error_of(p), Some(ErrorCode::UnexpectedMessage));
    for c in [wrong, elsewhere, bold, p] {
        assert!(net.closed.contains(&c));
    }
    assert!(!net.closed.contains(&v) && !net.closed.contains(&duel));
    // Ping works for anyone still connected.
    net.send(v, Message::Ping(42));
    assert_eq!(net.inbox[&v].last(), Some(&Message::Pong(42)));
}

#[test]
fn handshakes_and_waits_time_out() {
    let mut net = Net::new(RelayConfig {
        handshake_timeout_ms: 100,
        ..RelayConfig::default()
    });
    let idle = net.relay.connect(0);
    let waiting = net.viewer("later", ViewMode::Live);
    net.relay.handle_timeout(200);
    net.pump();
    assert_eq!(net.error_of(idle), Some(ErrorCode::Timeout));
    assert!(!net.closed.contains(&waiting));
    net.relay.handle_timeout(10_000);
    net.pump();
    assert_eq!(net.error_of(waiting), Some(ErrorCode::NoSuchSession));
    // A viewer that waits for a session that then starts gets it.
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let v = net.viewer("soon", ViewMode::Live);
    let p = net.publisher("soon", "sekrit", false, 1);
    net.send(p, Message::StreamHeader(header));
    net.send(p, Message::Chunk(chunks[0].clone()));
    assert!(matches!(net.inbox[&v].last(), Some(Message::Chunk(_))));
}

#[test]
fn complete_viewers_behind_the_backlog_read_the_archive_and_ended_sessions_come_back_from_it() {
    let (r, header, chunks) = stream();
    let want = bsor::to_vec(&r).unwrap();
    let mut net = Net::new(RelayConfig {
        backlog_chunks: 10,
        archive: true,
        fetch_chunks: 7,
        ..RelayConfig::default()
    });
    let p = net.publisher("song", "sekrit", false, 1);
    net.send(p, Message::StreamHeader(header.clone()));
    for c in &chunks[..50] {
        net.send(p, Message::Chunk(c.clone()));
    }
    // Joins long after the backlog lost the first chunks: they come from the archive.
    let late = net.viewer("song", ViewMode::Complete);
    for c in &chunks[50..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.send(p, Message::End(EndReason::Finished));
    net.drain(late);
    net.pump();
    assert!(net.fetches >= 40 / 7, "{} archive reads", net.fetches);
    let (bytes, rest) = net.received(late);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    let (back, rec) = decode(&bytes);
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&back).unwrap() == want);
    assert!(
        bytes == net.archive["song"],
        "the archive holds what the viewer got"
    );
    // Once its viewers are gone the session is forgotten; a viewer (live mode, even) that
    // comes later gets the whole stream from the archive.
    net.relay.disconnect(late, net.now);
    net.relay.handle_timeout(net.now + 1);
    assert_eq!(net.relay.sessions(), 0);
    let again = net.viewer("song", ViewMode::Live);
    net.pump();
    let (bytes, rest) = net.received(again);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    assert!(bytes == net.archive["song"]);
    // No archive file, no session: the viewer waits, and then is told.
    let nobody = net.viewer("nothing", ViewMode::Live);
    net.relay.handle_timeout(net.now + 10_000);
    net.pump();
    assert_eq!(net.error_of(nobody), Some(ErrorCode::NoSuchSession));
}

#[test]
fn floods_and_silence_close_only_the_offender() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig {
        flood_rate: 10,
        flood_burst: 20,
        idle_timeout_ms: 3_000,
        ping_interval_ms: 1_000,
        ..RelayConfig::default()
    });
    let p = net.publisher("song", "sekrit", false, 1);
    let calm = net.viewer("song", ViewMode::Live);
    let loud = net.viewer("song", ViewMode::Live);
    net.send(p, Message::StreamHeader(header));
    // A publisher's chunks do not count; a viewer's pings do.
    for c in &chunks {
        net.send(p, Message::Chunk(c.clone()));
    }
    for n in 0..30 {
        net.send(loud, Message::Ping(n));
    }
    assert_eq!(net.error_of(loud), Some(ErrorCode::Flood));
    assert!(net.closed.contains(&loud) && !net.closed.contains(&calm));
    assert!(!net.closed.contains(&p));
    // Pings spaced at the allowed rate are fine.
    for n in 0..30 {
        net.now += 100;
        net.send(calm, Message::Ping(n));
    }
    assert_eq!(net.error_of(calm), None);
    // Silence: first a ping from the relay, then, if nothing comes back, a timeout.
    let quiet = net.viewer("song", ViewMode::Live);
    let t = net.now;
    net.relay.handle_timeout(t + 1_200);
    net.pump();
    assert!(net.inbox[&quiet]
        .iter()
        .any(|m| matches!(m, Message::Ping(_))));
    net.now = t + 1_500;
    net.send(calm, Message::Pong(1));
    net.relay.handle_timeout(t + 3_200);
    net.pump();
    assert_eq!(net.error_of(quiet), Some(ErrorCode::Timeout));
    assert_eq!(net.error_of(calm), None);
    assert!(!net.closed.contains(&calm));
}

#[test]
fn a_publisher_that_does_not_read_its_acks_has_one_waiting() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("song", "sekrit", false, 1);
    net.slow.push(p);
    net.send(p, Message::StreamHeader(header));
    for c in &chunks {
        net.send(p, Message::Chunk(c.clone()));
    }
    // One cumulative Ack waits, not one per chunk.
    assert_eq!(net.relay.queued(p), 1);
    net.slow.clear();
    net.drain(p);
    let last = chunks.len() as u32 - 1;
    assert_eq!(net.inbox[&p].last(), Some(&Message::Ack(last)));
}

#[test]
fn a_publishers_header_must_be_a_stream_header_and_viewers_never_see_a_bad_one() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let v = net.viewer("song", ViewMode::Live);
    let bad = [
        Bytes::from_static(b"not a stream header at all"),
        header.slice(..header.len() - 1),
        Bytes::from([&header[..], b"x"].concat()),
    ];
    for (i, h) in bad.into_iter().enumerate() {
        let p = net.publisher("song", "sekrit", true, 1);
        net.send(p, Message::StreamHeader(h));
        assert_eq!(
            net.error_of(p),
            Some(ErrorCode::BadStreamHeader),
            "bad header {i}"
        );
        assert!(net.closed.contains(&p));
    }
    let (bytes, _) = net.received(v);
    assert!(bytes.is_empty(), "the viewer got {} bytes", bytes.len());
    // The real header, from the same publisher resuming, is taken and reaches the viewer.
    let p = net.publisher("song", "sekrit", true, 1);
    net.send(p, Message::StreamHeader(header.clone()));
    net.send(p, Message::Chunk(chunks[0].clone()));
    assert_eq!(net.error_of(p), None);
    let (bytes, _) = net.received(v);
    assert_eq!(bytes, [&header[..], &chunks[0][..]].concat());
}

#[test]
fn a_chunk_over_its_types_limit_is_refused_and_the_session_goes_on() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig::default());
    let v = net.viewer("song", ViewMode::Live);
    let p = net.publisher("song", "sekrit", false, 1);
    net.send(p, Message::StreamHeader(header.clone()));
    net.send(p, Message::Chunk(chunks[0].clone()));
    // One frame in a chunk of 300 KB: far over 128 + 256 bytes. (The shell's codec refuses
    // it from its header; the relay itself checks chunks it is handed too.)
    let mut huge = Vec::new();
    ChunkHeader::new(ChunkType::Frames, 1, 0, 1, 0.0).write_to(&vec![0u8; 300_000], &mut huge);
    net.send(p, Message::Chunk(Bytes::from(huge)));
    assert_eq!(net.error_of(p), Some(ErrorCode::MalformedChunk));
    // The publisher resumes and sends the real chunk 1: the viewer gets everything.
    let p2 = net.publisher("song", "sekrit", true, 1);
    net.send(p2, Message::StreamHeader(header.clone()));
    net.send(p2, Message::Chunk(chunks[1].clone()));
    let (bytes, _) = net.received(v);
    assert_eq!(
        bytes,
        [&header[..], &chunks[0][..], &chunks[1][..]].concat()
    );
}

#[test]
fn a_new_session_never_replaces_an_archived_one_but_its_publisher_may_resume() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig {
        archive: true,
        ..RelayConfig::default()
    });
    let p = net.publisher("song", "sekrit", false, 1);
    net.send(p, Message::StreamHeader(header.clone()));
    net.send(p, Message::Chunk(chunks[0].clone()));
    // Its connection drops; the same publisher resumes (same key, resume = 1) and goes on.
    net.relay.disconnect(p, net.now);
    let p = net.publisher("song", "sekrit", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(1)));
    // Another publisher of the live session is busy, as before.
    let other = net.publisher("song", "sekrit", false, 2);
    assert_eq!(net.error_of(other), Some(ErrorCode::SessionBusy));
    for c in &chunks[1..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.send(p, Message::End(EndReason::Finished));
    let file = net.archive["song"].clone();
    // Ended and held in memory: a new publisher of the name is refused, and the file stays.
    let again = net.publisher("song", "sekrit", false, 3);
    assert_eq!(net.error_of(again), Some(ErrorCode::SessionExists));
    // Forgotten (no viewers), so only on disk: the archive is looked up and still refuses.
    net.relay.handle_timeout(net.now + 1);
    assert_eq!(net.relay.sessions(), 0);
    for (key, resume) in [(3, false), (1, true)] {
        let late = net.publisher("song", "sekrit", resume, key);
        assert_eq!(net.error_of(late), Some(ErrorCode::SessionExists));
        assert!(net.closed.contains(&late));
    }
    assert!(net.archive["song"] == file, "the archive was not touched");
    // A name with nothing on disk is looked up too, and then starts at 0.
    let fresh = net.publisher("other", "sekrit", false, 4);
    assert!(net.received(fresh).1.contains(&Message::Resume(0)));
}

/// Signed streams (proto-spec/integrity.md): the relay forwards and archives the signing
/// chunks like any skippable chunk, so viewers from the start and the archive verify.
#[cfg(feature = "integrity")]
#[test]
fn signing_chunks_pass_through_and_the_archive_verifies() {
    use bsor_stream_core::integrity::{self, Signer, SigningKey, Verdict};
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 5.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (_, header_len, spans) = split_stream(&s).unwrap();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("signed", "sekrit", false, 1);
    let v = net.viewer("signed", ViewMode::Live);
    net.send(
        p,
        Message::StreamHeader(Bytes::copy_from_slice(&s[..header_len])),
    );
    for c in &spans {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    net.send(p, Message::End(EndReason::Finished));
    let (seen, _) = net.received(v);
    assert!(seen == s[..s.len() - 16], "the viewer gets every chunk");
    for bytes in [&seen, &net.archive["signed"]] {
        let rep = integrity::verify_stream(bytes);
        assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
        assert!(rep.checkpoints >= 5);
    }
}

/// A live viewer that joins a signed session late gets the key chunk after the header
/// (wire.md §3), so what it receives verifies as far as it goes: `incomplete`, with every
/// checkpoint of the groups it saw, never `invalid`.
#[cfg(feature = "integrity")]
#[test]
fn a_late_joiner_of_a_signed_session_gets_the_key_chunk_and_verifies_what_it_saw() {
    use bsor_stream_core::integrity::{
        self, Signer, SigningKey, Verdict, CHECKPOINT_CHUNK, KEY_CHUNK,
    };
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 8.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (_, header_len, spans) = split_stream(&s).unwrap();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("signed", "sekrit", false, 1);
    net.send(
        p,
        Message::StreamHeader(Bytes::copy_from_slice(&s[..header_len])),
    );
    let half = spans.len() / 2;
    for c in &spans[..half] {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    let late = net.viewer("signed", ViewMode::Live);
    // Only part of the rest comes before the check: the session is still live.
    let upto = half + (spans.len() - half) / 2;
    for c in &spans[half..upto] {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    let chunks: Vec<Bytes> = net.inbox[&late]
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    let head = |c: &Bytes| ChunkHeader::parse_at(c).unwrap().0;
    assert_eq!(head(&chunks[0]).seq, 0);
    assert_eq!(head(&chunks[0]).kind, ChunkType::Unknown(KEY_CHUNK));
    assert_eq!(head(&chunks[1]).kind, ChunkType::Keyframes);
    assert!(head(&chunks[1]).seq > 1, "joined after the first group");
    let (seen, _) = net.received(late);
    let rep = integrity::verify_stream(&seen);
    assert_eq!(rep.verdict, Verdict::Incomplete, "{:?}", rep.reason);
    assert!(rep.reason.unwrap().contains("joined late"));
    let checkpoints: Vec<u32> = chunks[1..]
        .iter()
        .map(head)
        .filter(|h| h.kind == ChunkType::Unknown(CHECKPOINT_CHUNK))
        .map(|h| h.seq)
        .collect();
    assert!(checkpoints.len() >= 2, "{checkpoints:?}");
    assert_eq!(rep.checkpoints as usize, checkpoints.len());
    assert_eq!(rep.chain_valid_to_chunk, checkpoints.last().copied());
    // A viewer that joins at the start gets the key chunk once, in its place.
    let early = net.viewer("signed", ViewMode::Complete);
    for c in &spans[upto..] {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    net.send(p, Message::End(EndReason::Finished));
    let (all, _) = net.received(early);
    assert!(all == s[..s.len() - 16]);
    assert_eq!(integrity::verify_stream(&all).verdict, Verdict::Valid);
    let (seen, _) = net.received(late);
    let rep = integrity::verify_stream(&seen);
    assert_eq!(rep.verdict, Verdict::Incomplete, "{:?}", rep.reason);
}

/// A witness relay (integrity.md §12) countersigns every checkpoint and the final
/// checkpoint: the publisher and the viewers get each statement, the shell appends it to
/// the session's `.witness` file, and the archive stays byte for byte what was published.
#[cfg(feature = "integrity")]
#[test]
fn a_witness_relay_countersigns_each_checkpoint_and_leaves_the_archive_as_published() {
    use bsor_stream_core::integrity::witness::{check_witnesses, Witness};
    use bsor_stream_core::integrity::{self, Signer, SigningKey, CHECKPOINT_CHUNK, FINAL_CHUNK};
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 12.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (_, header_len, spans) = split_stream(&s).unwrap();
    let witnessed = spans
        .iter()
        .filter(|c| {
            c.header.kind == ChunkType::Unknown(CHECKPOINT_CHUNK)
                || c.header.kind == ChunkType::Unknown(FINAL_CHUNK)
        })
        .count();
    let mut net = Net::new(RelayConfig {
        archive: true,
        ..RelayConfig::default()
    });
    let w = Witness::new(SigningKey::from_bytes(&[0x57; 32]));
    let public = w.public_key();
    // The shell's time 0 is this Unix time.
    let zero = 1_700_000_000_000;
    net.relay.set_witness(w, zero);
    let p = net.publisher("signed", "sekrit", false, 1);
    let v = net.viewer("signed", ViewMode::Live);
    // A viewer that never reads has at most 8 statements waiting.
    let stalled = net.viewer("signed", ViewMode::Live);
    net.slow.push(stalled);
    net.send(
        p,
        Message::StreamHeader(Bytes::copy_from_slice(&s[..header_len])),
    );
    for c in &spans {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    net.send(p, Message::End(EndReason::Finished));
    let waiting: Vec<Message> = std::iter::from_fn(|| net.relay.poll_outgoing(stalled)).collect();
    let waiting_statements = waiting
        .iter()
        .filter(|m| matches!(m, Message::Witness(_)))
        .count();
    assert!(witnessed > 8, "{witnessed}");
    assert_eq!(waiting_statements, 8);
    let statements = |c: ConnId| -> Vec<Bytes> {
        net.inbox[&c]
            .iter()
            .filter_map(|m| match m {
                Message::Witness(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    };
    let (to_publisher, to_viewer) = (statements(p), statements(v));
    assert_eq!(to_publisher.len(), witnessed);
    assert_eq!(to_viewer, to_publisher);
    // The archive holds the published chunks only; the viewer saw the same stream.
    assert!(net.archive["signed"] == s[..s.len() - 16]);
    assert!(net.received(v).0 == s[..s.len() - 16]);
    let file = &net.witness["signed"];
    assert_eq!(file.len(), witnessed * (4 + to_publisher[0].len()));
    let rep = check_witnesses(&s, file, &[public]);
    assert!(rep.rejected.is_empty(), "{:?}", rep.rejected);
    assert_eq!(rep.witnesses.len(), 1);
    assert!(rep.witnesses[0].final_checkpoint);
    assert_eq!(rep.witnesses[0].checkpoints.len(), witnessed - 1);
    // Receive times are the relay's clock from `zero` on (the harness ticks 1 ms a message).
    let t = rep.existed_by_ms.unwrap();
    assert!(t > zero && t < zero + 10_000, "{t}");
}

/// Without a witness key nothing changes: no statements on the wire or for the shell.
#[cfg(feature = "integrity")]
#[test]
fn a_relay_without_a_witness_key_makes_no_statements() {
    use bsor_stream_core::integrity::{self, Signer, SigningKey};
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 3.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (_, header_len, spans) = split_stream(&s).unwrap();
    let mut net = Net::new(RelayConfig::default());
    let p = net.publisher("signed", "sekrit", false, 1);
    let v = net.viewer("signed", ViewMode::Live);
    net.send(
        p,
        Message::StreamHeader(Bytes::copy_from_slice(&s[..header_len])),
    );
    for c in &spans {
        net.send(p, Message::Chunk(Bytes::copy_from_slice(c.bytes(&s))));
    }
    for c in [p, v] {
        assert!(!net.inbox[&c]
            .iter()
            .any(|m| matches!(m, Message::Witness(_))));
    }
    assert!(net.witness.is_empty());
}

/// Publishes `song` as `key` with `token` up to chunk `upto` (not included), on a relay
/// with an archive; returns the publisher's connection.
fn publish_part(net: &mut Net, token: &str, key: u8, header: &Bytes, chunks: &[Bytes]) -> ConnId {
    let p = net.publisher("song", token, false, key);
    assert!(net.received(p).1.contains(&Message::Resume(0)));
    net.send(p, Message::StreamHeader(header.clone()));
    for c in chunks {
        net.send(p, Message::Chunk(c.clone()));
    }
    p
}

fn archived_relay() -> Net {
    Net::new(RelayConfig {
        archive: true,
        backlog_chunks: 8,
        fetch_chunks: 3,
        ..RelayConfig::default()
    })
}

#[test]
fn a_publisher_resumes_its_session_after_a_relay_restart() {
    let (r, header, chunks) = stream();
    let mut net = archived_relay();
    publish_part(&mut net, "sekrit", 1, &header, &chunks[..20]);
    // The key file was asked for before the publisher's Resume, and holds a digest.
    let key = ResumeKey::parse(&net.keys["song"]).unwrap();
    assert!(key.proves(&[1; 16]));
    assert!(!net.keys["song"].windows(16).any(|w| w == [1; 16]));
    // Killed in the middle of chunk 20's write: half of it is in the file.
    let whole = net.archive["song"].clone();
    let torn = &chunks[20][..chunks[20].len() / 2];
    net.archive.get_mut("song").unwrap().extend_from_slice(torn);
    net.restart();
    // The same publisher (same key, resume = 1) comes back: the file is cut to its whole
    // chunks and it goes on from there.
    let p = net.publisher("song", "sekrit", true, 1);
    assert_eq!(net.error_of(p), None);
    assert!(net.received(p).1.contains(&Message::Resume(20)));
    assert_eq!(net.reopened, vec![("song".to_string(), whole.len() as u64)]);
    assert!(net.archive["song"] == whole, "only the torn tail was cut");
    // A live viewer right after the resume: the header, the backlog's group as the relay
    // held it before the restart (the last 8 chunks at most, here), then the chunks as they
    // come.
    let live = net.viewer("song", ViewMode::Live);
    // The publisher sends its header and its unacknowledged chunks again (18 and 19 were,
    // say, still unacknowledged): acknowledged and dropped.
    net.send(p, Message::StreamHeader(header.clone()));
    for c in &chunks[18..30] {
        net.send(p, Message::Chunk(c.clone()));
    }
    // A complete-mode viewer: the chunks from before the restart come from the archive.
    let complete = net.viewer("song", ViewMode::Complete);
    for c in &chunks[30..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    let last = chunks.len() as u32 - 1;
    assert!(net.received(p).1.contains(&Message::Ack(last)));
    net.send(p, Message::End(EndReason::Finished));
    net.drain(complete);
    net.pump();
    let all = [&header[..], &chunks.concat()[..]].concat();
    assert!(net.archive["song"] == all, "no gap, no duplicate");
    let (bytes, rest) = net.received(complete);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    assert!(bytes == all);
    assert!(net.fetches > 0);
    let (back, rec) = decode(&bytes);
    assert!(rec.complete, "{rec:?}");
    assert!(bsor::to_vec(&back).unwrap() == bsor::to_vec(&r).unwrap());
    let (bytes, rest) = net.received(live);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    let group = late_group(&chunks[..20], 8);
    let want = [&header[..], &group.concat()[..], &chunks[20..].concat()[..]].concat();
    assert!(bytes == want);
    // Ended: its key file is gone, and the name is the archive's for good.
    assert!(!net.keys.contains_key("song"));
}

#[test]
fn after_a_restart_nobody_else_resumes() {
    let (_, header, chunks) = stream();
    let mut net = archived_relay();
    publish_part(&mut net, "sekrit", 1, &header, &chunks[..5]);
    let key_file = net.keys["song"].clone();
    // Another key (with a valid token), resume = 0 with the right key, and the key file's
    // own bytes sent as the key: each, first after a restart, finds the session in the
    // archive.
    let mut digest_head = [0u8; 16];
    digest_head.copy_from_slice(&key_file[8..24]);
    for (key, resume) in [([2; 16], true), ([1; 16], false), (digest_head, true)] {
        net.restart();
        let c = net.client(Role::Publisher);
        net.send(
            c,
            Message::Publish {
                session: "song".into(),
                token: "sekrit".into(),
                resume,
                publisher_key: key,
            },
        );
        assert_eq!(net.error_of(c), Some(ErrorCode::SessionExists), "{key:?}");
    }
    // Held now (looked up), live and waiting for its publisher: another is busy, as with
    // any live session, and the publisher still resumes.
    let thief = net.publisher("song", "sekrit", true, 3);
    assert_eq!(net.error_of(thief), Some(ErrorCode::SessionBusy));
    let p = net.publisher("song", "sekrit", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(5)));
    // No key file: nobody resumes.
    net.restart();
    net.keys.clear();
    let p = net.publisher("song", "sekrit", true, 1);
    assert_eq!(net.error_of(p), Some(ErrorCode::SessionExists));
    assert!(net.reopened.len() == 1, "the file was not reopened again");
}

#[test]
fn a_finished_or_timed_out_session_is_not_resumed_after_a_restart() {
    let (_, header, chunks) = stream();
    let mut net = Net::new(RelayConfig {
        archive: true,
        publisher_timeout_ms: 1_000,
        ..RelayConfig::default()
    });
    let p = publish_part(&mut net, "sekrit", 1, &header, &chunks);
    net.send(p, Message::End(EndReason::Finished));
    assert!(
        !net.keys.contains_key("song"),
        "its key file went with the end"
    );
    // A finished file, even with its key file there (put back by hand).
    let found = ResumeKey::new(&[1; 16], None).to_bytes();
    net.keys.insert("song".into(), found);
    net.restart();
    let p = net.publisher("song", "sekrit", true, 1);
    assert_eq!(net.error_of(p), Some(ErrorCode::SessionExists));
    // A session whose publisher timed out while the relay ran: ended, and final.
    let p = net.publisher("other", "sekrit", false, 4);
    net.send(p, Message::StreamHeader(header.clone()));
    net.send(p, Message::Chunk(chunks[0].clone()));
    net.relay.disconnect(p, net.now);
    net.relay.handle_timeout(net.now + 2_000);
    net.pump();
    assert!(!net.keys.contains_key("other"));
    net.restart();
    let p = net.publisher("other", "sekrit", true, 4);
    assert_eq!(net.error_of(p), Some(ErrorCode::SessionExists));
}

#[test]
fn the_player_binding_survives_a_restart_and_a_cleared_one_stays_cleared() {
    let (_, header, chunks) = stream();
    let mut net = archived_relay();
    publish_part(&mut net, "tok1", 1, &header, &chunks[..3]);
    assert_eq!(
        ResumeKey::parse(&net.keys["song"])
            .unwrap()
            .player
            .as_deref(),
        Some("p1")
    );
    net.restart();
    // The same player's token: the binding holds.
    let p = net.publisher("song", "tok1", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(3)));
    assert_eq!(net.relay.session_player("song"), Some("p1"));
    net.restart();
    // Another player's token: the binding is cleared, and the key file says so.
    let p = net.publisher("song", "tok2", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(3)));
    assert_eq!(net.relay.session_player("song"), None);
    assert_eq!(ResumeKey::parse(&net.keys["song"]).unwrap().player, None);
    // ... so that the first player's token does not bring it back after a restart.
    net.restart();
    let p = net.publisher("song", "tok1", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(3)));
    assert_eq!(net.relay.session_player("song"), None);
    // Cleared by a resume while the relay runs (no restart) too.
    let mut net = archived_relay();
    let p = publish_part(&mut net, "tok1", 7, &header, &chunks[..2]);
    net.relay.disconnect(p, net.now);
    let p = net.publisher("song", "sekrit", true, 7);
    assert!(net.received(p).1.contains(&Message::Resume(2)));
    assert_eq!(ResumeKey::parse(&net.keys["song"]).unwrap().player, None);
    net.restart();
    let p = net.publisher("song", "tok1", true, 7);
    assert!(net.received(p).1.contains(&Message::Resume(2)));
    assert_eq!(net.relay.session_player("song"), None);
}

#[test]
fn a_viewer_that_comes_before_the_publisher_is_back_reads_through_to_the_end() {
    let (_, header, chunks) = stream();
    let mut net = archived_relay();
    publish_part(&mut net, "sekrit", 1, &header, &chunks[..25]);
    net.restart();
    let v = net.viewer("song", ViewMode::Complete);
    let p = net.publisher("song", "sekrit", true, 1);
    assert!(net.received(p).1.contains(&Message::Resume(25)));
    net.send(p, Message::StreamHeader(header.clone()));
    for c in &chunks[25..] {
        net.send(p, Message::Chunk(c.clone()));
    }
    net.send(p, Message::End(EndReason::Finished));
    net.drain(v);
    net.pump();
    let (bytes, rest) = net.received(v);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    assert!(bytes == [&header[..], &chunks.concat()[..]].concat());
}

/// What a late joiner of a stream cut after `chunks` gets from a backlog of at most
/// `limit` chunks: from the last keyframe chunk on, or the whole backlog if it holds none.
fn late_group(chunks: &[Bytes], limit: usize) -> Vec<Bytes> {
    let kept = &chunks[chunks.len().saturating_sub(limit)..];
    let start = kept
        .iter()
        .rposition(|c| kind(c) == ChunkType::Keyframes)
        .unwrap_or(0);
    kept[start..].to_vec()
}

/// What a live viewer of `song` receives when it joins after the publisher sent `header`
/// and `chunks` (and before anything more), on a relay with an archive and `config`: the
/// stream header, chunks and skip notices. With `restart`, the relay is killed after those
/// chunks and started again, and the viewer joins after the publisher resumed (or, with
/// `before`, before the publisher is back).
fn late_joiner(
    config: RelayConfig,
    header: &Bytes,
    chunks: &[Bytes],
    restart: bool,
    before: bool,
) -> (Vec<Message>, Net) {
    let mut net = Net::new(RelayConfig {
        archive: true,
        ..config
    });
    publish_part(&mut net, "sekrit", 1, header, chunks);
    let v = if restart {
        net.restart();
        let early = before.then(|| net.viewer("song", ViewMode::Live));
        let p = net.publisher("song", "sekrit", true, 1);
        assert!(net
            .received(p)
            .1
            .contains(&Message::Resume(chunks.len() as u32)));
        net.send(p, Message::StreamHeader(header.clone()));
        early.unwrap_or_else(|| net.viewer("song", ViewMode::Live))
    } else {
        net.viewer("song", ViewMode::Live)
    };
    let got = net.inbox[&v]
        .iter()
        .filter(|m| {
            matches!(
                m,
                Message::StreamHeader(_) | Message::Chunk(_) | Message::Skipped { .. }
            )
        })
        .cloned()
        .collect();
    (got, net)
}

/// A live viewer that joins a session resumed after a restart gets what it would have got
/// had the relay not restarted (wire.md §4.1): the header and the group of the backlog the
/// relay held, read back from the archive file within the backlog's limits; whatever the
/// limits, wherever the stream was cut, and whether it joins before or after the
/// publisher is back.
#[test]
fn a_late_joiner_after_a_restart_gets_what_it_would_have_got_without_one() {
    let (r, header, chunks) = stream();
    let keyframes: Vec<usize> = (0..chunks.len())
        .filter(|&i| kind(&chunks[i]) == ChunkType::Keyframes)
        .collect();
    assert!(keyframes.len() > 10, "{keyframes:?}");
    let configs = [
        RelayConfig::default(),
        // The group cut by the chunk limit, or by the bytes limit.
        RelayConfig {
            backlog_chunks: 4,
            ..RelayConfig::default()
        },
        RelayConfig {
            backlog_bytes: 3_000,
            ..RelayConfig::default()
        },
        RelayConfig {
            total_backlog_bytes: 2_000,
            ..RelayConfig::default()
        },
        // A group longer than the viewer's queue: skipped to the next keyframe.
        RelayConfig {
            viewer_queue_messages: 4,
            ..RelayConfig::default()
        },
    ];
    let cuts = [
        1,
        keyframes[3],
        keyframes[3] + 1,
        keyframes[5] + 4,
        chunks.len() - 1,
    ];
    for config in configs {
        for &cut in &cuts {
            let (want, unrestarted) = late_joiner(config, &header, &chunks[..cut], false, false);
            let shown = |net: &Net| {
                let v = net.relay.session_views(10);
                assert_eq!(v.len(), 1);
                (v[0].live, v[0].bytes, v[0].song_time)
            };
            for before in [false, true] {
                let (got, net) = late_joiner(config, &header, &chunks[..cut], true, before);
                assert!(
                    got == want,
                    "cut at {cut}, {config:?}, before: {before}: {} messages, not {}",
                    got.len(),
                    want.len()
                );
                // `GET /sessions` shows the session as it did before the restart.
                assert_eq!(
                    shown(&net),
                    shown(&unrestarted),
                    "cut at {cut}, {config:?}, before: {before}"
                );
                // Read back within the backlog's limits, and held within them.
                let (_, read, bytes) = net.backlog_reads.last().cloned().unwrap();
                assert!(read <= config.backlog_chunks.max(1), "{read}");
                assert!(read <= 1 || bytes <= config.backlog_bytes, "{bytes}");
                assert!(net.relay.backlog_bytes() <= config.total_backlog_bytes);
            }
        }
    }
    // With the default limits the late joiner decodes at once, from a keyframe chunk, the
    // frames of the source from there on.
    let cut = keyframes[5] + 4;
    let (got, _) = late_joiner(RelayConfig::default(), &header, &chunks[..cut], true, false);
    let data: Vec<&Bytes> = got
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(kind(data[0]), ChunkType::Keyframes);
    assert_eq!(
        ChunkHeader::parse_at(data[0]).unwrap().0.seq,
        keyframes[5] as u32
    );
    assert_eq!(data.len(), 4);
    let bytes = [
        &header[..],
        &data.iter().map(|c| &c[..]).collect::<Vec<_>>().concat()[..],
    ]
    .concat();
    let (back, _) = decode(&bytes);
    assert!(!back.frames.is_empty());
    let first = r
        .frames
        .iter()
        .position(|f| f.time == back.frames[0].time)
        .unwrap();
    assert!(back.frames[..] == r.frames[first..first + back.frames.len()]);
}

/// A signed session's late joiner after a restart gets the key chunk first, then the group
/// it would have got without the restart, and what it got verifies (integrity.md §8) as a
/// late joiner's stream of the publisher's key.
#[cfg(feature = "integrity")]
#[test]
fn a_late_joiner_of_a_signed_session_after_a_restart_gets_the_key_chunk() {
    use bsor_stream_core::integrity::{self, Signer, SigningKey, Verdict, KEY_CHUNK};
    let r = synth::replay(synth::Settings {
        seed: 21,
        seconds: 8.0,
        fps: 60,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let public = signer.public_key();
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).unwrap();
    let (header, chunks) = header_and_chunks(&s);
    let cut = chunks.len() / 2;
    let (want, _) = late_joiner(
        RelayConfig::default(),
        &header,
        &chunks[..cut],
        false,
        false,
    );
    let (got, net) = late_joiner(RelayConfig::default(), &header, &chunks[..cut], true, false);
    assert!(got == want, "{} messages, not {}", got.len(), want.len());
    let data: Vec<&Bytes> = got
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(c),
            _ => None,
        })
        .collect();
    let head = |c: &Bytes| ChunkHeader::parse_at(c).unwrap().0;
    assert_eq!(head(data[0]).seq, 0);
    assert_eq!(head(data[0]).kind, ChunkType::Unknown(KEY_CHUNK));
    assert_eq!(head(data[1]).kind, ChunkType::Keyframes);
    assert!(head(data[1]).seq > 1, "joined after the first group");
    assert!(net.relay.backlog_bytes() > 0);
    let bytes = [
        &header[..],
        &data.iter().map(|c| &c[..]).collect::<Vec<_>>().concat()[..],
    ]
    .concat();
    let rep = integrity::verify_stream(&bytes);
    assert_eq!(rep.verdict, Verdict::Incomplete, "{:?}", rep.reason);
    assert!(rep.reason.as_deref().unwrap_or("").contains("joined late"));
    assert_eq!(rep.signer_key, Some(public));
}

/// A hostile or huge archive file is read back within the backlog's limits: of a file of
/// 100,000 tiny chunks only the chunk limit's last are noted and read; a chunk longer than
/// a publisher could send leaves nothing before it; a damaged chunk in the group is an
/// error (nothing is read back). The relay checks what it is handed again: chunks that are
/// not the session's last, in sequence, are not kept, and the budgets hold.
#[test]
fn an_archive_file_is_read_back_within_the_backlogs_limits() {
    use bsor_stream_core::net::relay::BacklogLimits;
    let (_, header, chunks) = stream();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("song.bsors");
    let mut file = header.to_vec();
    let n = 100_000u32;
    for seq in 0..n {
        ChunkHeader::new(ChunkType::Unknown(0x20), seq, 0, 0, 0.0).write_to(&[1, 2, 3], &mut file);
    }
    std::fs::write(&path, &file).unwrap();
    let relay = Relay::new(RelayConfig::default(), Tokens::parse(TOKENS));
    let limits = relay.backlog_limits();
    assert_eq!(
        limits,
        BacklogLimits {
            chunks: 4096,
            bytes: 8 << 20,
            max_chunk: RelayConfig::default().publisher_frame_limit as usize,
        }
    );
    let (mut a, span) = archive::scan_backlog(&path, limits).unwrap().unwrap();
    assert_eq!(a.chunks, n);
    assert_eq!(span.len(), 4096);
    archive::read_backlog(&path, &span, &mut a).unwrap();
    assert_eq!(a.backlog.len(), 4096);
    let seq = |c: &Bytes| ChunkHeader::parse_at(c).unwrap().0.seq;
    assert_eq!(seq(&a.backlog[0]), n - 4096);
    assert_eq!(seq(a.backlog.last().unwrap()), n - 1);
    assert_eq!(a.key_chunk, None);
    // By bytes: the newest chunk always, then as many as fit.
    let small = BacklogLimits {
        bytes: 100,
        ..limits
    };
    let (_, span) = archive::scan_backlog(&path, small).unwrap().unwrap();
    assert!(span.len() > 1 && span.bytes() <= 100, "{span:?}");
    let tiny = BacklogLimits { bytes: 1, ..limits };
    let (_, span) = archive::scan_backlog(&path, tiny).unwrap().unwrap();
    assert_eq!(span.len(), 1);
    // A last chunk longer than a publisher's frame: counted, but none is read back.
    let mut long = file.clone();
    ChunkHeader::new(ChunkType::Unknown(0x20), n, 0, 0, 0.0).write_to(&[7; 500], &mut long);
    std::fs::write(&path, &long).unwrap();
    let strict = BacklogLimits {
        max_chunk: 400,
        ..limits
    };
    let (a, span) = archive::scan_backlog(&path, strict).unwrap().unwrap();
    assert_eq!(a.chunks, n + 1);
    assert!(span.is_empty());
    // A damaged chunk in the group: an error, and the session holds nothing back.
    let mut damaged = header.to_vec();
    for c in &chunks[..30] {
        damaged.extend_from_slice(c);
    }
    let last = damaged.len() - 1;
    damaged[last] ^= 0xFF;
    std::fs::write(&path, &damaged).unwrap();
    let (mut a, span) = archive::scan_backlog(&path, limits).unwrap().unwrap();
    assert_eq!(a.chunks, 30, "scanning reads headers only");
    assert!(archive::read_backlog(&path, &span, &mut a).is_err());
    assert!(a.backlog.is_empty());
    // The relay keeps only the session's last chunks, in sequence, within its budgets.
    let resumable = |backlog: Vec<Bytes>, chunks: u32| Archived {
        header: header.clone(),
        chunks,
        end: 0,
        index_at: None,
        finished: false,
        key: Some(ResumeKey::new(&[1; 16], None)),
        key_chunk: None,
        backlog,
    };
    let mut relay = Relay::new(
        RelayConfig {
            archive: true,
            backlog_chunks: 5,
            ..RelayConfig::default()
        },
        Tokens::parse(TOKENS),
    );
    // Not ending at the session's last chunk, or with a gap: none of it.
    relay.restored("a", Some(resumable(chunks[10..20].to_vec(), 21)), 1);
    let gap = [&chunks[10..12], &chunks[13..16]].concat();
    relay.restored("b", Some(resumable(gap, 16)), 1);
    assert_eq!(relay.backlog_bytes(), 0);
    // More than the backlog keeps: its last 5 chunks.
    relay.restored("c", Some(resumable(chunks[10..20].to_vec(), 20)), 1);
    let want: usize = chunks[15..20].iter().map(Bytes::len).sum();
    assert_eq!(relay.backlog_bytes(), want);
    // And never over the budget of all backlogs.
    let mut relay = Relay::new(
        RelayConfig {
            archive: true,
            total_backlog_bytes: want,
            ..RelayConfig::default()
        },
        Tokens::parse(TOKENS),
    );
    relay.restored("c", Some(resumable(chunks[15..20].to_vec(), 20)), 1);
    assert_eq!(relay.backlog_bytes(), want);
    relay.restored("d", Some(resumable(chunks[15..20].to_vec(), 20)), 1);
    assert_eq!(relay.backlog_bytes(), want, "no room left for d");
    assert_eq!(relay.backlog_limits().bytes, 0);
}

/// A viewer's connection: `Subscribe` with `from`.
fn viewer_from(net: &mut Net, mode: ViewMode, from: u32) -> ConnId {
    let c = net.client(Role::Viewer);
    net.send(
        c,
        Message::Subscribe {
            session: "song".into(),
            mode,
            wait_ms: 5_000,
            from,
        },
    );
    c
}

/// The sequence numbers of the chunks a connection received, in order.
fn seqs(net: &Net, c: ConnId) -> Vec<u32> {
    net.inbox[&c]
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(b) => Some(ChunkHeader::parse_at(b).unwrap().0.seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_viewer_that_reconnects_with_from_continues_exactly_after_its_last_chunk() {
    let (r, header, chunks) = stream();
    for config in [
        RelayConfig::default(),
        RelayConfig {
            cluster: true,
            ..RelayConfig::default()
        },
    ] {
        let mut net = Net::new(config);
        let p = net.publisher("song", "sekrit", false, 1);
        let steady = net.viewer("song", ViewMode::Live);
        let first = net.viewer("song", ViewMode::Live);
        let complete = net.viewer("song", ViewMode::Complete);
        net.send(p, Message::StreamHeader(header.clone()));
        let cut = 37;
        for c in &chunks[..cut] {
            net.send(p, Message::Chunk(c.clone()));
            if config.cluster {
                // The store confirms each chunk (wire.md §5).
                let seq = ChunkHeader::parse_at(c).unwrap().0.seq;
                net.relay.stored("song", seq, net.now);
                net.pump();
            }
        }
        // Both viewers lose their connection after chunk cut - 1, and come back (here, or
        // on another relay of a cluster: the same rule) asking for chunk `cut` on.
        assert_eq!(seqs(&net, first), (0..cut as u32).collect::<Vec<_>>());
        net.relay.disconnect(first, net.now);
        net.relay.disconnect(complete, net.now);
        for c in &chunks[cut..cut + 5] {
            net.send(p, Message::Chunk(c.clone()));
        }
        let again = viewer_from(&mut net, ViewMode::Live, cut as u32);
        let again_complete = viewer_from(&mut net, ViewMode::Complete, cut as u32);
        for c in &chunks[cut + 5..] {
            net.send(p, Message::Chunk(c.clone()));
        }
        net.send(p, Message::End(EndReason::Finished));
        // The chunks after the reconnection are exactly those from `cut` on, no key chunk
        // or group again, no gap, no repeat; with the bytes before, the steady viewer's.
        let n = chunks.len() as u32;
        assert_eq!(seqs(&net, again), (cut as u32..n).collect::<Vec<_>>());
        assert_eq!(
            seqs(&net, again_complete),
            (cut as u32..n).collect::<Vec<_>>()
        );
        let mut joined = net.received(first).0;
        let after = net.received(again).0;
        joined.extend_from_slice(&after[header.len()..]);
        assert!(
            joined == net.received(steady).0,
            "cluster {}",
            config.cluster
        );
        let (back, rec) = decode(&joined);
        assert!(rec.complete, "{rec:?}");
        assert!(bsor::to_vec(&back).unwrap() == bsor::to_vec(&r).unwrap());
        // A `from` the backlog no longer holds (or never had) is a new viewer's join: the
        // header and the current group, which the client reports as a gap.
        let ahead = viewer_from(&mut net, ViewMode::Live, n + 100);
        assert_eq!(
            net.inbox[&ahead]
                .iter()
                .filter(|m| matches!(m, Message::StreamHeader(_)))
                .count(),
            1
        );
    }
}
