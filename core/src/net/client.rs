//! The client side of the live protocol (`proto-spec/wire.md`), without I/O: the publisher's
//! and the viewer's handshake, publishing with acknowledgements and resume, subscribing with
//! reconnection, answering pings, deadlines, and which errors end the session and which
//! are worth a new connection.
//!
//! A [`Client`] is a state machine in the manner of `quinn-proto`: the shell that owns a
//! transport (a `std::net` thread in the recorder, tokio tasks in the command-line tool, a
//! browser's WebSocket) feeds it what happens — [`Client::connected`],
//! [`Client::handle_message`], [`Client::connection_lost`], [`Client::handle_timeout`] —
//! and carries out what it asks: [`Client::poll_event`] (open or close a transport, and
//! what the owner should know), [`Client::poll_transmit`] (what to send) and
//! [`Client::poll_timeout`] (when to call back). Time is milliseconds on any clock that
//! does not go backwards, chosen by the shell.
//!
//! ```
//! use bsor_stream_core::net::client::{Client, ClientConfig, ClientEvent, Outgoing, Subscription};
//! use bsor_stream_core::net::wire::{Message, Role, ViewMode};
//!
//! let sub = Subscription { session: "song-1".into(), mode: ViewMode::Live, wait_ms: 5_000 };
//! let mut client = Client::viewer(ClientConfig::default(), sub, 0);
//! // The client asks for a transport, then says hello on it.
//! assert_eq!(client.poll_event(), Some(ClientEvent::Connect));
//! client.connected(10);
//! assert!(matches!(
//!     client.poll_transmit(),
//!     Some(Outgoing::Message(Message::Hello { role: Role::Viewer, .. }))
//! ));
//! // The relay answers; the client subscribes.
//! client.handle_message(
//!     Message::Hello { min_version: 1, max_version: 1, role: Role::Relay, agent: "relay".into() },
//!     20,
//! );
//! assert!(matches!(client.poll_transmit(), Some(Outgoing::Message(Message::Subscribe { .. }))));
//! assert_eq!(client.poll_event(), Some(ClientEvent::Established { next_seq: 0 }));
//! // It gives up on a relay that stays silent past the idle timeout, and reconnects later.
//! client.handle_timeout(client.poll_timeout().unwrap());
//! assert_eq!(client.poll_event(), Some(ClientEvent::Disconnect));
//! assert!(matches!(client.poll_event(), Some(ClientEvent::Lost(_))));
//! ```

use std::collections::VecDeque;

use bytes::Bytes;

use super::outbox::{Held, Outbox, Overflow};
use super::wire::{EndReason, ErrorCode, Message, Role, ViewMode};
use crate::stream::ChunkHeader;

/// Timeouts and retry limits of a client. Times in milliseconds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Free text naming the software, sent in `Hello` (at most 64 bytes).
    pub agent: String,
    /// How long a connection may take from being opened to the relay's answer to
    /// `Publish` (or its `Hello`, for a viewer), and the shell's connect timeout.
    pub handshake_timeout_ms: u64,
    /// A connection on which nothing arrives for this long is lost (the relay pings every
    /// 15 s by default, so a live relay is never this quiet).
    pub idle_timeout_ms: u64,
    /// Wait between a lost connection and the next attempt; it doubles after each attempt
    /// that fails, up to `retry_max_ms`.
    pub retry_every_ms: u64,
    /// The longest wait between attempts (the doubling stops there; a `retry_every_ms`
    /// above it is kept as it is).
    pub retry_max_ms: u64,
    /// Failed connections in a row (none of them established) before the client gives up,
    /// once `retry_for_ms` has passed too.
    pub max_retries: u32,
    /// How long the client keeps trying once the relay went away (from the first failure
    /// in a row, or the loss of an established connection), whatever `max_retries` says:
    /// it gives up when both budgets are spent. 0: `max_retries` alone decides.
    pub retry_for_ms: u64,
    /// A publisher that has finished waits this long, connected or not, for the relay to
    /// acknowledge its last chunk, then gives up.
    pub finish_timeout_ms: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            agent: concat!("bsor-stream ", env!("CARGO_PKG_VERSION")).into(),
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 40_000,
            retry_every_ms: 500,
            retry_max_ms: 5_000,
            max_retries: 120,
            retry_for_ms: 0,
            finish_timeout_ms: 10_000,
        }
    }
}

/// What a publisher publishes, and as whom.
#[derive(Clone, Debug)]
pub struct Publication {
    /// Session name (`[A-Za-z0-9._-]{1,64}`).
    pub session: String,
    /// Publishing token.
    pub token: String,
    /// Proves to the relay that a reconnection is the same publisher.
    pub key: [u8; 16],
    /// The stream header (`format.md` §3), sent on every connection.
    pub header: Bytes,
    /// Bound of the chunks kept in memory until acknowledged, in bytes.
    pub buffer_bytes: usize,
}

