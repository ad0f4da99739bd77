//! The relay's session logic, sans-IO: messages and deadlines in, messages to send and
//! connections to close out. The network shells (TCP, WebSocket) only move bytes between
//! sockets and this state machine, so all of the protocol's rules are tested without sockets.
//!
//! Shape: [`Relay::connect`] gives a connection id; [`Relay::receive`] takes a decoded
//! message; [`Relay::poll_outgoing`] hands out the next message for a connection when its
//! socket can take one; [`Relay::poll_action`] says which connections have something to
//! send or must be closed; [`Relay::poll_timeout`] says when to call
//! [`Relay::handle_timeout`] next. Chunks are held once as [`Bytes`] and shared by every
//! viewer's queue.
//!
//! The archive stays out of this core: the relay says what to write
//! ([`RelayAction::ArchiveHeader`], [`RelayAction::ArchiveChunk`],
//! [`RelayAction::SessionEnded`]) and what to read ([`RelayAction::Fetch`] for a
//! complete-mode viewer behind the backlog, [`RelayAction::Lookup`] for a session it does
//! not know), and the shell answers reads with [`Relay::fetched`] and [`Relay::restored`].
//! A session's archive is its stream header and then its chunks in sequence order, so the
//! relay knows every chunk's file offset without reading the file.
//!
//! One concern a file: `connection` (one struct per connection: its stage, queue, meter
//! and deadline), `session` (the publisher's side and the backlog), `viewer` (live and
//! complete-mode delivery), `meter` (flood and liveness), `timers` (deadlines), `tokens`.
//!
//! ```
//! use bsor_stream_core::net::relay::{Relay, RelayAction, RelayConfig, Tokens};
//! use bsor_stream_core::net::wire::{Message, Role};
//!
//! let mut relay = Relay::new(RelayConfig::default(), Tokens::parse("secret"));
//! let conn = relay.connect(0);
//! let hello = Message::Hello {
//!     min_version: 1,
//!     max_version: 1,
//!     role: Role::Publisher,
//!     agent: "doc".into(),
//! };
//! relay.receive(conn, hello, 5);
//! let publish = Message::Publish {
//!     session: "song".into(),
//!     token: "secret".into(),
//!     resume: false,
//!     publisher_key: [7; 16],
//! };
//! relay.receive(conn, publish, 6);
//! // The shell is told the connection has messages, and sends them as its socket drains.
//! assert_eq!(relay.poll_action(), Some(RelayAction::Ready(conn)));
//! assert!(matches!(relay.poll_outgoing(conn), Some(Message::Hello { role: Role::Relay, .. })));
//! assert_eq!(relay.poll_outgoing(conn), Some(Message::Resume(0)));
//! assert_eq!(relay.poll_outgoing(conn), None);
//! // Nothing is due until the first ping (the default interval is 15 s).
//! assert_eq!(relay.poll_timeout(), Some(6 + 15_000));
//! relay.handle_timeout(15_006);
//! assert_eq!(relay.poll_action(), Some(RelayAction::Ready(conn)));
//! assert!(matches!(relay.poll_outgoing(conn), Some(Message::Ping(_))));
//! ```

mod cluster;
mod connection;
mod meter;
mod resume;
mod session;
mod timers;
mod tokens;
mod viewer;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;

use bytes::Bytes;

use self::connection::{Connection, Stage};
pub use self::resume::{ResumeKey, KEY_FILE_MAGIC, KEY_FILE_MAX, KEY_FILE_PLAYER_MAX};
pub(crate) use self::session::{KEY_CHUNK_KEPT_MAX, KEY_CHUNK_TYPE};
use self::timers::Timers;
pub use self::tokens::{Publisher, Tokens};
use super::wire::{self, EndReason, ErrorCode, Message, Role, VERSION};

