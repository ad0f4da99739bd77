//! Deadlines: every connection and session with something timed (a handshake, a wait, a
//! ping, an idle timeout, a publisher's return, being forgotten) has one deadline armed in
//! an ordered set, so the earliest is found without scanning every connection, and
//! [`Relay::handle_timeout`] looks only at what expired.

use std::collections::BTreeSet;

use super::connection::{Connection, Stage};
use super::session::Session;
use super::{ConnId, Relay, RelayConfig};
use crate::net::wire::{EndReason, ErrorCode, Message};

/// The armed deadlines, earliest first. Each entry mirrors the `armed` field of its
/// connection or session, which says where to find it again to move it.
#[derive(Debug, Default)]
pub(super) struct Timers {
    conns: BTreeSet<(u64, ConnId)>,
    sessions: BTreeSet<(u64, String)>,
}

impl Timers {
    /// The earliest deadline.
    fn next(&self) -> Option<u64> {
        let conn = self.conns.first().map(|e| e.0);
        let session = self.sessions.first().map(|e| e.0);
        match (conn, session) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn move_conn(&mut self, conn: ConnId, from: Option<u64>, to: Option<u64>) {
        if let Some(d) = from {
            self.conns.remove(&(d, conn));
        }
        if let Some(d) = to {
            self.conns.insert((d, conn));
        }
    }

    fn move_session(&mut self, name: &str, from: Option<u64>, to: Option<u64>) {
        if let Some(d) = from {
            self.sessions.remove(&(d, name.to_string()));
        }
        if let Some(d) = to {
            self.sessions.insert((d, name.to_string()));
        }
    }

    /// Takes out the connections whose deadline is `now` or earlier.
    fn expired_conns(&mut self, now: u64) -> Vec<ConnId> {
        let mut out = Vec::new();
        while self.conns.first().is_some_and(|e| e.0 <= now) {
            if let Some((_, c)) = self.conns.pop_first() {
                out.push(c);
            }
        }
        out
    }

    /// Takes out the sessions whose deadline is `now` or earlier.
    fn expired_sessions(&mut self, now: u64) -> Vec<String> {
        let mut out = Vec::new();
        while self.sessions.first().is_some_and(|e| e.0 <= now) {
            if let Some((_, s)) = self.sessions.pop_first() {
                out.push(s);
            }
        }
        out
    }
}

/// The first time at which something is due for a connection: its handshake or wait runs
/// out, it must be pinged, or it has been silent too long.
fn conn_deadline(config: &RelayConfig, c: &Connection) -> Option<u64> {
    let (idle, every) = (config.idle_timeout_ms, config.ping_interval_ms);
    match &c.stage {
        Stage::New { since } | Stage::Greeted { since, .. } | Stage::Claiming { since, .. } => {
            Some(
                since
                    .saturating_add(config.handshake_timeout_ms)
                    .saturating_add(1),
            )
        }
        Stage::Publisher { .. } => Some(c.meter.deadline(idle, every)),
        Stage::Viewer(v) => {
            let live = c.meter.deadline(idle, every);
            Some(
                v.waiting_until
                    .map_or(live, |u| live.min(u.saturating_add(1))),
            )
        }
        Stage::Closing => None,
    }
}

/// The first time at which something is due for a session: its publisher has been gone
/// too long, or (at once) it has ended and nobody watches it.
fn session_deadline(config: &RelayConfig, s: &Session, now: u64) -> Option<u64> {
    if s.forgettable() {
        // Already due: kept where it was armed if that is earlier, so it does not slide.
        return Some(s.armed.filter(|&d| d <= now).unwrap_or(now));
    }
    match (s.ended, s.publisher_gone_since) {
        (None, Some(t)) => Some(
            t.saturating_add(config.publisher_timeout_ms)
                .saturating_add(1),
        ),
        _ => None,
    }
}

impl Relay {
    /// Session `name` is dropped at once (its timer with it), whoever still holds it.
    pub(super) fn forget(&mut self, name: &str) {
        if let Some(s) = self.sessions.remove(name) {
            self.backlog_total -= s.backlog_bytes;
            self.timers.move_session(name, s.armed, None);
        }
    }

    /// The earliest deadline, in the shell's milliseconds: call
    /// [`handle_timeout`](Self::handle_timeout) then (nothing is due before it). `None`
    /// when nothing is timed. Found without scanning the connections.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.timers.next()
    }

