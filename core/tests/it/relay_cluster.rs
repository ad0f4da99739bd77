//! Relays in a cluster (`RelayConfig::cluster`), driven without sockets: two or three
//! relays and a model of the store they share (in the shell, NATS JetStream), carrying out
//! each relay's actions as the cluster's contract says (`core/src/net/relay/cluster.rs`).
//!
//! The model store keeps, per session, its entry (the publisher's key digest, its player,
//! live or ended: the shell's KV bucket) and its messages in order (the stream header, the
//! chunks, an end marker: the shell's subject). Each relay's writes wait in its own queue
//! until the test lets the store take them (or at once, with `auto`); each is checked
//! against the last message the writing relay knows of when it asked for the write (its
//! own last write, or, for its first write after a lookup, the store as that lookup saw
//! it), as `Nats-Expected-Last-Subject-Sequence` does (`wire.md` §5: "the last message the
//! writing relay knows on the subject"). The follower step feeds every relay the store's
//! messages of each live session it holds, in order.

use std::collections::{HashMap, HashSet, VecDeque};

use bsor_stream_core::net::relay::{
    Archived, ConnId, Relay, RelayAction, RelayConfig, ResumeKey, Tokens,
};
use bsor_stream_core::net::wire::{EndReason, ErrorCode, Message, Role, ViewMode};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{bsor, synth, transcode};
use bytes::Bytes;
use proptest::prelude::*;

const TOKENS: &str = "sekrit\n";
const SONG: &str = "song";

/// A live stream of `seconds` (of a replay made from `seed`), cut into its header and
/// chunks.
fn stream_of(seed: u64, seconds: f32) -> (bsor::Replay, Bytes, Vec<Bytes>) {
    let r = synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 60,
    });
    let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
    let (_, header_len, spans) = split_stream(&s).unwrap();
    let chunks = spans
        .iter()
        .map(|c| Bytes::copy_from_slice(c.bytes(&s)))
        .collect();
    (r, Bytes::copy_from_slice(&s[..header_len]), chunks)
}

fn stream() -> (bsor::Replay, Bytes, Vec<Bytes>) {
    stream_of(21, 20.0)
}

fn seq_of(c: &[u8]) -> u32 {
    ChunkHeader::parse_at(c).unwrap().0.seq
}

fn decodes_to(bytes: &[u8], r: &bsor::Replay) -> bool {
    match transcode::decode_replay(bytes) {
        Ok((back, rec)) => rec.complete && bsor::to_vec(&back).unwrap() == bsor::to_vec(r).unwrap(),
        Err(_) => false,
    }
}

/// One message of a session in the store.
#[derive(Clone, Debug)]
enum Msg {
    Header(Bytes),
    Chunk(Bytes),
    End(EndReason),
}

/// A session's entry in the store (the shell's KV bucket).
#[derive(Clone, Debug)]
struct Entry {
    digest: [u8; 32],
    player: Option<String>,
    live: bool,
}

/// A session in the store: its entry and its messages, in the store's order.
#[derive(Clone, Debug, Default)]
struct Subject {
    entry: Option<Entry>,
    msgs: Vec<Msg>,
}

impl Subject {
    fn header(&self) -> Option<&Bytes> {
        self.msgs.iter().find_map(|m| match m {
            Msg::Header(h) => Some(h),
            _ => None,
        })
    }