/// The default frame limit before a connection is a publisher: the longest handshake
/// message (`Publish`: a 64-byte name, a 256-byte token, a 16-byte key, 347 bytes with its
/// length and type) fits with room to spare.
pub const HANDSHAKE_FRAME_LIMIT: u32 = 1024;

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
    /// The relay sends `Ping` to a connection that has been silent this long (and not
    /// pinged for as long; 0 counts as 1, so that a ping is not due again the same moment).
    pub ping_interval_ms: u64,
    /// Messages per second a connection may send, on average (a publisher's chunks are not
    /// counted; 0 counts as 1); more is `Flood`.
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
    /// Bytes of chunks each session keeps in its backlog (one chunk at least): older ones
    /// are dropped from memory (complete-mode viewers then read them from the archive).
    pub backlog_bytes: usize,
    /// Bytes of chunks all sessions together keep in their backlogs: a chunk that would go
    /// over this even after its session's backlog is emptied is `OverBudget` for its
    /// publisher.
    pub total_backlog_bytes: usize,
    /// Connections from one IP address at once (0: no limit); one more is `OverBudget`.
    pub connections_per_address: usize,
    /// The frame limit of a connection that is not (yet) a publisher: what the relay reads
    /// ahead of a complete message from a connection that has not finished its handshake,
    /// or a viewer (whose messages are all small).
    pub handshake_frame_limit: u32,
    /// The frame limit of a publisher (its chunks are limited by type as well,
    /// `format.md` §4.3).
    pub publisher_frame_limit: u32,
    /// Sessions live in a store shared with other relays (`wire.md` §5, a cluster): a
    /// publisher's chunks are acknowledged only once the shell says the store holds them
    /// ([`Relay::stored`]); chunks another relay stored come in through
    /// [`Relay::mirrored`]; sessions the relay does not hold are looked up in the store
    /// ([`RelayAction::Lookup`], as with `archive`, which a cluster implies) and, found
    /// live, are held as mirrors of another relay's publisher until one resumes here.
    pub cluster: bool,
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
            fetch_chunks: 4,
            fetch_bytes: 4 << 10,
            backlog_bytes: 8 << 20,
            total_backlog_bytes: 64 << 20,
            connections_per_address: 64,
            handshake_frame_limit: HANDSHAKE_FRAME_LIMIT,
            publisher_frame_limit: wire::DEFAULT_MAX_FRAME,
            cluster: false,
        }
    }
}

/// What the relay asks its shell to do (from [`Relay::poll_action`]). Not
/// `non_exhaustive`: a shell must carry out every action, so a new one is a change the
/// shells have to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayAction {
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
    /// A witness statement the relay made for a session (`integrity.md` §12), to append to
    /// the session's `.witness` file beside its archive.
    ArchiveWitness(String, Bytes),
    /// Write a session's key file beside its archive (`wire.md` §4.1), replacing any, and
    /// flush it to stable storage. The shell must have done so before it sends the
    /// messages the relay queued after this action (the publisher's `Resume`).
    ArchiveKey(String, ResumeKey),
    /// A session cut short by a relay restart resumes (`wire.md` §4.1): cut its archive
    /// file to `end` bytes (dropping a torn tail after its last whole chunk) and open it for
    /// appending, before sending the messages the relay queued after this action.
    ArchiveReopen {
        /// The session.
        session: String,
        /// Where its last whole chunk ends ([`Archived::end`]).
        end: u64,
        /// Where its last whole chunk starts, when it is an index chunk
        /// ([`Archived::index_at`]): a finished session then gets its footer.
        index_at: Option<u64>,
    },
    /// A publisher was refused a session (a wrong token, a token for another session, or
    /// not the session's publisher), for the shell's log: the connection is told and
    /// closed as usual. It never carries the token.
    Refused {
        /// The connection refused.
        conn: ConnId,
        /// The session it asked for.
        session: String,
        /// The error it was sent.
        code: ErrorCode,
    },
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
    /// The byte offset where the last whole chunk ends (the stream header's length when
    /// there is none): what follows is the footer, or a torn tail.
    pub end: u64,
    /// Where the last whole chunk starts, when it is an index chunk.
    pub index_at: Option<u64>,
    /// The session's key file (`wire.md` §4.1), when there is one and it parses: its
    /// publisher may resume the session if the file is not finished.
    pub key: Option<ResumeKey>,
    /// The file ends with a footer: the publisher finished the song.
    pub finished: bool,
    /// For a session its publisher may resume (not finished, with a key file): its key
    /// chunk, when chunk 0 is one of at most 4096 bytes (a signed stream, `wire.md` §3),
    /// read back for its late joiners. `None` otherwise.
    pub key_chunk: Option<Bytes>,
    /// For a session its publisher may resume: the live backlog the relay would have held
    /// (`wire.md` §4.1), read back from the file within [`Relay::backlog_limits`]: the last
    /// chunks, in sequence order up to chunk `chunks - 1`, from the last keyframe chunk on
    /// (or as many of the last as the limits allow). Empty otherwise.
    pub backlog: Vec<Bytes>,
}

