//! The relay's session logic, sans-IO: messages and clock ticks in, messages to send and
//! connections to close out. The network shells (TCP, WebSocket) only move bytes between
//! sockets and this state machine, so all of the protocol's rules are tested without sockets.
//!
//! Shape: [`Relay::connect`] gives a connection id; [`Relay::receive`] takes a decoded
//! message; [`Relay::poll_outgoing`] hands out the next message for a connection when its
//! socket can take one; [`Relay::poll_event`] says which connections have something to send
//! or must be closed. Chunks are held once as [`Bytes`] and shared by every viewer's queue.
//!
//! The archive stays out of this core: the relay says what to write
//! ([`RelayEvent::ArchiveHeader`], [`RelayEvent::ArchiveChunk`], [`RelayEvent::SessionEnded`])
//! and what to read ([`RelayEvent::Fetch`] for a complete-mode viewer behind the backlog,
//! [`RelayEvent::Lookup`] for a session it does not know), and the shell answers reads with
//! [`Relay::fetched`] and [`Relay::restored`]. A session's archive is its stream header and
//! then its chunks in sequence order, so the relay knows every chunk's file offset without
//! reading the file.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use super::wire::{self, EndReason, ErrorCode, Message, Role, ViewMode, VERSION};
use crate::stream::{ChunkHeader, ChunkType};

/// A connection, as the relay numbers them.
pub type ConnId = u64;

/// Limits and timeouts.
#[derive(Clone, Copy, Debug)]
pub struct RelayConfig {
    /// Messages (of every kind) a live viewer may have waiting before it skips to the next
    /// keyframe group (1 at least: 0 counts as 1).
    pub viewer_queue_messages: usize,
    /// Bytes of chunks a live viewer may have waiting before it skips.
    pub viewer_queue_bytes: usize,
    /// Chunks each session keeps for complete-mode viewers (and late joiners' groups).
    pub backlog_chunks: usize,
    /// How long a session waits for its publisher to come back.
    pub publisher_timeout_ms: u64,
    /// How long a connection may take to say `Hello` and `Publish` or `Subscribe`.
    pub handshake_timeout_ms: u64,
    /// An established connection that sends nothing for this long is closed (`Timeout`).
    pub idle_timeout_ms: u64,
    /// The relay sends `Ping` to a connection that has been silent this long.
    pub ping_interval_ms: u64,
    /// Messages per second a connection may send, on average (a publisher's chunks are not
    /// counted); more is `Flood`.
    pub flood_rate: u32,
    /// Messages a connection may send in a burst above `flood_rate`.
    pub flood_burst: u32,
    /// Sessions are archived by the shell: complete-mode viewers behind the backlog are
    /// served from the archive, and sessions the relay does not know are looked up there.
    pub archive: bool,
    /// Most chunks one archive read hands a complete-mode viewer.
    pub fetch_chunks: usize,
    /// Most bytes one archive read hands a complete-mode viewer (one chunk at least).
    pub fetch_bytes: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            viewer_queue_messages: 64,
            viewer_queue_bytes: 4 << 20,
            backlog_chunks: 4096,
            publisher_timeout_ms: 30_000,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            ping_interval_ms: 15_000,
            flood_rate: 50,
            flood_burst: 200,
            archive: false,
            fetch_chunks: 64,
            fetch_bytes: 256 << 10,
        }
    }
}

/// Who may publish: the token file's lines, `TOKEN` for any session or `SESSION:TOKEN` for
/// one (split at the first `:`).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    any: Vec<String>,
    per_session: Vec<(String, String)>,
}

impl Tokens {
    /// Parses a token file (blank lines and lines starting with `#` are skipped).
    pub fn parse(text: &str) -> Tokens {
        let mut t = Tokens::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once(':') {
                Some((session, token)) => {
                    t.per_session.push((session.to_string(), token.to_string()))
                }
                None => t.any.push(line.to_string()),
            }
        }
        t
    }

    /// True when `token` may publish `session`.
    pub fn allows(&self, session: &str, token: &str) -> bool {
        !token.is_empty()
            && (self.any.iter().any(|t| t == token)
                || self
                    .per_session
                    .iter()
                    .any(|(s, t)| s == session && t == token))
    }
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayEvent {
    /// The connection has messages waiting: call [`Relay::poll_outgoing`].
    Ready(ConnId),
    /// Close the connection once its waiting messages are sent.
    Close(ConnId),
    /// A session's stream header, for its archive.
    ArchiveHeader(String, Bytes),
    /// A chunk of a session, in order, for its archive.
    ArchiveChunk(String, Bytes),
    /// A session ended.
    SessionEnded(String, EndReason),
    /// Read chunks from a session's archive for a complete-mode viewer, and hand them to
    /// [`Relay::fetched`].
    Fetch(Fetch),
    /// Look for a session in the archive, and say what was found with [`Relay::restored`].
    Lookup(String),
}

