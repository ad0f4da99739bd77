//! One connection's state, all in one place: where it stands in the protocol, what waits
//! to be sent to it, its flood meter, and the deadline armed for it. Disconnecting removes
//! the one entry.

use std::collections::VecDeque;

use bytes::Bytes;

use super::meter::Meter;
use super::viewer::Viewer;
use super::{ConnId, Relay, RelayAction};
use crate::net::wire::{ErrorCode, Message, Role};

/// Witness statements that may wait for one connection (`wire.md` §3).
#[cfg(feature = "integrity")]
pub(super) const WITNESS_WAITING: usize = 8;

/// Where a connection stands in the protocol.
#[derive(Clone, Debug)]
pub(super) enum Stage {
    /// Waiting for `Hello` since this time.
    New { since: u64 },
    /// Said `Hello`; waiting for `Publish` or `Subscribe` since this time.
    Greeted { role: Role, since: u64 },
    /// A publisher of a session the relay does not hold, waiting since this time for the
    /// archive to say whether a session of that name is on disk.
    Claiming {
        session: String,
        key: [u8; 16],
        /// It sent `resume = 1`.
        resume: bool,
        since: u64,
        /// The player its token grants, if any.
        player: Option<String>,
    },
    /// Publishing this session.
    Publisher { session: String },
    /// Watching (or waiting for) a session.
    Viewer(Viewer),
    /// Sent its last message (an error or `End`); nothing more is read from it.
    Closing,
}

/// Everything the relay knows about one connection.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) stage: Stage,
    /// Messages waiting to be sent, oldest first.
    pub(super) queue: VecDeque<Message>,
    /// Bytes of the chunks in `queue`.
    pub(super) queued_bytes: usize,
    pub(super) meter: Meter,
    /// The deadline armed for it in the relay's timers, if any.
    pub(super) armed: Option<u64>,
    /// The address it comes from, when the shell said (counted per address).
    pub(super) addr: Option<std::net::IpAddr>,
}

impl Connection {
    /// A connection opened at `now`, with a full flood allowance of `burst` messages
    /// refilled at `rate` a second.
    pub(super) fn new(now: u64, rate: u32, burst: u32) -> Self {
        Connection {
            stage: Stage::New { since: now },
            queue: VecDeque::new(),
            queued_bytes: 0,
            meter: Meter::new(now, rate, burst),
            armed: None,
            addr: None,
        }
    }

    /// Queues `m`; true when the queue was empty (the shell must be told).
    pub(super) fn push(&mut self, m: Message) -> bool {
        let was_empty = self.queue.is_empty();
        if let Message::Chunk(b) = &m {
            self.queued_bytes += b.len();
        }
        self.queue.push_back(m);
        was_empty
    }

    /// The next message to send.
    pub(super) fn pop(&mut self) -> Option<Message> {
        let m = self.queue.pop_front()?;
        if let Message::Chunk(b) = &m {
            self.queued_bytes = self.queued_bytes.saturating_sub(b.len());
        }
        Some(m)
    }

    /// The viewer, if it is one.
    pub(super) fn viewer(&self) -> Option<&Viewer> {
        match &self.stage {
            Stage::Viewer(v) => Some(v),
            _ => None,
        }
    }

    /// The viewer, if it is one.
    pub(super) fn viewer_mut(&mut self) -> Option<&mut Viewer> {
        match &mut self.stage {
            Stage::Viewer(v) => Some(v),
            _ => None,
        }
    }
}