    fn chunks(&self) -> Vec<Bytes> {
        self.msgs
            .iter()
            .filter_map(|m| match m {
                Msg::Chunk(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    fn end(&self) -> Option<EndReason> {
        self.msgs.iter().find_map(|m| match m {
            Msg::End(r) => Some(*r),
            _ => None,
        })
    }
}

/// A write a relay asked for.
#[derive(Clone, Debug)]
enum Write {
    Key(ResumeKey),
    Header(Bytes),
    Chunk(Bytes),
    End(EndReason),
}

/// A write waiting for the store, with what the relay knew of the store when it asked.
struct Pending {
    session: String,
    write: Write,
    /// The lookup it goes on from, and the store's length that lookup saw: a write the
    /// relay asked for after a later lookup than its last write's is checked against that
    /// lookup's view, not against its older writes.
    base: (u64, usize),
}

/// One relay and its shell's state.
struct Node {
    relay: Relay,
    /// Writes not taken by the store yet, in the relay's order.
    pending: VecDeque<Pending>,
    /// Sessions this relay writes (from its first write asked for, until the store refuses
    /// one): the lookup its writes go on from, and the store's length after its last write.
    writers: HashMap<String, (u64, usize)>,
    /// This relay's last lookup of each session: a number of its own, and the store's
    /// length it saw (a relay writes from there once it took the session over).
    base: HashMap<String, (u64, usize)>,
    lookups: u64,
    /// How far the follower fed each session (an index into its messages).
    cursor: HashMap<String, usize>,
    /// Sessions whose end this relay learnt from the store (it writes no end back).
    ended_from_store: HashSet<String>,
    /// Lookups of a session claimed with no header yet: answered when one comes.
    deferred: HashSet<String>,
}

/// Relays sharing a model store, and what each connection received.
struct Cluster {
    nodes: Vec<Option<Node>>,
    store: HashMap<String, Subject>,
    /// The store is unavailable: writes and lookups fail.
    down: bool,
    /// Writes are taken as soon as they are asked for.
    auto: bool,
    now: u64,
    inbox: HashMap<(usize, ConnId), Vec<Message>>,
    closed: HashSet<(usize, ConnId)>,
    /// Writes the store refused (another relay wrote first, or another publisher's entry).
    refused: Vec<(usize, String)>,
}

fn cluster_config() -> RelayConfig {
    RelayConfig {
        cluster: true,
        backlog_chunks: 8,
        fetch_chunks: 3,
        flood_burst: 100_000,
        ..RelayConfig::default()
    }
}

impl Cluster {
    fn new(relays: usize) -> Cluster {
        Cluster::with_config(relays, cluster_config())
    }

    fn with_config(relays: usize, config: RelayConfig) -> Cluster {
        Cluster {
            nodes: (0..relays).map(|_| Some(Node::new(config))).collect(),
            store: HashMap::new(),
            down: false,
            auto: true,
            now: 0,
            inbox: HashMap::new(),
            closed: HashSet::new(),
            refused: Vec::new(),
        }
    }

    fn node(&mut self, i: usize) -> &mut Node {
        self.nodes[i].as_mut().expect("a live relay")
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .collect()
    }

    /// The relay is killed (kill -9): its memory and its writes not yet taken are gone.
    fn kill(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    fn subject(&self, name: &str) -> Subject {
        self.store.get(name).cloned().unwrap_or_default()
    }

    /// Carries out every relay's actions, and with `auto` the writes they ask for, until
    /// nothing is left to do.
    fn pump(&mut self) {
        loop {
            let mut busy = false;
            for i in 0..self.nodes.len() {
                while let Some(a) = self.nodes[i].as_mut().and_then(|n| n.relay.poll_action()) {
                    busy = true;
                    self.act(i, a);
                }
            }
            if self.auto {
                for i in 0..self.nodes.len() {
                    if self.nodes[i]
                        .as_ref()
                        .is_some_and(|n| !n.pending.is_empty())
                    {
                        busy = true;
                        self.take_write(i);
                    }
                }
            }
            if !busy {
                return;
            }
        }
    }

    fn drain(&mut self, i: usize, c: ConnId) {
        let Some(n) = self.nodes[i].as_mut() else {
            return;
        };
        while let Some(m) = n.relay.poll_outgoing(c) {
            self.inbox.entry((i, c)).or_default().push(m);
        }
    }

    /// The shell's part for one action of relay `i`.
    fn act(&mut self, i: usize, a: RelayAction) {
        let now = self.now;
        match a {
            RelayAction::Ready(c) => self.drain(i, c),
            RelayAction::Close(c) => {
                self.drain(i, c);
                self.closed.insert((i, c));
            }
            RelayAction::ArchiveKey(s, k) => self.enqueue(i, s, Write::Key(k)),
            RelayAction::ArchiveHeader(s, h) => self.enqueue(i, s, Write::Header(h)),
            RelayAction::ArchiveChunk(s, c) => self.enqueue(i, s, Write::Chunk(c)),
            RelayAction::SessionEnded(s, reason) => {
                // The relay whose publisher ended the session (its `End`, or its timeout:
                // a mirror has none) writes the end marker, whether or not it wrote a chunk
                // since it took the session over; one that learnt the end from the store
                // writes nothing back.
                let n = self.node(i);
                if !n.ended_from_store.contains(&s) {
                    self.enqueue(i, s, Write::End(reason));
                }
            }
            RelayAction::Lookup(s) => self.lookup(i, &s),
            RelayAction::Fetch(f) => {
                // The store's chunks by sequence number (the shell keeps an index).
                let chunks = self.subject(&f.session).chunks();
                let mut got = Vec::new();
                let mut bytes = 0;
                for c in chunks.iter().filter(|c| seq_of(c) >= f.seq) {
                    if got.len() >= f.max_chunks.max(1) || (bytes >= f.max_bytes && !got.is_empty())
                    {
                        break;
                    }
                    bytes += c.len();
                    got.push(c.clone());
                }
                self.node(i).relay.fetched(f.conn, f.seq, Ok(got), now);
            }
            RelayAction::ArchiveReopen { .. } => panic!("a cluster relay reopens no file"),
            RelayAction::ArchiveWitness(..) | RelayAction::Refused { .. } => {}
        }
    }

    fn enqueue(&mut self, i: usize, s: String, w: Write) {
        // What the relay knows of the store when it asks for the write: a write waiting
        // from before a lookup is not checked against what that lookup saw.
        let n = self.node(i);
        let base = n.base.get(&s).copied().unwrap_or((0, 0));
        n.pending.push_back(Pending {
            session: s,
            write: w,
            base,
        });
    }

    /// The store takes (or refuses) relay `i`'s oldest pending write.
    fn take_write(&mut self, i: usize) {
        let now = self.now;
        let Some(Pending {
            session: s,
            write: w,
            base,
        }) = self.node(i).pending.pop_front()
        else {
            return;
        };
        if self.down {
            return self.write_failed(i, &s, false);
        }
        // Its own last write's, when it goes on from the same lookup; else the lookup's.
        let expected = match self.node(i).writers.get(&s) {
            Some(&(from, last)) if from == base.0 => last,
            _ => base.1,
        };
        let subject = self.store.entry(s.clone()).or_default();
        match w {
            Write::Key(k) => match &mut subject.entry {
                None => {
                    subject.entry = Some(Entry {
                        digest: k.digest,
                        player: k.player,
                        live: true,
                    })
                }
                Some(e) if e.digest == k.digest && e.live => e.player = k.player,
                Some(_) => self.claim_lost(i, &s),
            },
            w => {
                if subject.msgs.len() != expected {
                    return self.write_failed(i, &s, true);
                }
                let (m, seq) = match w {
                    Write::Header(h) => (Msg::Header(h), None),
                    Write::Chunk(c) => {
                        let seq = seq_of(&c);
                        (Msg::Chunk(c), Some(seq))
                    }
                    Write::End(r) => (Msg::End(r), None),
                    Write::Key(_) => unreachable!(),
                };
                let end = matches!(m, Msg::End(_));
                subject.msgs.push(m);
                let len = subject.msgs.len();
                if end {
                    if let Some(e) = &mut subject.entry {
                        e.live = false;
                    }
                }
                let n = self.node(i);
                if end {
                    n.writers.remove(&s);
                } else {
                    n.writers.insert(s.clone(), (base.0, len));
                }
                if let Some(seq) = seq {
                    n.relay.stored(&s, seq, now);
                }
            }
        }
    }

    /// A write refused: the relay is told, its writes of the session still waiting are
    /// dropped, and its follower goes on from the last message it wrote.
    fn write_failed(&mut self, i: usize, s: &str, taken: bool) {
        let now = self.now;
        if taken {
            self.refused.push((i, s.to_string()));
        }
        let n = self.node(i);
        let from = n.writers.remove(s).map_or(0, |w| w.1);
        n.pending.retain(|p| p.session != s);
        let cursor = n.cursor.entry(s.to_string()).or_insert(0);
        *cursor = (*cursor).min(from);
        n.relay.store_failed(s, taken, now);
    }

    /// A claim of a new name refused (another's): as the shell does, nothing more of the
    /// session is written from this relay, and the relay drops what it began.
    fn claim_lost(&mut self, i: usize, s: &str) {
        let now = self.now;
        self.refused.push((i, s.to_string()));
        let n = self.node(i);
        n.writers.remove(s);
        n.pending.retain(|p| p.session != s);
        n.relay.claim_lost(s, now);
    }

    /// Lets the store take `k` of relay `i`'s pending writes (all with `usize::MAX`).
    fn confirm(&mut self, i: usize, k: usize) {
        for _ in 0..k {
            if self.nodes[i].as_ref().is_none_or(|n| n.pending.is_empty()) {
                break;
            }
            self.take_write(i);
            self.pump();
        }
        self.pump();
    }

    fn confirm_all(&mut self) {
        for i in self.alive() {
            self.confirm(i, usize::MAX);
        }
    }

    fn pending(&self, i: usize) -> usize {
        self.nodes[i].as_ref().map_or(0, |n| n.pending.len())
    }

    /// The shell's lookup of session `name` for relay `i`: its entry, then its messages
    /// read from the start (the live backlog: from the last keyframe chunk on, within the
    /// relay's limits).
    fn lookup(&mut self, i: usize, name: &str) {
        let now = self.now;
        if self.down {
            self.node(i).relay.lookup_failed(name, now);
            return;
        }
        let subject = self.subject(name);
        let Some(entry) = subject.entry.clone() else {
            self.node(i).relay.restored(name, None, now);
            return;
        };
        let Some(header) = subject.header().cloned() else {
            self.node(i).deferred.insert(name.to_string());
            return;
        };
        let limits = self.node(i).relay.backlog_limits();
        let chunks = subject.chunks();
        let end = subject.end();
        let live = end.is_none() && entry.live;
        let mut backlog: VecDeque<Bytes> = VecDeque::new();
        let mut backlog_bytes = 0;
        let mut key_chunk = None;
        for c in &chunks {
            let (h, _) = ChunkHeader::parse_at(c).unwrap();
            if h.seq == 0 && h.kind == ChunkType::Unknown(0x10) && c.len() <= 4096 {
                key_chunk = Some(c.clone());
            }
            backlog_bytes += c.len();
            backlog.push_back(c.clone());
            while backlog.len() > 1
                && (backlog.len() > limits.chunks || backlog_bytes > limits.bytes)
            {
                backlog_bytes -= backlog.pop_front().unwrap().len();
            }
        }
        let bytes = header.len() + chunks.iter().map(Bytes::len).sum::<usize>();
        let found = Archived {
            header,
            chunks: chunks.len() as u32,
            end: bytes as u64,
            index_at: None,
            key: live.then(|| ResumeKey {
                digest: entry.digest,
                player: entry.player.clone(),
            }),
            finished: end == Some(EndReason::Finished),
            key_chunk: if live { key_chunk } else { None },
            backlog: if live { backlog.into() } else { Vec::new() },
        };
        let len = subject.msgs.len();
        let n = self.node(i);
        n.deferred.remove(name);
        n.lookups += 1;
        n.base.insert(name.to_string(), (n.lookups, len));
        // Followed from where the lookup read to.
        n.cursor.insert(name.to_string(), len);
        n.relay.restored(name, Some(found), now);
    }

    /// The followers: every relay is fed the store's messages of each live session it
    /// holds, from where its follower got to; sessions that started elsewhere are looked
    /// up for relays that wait for them.
    fn follow(&mut self) {
        self.now += 1;
        let now = self.now;
        for i in self.alive() {
            let names = self.node(i).relay.live_sessions();
            for name in names {
                let subject = self.subject(&name);
                let from = self.node(i).cursor.get(&name).copied().unwrap_or(0);
                for (at, m) in subject.msgs.iter().enumerate().skip(from) {
                    let n = self.node(i);
                    n.cursor.insert(name.clone(), at + 1);
                    match m {
                        Msg::Header(_) => {}
                        Msg::Chunk(c) => {
                            n.relay.mirrored(&name, c.clone(), now);
                        }
                        Msg::End(reason) => {
                            n.ended_from_store.insert(name.clone());
                            n.relay.mirror_ended(&name, *reason, now);
                        }
                    }
                    self.pump();
                    if self.nodes[i].is_none() {
                        break;
                    }
                }
            }
            let names: Vec<String> = self.store.keys().cloned().collect();
            for name in names {
                let subject = self.subject(&name);
                if subject.entry.is_none() || subject.header().is_none() {
                    continue;
                }
                let n = self.node(i);
                if n.deferred.contains(&name) || n.relay.wants(&name) {
                    self.lookup(i, &name);
                    self.pump();
                }
            }
        }
        self.pump();
    }

    fn send(&mut self, i: usize, c: ConnId, m: Message) {
        self.now += 1;
        let now = self.now;
        self.node(i).relay.receive(c, m, now);
        self.pump();
    }

    fn disconnect(&mut self, i: usize, c: ConnId) {
        self.now += 1;
        let now = self.now;
        if let Some(n) = self.nodes[i].as_mut() {
            n.relay.disconnect(c, now);
        }
        self.pump();
    }

    fn client(&mut self, i: usize, role: Role) -> ConnId {
        let now = self.now;
        let c = self.node(i).relay.connect(now);
        self.send(
            i,
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

    fn publisher(&mut self, i: usize, resume: bool, key: u8) -> ConnId {
        let c = self.client(i, Role::Publisher);
        self.send(
            i,
            c,
            Message::Publish {
                session: SONG.into(),
                token: "sekrit".into(),
                resume,
                publisher_key: [key; 16],
            },
        );
        c
    }

    fn viewer(&mut self, i: usize, mode: ViewMode) -> ConnId {
        let c = self.client(i, Role::Viewer);
        self.send(
            i,
            c,
            Message::Subscribe {
                session: SONG.into(),
                mode,
                wait_ms: 60_000,
                from: 0,
            },
        );
        c
    }

    fn messages(&self, i: usize, c: ConnId) -> &[Message] {
        self.inbox.get(&(i, c)).map_or(&[], Vec::as_slice)
    }

    /// What a connection received, as stream bytes (header and chunks), and the rest.
    fn received(&self, i: usize, c: ConnId) -> (Vec<u8>, Vec<Message>) {
        let mut bytes = Vec::new();
        let mut other = Vec::new();
        for m in self.messages(i, c) {
            match m {
                Message::StreamHeader(b) | Message::Chunk(b) => bytes.extend_from_slice(b),
                m => other.push(m.clone()),
            }
        }
        (bytes, other)
    }

    fn error_of(&self, i: usize, c: ConnId) -> Option<ErrorCode> {
        self.messages(i, c).iter().find_map(|m| match m {
            Message::Error { code, .. } => Some(*code),
            _ => None,
        })
    }

    fn acks(&self, i: usize, c: ConnId) -> Vec<u32> {
        self.messages(i, c)
            .iter()
            .filter_map(|m| match m {
                Message::Ack(n) => Some(*n),
                _ => None,
            })
            .collect()
    }

    fn resume_of(&self, i: usize, c: ConnId) -> Option<u32> {
        self.messages(i, c).iter().find_map(|m| match m {
            Message::Resume(n) => Some(*n),
            _ => None,
        })
    }

    /// The store's chunks of the song are exactly `chunks[..n]`, in order, each once.
    fn assert_store_prefix(&self, chunks: &[Bytes]) -> usize {
        let got = self.subject(SONG).chunks();
        assert!(got.len() <= chunks.len(), "more chunks stored than sent");
        for (k, c) in got.iter().enumerate() {
            assert!(
                *c == chunks[k],
                "the store's chunk {k} is chunk {} (a gap or a duplicate)",
                seq_of(c)
            );
        }
        got.len()
    }
}

impl Node {
    fn new(config: RelayConfig) -> Node {
        Node {
            relay: Relay::new(config, Tokens::parse(TOKENS)),
            pending: VecDeque::new(),
            writers: HashMap::new(),
            base: HashMap::new(),
            lookups: 0,
            cursor: HashMap::new(),
            ended_from_store: HashSet::new(),
            deferred: HashSet::new(),
        }
    }
}

/// Publishes the header and `chunks` on connection `p` of relay `i`.
fn send_chunks(net: &mut Cluster, i: usize, p: ConnId, chunks: &[Bytes]) {
    for c in chunks {
        net.send(i, p, Message::Chunk(c.clone()));
    }
}

/// The whole stream, as a complete-mode viewer receives it.
fn whole(header: &Bytes, chunks: &[Bytes]) -> Vec<u8> {
    [&header[..], &chunks.concat()[..]].concat()
}

#[test]
fn acks_wait_for_the_store_and_name_the_last_chunk_it_holds() {
    let (_, header, chunks) = stream();
    let mut net = Cluster::new(2);
    net.auto = false;
    let p = net.publisher(0, false, 1);
    net.confirm(0, usize::MAX);
    assert_eq!(net.resume_of(0, p), Some(0));
    net.send(0, p, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 0, p, &chunks[..10]);
    assert!(
        net.acks(0, p).is_empty(),
        "no Ack before the store holds a chunk"
    );
    assert_eq!(
        net.pending(0),
        11,
        "the header and ten chunks wait for the store"
    );
    // The store takes the header and chunks 0..=3: one Ack, for chunk 3 (cumulative; the
    // publisher reads its messages only now).
    net.confirm(0, 5);
    assert_eq!(net.subject(SONG).chunks().len(), 4);
    assert_eq!(net.acks(0, p).last(), Some(&3));
    assert!(net.acks(0, p).iter().all(|&a| a <= 3));
    // Then the rest: the last Ack names chunk 9.
    net.confirm(0, usize::MAX);
    assert_eq!(net.acks(0, p).last(), Some(&9));
    // The connection drops; the publisher resumes on the same relay with two chunks the
    // store does not hold yet (10 and 11 were sent, then the connection went).
    send_chunks(&mut net, 0, p, &chunks[10..12]);
    net.disconnect(0, p);
    let back = net.publisher(0, true, 1);
    assert_eq!(
        net.resume_of(0, back),
        Some(10),
        "Resume is what the store holds"
    );
    net.send(0, back, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 0, back, &chunks[10..12]);
    assert!(
        net.acks(0, back).is_empty(),
        "a resent chunk the store does not hold is not acknowledged"
    );
    net.confirm(0, 1);
    assert_eq!(net.acks(0, back), vec![10]);
    net.confirm(0, usize::MAX);
    assert_eq!(net.acks(0, back).last(), Some(&11));
    // A chunk already stored, resent: acknowledged at once.
    let before = net.acks(0, back).len();
    net.send(0, back, Message::Chunk(chunks[5].clone()));
    assert_eq!(net.acks(0, back).len(), before + 1);
    assert!(net.acks(0, back).iter().all(|&a| a <= 11));
    assert_eq!(net.assert_store_prefix(&chunks), 12);
}

/// The chunks a viewer received, in order.
fn chunks_received(net: &Cluster, i: usize, c: ConnId) -> Vec<ChunkHeader> {
    net.messages(i, c)
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(b) => Some(ChunkHeader::parse_at(b).unwrap().0),
            _ => None,
        })
        .collect()
}

#[test]
fn a_viewer_waiting_for_a_session_a_lookup_finds_under_way_gets_what_it_waited_for() {
    let (r, header, chunks) = stream();
    let config = RelayConfig {
        backlog_chunks: 4096,
        ..cluster_config()
    };
    let mut net = Cluster::with_config(3, config);
    // The relays' clock runs with the song: chunk k is sent at its song time.
    let at = |c: &Bytes| 1_000 + (ChunkHeader::parse_at(c).unwrap().0.t0 * 1000.0) as u64;
    net.now = 1_000;
    // Waiting on relay 1 from before the session starts.
    let early = net.viewer(1, ViewMode::Live);
    let p = net.publisher(0, false, 1);
    net.send(0, p, Message::StreamHeader(header.clone()));
    // About 3 s of song: what a viewer's queue takes at once (64 messages).
    let before = chunks.len() / 6;
    let mut middle = None;
    for (k, c) in chunks[..before].iter().enumerate() {
        net.now = net.now.max(at(c));
        if k == before / 2 {
            // Waiting on relay 2 from the middle of what is sent before any lookup.
            middle = Some((
                net.viewer(2, ViewMode::Live),
                ChunkHeader::parse_at(c).unwrap().0.t0,
            ));
        }
        net.send(0, p, Message::Chunk(c.clone()));
    }
    // Relays 1 and 2 look the session up only now (their lookups came late), and follow.
    net.follow();
    // A viewer coming to relay 1, which holds the session now: the latest group.
    let latecomer = net.viewer(1, ViewMode::Live);
    for c in &chunks[before..] {
        net.now = net.now.max(at(c));
        net.send(0, p, Message::Chunk(c.clone()));
        net.follow();
    }
    net.send(0, p, Message::End(EndReason::Finished));
    net.follow();
    // Waiting all along: every chunk, as on the publisher's relay.
    let (bytes, _) = net.received(1, early);
    assert!(
        decodes_to(&bytes, &r),
        "the viewer that waited from the start"
    );
    assert_eq!(chunks_received(&net, 1, early).len(), chunks.len());
    // From the middle: from the keyframe group of its song time, no later.
    let (middle, since) = middle.unwrap();
    let got = chunks_received(&net, 2, middle);
    let first = &got[0];
    assert_eq!(first.kind, ChunkType::Keyframes);
    assert!(
        first.t0 <= since,
        "starts at {} after it subscribed at {since}",
        first.t0
    );
    let next_group = chunks
        .iter()
        .map(|c| ChunkHeader::parse_at(c).unwrap().0)
        .filter(|h| h.kind == ChunkType::Keyframes && h.t0 > first.t0)
        .map(|h| h.t0)
        .next()
        .unwrap();
    assert!(
        next_group > since,
        "a whole group before what it waited for"
    );
    assert!(
        first.seq > 0,
        "not the whole song: it did not wait for that"
    );
    assert_eq!(got.last().unwrap().seq as usize, chunks.len() - 1);
    // The latecomer joins at the latest group, after the middle viewer's start.
    let late = chunks_received(&net, 1, latecomer);
    assert_eq!(late[0].kind, ChunkType::Keyframes);
    assert!(late[0].seq > first.seq);
    assert!(late[0].t0 > since);
}

#[test]
fn viewers_on_other_relays_decode_the_replay_and_complete_mode_matches_the_publishers_relay() {
    let (r, header, chunks) = stream();
    let mut net = Cluster::new(3);
    // Waiting on relay 1 before the session starts: attached when the store says so.
    let early = net.viewer(1, ViewMode::Live);
    let p = net.publisher(0, false, 1);
    assert_eq!(net.resume_of(0, p), Some(0));
    let local = net.viewer(0, ViewMode::Complete);
    net.send(0, p, Message::StreamHeader(header.clone()));
    net.follow();
    let half = chunks.len() / 2;
    for c in &chunks[..half] {
        net.send(0, p, Message::Chunk(c.clone()));
        net.follow();
    }
    // Joining on relay 2 half-way: a live late joiner and a complete-mode viewer (which
    // reads what relay 2's backlog does not hold from the store).
    let late = net.viewer(2, ViewMode::Live);
    let complete = net.viewer(2, ViewMode::Complete);
    for c in &chunks[half..] {
        net.send(0, p, Message::Chunk(c.clone()));
        net.follow();
    }
    net.send(0, p, Message::End(EndReason::Finished));
    net.follow();
    net.follow();
    assert_eq!(net.subject(SONG).end(), Some(EndReason::Finished));
    assert_eq!(net.assert_store_prefix(&chunks), chunks.len());
    for (i, c) in [(1, early), (2, late), (2, complete), (0, local)] {
        assert_eq!(
            net.received(i, c).1.last(),
            Some(&Message::End(EndReason::Finished)),
            "viewer {c} on relay {i}"
        );
    }
    let (bytes, _) = net.received(1, early);
    assert!(decodes_to(&bytes, &r), "the live viewer from the start");
    let (local_bytes, _) = net.received(0, local);
    let (complete_bytes, _) = net.received(2, complete);
    assert!(local_bytes == whole(&header, &chunks));
    assert!(
        complete_bytes == local_bytes,
        "complete mode on another relay: the same bytes"
    );
    assert!(decodes_to(&complete_bytes, &r));
    // The late joiner: from a chunk of the stream on, to its end; it decodes.
    let (late_bytes, _) = net.received(2, late);
    assert!(late_bytes.starts_with(&header));
    assert!(late_bytes.ends_with(chunks.last().unwrap()));
    let (back, _) = transcode::decode_replay(&late_bytes).unwrap();
    assert!(!back.frames.is_empty() && back.frames.len() < r.frames.len());
}

#[test]
fn a_publisher_whose_relay_dies_resumes_on_another_and_the_store_holds_each_chunk_once() {
    let (r, header, chunks) = stream();
    let mut net = Cluster::new(3);
    let p = net.publisher(0, false, 7);
    net.send(0, p, Message::StreamHeader(header.clone()));
    let live1 = net.viewer(1, ViewMode::Live);
    let complete1 = net.viewer(1, ViewMode::Complete);
    let complete2 = net.viewer(2, ViewMode::Complete);
    net.follow();
    send_chunks(&mut net, 0, p, &chunks[..20]);
    net.follow();
    assert_eq!(net.acks(0, p).last(), Some(&19));
    // Ten more sent, not yet stored: relay 0 is killed (its writes waiting are lost).
    net.auto = false;
    send_chunks(&mut net, 0, p, &chunks[20..30]);
    net.kill(0);
    net.auto = true;
    // The publisher resumes on relay 1 with the same key: Resume is what the store holds.
    let back = net.publisher(1, true, 7);
    assert_eq!(net.error_of(1, back), None);
    assert_eq!(net.subject(SONG).chunks().len(), 20);
    assert_eq!(net.resume_of(1, back), Some(20));
    // Another publisher (another key, resume = 1) on relay 2: busy.
    let thief = net.publisher(2, true, 9);
    assert_eq!(net.error_of(2, thief), Some(ErrorCode::SessionBusy));
    // It resends from the Resume point, and goes on.
    net.send(1, back, Message::StreamHeader(header.clone()));
    for c in &chunks[20..] {
        net.send(1, back, Message::Chunk(c.clone()));
        net.follow();
    }
    assert_eq!(net.acks(1, back).last(), Some(&(chunks.len() as u32 - 1)));
    net.send(1, back, Message::End(EndReason::Finished));
    net.follow();
    net.follow();
    assert_eq!(
        net.assert_store_prefix(&chunks),
        chunks.len(),
        "every chunk once, in order"
    );
    assert_eq!(net.subject(SONG).end(), Some(EndReason::Finished));
    assert_eq!(
        net.subject(SONG)
            .msgs
            .iter()
            .filter(|m| matches!(m, Msg::Header(_)))
            .count(),
        1
    );
    for (i, c) in [(1, live1), (1, complete1), (2, complete2)] {
        let (bytes, rest) = net.received(i, c);
        assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
        assert!(decodes_to(&bytes, &r), "viewer {c} on relay {i}");
    }
    assert!(net.received(2, complete2).0 == whole(&header, &chunks));
}

#[test]
fn of_two_publishers_claiming_a_new_name_one_keeps_it_and_the_others_chunks_are_never_stored() {
    let (_, header, chunks) = stream();
    let (other, other_header, other_chunks) = stream_of(5, 7.0);
    assert!(other_header != header);
    let mut net = Cluster::new(2);
    net.auto = false;
    // A viewer on the loser's relay, waiting for the name: it gets the loser's header and
    // chunks before the store decides.
    let early = net.viewer(0, ViewMode::Complete);
    // Both claim the new name before the store took either's entry.
    let a = net.publisher(0, false, 1);
    let b = net.publisher(1, false, 2);
    assert_eq!(net.resume_of(0, a), Some(0));
    assert_eq!(net.resume_of(1, b), Some(0));
    net.send(0, a, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 0, a, &chunks[..10]);
    net.send(1, b, Message::StreamHeader(other_header.clone()));
    send_chunks(&mut net, 1, b, &other_chunks[..10]);
    // The store takes relay 1's entry first: b keeps the name.
    net.confirm(1, 1);
    net.confirm(0, usize::MAX);
    net.confirm(1, usize::MAX);
    assert_eq!(net.error_of(0, a), Some(ErrorCode::SessionBusy));
    assert!(net.acks(0, a).is_empty());
    // That viewer is told (it must not go on with the winner's chunks after the loser's
    // header), and nothing reached it after the loser's.
    let (seen, _) = net.received(0, early);
    assert!(seen.starts_with(&header));
    assert_eq!(net.error_of(0, early), Some(ErrorCode::SessionBusy));
    assert!(!other_chunks
        .iter()
        .any(|c| seen.windows(c.len()).any(|w| w == &c[..])));
    assert_eq!(net.error_of(1, b), None);
    assert_eq!(net.acks(1, b).last(), Some(&9));
    let subject = net.subject(SONG);
    assert!(subject.header() == Some(&other_header));
    assert!(subject.chunks() == other_chunks[..10].to_vec());
    assert_eq!(
        subject
            .msgs
            .iter()
            .filter(|m| matches!(m, Msg::Header(_)))
            .count(),
        1,
        "nothing of the loser's in the store"
    );
    assert!(!subject.chunks().iter().any(|c| chunks.contains(c)));
    // The winner goes on; its stream is whole in the store.
    net.auto = true;
    send_chunks(&mut net, 1, b, &other_chunks[10..]);
    net.send(1, b, Message::End(EndReason::Finished));
    net.follow();
    assert!(net.subject(SONG).chunks() == other_chunks);
    assert_eq!(net.refused, vec![(0, SONG.to_string())]);
    // A viewer on the loser's relay now gets the winner's session, whole.
    let late = net.viewer(0, ViewMode::Complete);
    net.follow();
    let (bytes, _) = net.received(0, late);
    assert!(
        decodes_to(&bytes, &other),
        "the loser's relay serves the winner's stream"
    );
}

#[test]
fn a_stale_relays_publisher_is_busy_its_writes_are_refused_and_its_viewers_follow_the_store() {
    let (r, header, chunks) = stream();
    let mut net = Cluster::new(2);
    let p = net.publisher(0, false, 5);
    let live = net.viewer(0, ViewMode::Live);
    let complete = net.viewer(0, ViewMode::Complete);
    net.send(0, p, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 0, p, &chunks[..10]);
    net.follow();
    // The publisher's connection to relay 0 looks open there; the publisher has moved to
    // relay 1 (resume, same key) and writes from chunk 10 on.
    net.auto = false;
    let moved = net.publisher(1, true, 5);
    assert_eq!(net.resume_of(1, moved), Some(10));
    net.send(1, moved, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 1, moved, &chunks[10..20]);
    // Late chunks on the stale connection: relay 0 asks to write them.
    send_chunks(&mut net, 0, p, &chunks[10..13]);
    assert_eq!(net.pending(0), 3);
    net.confirm(1, usize::MAX);
    assert_eq!(net.acks(1, moved).last(), Some(&19));
    // Relay 0's writes: refused (relay 1 wrote after the last message relay 0 knows).
    net.confirm(0, usize::MAX);
    assert_eq!(net.refused, vec![(0, SONG.to_string())]);
    assert_eq!(net.error_of(0, p), Some(ErrorCode::SessionBusy));
    assert!(net.acks(0, p).iter().all(|&a| a < 10));
    assert_eq!(net.assert_store_prefix(&chunks), 20, "nothing stored twice");
    // A chunk the stale connection sends now is not even read.
    send_chunks(&mut net, 0, p, &chunks[13..14]);
    assert_eq!(net.pending(0), 0);
    // Relay 0 goes on as a mirror of the store: its viewers get the session to its end.
    assert!(net.nodes[0].as_ref().unwrap().relay.is_live(SONG));
    assert!(!net.closed.contains(&(0, live)) && !net.closed.contains(&(0, complete)));
    net.auto = true;
    net.follow();
    for c in &chunks[20..] {
        net.send(1, moved, Message::Chunk(c.clone()));
        net.follow();
    }
    net.send(1, moved, Message::End(EndReason::Finished));
    net.follow();
    assert_eq!(net.assert_store_prefix(&chunks), chunks.len());
    let (bytes, rest) = net.received(0, complete);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    assert!(bytes == whole(&header, &chunks));
    assert!(decodes_to(&bytes, &r));
    // The live viewer got every chunk (those of the stale connection it had before the
    // store said otherwise may come twice: the same publisher's bytes).
    let (_, rest) = net.received(0, live);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    let mut seqs: Vec<u32> = net
        .messages(0, live)
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(seq_of(c)),
            _ => None,
        })
        .collect();
    seqs.dedup();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs, (0..chunks.len() as u32).collect::<Vec<_>>());
}

#[test]
fn with_the_store_unavailable_publishers_get_internal_viewers_wait_and_the_session_stays() {
    let (r, header, chunks) = stream();
    let mut net = Cluster::new(2);
    // Lookups fail: a publisher is refused with Internal (it may retry); a viewer waits.
    net.down = true;
    let p = net.publisher(0, false, 3);
    assert_eq!(net.error_of(0, p), Some(ErrorCode::Internal));
    let v = net.viewer(1, ViewMode::Complete);
    assert_eq!(net.error_of(1, v), None);
    assert!(!net.closed.contains(&(1, v)));
    assert!(net.store.values().all(|s| s.entry.is_none()));
    // Back up: the publisher retries and starts the session; the viewer is attached.
    net.down = false;
    let p = net.publisher(0, false, 3);
    assert_eq!(net.resume_of(0, p), Some(0));
    net.send(0, p, Message::StreamHeader(header.clone()));
    send_chunks(&mut net, 0, p, &chunks[..15]);
    net.follow();
    assert!(net.received(1, v).0.starts_with(&header));
    let local = net.viewer(0, ViewMode::Live);
    // A write fails: the publisher gets Internal; the session stays, as a mirror.
    net.down = true;
    net.send(0, p, Message::Chunk(chunks[15].clone()));
    assert_eq!(net.error_of(0, p), Some(ErrorCode::Internal));
    assert!(!net.acks(0, p).contains(&15));
    let relay = &net.nodes[0].as_ref().unwrap().relay;
    assert!(relay.is_live(SONG));
    assert!(!net.closed.contains(&(0, local)));
    // The store comes back; the publisher resumes (here) from what it holds.
    net.down = false;
    let back = net.publisher(0, true, 3);
    assert_eq!(net.resume_of(0, back), Some(15));
    net.send(0, back, Message::StreamHeader(header.clone()));
    for c in &chunks[15..] {
        net.send(0, back, Message::Chunk(c.clone()));
        net.follow();
    }
    net.send(0, back, Message::End(EndReason::Finished));
    net.follow();
    assert_eq!(net.assert_store_prefix(&chunks), chunks.len());
    let (bytes, _) = net.received(1, v);
    assert!(bytes == whole(&header, &chunks));
    assert!(decodes_to(&bytes, &r));
    assert_eq!(
        net.received(0, local).1.last(),
        Some(&Message::End(EndReason::Finished))
    );
}

/// Found by the property test below: a relay holding the session as a mirror that its
/// follower had not kept up to date (behind the store by more than the backlog a lookup
/// reads back, which then does not start at a keyframe chunk) took the publisher back from
/// where the mirror was, not from what the store holds, and stored its resent chunks twice.
#[test]
fn a_publisher_resuming_on_a_relay_whose_mirror_is_behind_resumes_from_the_store() {
    let (r, header, chunks) = stream();
    let mut net = Cluster::new(2);
    let p = net.publisher(0, false, 6);
    net.send(0, p, Message::StreamHeader(header.clone()));
    let complete = net.viewer(1, ViewMode::Complete);
    // Relay 1's follower does not run: its mirror stays at chunk 0.
    send_chunks(&mut net, 0, p, &chunks[..35]);
    assert_eq!(net.acks(0, p).last(), Some(&34));
    net.disconnect(0, p);
    let back = net.publisher(1, true, 6);
    assert_eq!(net.resume_of(1, back), Some(35), "what the store holds");
    net.send(1, back, Message::StreamHeader(header.clone()));
    for c in &chunks[35..] {
        net.send(1, back, Message::Chunk(c.clone()));
        net.follow();
    }
    net.send(1, back, Message::End(EndReason::Finished));
    net.follow();
    assert_eq!(net.assert_store_prefix(&chunks), chunks.len());
    let (bytes, rest) = net.received(1, complete);
    assert_eq!(rest.last(), Some(&Message::End(EndReason::Finished)));
    assert!(bytes == whole(&header, &chunks));
    assert!(decodes_to(&bytes, &r));
}

/// One step of a random schedule.
#[derive(Clone, Debug)]
enum Op {
    /// The publisher sends its next `k` chunks.
    Send(usize),
    /// The store takes up to `k` of relay `i`'s pending writes.
    Confirm(usize, usize),
    /// The publisher's connection drops; it resumes on relay `i` (of those alive).
    Move(usize),
    /// Relay `i` (of those alive) is killed, unless it is the last.
    Kill(usize),
    /// The followers run.
    Follow,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1..8usize).prop_map(Op::Send),
        4 => (0..3usize, 1..12usize).prop_map(|(i, k)| Op::Confirm(i, k)),
        2 => (0..3usize).prop_map(Op::Move),
        1 => (0..3usize).prop_map(Op::Kill),
        3 => Just(Op::Follow),
    ]
}