/// An archive read: chunks of `session` from sequence number `seq`, which starts at byte
/// `offset` of the archive file, at most `max_chunks` of them and `max_bytes` (but at least
/// one chunk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    /// The viewer the chunks are for.
    pub conn: ConnId,
    /// The session.
    pub session: String,
    /// The sequence number of the first chunk wanted.
    pub seq: u32,
    /// Its offset in the archive file.
    pub offset: u64,
    /// At most this many chunks.
    pub max_chunks: usize,
    /// At most this many bytes (but one chunk at least).
    pub max_bytes: usize,
}

/// A session found in the archive: its stream header, how many whole chunks follow it, and
/// whether the file is finished (ends with the footer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Archived {
    /// The stream header.
    pub header: Bytes,
    /// Whole chunks after it, with sequence numbers 0, 1, ...
    pub chunks: u32,
    /// The file ends with a footer: the publisher finished the song.
    pub finished: bool,
}

#[derive(Clone, Debug)]
enum Conn {
    /// Waiting for `Hello` since this time.
    New {
        since: u64,
    },
    /// Said `Hello`; waiting for `Publish` or `Subscribe`.
    Greeted {
        role: Role,
        since: u64,
    },
    Publisher {
        session: String,
    },
    Viewer(Viewer),
    /// Sent an error; nothing more is read from it.
    Closing,
}

#[derive(Clone, Debug)]
struct Viewer {
    session: String,
    mode: ViewMode,
    /// Waiting for the session to start, until this time.
    waiting_until: Option<u64>,
    /// Complete mode: the sequence number of the next chunk to send.
    cursor: u32,
    /// Live mode: dropping chunks until the next keyframe chunk.
    skipping: bool,
    skipped_chunks: u32,
    skipped_bytes: u64,
    sent_header: bool,
    /// Complete mode: the archive offset of chunk `cursor`.
    offset: u64,
    /// Complete mode: an archive read is under way.
    fetching: bool,
}

/// When a connection was last heard from and pinged, and its flood allowance.
#[derive(Clone, Copy, Debug)]
struct Meter {
    heard: u64,
    pinged: u64,
    /// Allowance in thousandths of a message.
    level: u64,
    at: u64,
}

#[derive(Clone, Debug)]
struct Session {
    publisher: Option<ConnId>,
    key: [u8; 16],
    header: Option<Bytes>,
    /// The last chunks (sequence number, bytes, keyframe?), oldest first.
    backlog: VecDeque<(u32, Bytes, bool)>,
    next_seq: u32,
    ended: Option<EndReason>,
    publisher_gone_since: Option<u64>,
    viewers: Vec<ConnId>,
    /// The shell keeps this session's archive (and it has not failed).
    archived: bool,
}

/// The relay's state: every connection and session.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    tokens: Tokens,
    next_conn: ConnId,
    conns: HashMap<ConnId, Conn>,
    outgoing: HashMap<ConnId, VecDeque<Message>>,
    queued_bytes: HashMap<ConnId, usize>,
    sessions: HashMap<String, Session>,
    meters: HashMap<ConnId, Meter>,
    /// Sessions being looked up in the archive.
    lookups: std::collections::HashSet<String>,
    next_nonce: u64,
    events: VecDeque<RelayEvent>,
    /// The time of the latest call, in the shell's milliseconds.
    now: u64,
}

fn chunk_info(chunk: &[u8]) -> Option<(u32, bool)> {
    ChunkHeader::parse_at(chunk).map(|(h, _)| (h.seq, h.kind == ChunkType::Keyframes))
}