/// How much of a session's stream the relay keeps in its backlog: what a shell reads back
/// from an archive file for a session resumed after a restart ([`Archived::backlog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BacklogLimits {
    /// At most this many chunks (1 at least).
    pub chunks: usize,
    /// At most this many bytes of chunks, unless the last chunk alone is larger (it is
    /// kept, as the newest chunk of a backlog always is).
    pub bytes: usize,
    /// The longest chunk a publisher could have sent (its frame limit): a longer one in a
    /// file was never the relay's, and is not read back.
    pub max_chunk: usize,
}

/// A session the relay holds, as `GET /sessions` shows it.
#[derive(Clone, Debug)]
pub struct SessionView {
    /// The session's name.
    pub name: String,
    /// Its stream header, once the publisher sent it.
    pub header: Option<Bytes>,
    /// Not ended (its publisher is connected, or may still resume).
    pub live: bool,
    /// Viewers attached.
    pub viewers: usize,
    /// Bytes of the stream received so far (0 for a session restored from the archive).
    pub bytes: u64,
    /// The latest song time of the frames received, in seconds.
    pub song_time: f32,
}

/// The relay's state: every connection and session.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    tokens: Tokens,
    next_conn: ConnId,
    /// Every connection, all of its state in one entry.
    conns: HashMap<ConnId, Connection>,
    sessions: HashMap<String, session::Session>,
    /// Sessions being looked up in the archive.
    lookups: HashSet<String>,
    /// The deadlines of the connections and sessions, earliest first.
    timers: Timers,
    next_nonce: u64,
    actions: VecDeque<RelayAction>,
    /// The time of the latest call, in the shell's milliseconds.
    now: u64,
    /// Open connections per address (those given one).
    per_address: HashMap<IpAddr, usize>,
    /// Bytes of chunks in all sessions' backlogs.
    backlog_total: usize,
    /// The relay's witness key and the Unix time (ms) of the shell's time 0.
    #[cfg(feature = "integrity")]
    witness: Option<(crate::integrity::witness::Witness, u64)>,
}

impl Relay {
    /// A relay with these limits and credentials.
    pub fn new(mut config: RelayConfig, tokens: Tokens) -> Self {
        config.archive |= config.cluster;
        Relay {
            config,
            tokens,
            next_conn: 1,
            conns: HashMap::new(),
            sessions: HashMap::new(),
            lookups: HashSet::new(),
            timers: Timers::default(),
            next_nonce: 0,
            actions: VecDeque::new(),
            now: 0,
            per_address: HashMap::new(),
            backlog_total: 0,
            #[cfg(feature = "integrity")]
            witness: None,
        }
    }

    /// Makes the relay a witness (`integrity.md` §12): it countersigns every checkpoint and
    /// final checkpoint it stores with its receive time, the shell's time plus
    /// `unix_ms_at_zero` (the Unix time in milliseconds at the shell's time 0), and sends the
    /// statement to the session's publisher and viewers ([`Message::Witness`]) and to the
    /// shell ([`RelayAction::ArchiveWitness`]).
    #[cfg(feature = "integrity")]
    pub fn set_witness(
        &mut self,
        witness: crate::integrity::witness::Witness,
        unix_ms_at_zero: u64,
    ) {
        self.witness = Some((witness, unix_ms_at_zero));
    }

    /// A new connection, opened at `now` (the shell's milliseconds, as for every call),
    /// from no address the relay counts (see [`connect_from`](Self::connect_from)).
    pub fn connect(&mut self, now: u64) -> ConnId {
        self.now = now;
        let id = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(
            id,
            Connection::new(now, self.config.flood_rate, self.config.flood_burst),
        );
        self.rearm(id);
        id
    }