    /// Time passes: handshakes and waits that ran out fail, silent connections are pinged
    /// or closed, sessions whose publisher is gone end, and ended sessions nobody watches
    /// are forgotten. Only what is due by `now` is looked at; calling it early does nothing.
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        let sessions = self.timers.expired_sessions(now);
        for name in &sessions {
            if let Some(s) = self.sessions.get_mut(name) {
                s.armed = None;
            }
        }
        let conns = self.timers.expired_conns(now);
        for c in &conns {
            if let Some(c) = self.conns.get_mut(c) {
                c.armed = None;
            }
        }
        // In this order, as each step may change what the next sees.
        for name in &sessions {
            if self.sessions.get(name).is_some_and(Session::forgettable) {
                if let Some(s) = self.sessions.remove(name) {
                    self.backlog_total -= s.backlog_bytes;
                }
            }
        }
        for &c in &conns {
            self.expire_handshake(c, now);
        }
        for name in &sessions {
            let pt = self.config.publisher_timeout_ms;
            let gone = self.sessions.get(name).is_some_and(|s| {
                s.ended.is_none()
                    && s.publisher_gone_since
                        .is_some_and(|t| now.saturating_sub(t) > pt)
            });
            if gone {
                self.end(name, EndReason::PublisherGone);
            }
        }
        for &c in &conns {
            self.check_liveness(c, now);
        }
        for c in conns {
            self.rearm(c);
        }
        for name in sessions {
            self.rearm_session(&name);
        }
    }

    /// A handshake that took too long, or a wait for a session that did not start.
    fn expire_handshake(&mut self, conn: ConnId, now: u64) {
        let hs = self.config.handshake_timeout_ms;
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match &c.stage {
            Stage::New { since } | Stage::Greeted { since, .. } | Stage::Claiming { since, .. }
                if now.saturating_sub(*since) > hs =>
            {
                self.fail(conn, ErrorCode::Timeout, "handshake took too long");
            }
            Stage::Viewer(v) if v.waiting_until.is_some_and(|u| now > u) => {
                self.fail(
                    conn,
                    ErrorCode::NoSuchSession,
                    "the session did not start in time",
                );
            }
            _ => {}
        }
    }

    /// An established connection: pinged when silent, closed when silent too long.
    fn check_liveness(&mut self, conn: ConnId, now: u64) {
        let (idle, every) = (self.config.idle_timeout_ms, self.config.ping_interval_ms);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !matches!(c.stage, Stage::Publisher { .. } | Stage::Viewer(_)) {
            return;
        }
        if c.meter.silent(now, idle) {
            return self.fail(conn, ErrorCode::Timeout, "nothing received for too long");
        }
        if !c.meter.ping_due(now, every) {
            return;
        }
        c.meter.pinged(now);
        // One Ping waits at most: a peer that has not read the last one is asked nothing
        // new (its idle timeout closes it if it stays silent).
        if c.queue.iter().any(|m| matches!(m, Message::Ping(_))) {
            return;
        }
        self.next_nonce += 1;
        let n = self.next_nonce;
        self.send(conn, Message::Ping(n));
    }

    /// Moves `conn`'s deadline to where its state now puts it.
    pub(super) fn rearm(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let want = conn_deadline(&self.config, c);
        if want != c.armed {
            self.timers.move_conn(conn, c.armed, want);
            c.armed = want;
        }
    }

    /// Moves session `name`'s deadline to where its state now puts it.
    pub(super) fn rearm_session(&mut self, name: &str) {
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        let want = session_deadline(&self.config, s, self.now);
        if want != s.armed {
            self.timers.move_session(name, s.armed, want);
            s.armed = want;
        }
    }

    /// Forgets `conn`'s deadline (it is gone).
    pub(super) fn disarm(&mut self, conn: ConnId, armed: Option<u64>) {
        self.timers.move_conn(conn, armed, None);
    }
}

#[cfg(test)]
mod tests {
    use crate::net::relay::{Relay, RelayAction, RelayConfig, Tokens};
    use crate::net::wire::{ErrorCode, Message};

    #[test]
    fn poll_timeout_is_the_earliest_deadline_and_nothing_happens_before_it() {
        let config = RelayConfig {
            handshake_timeout_ms: 100,
            ..RelayConfig::default()
        };
        let mut r = Relay::new(config, Tokens::default());
        assert_eq!(r.poll_timeout(), None, "nothing is timed yet");
        let late = r.connect(50);
        let early = r.connect(20);
        // A handshake times out when more than 100 ms have passed.
        assert_eq!(r.poll_timeout(), Some(121));
        r.handle_timeout(120);
        assert_eq!(
            r.poll_action(),
            None,
            "handle_timeout before the deadline does nothing"
        );
        assert_eq!((r.queued(early), r.queued(late)), (0, 0));
        assert_eq!(r.poll_timeout(), Some(121));
        r.handle_timeout(121);
        assert_eq!(r.poll_action(), Some(RelayAction::Ready(early)));
        assert_eq!(r.poll_action(), Some(RelayAction::Close(early)));
        assert_eq!(r.poll_action(), None);
        assert!(matches!(
            r.poll_outgoing(early),
            Some(Message::Error {
                code: ErrorCode::Timeout,
                ..
            })
        ));
        // The closing connection has no deadline left; the other one's is next.
        assert_eq!(r.poll_timeout(), Some(151));
        r.disconnect(late, 130);
        assert_eq!(
            r.poll_timeout(),
            None,
            "a connection's deadline goes with it"
        );
    }
}