impl Relay {
    /// A relay with these limits and credentials.
    pub fn new(config: RelayConfig, tokens: Tokens) -> Self {
        Relay {
            config,
            tokens,
            next_conn: 1,
            conns: HashMap::new(),
            outgoing: HashMap::new(),
            queued_bytes: HashMap::new(),
            sessions: HashMap::new(),
            meters: HashMap::new(),
            lookups: Default::default(),
            next_nonce: 0,
            events: VecDeque::new(),
            now: 0,
        }
    }

    /// A new connection.
    pub fn connect(&mut self, now: u64) -> ConnId {
        self.now = now;
        let id = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(id, Conn::New { since: now });
        let level = u64::from(self.config.flood_burst) * 1000;
        self.meters.insert(
            id,
            Meter {
                heard: now,
                pinged: now,
                level,
                at: now,
            },
        );
        id
    }

    /// What the shell must do next, if anything.
    pub fn poll_event(&mut self) -> Option<RelayEvent> {
        self.events.pop_front()
    }

    /// The next message to send on `conn`.
    pub fn poll_outgoing(&mut self, conn: ConnId) -> Option<Message> {
        self.refill_complete_viewer(conn);
        let m = self.outgoing.get_mut(&conn)?.pop_front()?;
        if let Message::Chunk(b) = &m {
            if let Some(q) = self.queued_bytes.get_mut(&conn) {
                *q = q.saturating_sub(b.len());
            }
        }
        Some(m)
    }

    /// Messages waiting for `conn`.
    pub fn queued(&self, conn: ConnId) -> usize {
        self.outgoing.get(&conn).map_or(0, VecDeque::len)
    }

    /// Sessions alive (with or without a publisher).
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    fn send(&mut self, conn: ConnId, m: Message) {
        let q = self.outgoing.entry(conn).or_default();
        let was_empty = q.is_empty();
        if let Message::Chunk(b) = &m {
            *self.queued_bytes.entry(conn).or_default() += b.len();
        }
        q.push_back(m);
        if was_empty {
            self.events.push_back(RelayEvent::Ready(conn));
        }
    }

    /// Answers a ping. A connection that pings faster than it reads gets one answer waiting
    /// at a time, for its latest ping, so its queue cannot grow.
    fn pong(&mut self, conn: ConnId, n: u64) {
        let waiting = self
            .outgoing
            .get_mut(&conn)
            .and_then(|q| q.iter_mut().find(|m| matches!(m, Message::Pong(_))));
        match waiting {
            Some(m) => *m = Message::Pong(n),
            None => self.send(conn, Message::Pong(n)),
        }
    }

    /// Acknowledges chunks up to `seq`. Acks are cumulative: one that still waits, wherever
    /// it stands in the queue (a Pong or a Ping may have come after it), is raised to `seq`,
    /// so a publisher that does not read them has one Ack waiting at most.
    fn ack(&mut self, conn: ConnId, seq: u32) {
        let waiting = self
            .outgoing
            .get_mut(&conn)
            .and_then(|q| q.iter_mut().find(|m| matches!(m, Message::Ack(_))));
        match waiting {
            Some(Message::Ack(waiting)) => *waiting = (*waiting).max(seq),
            _ => self.send(conn, Message::Ack(seq)),
        }
    }

    /// Sends an error and closes `conn` (only it). A connection already closing gets
    /// nothing more: its error or `End` is its last message.
    fn fail(&mut self, conn: ConnId, code: ErrorCode, message: &str) {
        if matches!(self.conns.get(&conn), Some(Conn::Closing)) {
            return;
        }
        self.send(
            conn,
            Message::Error {
                code,
                message: message.to_string(),
            },
        );
        self.detach(conn);
        self.conns.insert(conn, Conn::Closing);
        self.events.push_back(RelayEvent::Close(conn));
    }

    /// A decode error on `conn`'s bytes: its error code, and the connection closed.
    pub fn reject(&mut self, conn: ConnId, e: &wire::WireError) {
        self.fail(conn, e.code(), &e.to_string());
    }

    /// The connection went away.
    pub fn disconnect(&mut self, conn: ConnId, now: u64) {
        self.now = now;
        self.detach(conn);
        self.conns.remove(&conn);
        self.outgoing.remove(&conn);
        self.queued_bytes.remove(&conn);
        self.meters.remove(&conn);
    }

