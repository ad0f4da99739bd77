//! Viewers: subscribing (and waiting for a session to start), joining at the current
//! keyframe group, live delivery that skips a slow viewer to the next group, and
//! complete-mode delivery refilled from the backlog or the archive.

use bytes::Bytes;

use super::connection::Stage;
use super::session::{frames_t0, is_key_chunk};
use super::{ConnId, Fetch, Relay, RelayAction};
use crate::net::archive::ArchiveError;
use crate::net::wire::{ErrorCode, Message, ViewMode};

/// A viewer's place in its session.
#[derive(Clone, Debug)]
pub(super) struct Viewer {
    pub(super) session: String,
    pub(super) mode: ViewMode,
    /// Waiting for the session to start, until this time.
    pub(super) waiting_until: Option<u64>,
    /// Complete mode: the sequence number of the next chunk to send.
    pub(super) cursor: u32,
    /// Live mode: dropping chunks until the next keyframe chunk.
    pub(super) skipping: bool,
    pub(super) skipped_chunks: u32,
    pub(super) skipped_bytes: u64,
    pub(super) sent_header: bool,
    /// Complete mode: the archive offset of chunk `cursor`.
    pub(super) offset: u64,
    /// Complete mode: an archive read is under way.
    pub(super) fetching: bool,
    /// The first chunk it asked for (`Subscribe.from`): it has those before.
    pub(super) from: u32,
    /// When it subscribed to a session not known here (the relay's clock, ms): it
    /// waited for it.
    pub(super) waited_since: Option<u64>,
}

impl Viewer {
    /// Drops the chunks (and folds the skip notices) waiting in `queue` into this viewer's
    /// skip count, all but the session's key chunk; returns the bytes of chunks still
    /// waiting.
    fn drop_waiting_chunks(&mut self, queue: &mut std::collections::VecDeque<Message>) -> usize {
        let mut kept = 0;
        queue.retain(|m| match m {
            // The key chunk stays: a viewer has no other way to get it (wire.md §3).
            Message::Chunk(b) if is_key_chunk(b) => {
                kept += b.len();
                true
            }
            Message::Chunk(b) => {
                self.skipped_chunks = self.skipped_chunks.saturating_add(1);
                self.skipped_bytes = self.skipped_bytes.saturating_add(b.len() as u64);
                false
            }
            Message::Skipped { chunks, bytes } => {
                self.skipped_chunks = self.skipped_chunks.saturating_add(*chunks);
                self.skipped_bytes = self.skipped_bytes.saturating_add(*bytes);
                false
            }
            _ => true,
        });
        kept
    }
}

impl Relay {
    /// `Subscribe`: attached at once if the session is known, else waiting for it until
    /// `until` (and looked up in the archive, if there is one).
    pub(super) fn subscribe(
        &mut self,
        conn: ConnId,
        name: String,
        mode: ViewMode,
        until: u64,
        from: u32,
    ) {
        let known = self.sessions.contains_key(&name);
        let viewer = Viewer {
            session: name.clone(),
            mode,
            waiting_until: (!known).then_some(until),
            cursor: 0,
            skipping: false,
            skipped_chunks: 0,
            skipped_bytes: 0,
            sent_header: false,
            offset: 0,
            fetching: false,
            from,
            waited_since: (!known).then_some(self.now),
        };
        self.set_stage(conn, Stage::Viewer(viewer));
        if let Some(s) = self.sessions.get_mut(&name) {
            s.viewers.push(conn);
            self.join(conn);
            self.rearm_session(&name);
        } else if self.config.archive && self.lookups.insert(name.clone()) {
            self.actions.push_back(RelayAction::Lookup(name));
        }
    }

    /// Attaches the viewers that wait for session `name`; returns them.
    pub(super) fn attach_waiting(&mut self, name: &str) -> Vec<ConnId> {
        let waiting: Vec<ConnId> = self
            .conns
            .iter()
            .filter_map(|(&c, st)| match &st.stage {
                Stage::Viewer(v) if v.session == name && v.waiting_until.is_some() => Some(c),
                _ => None,
            })
            .collect();
        for &c in &waiting {
            if let Some(v) = self.conns.get_mut(&c).and_then(|c| c.viewer_mut()) {
                v.waiting_until = None;
            }
            self.rearm(c);
            if let Some(s) = self.sessions.get_mut(name) {
                s.viewers.push(c);
            }
        }
        waiting
    }