    /// A new connection from `addr`: beyond
    /// [`connections_per_address`](RelayConfig::connections_per_address) open connections
    /// from that address, it gets `Error OverBudget` at once and is closed.
    pub fn connect_from(&mut self, now: u64, addr: IpAddr) -> ConnId {
        let id = self.connect(now);
        let cap = self.config.connections_per_address;
        let open = self.per_address.entry(addr).or_insert(0);
        *open += 1;
        if let Some(c) = self.conns.get_mut(&id) {
            c.addr = Some(addr);
        }
        if cap > 0 && *open > cap {
            self.fail(
                id,
                ErrorCode::OverBudget,
                &format!("more than {cap} connections from this address"),
            );
        }
        id
    }

    /// The longest frame the shell may read (and buffer) from `conn` now: small until it
    /// is a publisher (`handshake_frame_limit`), then `publisher_frame_limit`.
    pub fn frame_limit(&self, conn: ConnId) -> u32 {
        match self.conns.get(&conn).map(|c| &c.stage) {
            // A publisher whose token held, waiting for the archive lookup, may already send
            // its header and chunks behind the Resume it is about to get.
            Some(Stage::Publisher { .. } | Stage::Claiming { .. }) => {
                self.config.publisher_frame_limit
            }
            _ => self.config.handshake_frame_limit,
        }
    }