fn short_stream() -> &'static (bsor::Replay, Bytes, Vec<Bytes>) {
    static S: std::sync::OnceLock<(bsor::Replay, Bytes, Vec<Bytes>)> = std::sync::OnceLock::new();
    S.get_or_init(|| stream_of(21, 4.0))
}

/// The publisher as a real client: one connection at a time; on `Resume n` it sends its
/// header again and every chunk from `n` it had sent.
struct Client {
    at: Option<(usize, ConnId)>,
    /// Connections it has had (their messages stay in the inbox).
    conns: Vec<(usize, ConnId)>,
    /// The next chunk to send on this connection.
    next: usize,
    /// Chunks produced (sent at least once).
    high: usize,
}

impl Client {
    /// Connected, and not told to go.
    fn open(&mut self, net: &Cluster) -> Option<(usize, ConnId)> {
        let (i, c) = self.at?;
        if net.nodes[i].is_none() || net.closed.contains(&(i, c)) || net.error_of(i, c).is_some() {
            self.at = None;
        }
        self.at
    }

    fn send(&mut self, net: &mut Cluster, k: usize, chunks: &[Bytes]) {
        let Some((i, c)) = self.open(net) else {
            return;
        };
        let to = (self.next + k).min(chunks.len());
        for ch in &chunks[self.next..to] {
            net.send(i, c, Message::Chunk(ch.clone()));
        }
        self.next = self.next.max(to);
        self.high = self.high.max(self.next);
    }