impl Relay {
    /// Queues `m` for `conn`, and tells the shell when its queue was empty.
    pub(super) fn send(&mut self, conn: ConnId, m: Message) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.push(m) {
            self.actions.push_back(RelayAction::Ready(conn));
        }
    }

    /// Queues a witness statement for `conn`: at most [`WITNESS_WAITING`] wait, an older
    /// one is dropped for a newer (the `.witness` file keeps them all), so a peer that does
    /// not read does not grow the relay's memory.
    #[cfg(feature = "integrity")]
    pub(super) fn send_witness(&mut self, conn: ConnId, statement: Bytes) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if matches!(c.stage, Stage::Closing) {
            return;
        }
        let waiting = c
            .queue
            .iter()
            .filter(|m| matches!(m, Message::Witness(_)))
            .count();
        if waiting >= WITNESS_WAITING {
            if let Some(i) = c
                .queue
                .iter()
                .position(|m| matches!(m, Message::Witness(_)))
            {
                c.queue.remove(i);
            }
        }
        self.send(conn, Message::Witness(statement));
    }

    /// Queues a chunk for `conn`.
    pub(super) fn send_chunk(&mut self, conn: ConnId, chunk: Bytes) {
        self.send(conn, Message::Chunk(chunk));
    }

    /// Answers a ping. A connection that pings faster than it reads gets one answer waiting
    /// at a time, for its latest ping, so its queue cannot grow.
    pub(super) fn pong(&mut self, conn: ConnId, n: u64) {
        let waiting = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.queue.iter_mut().find(|m| matches!(m, Message::Pong(_))));
        match waiting {
            Some(m) => *m = Message::Pong(n),
            None => self.send(conn, Message::Pong(n)),
        }
    }

    /// Acknowledges chunks up to `seq`. Acks are cumulative: one that still waits, wherever
    /// it stands in the queue (a Pong or a Ping may have come after it), is raised to `seq`,
    /// so a publisher that does not read them has one Ack waiting at most.
    pub(super) fn ack(&mut self, conn: ConnId, seq: u32) {
        let waiting = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.queue.iter_mut().find(|m| matches!(m, Message::Ack(_))));
        match waiting {
            Some(Message::Ack(waiting)) => *waiting = (*waiting).max(seq),
            _ => self.send(conn, Message::Ack(seq)),
        }
    }

    /// Sends an error and closes `conn` (only it). A connection already closing gets
    /// nothing more: its error or `End` is its last message; one the relay does not know
    /// (gone already) gets nothing at all.
    pub(super) fn fail(&mut self, conn: ConnId, code: ErrorCode, message: &str) {
        let open = self
            .conns
            .get(&conn)
            .is_some_and(|c| !matches!(c.stage, Stage::Closing));
        if !open {
            return;
        }
        self.send(
            conn,
            Message::Error {
                code,
                message: message.to_string(),
            },
        );
        self.close(conn);
    }

    /// Sends `End` as `conn`'s last message and closes it.
    pub(super) fn finish(&mut self, conn: ConnId, reason: crate::net::wire::EndReason) {
        self.send(conn, Message::End(reason));
        self.close(conn);
    }

    /// Takes `conn` out of its session, marks it closing (nothing more is read from it) and
    /// asks the shell to close it once what waits is sent. (Detached first: once closing,
    /// a publisher's session could no longer tell that it is gone, and would never end.)
    pub(super) fn close(&mut self, conn: ConnId) {
        self.detach(conn);
        self.set_stage(conn, Stage::Closing);
        self.actions.push_back(RelayAction::Close(conn));
    }

    /// Moves `conn` to `stage`, and re-arms its deadline to match.
    pub(super) fn set_stage(&mut self, conn: ConnId, stage: Stage) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.stage = stage;
        }
        self.rearm(conn);
    }

    /// Takes `conn` out of its session (a publisher leaves its session waiting for it).
    pub(super) fn detach(&mut self, conn: ConnId) {
        let now = self.now;
        let session = match self.conns.get(&conn).map(|c| &c.stage) {
            Some(Stage::Publisher { session }) => {
                let Some(s) = self.sessions.get_mut(session) else {
                    return;
                };
                if s.publisher == Some(conn) {
                    s.publisher = None;
                    s.publisher_gone_since = Some(now);
                }
                session.clone()
            }
            Some(Stage::Viewer(v)) => {
                let Some(s) = self.sessions.get_mut(&v.session) else {
                    return;
                };
                s.viewers.retain(|&c| c != conn);
                v.session.clone()
            }
            _ => return,
        };
        self.rearm_session(&session);
    }
}

#[cfg(test)]
mod tests {
    use crate::net::relay::{Relay, RelayConfig, Tokens};
    use crate::net::wire::{ErrorCode, Message, Role, WireError};

    #[test]
    fn disconnect_leaves_nothing_and_a_gone_connection_gets_nothing() {
        let mut r = Relay::new(RelayConfig::default(), Tokens::default());
        let c = r.connect(0);
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Viewer,
            agent: String::new(),
        };
        r.receive(c, hello, 1);
        assert_eq!(r.queued(c), 1);
        r.disconnect(c, 2);
        assert!(
            r.conns.is_empty(),
            "one entry per connection, removed whole"
        );
        assert_eq!(r.poll_timeout(), None, "its deadline went with it");
        while r.poll_action().is_some() {}
        r.reject(c, &WireError::UnknownMessage(0x77));
        assert_eq!(r.poll_action(), None);
        assert!(r.conns.is_empty());
    }

    /// Found by the relay-session fuzz target: a publisher that says `Error` is closed, and
    /// its session must still see it gone, end after the publisher timeout and be
    /// forgotten, rather than wait for it forever.
    #[test]
    fn a_publisher_closed_on_its_own_error_leaves_its_session_to_end() {
        let config = RelayConfig::default();
        let mut r = Relay::new(config, Tokens::parse("t"));
        let c = r.connect(0);
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Publisher,
            agent: String::new(),
        };
        r.receive(c, hello, 1);
        let publish = Message::Publish {
            session: "s".into(),
            token: "t".into(),
            resume: false,
            publisher_key: [7; 16],
        };
        r.receive(c, publish, 2);
        assert_eq!(r.sessions(), 1);
        let error = Message::Error {
            code: ErrorCode::Internal,
            message: "the game quit".into(),
        };
        r.receive(c, error, 3);
        r.disconnect(c, 4);
        let mut now = 4;
        while let Some(t) = r.poll_timeout() {
            now = t.max(now);
            r.handle_timeout(now);
            while r.poll_action().is_some() {}
            if now > 10 * config.publisher_timeout_ms {
                break;
            }
        }
        assert_eq!(r.sessions(), 0, "the session ended and was forgotten");
    }
}