    /// Sends a newly attached viewer what it needs to decode at once: the header and the
    /// chunks of the current keyframe group. A complete-mode viewer, and any viewer of a
    /// session that has ended, reads every chunk from the first on instead.
    pub(super) fn join(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let Some(v) = c.viewer() else {
            return;
        };
        let Some(s) = self.sessions.get(&v.session) else {
            return;
        };
        let Some(header) = s.header.clone() else {
            return;
        };
        // A viewer that has the chunks before `from` (a reconnection) continues from there
        // when the backlog still holds it; else it joins at the group as a new viewer does.
        let (from, first_kept) = (v.from, s.first_kept());
        let resume_at = (from > 0 && from >= first_kept && from <= s.next_seq)
            .then(|| (from - first_kept) as usize);
        // A viewer that waited for a session found already under way (a cluster's lookup)
        // gets what it waited for, as on the relay where the session started: from the
        // keyframe group of the song time it subscribed at (the song's latest time less how
        // long it waited), as far as the backlog holds it. Any other joins at the latest
        // group.
        let latest = s.backlog.iter().rposition(|c| c.keyframe).unwrap_or(0);
        let waited_for = v.waited_since.map(|t| {
            let since = s.song_time - self.now.saturating_sub(t) as f32 / 1000.0;
            s.backlog
                .iter()
                .rposition(|c| c.keyframe && frames_t0(&c.bytes).is_some_and(|t0| t0 <= since))
                .or_else(|| match s.backlog.front() {
                    // It waited from before the first group: the song from its start.
                    Some(c) if c.seq == 0 => Some(0),
                    _ => s.backlog.iter().position(|c| c.keyframe),
                })
                .unwrap_or(latest)
        });
        let group_start = resume_at.or(waited_for).unwrap_or(latest);
        // A signed session's key chunk goes after the header when the chunks sent do not
        // start with it: without it a late joiner cannot verify what it gets (wire.md §3).
        // One that had chunks before has it.
        let group_seq = s.backlog.get(group_start).map_or(s.next_seq, |c| c.seq);
        let key_chunk = s.key_chunk.clone().filter(|_| group_seq > 0 && from == 0);
        // Complete mode from `from`: where chunks are read by sequence number (a cluster's
        // store) or only from the backlog (no archive); an archive file is read by offset,
        // known from the start only, so there it starts at 0 (the client drops what it has).
        let complete_from = if self.config.cluster || !self.config.archive {
            from.min(s.next_seq)
        } else {
            0
        };
        let mode = if s.ended.is_some() {
            ViewMode::Complete
        } else {
            v.mode
        };
        let live_chunks: Vec<Bytes> = if mode == ViewMode::Live {
            let group = s.backlog.iter().skip(group_start);
            group.map(|c| c.bytes.clone()).collect()
        } else {
            Vec::new()
        };
        // A group longer than the live queue takes is skipped like a slow viewer's: the
        // viewer starts at the next keyframe chunk, told how much it missed.
        let group_bytes: usize = live_chunks.iter().map(Bytes::len).sum();
        let max_msgs = self.config.viewer_queue_messages.max(1);
        let key_msgs = usize::from(key_chunk.is_some());
        let fits = c.queue.len() + 1 + key_msgs + live_chunks.len() <= max_msgs
            && group_bytes <= self.config.viewer_queue_bytes;
        let skipped = (mode == ViewMode::Live && !fits).then_some((live_chunks.len(), group_bytes));
        if let Some(v) = self.conns.get_mut(&conn).and_then(|c| c.viewer_mut()) {
            v.sent_header = true;
            v.mode = mode;
            v.cursor = if mode == ViewMode::Complete {
                complete_from
            } else {
                0
            };
            v.offset = header.len() as u64;
            if let Some((chunks, bytes)) = skipped {
                v.skipping = true;
                v.skipped_chunks = chunks as u32;
                v.skipped_bytes = bytes as u64;
            }
        }
        self.send(conn, Message::StreamHeader(header));
        if let Some(k) = key_chunk.filter(|_| mode == ViewMode::Live) {
            self.send_chunk(conn, k);
        }
        if skipped.is_none() {
            for c in live_chunks {
                self.send_chunk(conn, c);
            }
        }
    }