    /// Drops its connection (if any) and resumes on relay `i`.
    fn resume(&mut self, net: &mut Cluster, i: usize, header: &Bytes, chunks: &[Bytes]) {
        if let Some((j, c)) = self.at.take() {
            net.disconnect(j, c);
        }
        let c = net.publisher(i, true, 4);
        self.conns.push((i, c));
        self.at = Some((i, c));
        let Some(n) = net.resume_of(i, c) else {
            self.at = None;
            return;
        };
        let n = n as usize;
        assert!(
            n <= self.high,
            "Resume {n} past what was sent ({})",
            self.high
        );
        let stored = net.subject(SONG).chunks().len();
        assert!(
            n <= stored,
            "Resume {n} past what the store holds ({stored})"
        );
        net.send(i, c, Message::StreamHeader(header.clone()));
        self.next = n;
        let k = self.high - n;
        self.send(net, k, chunks);
    }

    fn acks(&self, net: &Cluster) -> Vec<u32> {
        self.conns
            .iter()
            .flat_map(|&(i, c)| net.acks(i, c))
            .collect()
    }
}

/// Every Ack names a chunk the store holds; the store holds chunks 0..n in order, once.
fn check(net: &Cluster, client: &Client, chunks: &[Bytes]) {
    let stored = net.assert_store_prefix(chunks);
    for a in client.acks(net) {
        assert!(
            (a as usize) < stored,
            "Ack {a} for a chunk the store does not hold ({stored} held)"
        );
    }
}