    /// True once `conn` has its last message queued (an error or `End`) and is to close.
    pub fn is_closing(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| matches!(c.stage, Stage::Closing))
    }

    /// Bytes of chunks all sessions' backlogs hold.
    pub fn backlog_bytes(&self) -> usize {
        self.backlog_total
    }

    /// What a session's backlog may hold now: its chunk and byte limits, the bytes no more
    /// than the room left in the budget of all backlogs. The shell reads no more than this
    /// back from an archive file for a session cut short by a restart ([`Archived::backlog`]).
    pub fn backlog_limits(&self) -> BacklogLimits {
        let room = self
            .config
            .total_backlog_bytes
            .saturating_sub(self.backlog_total);
        BacklogLimits {
            chunks: self.config.backlog_chunks.max(1),
            bytes: self.config.backlog_bytes.min(room),
            max_chunk: usize::try_from(self.config.publisher_frame_limit).unwrap_or(usize::MAX),
        }
    }

    /// What the shell must do next, if anything.
    pub fn poll_action(&mut self) -> Option<RelayAction> {
        self.actions.pop_front()
    }

    /// The next message to send on `conn`.
    pub fn poll_outgoing(&mut self, conn: ConnId) -> Option<Message> {
        self.refill_complete_viewer(conn);
        self.conns.get_mut(&conn)?.pop()
    }

    /// Messages waiting for `conn`.
    pub fn queued(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.queue.len())
    }

    /// Replaces the credentials (a token file read again, say). Publishers already in are
    /// not affected; every `Publish` from now on is checked against `tokens`.
    pub fn set_tokens(&mut self, tokens: Tokens) {
        self.tokens = tokens;
    }

    /// Sessions alive (with or without a publisher).
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The player session `name`'s publisher's token grants (`http.md` §8.12): a
    /// finished session is stored as this player's replay only. `None` for a token that
    /// grants no player, a session restored from the archive without a key file naming
    /// one, or no such session.
    pub fn session_player(&self, name: &str) -> Option<&str> {
        self.sessions.get(name).and_then(|s| s.player.as_deref())
    }

    /// Whether session `name` is held and has not ended.
    pub fn is_live(&self, name: &str) -> bool {
        self.sessions.get(name).is_some_and(|s| s.ended.is_none())
    }

    /// At most `max` of the sessions the relay holds, as `GET /sessions` lists them (in no
    /// particular order).
    pub fn session_views(&self, max: usize) -> Vec<SessionView> {
        self.sessions
            .iter()
            .take(max)
            .map(|(name, s)| SessionView {
                name: name.clone(),
                header: s.header.clone(),
                live: s.ended.is_none(),
                viewers: s.viewers.len(),
                bytes: s.bytes,
                song_time: s.song_time,
            })
            .collect()
    }

    /// A decode error on `conn`'s bytes: its error code, and the connection closed.
    pub fn reject(&mut self, conn: ConnId, e: &wire::WireError) {
        self.fail(conn, e.code(), &e.to_string());
    }

    /// The connection went away: its one entry is removed, with its deadline.
    pub fn disconnect(&mut self, conn: ConnId, now: u64) {
        self.now = now;
        self.detach(conn);
        if let Some(c) = self.conns.remove(&conn) {
            self.disarm(conn, c.armed);
            if let Some(addr) = c.addr {
                if let Some(n) = self.per_address.get_mut(&addr) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_address.remove(&addr);
                    }
                }
            }
        }
    }

    /// A message from `conn`, received at `now`.
    pub fn receive(&mut self, conn: ConnId, m: Message, now: u64) {
        self.now = now;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if matches!(c.stage, Stage::Closing) {
            return;
        }
        // A publisher's chunks are paced by the song (or, at full speed, by the socket);
        // everything else counts against the connection's allowance.
        let counted = !matches!((&c.stage, &m), (Stage::Publisher { .. }, Message::Chunk(_)));
        c.meter.heard(now);
        if counted && !c.meter.spend(now) {
            return self.fail(conn, ErrorCode::Flood, "too many messages too fast");
        }
        let stage = c.stage.clone();
        self.dispatch(conn, stage, m, now);
        self.rearm(conn);
    }

    /// Does what `m` asks of a connection at `stage`.
    fn dispatch(&mut self, conn: ConnId, stage: Stage, m: Message, now: u64) {
        match (stage, m) {
            (Stage::Closing, _) => {}
            // An error is the sender's last message (wire.md §2): the connection just
            // closes, with no error in reply.
            (_, Message::Error { .. }) => self.close(conn),
            // Ping and Pong come after Hello (wire.md §2); before it they are out of order.
            (Stage::New { .. }, Message::Ping(_) | Message::Pong(_)) => {
                self.fail(conn, ErrorCode::UnexpectedMessage, "Hello comes first")
            }
            (_, Message::Ping(n)) => self.pong(conn, n),
            (_, Message::Pong(_)) => {}
            (
                Stage::New { .. },
                Message::Hello {
                    min_version,
                    max_version,
                    role,
                    ..
                },
            ) => self.hello(conn, (min_version, max_version), role, now),
            (
                Stage::Greeted {
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
                Stage::Greeted {
                    role: Role::Viewer, ..
                },
                Message::Subscribe {
                    session,
                    mode,
                    wait_ms,
                    from,
                },
            ) => self.subscribe(
                conn,
                session,
                mode,
                now.saturating_add(u64::from(wait_ms)),
                from,
            ),
            (Stage::Publisher { session }, Message::StreamHeader(h)) => {
                self.header(conn, &session, h)
            }
            (Stage::Publisher { session }, Message::Chunk(c)) => self.chunk(conn, &session, c),
            (Stage::Publisher { session }, Message::End(reason)) => {
                self.end(&session, reason);
                self.close(conn);
            }
            (_, _) => self.fail(conn, ErrorCode::UnexpectedMessage, "message out of order"),
        }
    }

    /// `Hello`: answered with the relay's, or refused.
    fn hello(&mut self, conn: ConnId, (min, max): (u16, u16), role: Role, now: u64) {
        if !(min..=max).contains(&VERSION) {
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
        self.set_stage(conn, Stage::Greeted { role, since: now });
    }
}

#[cfg(test)]
mod order_tests {
    use super::{Relay, RelayAction, RelayConfig, Tokens};
    use crate::net::wire::{ErrorCode, Message, Role};

    #[test]
    fn a_ping_before_hello_is_out_of_order_and_a_clients_error_is_not_answered() {
        let mut r = Relay::new(RelayConfig::default(), Tokens::parse("t"));
        let early = r.connect(0);
        r.receive(early, Message::Ping(1), 1);
        assert!(matches!(
            r.poll_outgoing(early),
            Some(Message::Error {
                code: ErrorCode::UnexpectedMessage,
                ..
            })
        ));
        let c = r.connect(2);
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: "test".into(),
        };
        r.receive(c, hello, 3);
        let error = Message::Error {
            code: ErrorCode::Internal,
            message: "bye".into(),
        };
        r.receive(c, error, 4);
        let actions: Vec<_> = std::iter::from_fn(|| r.poll_action()).collect();
        assert!(actions.contains(&RelayAction::Close(c)), "{actions:?}");
        assert!(matches!(r.poll_outgoing(c), Some(Message::Hello { .. })));
        assert_eq!(r.poll_outgoing(c), None, "no error in reply to an error");
    }
}
