//! Relays sharing sessions through a store (`wire.md` §5): what the shell tells the relay
//! about the store, with [`RelayConfig::cluster`](super::RelayConfig::cluster) set. The
//! store itself (NATS JetStream in this project's shell) stays out of this core: the relay
//! asks for writes with the archive's actions, and is told here what the store did.
//!
//! - [`Relay::stored`]: the store holds a session's chunks up to a sequence number; its
//!   publisher gets the `Ack` only now.
//! - [`Relay::claim_lost`]: the store gave a new session's name to another relay's
//!   publisher: what this relay began of it is dropped.
//! - [`Relay::store_failed`]: the store refused a write (another relay wrote the session
//!   first, or the store is unavailable): the publisher here is told and the session goes on
//!   as a mirror of whatever the store holds.
//! - [`Relay::mirrored`]: a chunk the store holds, in the store's order: new to this relay
//!   when another relay's publisher sent it, for this relay's viewers.
//! - [`Relay::mirrored_witness`]: a witness statement the store holds, for this relay's
//!   viewers.
//! - [`Relay::mirror_ended`]: the store says the session ended.

use bytes::Bytes;

use super::session::chunk_info;
use super::Relay;
use crate::net::wire::{EndReason, ErrorCode};

impl Relay {
    /// The store holds session `name`'s chunks up to and including `through`: its
    /// publisher here, if any, gets `Ack through` (acks are cumulative, `wire.md` §3).
    pub fn stored(&mut self, name: &str, through: u32, now: u64) {
        self.now = now;
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        let next = through.saturating_add(1).min(s.next_seq);
        if next <= s.stored {
            return;
        }
        s.stored = next;
        if let Some(p) = s.publisher {
            self.ack(p, next - 1);
        }
    }

    /// The store refused a write for session `name`: `taken` when another relay holds the
    /// session now (its writes came first), else the store failed. The publisher here, if
    /// any, is told (`SessionBusy` or `Internal`: it may resume on any relay) and closed;
    /// what it sent that the store does not hold is dropped, and the session stays as a
    /// mirror of the store's stream (its viewers stay).
    pub fn store_failed(&mut self, name: &str, taken: bool, now: u64) {
        self.now = now;
        if taken {
            self.store_refused(
                name,
                ErrorCode::SessionBusy,
                "the session moved to another relay",
            );
        } else {
            self.store_refused(
                name,
                ErrorCode::Internal,
                "the cluster's store did not take the chunk",
            );
        }
    }

    /// The store is full for session `name` (it holds the cluster's maximum of sessions,
    /// or its maximum of bytes): as [`Relay::store_failed`], the publisher told
    /// `OverBudget` with `why`.
    pub fn store_full(&mut self, name: &str, why: &str, now: u64) {
        self.now = now;
        self.store_refused(name, ErrorCode::OverBudget, why);
    }

    /// The store refused this relay's claim of session `name`, a new session's name:
    /// another relay's publisher claimed it first. What this relay began of it (its
    /// publisher's header and chunks, never stored) is dropped: the publisher gets
    /// `SessionBusy`, and so does every viewer here, which may have received some of it (a
    /// viewer that went on would get another publisher's chunks after this one's header);
    /// the next viewer of the name finds the session the store holds.
    pub fn claim_lost(&mut self, name: &str, now: u64) {
        self.now = now;
        let Some(s) = self.sessions.get(name) else {
            return;
        };
        if s.ended.is_some() || s.stored > 0 {
            return;
        }
        let publisher = s.publisher;
        let viewers = s.viewers.clone();
        self.forget(name);
        if let Some(p) = publisher {
            self.fail(
                p,
                ErrorCode::SessionBusy,
                "another relay's publisher has the session's name",
            );
        }
        for v in viewers {
            self.fail(
                v,
                ErrorCode::SessionBusy,
                "the session this relay began is another publisher's name: watch it again",
            );
        }
    }

    fn store_refused(&mut self, name: &str, code: ErrorCode, why: &str) {
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        if s.ended.is_some() {
            return;
        }
        let publisher = s.publisher.take();
        s.remote = true;
        s.publisher_gone_since = None;
        // Back to what the store holds: the chunks after it were never stored.
        let stored = s.stored;
        while s.backlog.back().is_some_and(|k| k.seq >= stored) {
            if let Some(k) = s.backlog.pop_back() {
                s.backlog_bytes -= k.bytes.len();
                self.backlog_total -= k.bytes.len();
            }
        }
        s.next_seq = stored;
        if let Some(p) = publisher {
            self.fail(p, code, why);
        }
        self.rearm_session(name);
    }