fn run_schedule(relays: usize, ops: &[Op]) {
    let (r, header, chunks) = short_stream();
    let mut net = Cluster::new(relays);
    let mut client = Client {
        at: None,
        conns: Vec::new(),
        next: 0,
        high: 0,
    };
    let p = net.publisher(0, false, 4);
    client.at = Some((0, p));
    client.conns.push((0, p));
    net.send(0, p, Message::StreamHeader(header.clone()));
    let viewers: Vec<(usize, ConnId)> = (0..relays)
        .map(|i| (i, net.viewer(i, ViewMode::Complete)))
        .collect();
    net.auto = false;
    for op in ops {
        match *op {
            Op::Send(k) => client.send(&mut net, k, chunks),
            Op::Confirm(i, k) => {
                if i < relays && net.nodes[i].is_some() {
                    net.confirm(i, k);
                }
            }
            Op::Move(i) => {
                let alive = net.alive();
                let to = alive[i % alive.len()];
                client.resume(&mut net, to, header, chunks);
            }
            Op::Kill(i) => {
                let alive = net.alive();
                if alive.len() > 1 {
                    net.kill(alive[i % alive.len()]);
                }
            }
            Op::Follow => net.follow(),
        }
        check(&net, &client, chunks);
    }
    // The end: the store takes every write, and the publisher sends all and finishes.
    net.auto = true;
    let last = chunks.len() as u32 - 1;
    let mut finished = false;
    for round in 0..20 {
        net.confirm_all();
        net.follow();
        if client.open(&net).is_none() {
            let alive = net.alive();
            client.resume(&mut net, alive[round % alive.len()], header, chunks);
        }
        client.send(&mut net, chunks.len(), chunks);
        net.confirm_all();
        net.follow();
        check(&net, &client, chunks);
        if let Some((i, c)) = client.open(&net) {
            // All acknowledged (or the Resume said the store holds them all): done.
            let acked = client.acks(&net).contains(&last);
            if acked || net.resume_of(i, c) == Some(chunks.len() as u32) {
                net.send(i, c, Message::End(EndReason::Finished));
                finished = true;
                break;
            }
        }
    }
    assert!(finished, "the publisher could not finish");
    net.confirm_all();
    net.follow();
    net.follow();
    check(&net, &client, chunks);
    assert_eq!(net.assert_store_prefix(chunks), chunks.len());
    assert_eq!(net.subject(SONG).end(), Some(EndReason::Finished));
    let want = whole(header, chunks);
    for i in net.alive() {
        let fresh = net.viewer(i, ViewMode::Complete);
        for (j, c) in viewers
            .iter()
            .copied()
            .filter(|v| v.0 == i)
            .chain([(i, fresh)])
        {
            let (bytes, rest) = net.received(j, c);
            assert_eq!(
                rest.last(),
                Some(&Message::End(EndReason::Finished)),
                "viewer {c} on relay {j}: {rest:?}"
            );
            assert!(bytes == want, "viewer {c} on relay {j}: not the stream");
        }
    }
    let (bytes, _) = net.received(viewers[0].0, viewers[0].1);
    if net.nodes[0].is_some() {
        assert!(decodes_to(&bytes, r));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_moves_kills_and_store_delays_keep_acks_stored_and_the_store_whole(
        relays in 2..=3usize,
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run_schedule(relays, &ops);
    }
}