    /// Takes `conn` out of its session (a publisher leaves its session waiting for it).
    fn detach(&mut self, conn: ConnId) {
        let now = self.now;
        match self.conns.get(&conn) {
            Some(Conn::Publisher { session }) => {
                if let Some(s) = self.sessions.get_mut(session) {
                    if s.publisher == Some(conn) {
                        s.publisher = None;
                        s.publisher_gone_since = Some(now);
                    }
                }
            }
            Some(Conn::Viewer(v)) => {
                if let Some(s) = self.sessions.get_mut(&v.session) {
                    s.viewers.retain(|&c| c != conn);
                }
            }
            _ => {}
        }
    }

    /// A message from `conn`.
    pub fn receive(&mut self, conn: ConnId, m: Message, now: u64) {
        self.now = now;
        let Some(state) = self.conns.get(&conn).cloned() else {
            return;
        };
        if matches!(state, Conn::Closing) {
            return;
        }
        // A publisher's chunks are paced by the song (or, at full speed, by the socket);
        // everything else counts against the connection's allowance.
        let counted = !matches!((&state, &m), (Conn::Publisher { .. }, Message::Chunk(_)));
        let (rate, burst) = (
            u64::from(self.config.flood_rate),
            u64::from(self.config.flood_burst) * 1000,
        );
        if let Some(meter) = self.meters.get_mut(&conn) {
            meter.heard = now;
            if counted {
                let elapsed = now.saturating_sub(meter.at);
                meter.level = meter
                    .level
                    .saturating_add(elapsed.saturating_mul(rate))
                    .min(burst);
                meter.at = now;
                if meter.level < 1000 {
                    return self.fail(conn, ErrorCode::Flood, "too many messages too fast");
                }
                meter.level -= 1000;
            }
        }
        match (state, m) {
            (Conn::Closing, _) => {}
            (_, Message::Ping(n)) => self.pong(conn, n),
            (_, Message::Pong(_)) => {}
            (
                Conn::New { .. },
                Message::Hello {
                    min_version,
                    max_version,
                    role,
                    ..
                },
            ) => {
                if !(min_version..=max_version).contains(&VERSION) {
                    return self.fail(conn, ErrorCode::UnsupportedVersion, "version 1 only");
                }
                if role == Role::Relay {
                    return self.fail(conn, ErrorCode::Malformed, "a client cannot be a relay");
                }
                self.send(
                    conn,
                    Message::Hello {
                        min_version: VERSION,
                        max_version: VERSION,
                        role: Role::Relay,
                        agent: concat!("bsor-stream ", env!("CARGO_PKG_VERSION")).into(),
                    },
                );
                self.conns.insert(conn, Conn::Greeted { role, since: now });
            }
            (
                Conn::Greeted {
                    role: Role::Publisher,
                    ..
                },
                Message::Publish {
                    session,
                    token,
                    resume,
                    publisher_key,
                },
            ) => self.publish(conn, session, &token, resume, publisher_key),
            (
                Conn::Greeted {
                    role: Role::Viewer, ..
                },
                Message::Subscribe {
                    session,
                    mode,
                    wait_ms,
                },
            ) => self.subscribe(conn, session, mode, now.saturating_add(u64::from(wait_ms))),
            (Conn::Publisher { session }, Message::StreamHeader(h)) => {
                self.header(conn, &session, h)
            }
            (Conn::Publisher { session }, Message::Chunk(c)) => self.chunk(conn, &session, c),
            (Conn::Publisher { session }, Message::End(reason)) => {
                self.end(&session, reason);
                self.conns.insert(conn, Conn::Closing);
                self.events.push_back(RelayEvent::Close(conn));
            }
            (_, _) => self.fail(conn, ErrorCode::UnexpectedMessage, "message out of order"),
        }
    }