/// What a viewer watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// Session name.
    pub session: String,
    /// Live edge or every chunk.
    pub mode: ViewMode,
    /// How long the relay should wait for a session that has not started.
    pub wait_ms: u32,
}

/// Why a connection or the whole client failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The relay answered with an error: retrying helps only for some codes
    /// ([`ClientError::is_retryable`]).
    #[error("the relay refused: {code:?}: {message}")]
    Relay {
        /// The error code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The relay sent a message this side of the protocol does not expect at this point.
    #[error("unexpected {message} message from the relay while {state}")]
    Unexpected {
        /// The message's type.
        message: &'static str,
        /// What the client was doing.
        state: &'static str,
    },
    /// The transport failed or closed (as the shell reports it).
    #[error("connection lost: {0}")]
    Transport(String),
    /// The relay did not complete the handshake in time.
    #[error("no answer to the handshake within {0} ms")]
    HandshakeTimeout(u64),
    /// Nothing came from the relay for the idle timeout.
    #[error("nothing from the relay for {0} ms")]
    Idle(u64),
    /// Too many failed connections in a row.
    #[error("gave up after {attempts} failed connections; the last: {last}")]
    Unreachable {
        /// Connections tried.
        attempts: u32,
        /// Why the last failed.
        last: Box<ClientError>,
    },
    /// The outbox's bound was reached (the relay stayed away too long).
    #[error(transparent)]
    Overflow(#[from] Overflow),
    /// A chunk handed to the publisher has no valid chunk header.
    #[error("not a chunk: {0} bytes without a valid chunk header")]
    NotAChunk(usize),
    /// A finished publisher's last chunks were not acknowledged within the finish timeout.
    #[error("{0} chunks still unacknowledged at the finish timeout")]
    Unacknowledged(usize),
    /// A viewer that reconnected got another stream header than before.
    #[error("the stream header changed between connections")]
    HeaderChanged,
}

impl ClientError {
    /// True when a new connection may succeed where this one failed: transport faults,
    /// timeouts, and the relay's `Timeout`, `Flood`, `Internal`, `Malformed`,
    /// `UnexpectedMessage` and `FrameTooLarge` (a fault of one connection). Refusals that
    /// would come again (a wrong token, a busy or missing session, no common version, a
    /// viewer fallen behind the backlog) and the client's own limits are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Relay { code, .. } => !matches!(
                code,
                ErrorCode::Unauthorized
                    | ErrorCode::SessionBusy
                    | ErrorCode::BadSessionName
                    | ErrorCode::UnsupportedVersion
                    | ErrorCode::NoSuchSession
                    | ErrorCode::BacklogExceeded
                    | ErrorCode::MalformedChunk
                    | ErrorCode::BadStreamHeader
                    | ErrorCode::SessionExists
            ),
            ClientError::Unexpected { .. }
            | ClientError::Transport(_)
            | ClientError::HandshakeTimeout(_)
            | ClientError::Idle(_) => true,
            _ => false,
        }
    }
}

/// What the shell must do, or what the owner should know.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// Open a transport to the relay, then call [`Client::connected`] (or
    /// [`Client::connection_lost`] if it cannot be opened).
    Connect,
    /// Close the transport (after sending what [`Client::poll_transmit`] still gives).
    Disconnect,
    /// The handshake is done; a publisher resumes at this sequence number (0 for a new
    /// session), a viewer has subscribed (`next_seq` is the next chunk it expects).
    Established {
        /// The next chunk's sequence number.
        next_seq: u32,
    },
    /// A connection was lost; the client retries after its retry interval.
    Lost(ClientError),
    /// Chunks acknowledged so far, in all (publisher).
    Acked(u64),
    /// The stream header (viewer; once, not again after a reconnection).
    Header(Bytes),
    /// A whole chunk (viewer; after a reconnection in complete mode, chunks already
    /// delivered are not delivered again).
    Chunk(Bytes),
    /// A live viewer was moved to the next keyframe group past this much (by the relay, or
    /// by a reconnection: then `bytes` is 0 and `chunks` counts the sequence numbers missed).
    Skipped {
        /// Chunks skipped.
        chunks: u32,
        /// Bytes skipped (as the relay counts them).
        bytes: u64,
    },
    /// A witness statement from the relay (`integrity.md` §12.1), publisher or viewer: the
    /// relay countersigned a checkpoint it received.
    Witness(Bytes),
    /// The stream ended (viewer), or the publisher's `End` went out after its last
    /// acknowledgement. The client is done.
    End(EndReason),
    /// The client stopped for good; nothing more will happen.
    Failed(ClientError),
}