    /// Complete-mode viewers pull from the backlog as their socket drains, and from the
    /// archive (through the shell) for what the backlog no longer holds.
    pub(super) fn refill_complete_viewer(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let Some(v) = c.viewer() else {
            return;
        };
        if v.mode != ViewMode::Complete || !v.sent_header || v.fetching || !c.queue.is_empty() {
            return;
        }
        let (name, cursor, offset) = (v.session.clone(), v.cursor, v.offset);
        let Some(s) = self.sessions.get(&name) else {
            return;
        };
        let first_kept = s.first_kept();
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
            if let Some(v) = self.conns.get_mut(&conn).and_then(|c| c.viewer_mut()) {
                v.fetching = true;
            }
            self.actions.push_back(RelayAction::Fetch(fetch));
            return;
        }
        // The backlog holds consecutive sequence numbers.
        let next = s
            .backlog
            .get((cursor - first_kept) as usize)
            .map(|c| c.bytes.clone());
        let ended = s.ended;
        match (next, ended) {
            (Some(chunk), _) => {
                if let Some(v) = self.conns.get_mut(&conn).and_then(|c| c.viewer_mut()) {
                    v.cursor += 1;
                    v.offset += chunk.len() as u64;
                }
                self.send_chunk(conn, chunk);
            }
            (None, Some(reason)) => self.finish(conn, reason),
            (None, None) => {}
        }
    }

    /// The answer to [`RelayAction::Fetch`]: the chunks read from the archive from `seq` on,
    /// or why they could not be read (the viewer then gets `Error Internal`).
    pub fn fetched(
        &mut self,
        conn: ConnId,
        seq: u32,
        chunks: Result<Vec<Bytes>, ArchiveError>,
        now: u64,
    ) {
        self.now = now;
        let Some(v) = self.conns.get_mut(&conn).and_then(|c| c.viewer_mut()) else {
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
            match super::session::chunk_info(&c) {
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
            self.send_chunk(conn, c);
        }
    }

    /// A live chunk to a viewer: queued, or skipped when the viewer has fallen behind.
    pub(super) fn deliver(&mut self, conn: ConnId, chunk: &Bytes, keyframe: bool) {
        let (max_msgs, max_bytes) = (
            self.config.viewer_queue_messages.max(1),
            self.config.viewer_queue_bytes,
        );
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let mut queued = c.queue.len();
        let Stage::Viewer(v) = &mut c.stage else {
            return;
        };
        if !v.sent_header || v.mode == ViewMode::Complete {
            // Complete viewers pull from the backlog (refill_complete_viewer).
            if v.mode == ViewMode::Complete && queued == 0 {
                self.actions.push_back(RelayAction::Ready(conn));
            }
            return;
        }
        if !v.skipping && (queued >= max_msgs || c.queued_bytes + chunk.len() > max_bytes) {
            // Behind: drop the chunks that wait and everything up to the next keyframe
            // group. What else waits stays (the stream header above all); a skip notice
            // still waiting is folded into the next one.
            v.skipping = true;
            c.queued_bytes = v.drop_waiting_chunks(&mut c.queue);
            queued = c.queue.len();
        }
        if v.skipping && is_key_chunk(chunk) {
            // The key chunk is never skipped: it is the first chunk of the stream, and the
            // only one a viewer cannot do without to verify the rest.
            return self.send_chunk(conn, chunk.clone());
        }
        if v.skipping {
            // It resumes at a keyframe chunk, and only if the queue has room for it: control
            // messages (Hello, the header, Pong, Ping) may fill a small queue on their own,
            // and a viewer that has not read them is still behind. (The bytes limit does not
            // hold the keyframe back: the queue holds no chunk now, and one chunk always goes.)
            if !keyframe || queued >= max_msgs {
                v.skipped_chunks = v.skipped_chunks.saturating_add(1);
                v.skipped_bytes = v.skipped_bytes.saturating_add(chunk.len() as u64);
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
        self.send_chunk(conn, chunk.clone());
    }
}