    fn publish(&mut self, conn: ConnId, name: String, token: &str, resume: bool, key: [u8; 16]) {
        if !self.tokens.allows(&name, token) {
            return self.fail(
                conn,
                ErrorCode::Unauthorized,
                "not allowed to publish this session",
            );
        }
        let next = match self.sessions.get_mut(&name) {
            Some(s) if s.ended.is_some() => {
                return self.fail(conn, ErrorCode::SessionBusy, "the session has ended");
            }
            Some(s) if s.key != key || !resume => {
                return self.fail(conn, ErrorCode::SessionBusy, "the session has a publisher");
            }
            Some(s) => {
                // The same publisher, resuming: its old connection, if it lingers, goes.
                let old = s.publisher.replace(conn);
                s.publisher_gone_since = None;
                let next = s.next_seq;
                if let Some(old) = old {
                    self.conns.insert(old, Conn::Closing);
                    self.events.push_back(RelayEvent::Close(old));
                }
                next
            }
            None => {
                self.sessions.insert(
                    name.clone(),
                    Session {
                        publisher: Some(conn),
                        key,
                        header: None,
                        backlog: VecDeque::new(),
                        next_seq: 0,
                        ended: None,
                        publisher_gone_since: None,
                        viewers: Vec::new(),
                        archived: self.config.archive,
                    },
                );
                0
            }
        };
        self.conns.insert(
            conn,
            Conn::Publisher {
                session: name.clone(),
            },
        );
        self.send(conn, Message::Resume(next));
        self.attach_waiting(&name);
    }

    /// Attaches the viewers that wait for session `name`; returns them.
    fn attach_waiting(&mut self, name: &str) -> Vec<ConnId> {
        let waiting: Vec<ConnId> = self
            .conns
            .iter()
            .filter_map(|(&c, st)| match st {
                Conn::Viewer(v) if v.session == name && v.waiting_until.is_some() => Some(c),
                _ => None,
            })
            .collect();
        for &c in &waiting {
            if let Some(Conn::Viewer(v)) = self.conns.get_mut(&c) {
                v.waiting_until = None;
            }
            if let Some(s) = self.sessions.get_mut(name) {
                s.viewers.push(c);
            }
        }
        waiting
    }

    /// The answer to [`RelayEvent::Lookup`]: the session as found in the archive, if it is
    /// there. It comes back as an ended session whose viewers read it from the archive.
    pub fn restored(&mut self, name: &str, found: Option<Archived>, now: u64) {
        self.now = now;
        self.lookups.remove(name);
        let Some(a) = found else {
            return;
        };
        if self.sessions.contains_key(name) {
            return; // a publisher started it meanwhile
        }
        self.sessions.insert(
            name.to_string(),
            Session {
                publisher: None,
                key: [0; 16],
                header: Some(a.header),
                backlog: VecDeque::new(),
                next_seq: a.chunks,
                ended: Some(if a.finished {
                    EndReason::Finished
                } else {
                    EndReason::PublisherGone
                }),
                publisher_gone_since: None,
                viewers: Vec::new(),
                archived: true,
            },
        );
        for c in self.attach_waiting(name) {
            self.join(c);
        }
    }

    /// The shell could not write a session's archive: its viewers are served from memory
    /// only from now on.
    pub fn archive_failed(&mut self, name: &str) {
        if let Some(s) = self.sessions.get_mut(name) {
            s.archived = false;
        }
    }