/// What to send next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// A message.
    Message(Message),
    /// A chunk the shell wrote to its spill file: read it back and send it as
    /// `Message::Chunk`.
    Spilled {
        /// Offset in the spill file.
        at: u64,
        /// Length.
        len: usize,
    },
}

/// Where the client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting to (re)connect at this time.
    Waiting(u64),
    /// The shell is opening a transport.
    Connecting(u64),
    /// `Hello` sent; the relay's `Hello` is due by the deadline.
    HelloSent(u64),
    /// `Publish` sent; `Resume` is due by the deadline.
    PublishSent(u64),
    /// Established: messages flow.
    Open,
    /// Done, for good.
    Closed,
}

/// The role's own state.
#[derive(Debug)]
enum Side {
    Publisher {
        publication: Publication,
        outbox: Outbox,
        /// Whether the relay has ever answered `Publish` (later connections resume).
        resumed: bool,
        /// The owner said the stream is complete: send `End` after the last `Ack`.
        finishing: bool,
    },
    Viewer {
        subscription: Subscription,
        header: Option<Bytes>,
        /// The next chunk's sequence number (chunks below it were delivered).
        next_seq: u32,
    },
}

/// The client side of one publishing or viewing session, over as many connections as it
/// takes. See the [module documentation](self).
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    side: Side,
    state: State,
    events: VecDeque<ClientEvent>,
    /// Control messages to send before any chunk.
    control: VecDeque<Message>,
    /// Whether the stream header went out on this connection (publisher).
    header_sent: bool,
    /// Failed connections in a row.
    failures: u32,
    /// When the relay went away: the first failure in a row, or the loss of an established
    /// connection (`None` while connected).
    down_since: Option<u64>,
    /// Waits since the relay went away (each one twice the last, up to the cap).
    waits: u32,
    /// Last time anything came from the relay.
    last_heard: u64,
    /// When a finishing publisher gives up.
    finish_deadline: Option<u64>,
}

impl Client {
    fn new(config: ClientConfig, side: Side, now: u64) -> Self {
        let mut c = Client {
            config,
            side,
            state: State::Connecting(now),
            events: VecDeque::new(),
            control: VecDeque::new(),
            header_sent: false,
            failures: 0,
            down_since: None,
            waits: 0,
            last_heard: now,
            finish_deadline: None,
        };
        c.events.push_back(ClientEvent::Connect);
        c
    }

    /// A publisher of `publication`; it asks for its first connection at once.
    pub fn publisher(config: ClientConfig, publication: Publication, now: u64) -> Self {
        let outbox = Outbox::new(publication.buffer_bytes);
        let side = Side::Publisher {
            publication,
            outbox,
            resumed: false,
            finishing: false,
        };
        Client::new(config, side, now)
    }

    /// A viewer of `subscription`; it asks for its first connection at once.
    pub fn viewer(config: ClientConfig, subscription: Subscription, now: u64) -> Self {
        let side = Side::Viewer {
            subscription,
            header: None,
            next_seq: 0,
        };
        Client::new(config, side, now)
    }

    /// The configuration (a shell reads its connect timeout here).
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// True once the client is done (ended, finished or failed): the shell may stop.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// True while a handshake is done and messages flow.
    pub fn is_established(&self) -> bool {
        self.state == State::Open
    }

    /// True while [`Client::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// True once a publisher's owner called [`Client::finish`].
    pub fn is_finishing(&self) -> bool {
        matches!(
            self.side,
            Side::Publisher {
                finishing: true,
                ..
            }
        )
    }

    /// The next thing the shell must do or the owner should know.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// The transport the client asked for is open: the handshake starts.
    pub fn connected(&mut self, now: u64) {
        if !matches!(self.state, State::Connecting(_)) {
            return;
        }
        let role = match self.side {
            Side::Publisher { .. } => Role::Publisher,
            Side::Viewer { .. } => Role::Viewer,
        };
        self.control.clear();
        self.header_sent = false;
        self.last_heard = now;
        self.control.push_back(Message::Hello {
            min_version: 1,
            max_version: 1,
            role,
            agent: self.config.agent.clone(),
        });
        self.state = State::HelloSent(now + self.config.handshake_timeout_ms);
    }

    /// The transport failed, closed, or could not be opened.
    pub fn connection_lost(&mut self, now: u64, reason: impl Into<String>) {
        if matches!(self.state, State::Closed | State::Waiting(_)) {
            return;
        }
        self.lose(now, ClientError::Transport(reason.into()));
    }