    /// A chunk of session `name` as the store holds it, in the store's order. One this
    /// relay has is dropped; the next one it lacks is kept and delivered as a publisher's
    /// would be. When it is not the next one (this relay missed some), it is taken from a
    /// keyframe chunk on: live viewers see a skip, complete-mode viewers read what is missed
    /// from the store. A publisher here that did not send it is stale (the session moved
    /// to another relay): it is told so and closed. Returns whether the chunk was new.
    pub fn mirrored(&mut self, name: &str, chunk: Bytes, now: u64) -> bool {
        self.now = now;
        let Some((seq, keyframe)) = chunk_info(&chunk) else {
            return false;
        };
        if crate::net::wire::check_chunk_size(&chunk).is_err() {
            return false;
        }
        let limit = self.config.backlog_chunks.max(1);
        let (max_bytes, max_total) = (self.config.backlog_bytes, self.config.total_backlog_bytes);
        let Some(s) = self.sessions.get_mut(name) else {
            return false;
        };
        if s.ended.is_some() || s.header.is_none() || seq < s.next_seq {
            return false;
        }
        if seq > s.next_seq && !keyframe {
            return false;
        }
        let stale = s.publisher.take();
        s.remote = true;
        s.publisher_gone_since = None;
        if seq > s.next_seq {
            // A gap: what is kept no longer runs on to this chunk.
            self.backlog_total -= s.backlog_bytes;
            s.backlog.clear();
            s.backlog_bytes = 0;
        }
        s.keep(
            seq,
            &chunk,
            keyframe,
            &mut self.backlog_total,
            (limit, max_bytes, max_total),
        );
        s.stored = s.next_seq;
        let viewers = s.viewers.clone();
        if let Some(p) = stale {
            self.fail(
                p,
                ErrorCode::SessionBusy,
                "the session moved to another relay",
            );
        }
        for &v in &viewers {
            self.deliver(v, &chunk, keyframe);
        }
        self.rearm_session(name);
        true
    }

    /// A witness statement the store holds on session `name` (`integrity.md` §12), made by
    /// the relay its publisher sent to: for this relay's viewers when the session's chunks
    /// come from the store (a relay whose own publisher sent the checkpoint sent its own
    /// statement already).
    pub fn mirrored_witness(&mut self, name: &str, statement: Bytes, now: u64) {
        self.now = now;
        let Some(s) = self.sessions.get(name) else {
            return;
        };
        if !s.remote || s.ended.is_some() {
            return;
        }
        #[cfg(feature = "integrity")]
        for v in s.viewers.clone() {
            self.send_witness(v, statement.clone());
        }
        #[cfg(not(feature = "integrity"))]
        let _ = statement;
    }

    /// The store says session `name` ended (its publisher's relay wrote the end): it ends
    /// here too, as if its publisher were here ([`RelayAction::SessionEnded`](super::RelayAction::SessionEnded) follows, which
    /// a shell does not write back).
    pub fn mirror_ended(&mut self, name: &str, reason: EndReason, now: u64) {
        self.now = now;
        if let Some(p) = self.sessions.get_mut(name).and_then(|s| s.publisher.take()) {
            self.fail(
                p,
                ErrorCode::SessionBusy,
                "the session ended on another relay",
            );
        }
        self.end(name, reason);
    }

    /// A lookup of session `name` in the store failed (it is unreachable, say): the
    /// publishers waiting for it are refused (`Internal`: they may try again, here or on
    /// another relay) rather than given a session the store may already hold; viewers
    /// waiting for it go on waiting until their `wait_ms`.
    pub fn lookup_failed(&mut self, name: &str, now: u64) {
        self.now = now;
        self.lookups.remove(name);
        for (conn, ..) in self.claiming(name) {
            self.refuse(
                conn,
                name.to_string(),
                ErrorCode::Internal,
                "the cluster's store (NATS JetStream) is unavailable; try again or another relay",
            );
        }
    }

    /// Whether anything here waits for session `name` to be found: a viewer waiting for it
    /// to start, or a publisher waiting for a lookup. A shell that learns a session started
    /// elsewhere looks it up for these ([`Relay::restored`]).
    pub fn wants(&self, name: &str) -> bool {
        !self.sessions.contains_key(name)
            && self.conns.values().any(|c| match &c.stage {
                super::connection::Stage::Viewer(v) => {
                    v.session == name && v.waiting_until.is_some()
                }
                super::connection::Stage::Claiming { session, .. } => session == name,
                _ => false,
            })
    }

    /// The names of the sessions held that have not ended (for a shell that follows each
    /// in the store).
    pub fn live_sessions(&self) -> Vec<String> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.ended.is_none())
            .map(|(n, _)| n.clone())
            .collect()
    }
}