    /// The answer to [`RelayEvent::Fetch`]: the chunks read from the archive from `seq` on,
    /// or why they could not be read (the viewer then gets `Error Internal`).
    pub fn fetched(
        &mut self,
        conn: ConnId,
        seq: u32,
        chunks: Result<Vec<Bytes>, String>,
        now: u64,
    ) {
        self.now = now;
        let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) else {
            return;
        };
        if !v.fetching || v.cursor != seq {
            return;
        }
        v.fetching = false;
        let chunks = match chunks {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => {
                return self.fail(conn, ErrorCode::Internal, "the archive ends early");
            }
            Err(e) => {
                return self.fail(
                    conn,
                    ErrorCode::Internal,
                    &format!("reading the archive: {e}"),
                );
            }
        };
        let mut good = Vec::with_capacity(chunks.len());
        for c in chunks {
            match chunk_info(&c) {
                Some((s, _)) if s == v.cursor => {
                    v.cursor += 1;
                    v.offset += c.len() as u64;
                    good.push(c);
                }
                _ => {
                    return self.fail(
                        conn,
                        ErrorCode::Internal,
                        "the archive does not match the session",
                    )
                }
            }
        }
        for c in good {
            self.send(conn, Message::Chunk(c));
        }
    }

    fn subscribe(&mut self, conn: ConnId, name: String, mode: ViewMode, until: u64) {
        let viewer = Viewer {
            session: name.clone(),
            mode,
            waiting_until: Some(until),
            cursor: 0,
            skipping: false,
            skipped_chunks: 0,
            skipped_bytes: 0,
            sent_header: false,
            offset: 0,
            fetching: false,
        };
        self.conns.insert(conn, Conn::Viewer(viewer));
        if let Some(s) = self.sessions.get_mut(&name) {
            s.viewers.push(conn);
            if let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) {
                v.waiting_until = None;
            }
            self.join(conn);
        } else if self.config.archive && self.lookups.insert(name.clone()) {
            self.events.push_back(RelayEvent::Lookup(name));
        }
    }

    /// Sends a newly attached viewer what it needs to decode at once: the header and the
    /// chunks of the current keyframe group. A complete-mode viewer, and any viewer of a
    /// session that has ended, reads every chunk from the first on instead.
    fn join(&mut self, conn: ConnId) {
        let Some(Conn::Viewer(v)) = self.conns.get(&conn).cloned() else {
            return;
        };
        let Some(s) = self.sessions.get(&v.session) else {
            return;
        };
        let Some(header) = s.header.clone() else {
            return;
        };
        let group_start = s.backlog.iter().rposition(|c| c.2).unwrap_or(0);
        let mode = if s.ended.is_some() {
            ViewMode::Complete
        } else {
            v.mode
        };
        let live_chunks: Vec<Bytes> = if mode == ViewMode::Live {
            s.backlog
                .iter()
                .skip(group_start)
                .map(|c| c.1.clone())
                .collect()
        } else {
            Vec::new()
        };
        // A group longer than the live queue takes is skipped like a slow viewer's: the
        // viewer starts at the next keyframe chunk, told how much it missed.
        let group_bytes: usize = live_chunks.iter().map(Bytes::len).sum();
        let max_msgs = self.config.viewer_queue_messages.max(1);
        let fits = self.queued(conn) + 1 + live_chunks.len() <= max_msgs
            && group_bytes <= self.config.viewer_queue_bytes;
        let skipped = (mode == ViewMode::Live && !fits).then_some((live_chunks.len(), group_bytes));
        if let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) {
            v.sent_header = true;
            v.mode = mode;
            v.cursor = 0;
            v.offset = header.len() as u64;
            if let Some((chunks, bytes)) = skipped {
                v.skipping = true;
                v.skipped_chunks = chunks as u32;
                v.skipped_bytes = bytes as u64;
            }
        }
        self.send(conn, Message::StreamHeader(header));
        if skipped.is_none() {
            for c in live_chunks {
                self.send(conn, Message::Chunk(c));
            }
        }
    }

    /// Complete-mode viewers pull from the backlog as their socket drains, and from the
    /// archive (through the shell) for what the backlog no longer holds.
    fn refill_complete_viewer(&mut self, conn: ConnId) {
        let Some(Conn::Viewer(v)) = self.conns.get(&conn) else {
            return;
        };
        if v.mode != ViewMode::Complete || !v.sent_header || v.fetching {
            return;
        }
        if self.queued(conn) > 0 {
            return;
        }
        let (name, cursor, offset) = (v.session.clone(), v.cursor, v.offset);
        let Some(s) = self.sessions.get(&name) else {
            return;
        };
        let first_kept = s.backlog.front().map_or(s.next_seq, |c| c.0);
        if cursor < first_kept {
            if !s.archived {
                return self.fail(
                    conn,
                    ErrorCode::BacklogExceeded,
                    "fell further behind than the relay keeps",
                );
            }
            let fetch = Fetch {
                conn,
                session: name,
                seq: cursor,
                offset,
                max_chunks: self.config.fetch_chunks.max(1),
                max_bytes: self.config.fetch_bytes,
            };
            if let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) {
                v.fetching = true;
            }
            self.events.push_back(RelayEvent::Fetch(fetch));
            return;
        }
        // The backlog holds consecutive sequence numbers.
        let next = s
            .backlog
            .get((cursor - first_kept) as usize)
            .map(|c| c.1.clone());
        let ended = s.ended;
        match next {
            Some(chunk) => {
                if let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) {
                    v.cursor += 1;
                    v.offset += chunk.len() as u64;
                }
                self.send(conn, Message::Chunk(chunk));
            }
            None => {
                if let Some(reason) = ended {
                    self.send(conn, Message::End(reason));
                    self.detach(conn);
                    self.conns.insert(conn, Conn::Closing);
                    self.events.push_back(RelayEvent::Close(conn));
                }
            }
        }
    }

    fn header(&mut self, conn: ConnId, name: &str, h: Bytes) {
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        if s.header.is_some() {
            if s.header.as_ref() == Some(&h) {
                return; // a resuming publisher may send it again
            }
            return self.fail(
                conn,
                ErrorCode::UnexpectedMessage,
                "stream header already set",
            );
        }
        s.header = Some(h.clone());
        let viewers = s.viewers.clone();
        self.events
            .push_back(RelayEvent::ArchiveHeader(name.to_string(), h));
        for v in viewers {
            self.join(v);
        }
    }

    fn chunk(&mut self, conn: ConnId, name: &str, c: Bytes) {
        let Some((seq, keyframe)) = chunk_info(&c) else {
            return self.fail(conn, ErrorCode::MalformedChunk, "no chunk header");
        };
        let limit = self.config.backlog_chunks.max(1);
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        if s.header.is_none() {
            return self.fail(
                conn,
                ErrorCode::UnexpectedMessage,
                "chunk before the stream header",
            );
        }
        if seq < s.next_seq {
            // Sent again by a resuming publisher: already stored.
            return self.ack(conn, seq);
        }
        if seq != s.next_seq {
            return self.fail(conn, ErrorCode::UnexpectedMessage, "chunk sequence gap");
        }
        s.next_seq += 1;
        s.backlog.push_back((seq, c.clone(), keyframe));
        while s.backlog.len() > limit {
            s.backlog.pop_front();
        }
        let viewers = s.viewers.clone();
        self.events
            .push_back(RelayEvent::ArchiveChunk(name.to_string(), c.clone()));
        self.ack(conn, seq);
        for v in viewers {
            self.deliver(v, &c, keyframe);
        }
    }

    /// A live chunk to a viewer: queued, or skipped when the viewer has fallen behind.
    fn deliver(&mut self, conn: ConnId, c: &Bytes, keyframe: bool) {
        let (max_msgs, max_bytes) = (
            self.config.viewer_queue_messages.max(1),
            self.config.viewer_queue_bytes,
        );
        let mut queued = self.queued(conn);
        let queued_bytes = self.queued_bytes.get(&conn).copied().unwrap_or(0);
        let Some(Conn::Viewer(v)) = self.conns.get_mut(&conn) else {
            return;
        };
        if !v.sent_header || v.mode == ViewMode::Complete {
            // Complete viewers pull from the backlog (refill_complete_viewer).
            if v.mode == ViewMode::Complete && queued == 0 {
                self.events.push_back(RelayEvent::Ready(conn));
            }
            return;
        }
        if !v.skipping && (queued >= max_msgs || queued_bytes + c.len() > max_bytes) {
            // Behind: drop the chunks that wait and everything up to the next keyframe
            // group. What else waits stays (the stream header above all); a skip notice
            // still waiting is folded into the next one.
            v.skipping = true;
            if let Some(q) = self.outgoing.get_mut(&conn) {
                q.retain(|m| match m {
                    Message::Chunk(b) => {
                        v.skipped_chunks = v.skipped_chunks.saturating_add(1);
                        v.skipped_bytes = v.skipped_bytes.saturating_add(b.len() as u64);
                        false
                    }
                    Message::Skipped { chunks, bytes } => {
                        v.skipped_chunks = v.skipped_chunks.saturating_add(*chunks);
                        v.skipped_bytes = v.skipped_bytes.saturating_add(*bytes);
                        false
                    }
                    _ => true,
                });
                queued = q.len();
            }
            self.queued_bytes.insert(conn, 0);
        }
        if v.skipping {
            // It resumes at a keyframe chunk, and only if the queue has room for it: control
            // messages (Hello, the header, Pong, Ping) may fill a small queue on their own,
            // and a viewer that has not read them is still behind. (The bytes limit does not
            // hold the keyframe back: the queue holds no chunk now, and one chunk always goes.)
            if !keyframe || queued >= max_msgs {
                v.skipped_chunks = v.skipped_chunks.saturating_add(1);
                v.skipped_bytes = v.skipped_bytes.saturating_add(c.len() as u64);
                return;
            }
            v.skipping = false;
            let notice = Message::Skipped {
                chunks: v.skipped_chunks,
                bytes: v.skipped_bytes,
            };
            v.skipped_chunks = 0;
            v.skipped_bytes = 0;
            self.send(conn, notice);
        }
        self.send(conn, Message::Chunk(c.clone()));
    }

    fn end(&mut self, name: &str, reason: EndReason) {
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        if s.ended.is_some() {
            return;
        }
        s.ended = Some(reason);
        s.publisher = None;
        let viewers = s.viewers.clone();
        self.events
            .push_back(RelayEvent::SessionEnded(name.to_string(), reason));
        for v in viewers {
            let complete =
                matches!(self.conns.get(&v), Some(Conn::Viewer(x)) if x.mode == ViewMode::Complete);
            if complete {
                // It gets End after its last chunk (refill_complete_viewer).
                self.events.push_back(RelayEvent::Ready(v));
            } else {
                self.send(v, Message::End(reason));
                self.detach(v);
                self.conns.insert(v, Conn::Closing);
                self.events.push_back(RelayEvent::Close(v));
            }
        }
        // The live viewers are closing: out of the session, so that it can be forgotten.
        let conns = &self.conns;
        if let Some(s) = self.sessions.get_mut(name) {
            s.viewers
                .retain(|c| matches!(conns.get(c), Some(Conn::Viewer(_))));
        }
    }

    /// Time passes: handshakes and waits time out, sessions whose publisher is gone end.
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        // Ended sessions nobody watches any more are forgotten.
        self.sessions
            .retain(|_, s| s.ended.is_none() || !s.viewers.is_empty());
        let hs = self.config.handshake_timeout_ms;
        let late: Vec<(ConnId, bool)> = self
            .conns
            .iter()
            .filter_map(|(&c, st)| match st {
                Conn::New { since } | Conn::Greeted { since, .. }
                    if now.saturating_sub(*since) > hs =>
                {
                    Some((c, false))
                }
                Conn::Viewer(v) if v.waiting_until.is_some_and(|u| now > u) => Some((c, true)),
                _ => None,
            })
            .collect();
        for (c, waiting) in late {
            if waiting {
                self.fail(
                    c,
                    ErrorCode::NoSuchSession,
                    "the session did not start in time",
                );
            } else {
                self.fail(c, ErrorCode::Timeout, "handshake took too long");
            }
        }
        let pt = self.config.publisher_timeout_ms;
        let gone: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                s.ended.is_none()
                    && s.publisher_gone_since
                        .is_some_and(|t| now.saturating_sub(t) > pt)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            self.end(&name, EndReason::PublisherGone);
        }
        // Established connections: pinged when silent, closed when silent too long.
        let (idle, every) = (self.config.idle_timeout_ms, self.config.ping_interval_ms);
        let mut silent = Vec::new();
        let mut ping = Vec::new();
        for (&c, st) in &self.conns {
            if !matches!(st, Conn::Publisher { .. } | Conn::Viewer(_)) {
                continue;
            }
            let Some(m) = self.meters.get(&c) else {
                continue;
            };
            if now.saturating_sub(m.heard) > idle {
                silent.push(c);
            } else if now.saturating_sub(m.heard) >= every && now.saturating_sub(m.pinged) >= every
            {
                ping.push(c);
            }
        }
        for c in silent {
            self.fail(c, ErrorCode::Timeout, "nothing received for too long");
        }
        for c in ping {
            if let Some(m) = self.meters.get_mut(&c) {
                m.pinged = now;
            }
            // One Ping waits at most: a peer that has not read the last one is asked nothing
            // new (its idle timeout closes it if it stays silent).
            let waiting = self
                .outgoing
                .get(&c)
                .is_some_and(|q| q.iter().any(|m| matches!(m, Message::Ping(_))));
            if waiting {
                continue;
            }
            self.next_nonce += 1;
            let n = self.next_nonce;
            self.send(c, Message::Ping(n));
        }
    }
}