    /// A message from the relay.
    pub fn handle_message(&mut self, m: Message, now: u64) {
        if matches!(
            self.state,
            State::Closed | State::Waiting(_) | State::Connecting(_)
        ) {
            return;
        }
        self.last_heard = now;
        match m {
            // At most one Pong waits: a newer Ping replaces the older one's answer, so a
            // relay that pings a client whose socket is stuck does not grow its memory.
            Message::Ping(n) => {
                for m in &mut self.control {
                    if let Message::Pong(old) = m {
                        *old = n;
                        return;
                    }
                }
                return self.control.push_back(Message::Pong(n));
            }
            Message::Pong(_) => return,
            Message::Error { code, message } => {
                return self.lose(now, ClientError::Relay { code, message })
            }
            _ => {}
        }
        match self.state {
            State::HelloSent(_) => self.hello_answered(m, now),
            State::PublishSent(_) => self.publish_answered(m, now),
            State::Open => match self.side {
                Side::Publisher { .. } => self.publisher_message(m, now),
                Side::Viewer { .. } => self.viewer_message(m, now),
            },
            State::Waiting(_) | State::Connecting(_) | State::Closed => {}
        }
    }

    fn hello_answered(&mut self, m: Message, now: u64) {
        let Message::Hello {
            role: Role::Relay, ..
        } = m
        else {
            return self.unexpected(&m, "waiting for the relay's Hello", now);
        };
        match &self.side {
            Side::Publisher {
                publication,
                resumed,
                ..
            } => {
                self.control.push_back(Message::Publish {
                    session: publication.session.clone(),
                    token: publication.token.clone(),
                    resume: *resumed,
                    publisher_key: publication.key,
                });
                self.state = State::PublishSent(now + self.config.handshake_timeout_ms);
            }
            Side::Viewer {
                subscription,
                next_seq,
                ..
            } => {
                // A reconnection asks for the chunks after those it has (wire.md §2): the
                // same relay, or another of its cluster, continues exactly there.
                self.control.push_back(Message::Subscribe {
                    session: subscription.session.clone(),
                    mode: subscription.mode,
                    wait_ms: subscription.wait_ms,
                    from: *next_seq,
                });
                let next_seq = *next_seq;
                self.establish(next_seq);
            }
        }
    }

    fn publish_answered(&mut self, m: Message, now: u64) {
        let Message::Resume(next_seq) = m else {
            return self.unexpected(&m, "waiting for Resume", now);
        };
        if let Side::Publisher {
            outbox, resumed, ..
        } = &mut self.side
        {
            outbox.resume(next_seq);
            *resumed = true;
        }
        self.establish(next_seq);
    }

    fn establish(&mut self, next_seq: u32) {
        self.failures = 0;
        self.down_since = None;
        self.waits = 0;
        self.state = State::Open;
        self.events.push_back(ClientEvent::Established { next_seq });
    }

    fn publisher_message(&mut self, m: Message, now: u64) {
        let Side::Publisher { outbox, .. } = &mut self.side else {
            return;
        };
        match m {
            Message::Ack(seq) => {
                outbox.ack(seq);
                let acked = outbox.acked();
                self.events.push_back(ClientEvent::Acked(acked));
            }
            Message::Witness(w) => self.events.push_back(ClientEvent::Witness(w)),
            m => self.unexpected(&m, "publishing", now),
        }
    }

    fn viewer_message(&mut self, m: Message, now: u64) {
        let Side::Viewer {
            header, next_seq, ..
        } = &mut self.side
        else {
            return;
        };
        match m {
            Message::StreamHeader(h) => match header {
                None => {
                    *header = Some(h.clone());
                    self.events.push_back(ClientEvent::Header(h));
                }
                Some(old) if *old == h => {}
                Some(_) => self.fail(ClientError::HeaderChanged),
            },
            Message::Chunk(c) => {
                let Some((h, _)) = ChunkHeader::parse_at(&c) else {
                    return self.unexpected(&Message::Chunk(c), "viewing", now);
                };
                if h.seq < *next_seq {
                    return; // delivered before a reconnection
                }
                if h.seq > *next_seq && *next_seq > 0 {
                    // Only a live viewer's reconnection leaves a gap the relay did not
                    // report (its own skips come as `Skipped` first, which moves next_seq).
                    self.events.push_back(ClientEvent::Skipped {
                        chunks: h.seq - *next_seq,
                        bytes: 0,
                    });
                }
                *next_seq = h.seq.wrapping_add(1);
                self.events.push_back(ClientEvent::Chunk(c));
            }
            Message::Skipped { chunks, bytes } => {
                *next_seq = next_seq.wrapping_add(chunks);
                self.events
                    .push_back(ClientEvent::Skipped { chunks, bytes });
            }
            Message::End(reason) => {
                self.events.push_back(ClientEvent::End(reason));
                self.close();
            }
            Message::Witness(w) => self.events.push_back(ClientEvent::Witness(w)),
            m => self.unexpected(&m, "viewing", now),
        }
    }

    /// The next message to send, or a spilled chunk to read back and send. Control messages
    /// go first; a publisher's chunks follow once it is established, then its `End`.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        if let Some(m) = self.control.pop_front() {
            return Some(Outgoing::Message(m));
        }
        if self.state != State::Open {
            return None;
        }
        let Side::Publisher {
            publication,
            outbox,
            finishing,
            ..
        } = &mut self.side
        else {
            return None;
        };
        if !self.header_sent {
            self.header_sent = true;
            return Some(Outgoing::Message(Message::StreamHeader(
                publication.header.clone(),
            )));
        }
        match outbox.next_to_send() {
            Some(Held::Memory(c)) => Some(Outgoing::Message(Message::Chunk(c))),
            Some(Held::Spilled { at, len }) => Some(Outgoing::Spilled { at, len }),
            None if *finishing && outbox.is_empty() => {
                self.events.push_back(ClientEvent::End(EndReason::Finished));
                self.close();
                Some(Outgoing::Message(Message::End(EndReason::Finished)))
            }
            None => None,
        }
    }

    /// A whole chunk to publish, kept in memory until acknowledged. Over the outbox's bound
    /// the chunk is not taken: the shell may write it to its spill file and call
    /// [`Client::push_spilled`], or fail.
    pub fn push_chunk(&mut self, chunk: Bytes) -> Result<(), ClientError> {
        let Side::Publisher { outbox, .. } = &mut self.side else {
            return Ok(());
        };
        let len = chunk.len();
        match outbox.push(chunk) {
            Ok(Some(())) => Ok(()),
            Ok(None) => Err(ClientError::NotAChunk(len)),
            Err(o) => Err(ClientError::Overflow(o)),
        }
    }

    /// A chunk the shell wrote to its spill file at `at`.
    pub fn push_spilled(&mut self, seq: u32, at: u64, len: usize) {
        if let Side::Publisher { outbox, .. } = &mut self.side {
            outbox.push_spilled(seq, at, len);
        }
    }

    /// Chunks waiting in the spill file (a shell keeps spilling while any do, so that
    /// memory goes to the chunks that go out first).
    pub fn spilled(&self) -> usize {
        match &self.side {
            Side::Publisher { outbox, .. } => outbox.spilled(),
            Side::Viewer { .. } => 0,
        }
    }

    /// Chunks waiting for an acknowledgement.
    pub fn unacknowledged(&self) -> usize {
        match &self.side {
            Side::Publisher { outbox, .. } => outbox.len(),
            Side::Viewer { .. } => 0,
        }
    }

    /// The stream is complete: `End` goes out once every chunk is acknowledged, or the
    /// client fails after the finish timeout.
    pub fn finish(&mut self, now: u64) {
        if self.state == State::Closed {
            return;
        }
        if let Side::Publisher { finishing, .. } = &mut self.side {
            *finishing = true;
            self.finish_deadline
                .get_or_insert(now + self.config.finish_timeout_ms);
        }
    }

    /// Stop now, without `End` (a publisher's relay ends the session after its publisher
    /// timeout), or a viewer that has seen enough.
    pub fn abandon(&mut self) {
        if self.state != State::Closed {
            self.close();
        }
    }

    /// The next time [`Client::handle_timeout`] must be called, if any.
    pub fn poll_timeout(&self) -> Option<u64> {
        let state = match self.state {
            State::Waiting(t) => Some(t),
            State::Connecting(t) => Some(t + self.config.handshake_timeout_ms),
            State::HelloSent(t) | State::PublishSent(t) => Some(t),
            State::Open => Some(self.last_heard + self.config.idle_timeout_ms),
            State::Closed => None,
        };
        match (state, self.finish_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, _) => a,
        }
    }

    /// Time passed: reconnect, or give up on a handshake, a silent relay or unacknowledged
    /// chunks, as their deadlines say.
    pub fn handle_timeout(&mut self, now: u64) {
        if let Some(d) = self.finish_deadline {
            if now >= d && self.state != State::Closed {
                return self.fail(ClientError::Unacknowledged(self.unacknowledged()));
            }
        }
        match self.state {
            State::Waiting(t) if now >= t => {
                self.state = State::Connecting(now);
                self.events.push_back(ClientEvent::Connect);
            }
            State::Connecting(t) if now >= t + self.config.handshake_timeout_ms => {
                self.lose(
                    now,
                    ClientError::HandshakeTimeout(self.config.handshake_timeout_ms),
                );
            }
            State::HelloSent(t) | State::PublishSent(t) if now >= t => {
                self.lose(
                    now,
                    ClientError::HandshakeTimeout(self.config.handshake_timeout_ms),
                );
            }
            State::Open if now >= self.last_heard + self.config.idle_timeout_ms => {
                self.lose(now, ClientError::Idle(self.config.idle_timeout_ms));
            }
            _ => {}
        }
    }

    fn unexpected(&mut self, m: &Message, state: &'static str, now: u64) {
        let message = m.name();
        self.lose(now, ClientError::Unexpected { message, state });
    }

    /// This connection is over: retry if the error allows and the budget is not spent.
    fn lose(&mut self, now: u64, e: ClientError) {
        let established = self.state == State::Open;
        self.events.push_back(ClientEvent::Disconnect);
        self.control.clear();
        if !e.is_retryable() {
            return self.fail(e);
        }
        let since = *self.down_since.get_or_insert(now);
        if !established {
            self.failures = self.failures.saturating_add(1);
            let window_spent = now.saturating_sub(since) >= self.config.retry_for_ms;
            if self.failures > self.config.max_retries && window_spent {
                let attempts = self.failures;
                return self.fail(ClientError::Unreachable {
                    attempts,
                    last: Box::new(e),
                });
            }
        }
        self.events.push_back(ClientEvent::Lost(e));
        self.state = State::Waiting(now.saturating_add(self.retry_wait()));
        self.waits = self.waits.saturating_add(1);
    }

    /// The wait before the next attempt: `retry_every_ms` first, then twice the last wait,
    /// up to `retry_max_ms` (no jitter).
    fn retry_wait(&self) -> u64 {
        let first = self.config.retry_every_ms;
        let cap = self.config.retry_max_ms.max(first);
        let doublings = self.waits.min(32);
        first.saturating_mul(1u64 << doublings).min(cap)
    }

    fn fail(&mut self, e: ClientError) {
        self.events.push_back(ClientEvent::Failed(e));
        self.close();
    }

    fn close(&mut self) {
        self.state = State::Closed;
        self.finish_deadline = None;
        self.control.clear();
        self.events.push_back(ClientEvent::Disconnect);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ChunkType;

    fn chunk(seq: u32) -> Bytes {
        let mut out = Vec::new();
        ChunkHeader::new(ChunkType::Frames, seq, 0, 1, 0.0).write_to(&[seq as u8; 8], &mut out);
        Bytes::from(out)
    }

    fn relay_hello() -> Message {
        Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Relay,
            agent: "relay".into(),
        }
    }

    fn publisher(config: ClientConfig) -> Client {
        let publication = Publication {
            session: "s".into(),
            token: "t".into(),
            key: [3; 16],
            header: Bytes::from_static(b"HEADER"),
            buffer_bytes: 1 << 20,
        };
        Client::publisher(config, publication, 0)
    }

    fn events(c: &mut Client) -> Vec<ClientEvent> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn sent(c: &mut Client) -> Vec<Message> {
        std::iter::from_fn(|| c.poll_transmit())
            .map(|o| match o {
                Outgoing::Message(m) => m,
                Outgoing::Spilled { .. } => panic!("nothing spills here"),
            })
            .collect()
    }

    /// Connects and completes the publisher handshake; the relay expects `next`.
    fn handshake(c: &mut Client, now: u64, next: u32) -> Vec<Message> {
        c.connected(now);
        let mut out = sent(c);
        c.handle_message(relay_hello(), now);
        out.extend(sent(c));
        c.handle_message(Message::Resume(next), now);
        out
    }

    #[test]
    fn a_publisher_says_hello_publishes_and_sends_header_then_chunks_then_end() {
        let mut c = publisher(ClientConfig::default());
        assert_eq!(events(&mut c), vec![ClientEvent::Connect]);
        for s in 0..3 {
            c.push_chunk(chunk(s)).unwrap();
        }
        let hs = handshake(&mut c, 1, 0);
        assert!(matches!(
            hs[0],
            Message::Hello {
                role: Role::Publisher,
                ..
            }
        ));
        assert!(
            matches!(&hs[1], Message::Publish { resume: false, session, .. } if session == "s")
        );
        assert_eq!(
            events(&mut c),
            vec![ClientEvent::Established { next_seq: 0 }]
        );
        let out = sent(&mut c);
        assert_eq!(out[0], Message::StreamHeader(Bytes::from_static(b"HEADER")));
        assert_eq!(out[1..], [0, 1, 2].map(|s| Message::Chunk(chunk(s))));
        c.finish(2);
        // No End before the last acknowledgement.
        assert_eq!(sent(&mut c), vec![]);
        c.handle_message(Message::Ack(2), 3);
        assert_eq!(events(&mut c), vec![ClientEvent::Acked(3)]);
        assert_eq!(sent(&mut c), vec![Message::End(EndReason::Finished)]);
        assert_eq!(
            events(&mut c),
            vec![
                ClientEvent::End(EndReason::Finished),
                ClientEvent::Disconnect
            ]
        );
        assert!(c.is_closed());
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn a_lost_publisher_reconnects_resumes_and_resends_only_what_the_relay_lacks() {
        let mut c = publisher(ClientConfig::default());
        events(&mut c);
        handshake(&mut c, 0, 0);
        for s in 0..4 {
            c.push_chunk(chunk(s)).unwrap();
        }
        assert_eq!(sent(&mut c).len(), 5);
        c.connection_lost(100, "reset");
        let ev = events(&mut c);
        assert_eq!(ev[1..2], [ClientEvent::Disconnect]);
        assert!(matches!(
            ev[2],
            ClientEvent::Lost(ClientError::Transport(_))
        ));
        // Reconnects after the retry interval, not before.
        assert_eq!(c.poll_timeout(), Some(600));
        c.handle_timeout(599);
        assert_eq!(events(&mut c), vec![]);
        c.handle_timeout(600);
        assert_eq!(events(&mut c), vec![ClientEvent::Connect]);
        let hs = handshake(&mut c, 610, 2);
        assert!(
            matches!(hs[1], Message::Publish { resume: true, publisher_key, .. } if publisher_key == [3; 16])
        );
        let out = sent(&mut c);
        assert_eq!(out[0], Message::StreamHeader(Bytes::from_static(b"HEADER")));
        assert_eq!(out[1..], [2, 3].map(|s| Message::Chunk(chunk(s))));
        assert_eq!(c.unacknowledged(), 2);
    }

    #[test]
    fn pings_are_answered_before_chunks() {
        let mut c = publisher(ClientConfig::default());
        handshake(&mut c, 0, 0);
        sent(&mut c);
        c.push_chunk(chunk(0)).unwrap();
        c.handle_message(Message::Ping(77), 5);
        assert_eq!(
            sent(&mut c),
            vec![Message::Pong(77), Message::Chunk(chunk(0))]
        );
    }

    #[test]
    fn only_the_latest_ping_is_answered_while_the_socket_is_stuck() {
        let mut c = publisher(ClientConfig::default());
        handshake(&mut c, 0, 0);
        sent(&mut c);
        for n in 0..1000 {
            c.handle_message(Message::Ping(n), 1);
        }
        assert_eq!(sent(&mut c), vec![Message::Pong(999)]);
    }

    #[test]
    fn refusals_are_final_and_faults_are_retried() {
        for (code, final_) in [
            (ErrorCode::Unauthorized, true),
            (ErrorCode::SessionBusy, true),
            (ErrorCode::NoSuchSession, true),
            (ErrorCode::Timeout, false),
            (ErrorCode::Flood, false),
            (ErrorCode::Internal, false),
        ] {
            let mut c = publisher(ClientConfig::default());
            events(&mut c);
            c.connected(0);
            c.handle_message(
                Message::Error {
                    code,
                    message: "no".into(),
                },
                1,
            );
            let ev = events(&mut c);
            assert_eq!(
                ev.iter().any(|e| matches!(e, ClientEvent::Failed(_))),
                final_,
                "{code:?}: {ev:?}"
            );
            assert_eq!(c.is_closed(), final_);
        }
    }

    #[test]
    fn the_retry_budget_counts_failed_connections_in_a_row() {
        let config = ClientConfig {
            max_retries: 2,
            ..ClientConfig::default()
        };
        let mut c = publisher(config);
        let mut now = 0;
        for attempt in 1..=3 {
            assert_eq!(events(&mut c).last(), Some(&ClientEvent::Connect));
            c.connection_lost(now, "refused");
            if attempt < 3 {
                now = c.poll_timeout().unwrap();
                c.handle_timeout(now);
            }
        }
        let ev = events(&mut c);
        assert!(
            matches!(
                &ev[1],
                ClientEvent::Failed(ClientError::Unreachable { attempts: 3, .. })
            ),
            "{ev:?}"
        );
        assert!(c.is_closed());
    }

    #[test]
    fn waits_double_up_to_the_cap_and_the_time_budget_outlasts_the_count() {
        let config = ClientConfig {
            max_retries: 2,
            retry_for_ms: 60_000,
            ..ClientConfig::default()
        };
        let mut c = publisher(config);
        handshake(&mut c, 0, 0);
        events(&mut c);
        // An established connection lost: the first wait is retry_every_ms.
        c.connection_lost(1_000, "relay killed");
        let mut now = 1_000;
        let mut waits = Vec::new();
        while !c.is_closed() {
            let next = c.poll_timeout().unwrap();
            waits.push(next - now);
            c.handle_timeout(next);
            now = next;
            c.connection_lost(now, "refused");
        }
        assert_eq!(waits[..6], [500, 1_000, 2_000, 4_000, 5_000, 5_000]);
        // It gave up only once 60 s had passed since the relay went away.
        assert!(now - 1_000 >= 60_000, "{now}");
        assert!(now - 1_000 < 65_000, "{now}");
        // Connected again, the waits start over.
        let mut c = publisher(ClientConfig::default());
        c.connection_lost(0, "refused");
        c.handle_timeout(c.poll_timeout().unwrap());
        c.connection_lost(500, "refused");
        assert_eq!(c.poll_timeout(), Some(1_500));
        c.handle_timeout(1_500);
        handshake(&mut c, 1_500, 0);
        c.connection_lost(2_000, "gone");
        assert_eq!(c.poll_timeout(), Some(2_500));
    }

    #[test]
    fn a_silent_handshake_and_a_silent_relay_time_out() {
        let mut c = publisher(ClientConfig::default());
        events(&mut c);
        c.connected(0);
        assert_eq!(c.poll_timeout(), Some(10_000));
        c.handle_timeout(10_000);
        assert!(events(&mut c)
            .iter()
            .any(|e| matches!(e, ClientEvent::Lost(ClientError::HandshakeTimeout(_)))));
        let mut c = publisher(ClientConfig::default());
        handshake(&mut c, 0, 0);
        events(&mut c);
        // Anything from the relay pushes the idle deadline.
        c.handle_message(Message::Ping(1), 30_000);
        c.handle_timeout(40_000);
        assert_eq!(events(&mut c), vec![]);
        c.handle_timeout(70_000);
        assert!(matches!(
            events(&mut c)[1],
            ClientEvent::Lost(ClientError::Idle(_))
        ));
    }

    #[test]
    fn a_finishing_publisher_gives_up_at_the_finish_timeout_even_while_reconnecting() {
        let mut c = publisher(ClientConfig::default());
        handshake(&mut c, 0, 0);
        c.push_chunk(chunk(0)).unwrap();
        c.finish(1_000);
        c.connection_lost(1_500, "gone");
        assert_eq!(c.poll_timeout(), Some(2_000));
        c.handle_timeout(2_000);
        c.handle_timeout(11_000);
        let ev = events(&mut c);
        assert!(
            ev.contains(&ClientEvent::Failed(ClientError::Unacknowledged(1))),
            "{ev:?}"
        );
        assert!(c.is_closed());
    }

    #[test]
    fn a_complete_mode_viewer_reconnects_without_duplicates() {
        let sub = Subscription {
            session: "s".into(),
            mode: ViewMode::Complete,
            wait_ms: 0,
        };
        let mut c = Client::viewer(ClientConfig::default(), sub, 0);
        events(&mut c);
        c.connected(0);
        c.handle_message(relay_hello(), 1);
        let out = sent(&mut c);
        assert!(matches!(
            out[1],
            Message::Subscribe {
                mode: ViewMode::Complete,
                ..
            }
        ));
        let header = Bytes::from_static(b"H");
        c.handle_message(Message::StreamHeader(header.clone()), 2);
        c.handle_message(Message::Chunk(chunk(0)), 2);
        c.handle_message(Message::Chunk(chunk(1)), 2);
        c.connection_lost(3, "eof");
        events(&mut c);
        c.handle_timeout(c.poll_timeout().unwrap());
        c.connected(600);
        c.handle_message(relay_hello(), 601);
        for m in [
            Message::StreamHeader(header.clone()),
            Message::Chunk(chunk(0)),
            Message::Chunk(chunk(1)),
            Message::Chunk(chunk(2)),
            Message::End(EndReason::Finished),
        ] {
            c.handle_message(m, 602);
        }
        let ev = events(&mut c);
        assert_eq!(
            ev,
            vec![
                ClientEvent::Connect,
                ClientEvent::Established { next_seq: 2 },
                ClientEvent::Chunk(chunk(2)),
                ClientEvent::End(EndReason::Finished),
                ClientEvent::Disconnect,
            ]
        );
    }

    #[test]
    fn a_closed_client_has_no_deadline_even_when_told_to_finish() {
        let mut c = publisher(ClientConfig::default());
        c.connected(0);
        c.handle_message(
            Message::Error {
                code: ErrorCode::Unauthorized,
                message: "no".into(),
            },
            1,
        );
        assert!(c.is_closed());
        c.finish(2);
        assert_eq!(c.poll_timeout(), None);
        assert!(!c.is_finishing() || c.is_closed());
    }

    #[test]
    fn a_message_out_of_place_loses_the_connection() {
        let mut c = publisher(ClientConfig::default());
        events(&mut c);
        c.connected(0);
        c.handle_message(Message::Ack(3), 1);
        let ev = events(&mut c);
        assert!(
            matches!(
                &ev[1],
                ClientEvent::Lost(ClientError::Unexpected { message: "Ack", .. })
            ),
            "{ev:?}"
        );
    }
}
