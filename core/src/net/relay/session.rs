//! Sessions, the publisher's side: who publishes, the stream header, the backlog of recent
//! chunks that viewers are served from, and how a session ends.

use std::collections::VecDeque;

use bytes::Bytes;

use super::connection::Stage;
use super::resume::{self, ResumeKey};
use super::{Archived, ConnId, Relay, RelayAction};
use crate::net::wire::{EndReason, ErrorCode, Message};
use crate::stream::{ChunkHeader, ChunkType, StreamHeader};

/// A chunk kept in a session's backlog.
#[derive(Clone, Debug)]
pub(super) struct Kept {
    pub(super) seq: u32,
    pub(super) bytes: Bytes,
    /// It starts a keyframe group.
    pub(super) keyframe: bool,
}

/// One session: its publisher (if connected), its stream so far, and its viewers.
#[derive(Clone, Debug)]
pub(super) struct Session {
    pub(super) publisher: Option<ConnId>,
    /// The SHA-256 digest of its publisher's key (`None`: restored from the archive without
    /// a key file, so nobody can resume it).
    pub(super) key: Option<[u8; 32]>,
    /// Restored from the archive, cut short by a relay restart, with a key file, and not
    /// resumed yet: when its publisher resumes it, its archive file is cut to this length
    /// and reopened (`wire.md` §4.1), with its last chunk's offset if an index chunk.
    pub(super) reopen: Option<(u64, Option<u64>)>,
    pub(super) header: Option<Bytes>,
    /// The last chunks, oldest first, with consecutive sequence numbers.
    pub(super) backlog: VecDeque<Kept>,
    /// Bytes of the chunks in `backlog`.
    pub(super) backlog_bytes: usize,
    pub(super) next_seq: u32,
    pub(super) ended: Option<EndReason>,
    pub(super) publisher_gone_since: Option<u64>,
    /// Attached viewers (not those still waiting for the session to start).
    pub(super) viewers: Vec<ConnId>,
    /// The shell keeps this session's archive (and it has not failed).
    pub(super) archived: bool,
    /// The deadline armed for it in the relay's timers, if any.
    pub(super) armed: Option<u64>,
    /// Bytes of the stream received (header and chunks), for `GET /sessions`.
    pub(super) bytes: u64,
    /// The latest song time of a frame chunk received (its `t0`), in seconds.
    pub(super) song_time: f32,
    /// The session's key chunk (a signed stream's chunk 0, `integrity.md` §3), kept for
    /// the whole session: every live viewer gets it after the header (`wire.md` §3).
    pub(super) key_chunk: Option<Bytes>,
    /// The player the publisher's token grants (`http.md` §8.12): a `player:` line's, set
    /// when the session starts; a resume with a token granting another (or none) clears it.
    pub(super) player: Option<String>,
    /// In a cluster: chunks the shared store holds (sequence numbers below this), as the
    /// shell confirmed them ([`Relay::stored`]) or they came from it ([`Relay::mirrored`]).
    pub(super) stored: u32,
    /// In a cluster: its publisher is on another relay; this relay holds a mirror of the
    /// stream the store gives it, and waits for no publisher (no timeout runs).
    pub(super) remote: bool,
}

impl Session {
    /// A session with nothing in it yet.
    fn new(publisher: Option<ConnId>, key: Option<[u8; 32]>, archived: bool) -> Self {
        Session {
            publisher,
            key,
            reopen: None,
            header: None,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            next_seq: 0,
            ended: None,
            publisher_gone_since: None,
            viewers: Vec::new(),
            archived,
            armed: None,
            bytes: 0,
            song_time: 0.0,
            key_chunk: None,
            player: None,
            stored: 0,
            remote: false,
        }
    }

    /// The sequence number of the oldest chunk kept (`next_seq` when none is).
    pub(super) fn first_kept(&self) -> u32 {
        self.backlog.front().map_or(self.next_seq, |c| c.seq)
    }

    /// Takes chunk `c` (sequence number `seq`, the next) in: the stream's counts, the key
    /// chunk, the song time, and the backlog, whose oldest chunks go past the chunk count
    /// or either byte budget (`limits`: chunks, the session's bytes, all backlogs' bytes,
    /// which `total` counts; the newest stays).
    pub(super) fn keep(
        &mut self,
        seq: u32,
        c: &Bytes,
        keyframe: bool,
        total: &mut usize,
        (limit, max_bytes, max_total): (usize, usize, usize),
    ) {
        self.next_seq = seq.saturating_add(1);
        self.bytes += c.len() as u64;
        if seq == 0 && c.len() <= KEY_CHUNK_KEPT_MAX && is_key_chunk(c) {
            self.key_chunk = Some(c.clone());
        }
        if let Some(t0) = frames_t0(c) {
            self.song_time = self.song_time.max(t0);
        }
        self.backlog.push_back(Kept {
            seq,
            bytes: c.clone(),
            keyframe,
        });
        self.backlog_bytes += c.len();
        *total += c.len();
        while self.backlog.len() > 1
            && (self.backlog.len() > limit || self.backlog_bytes > max_bytes || *total > max_total)
        {
            if let Some(k) = self.backlog.pop_front() {
                self.backlog_bytes -= k.bytes.len();
                *total -= k.bytes.len();
            }
        }
    }

    /// Ended, and watched by nobody: to be forgotten.
    pub(super) fn forgettable(&self) -> bool {
        self.ended.is_some() && self.viewers.is_empty()
    }
}

/// A publisher waiting for the archive: its connection, key, `resume` flag and player.
type Claimer = (ConnId, [u8; 16], bool, Option<String>);

/// The chunk type byte of a signed stream's key chunk (`integrity.md` §2), a type from the
/// skippable range the relay otherwise forwards without looking. Named here rather than
/// taken from `crate::integrity`, which the `net` layer does not require.
pub(crate) const KEY_CHUNK_TYPE: u8 = 0x10;

/// The longest key chunk a session keeps for late joiners (`wire.md` §3), so that what a
/// session holds outside its backlog budget stays small: a key chunk with real info strings
/// is about 180 bytes.
pub(crate) const KEY_CHUNK_KEPT_MAX: usize = 4096;

/// Is this chunk a session's key chunk: sequence number 0, type `0x10`?
pub(super) fn is_key_chunk(chunk: &[u8]) -> bool {
    ChunkHeader::parse_at(chunk)
        .is_some_and(|(h, _)| h.seq == 0 && h.kind == ChunkType::Unknown(KEY_CHUNK_TYPE))
}

/// A chunk's sequence number and whether it starts a keyframe group.
pub(super) fn chunk_info(chunk: &[u8]) -> Option<(u32, bool)> {
    ChunkHeader::parse_at(chunk).map(|(h, _)| (h.seq, h.kind == ChunkType::Keyframes))
}

impl Relay {
    /// `Publish`: a new session, or its publisher resuming it. With an archive, a name the
    /// relay does not hold is looked up on disk first: a new session never replaces an
    /// archived one.
    pub(super) fn publish(
        &mut self,
        conn: ConnId,
        name: String,
        token: &str,
        resume: bool,
        key: [u8; 16],
    ) {
        let Some(granted) = self.tokens.grant(&name, token) else {
            return self.refuse(
                conn,
                name,
                ErrorCode::Unauthorized,
                "not allowed to publish this session",
            );
        };
        let player = granted.player;
        // In a cluster, a session held as a mirror is looked up too: its publisher takes
        // it over from where the store has it, not from where this mirror got to.
        let held = self.sessions.get(&name).map(|s| s.remote);
        if self.config.archive && held.is_none_or(|remote| remote) {
            let since = self.now;
            self.set_stage(
                conn,
                Stage::Claiming {
                    session: name.clone(),
                    key,
                    resume,
                    since,
                    player,
                },
            );
            if self.lookups.insert(name.clone()) {
                self.actions.push_back(RelayAction::Lookup(name));
            }
            return;
        }
        self.claim(conn, name, resume, key, player);
    }

    /// A publisher takes session `name` as the relay holds it: a new session, the same
    /// publisher resuming it, or its publisher resuming it after a relay restart.
    fn claim(
        &mut self,
        conn: ConnId,
        name: String,
        resume: bool,
        key: [u8; 16],
        player: Option<String>,
    ) {
        let archived = self.config.archive;
        let mut reopen = None;
        let mut rewrite_key = None;
        let next = match self.sessions.get_mut(&name) {
            // Cut short by a relay restart, with a key file: its publisher resumes it
            // (wire.md §4.1); the digest is compared in constant time, like tokens.
            Some(s)
                if s.ended.is_none()
                    && s.reopen.is_some()
                    && resume
                    && s.key.is_some_and(|d| resume::proves(&d, &key)) =>
            {
                reopen = s.reopen.take();
                s.publisher = Some(conn);
                s.publisher_gone_since = None;
                s.archived = true;
                if s.player.is_some() && s.player != player {
                    s.player = None;
                    rewrite_key = s.key;
                }
                s.next_seq
            }
            Some(s) if s.ended.is_some() && s.archived => {
                return self.refuse(
                    conn,
                    name,
                    ErrorCode::SessionExists,
                    "a session of this name is in the archive",
                );
            }
            Some(s) if s.ended.is_some() => {
                return self.refuse(conn, name, ErrorCode::SessionBusy, "the session has ended");
            }
            // The key proves the publisher; compared in constant time, like tokens.
            Some(s) if !resume || !s.key.is_some_and(|d| resume::proves(&d, &key)) => {
                return self.refuse(
                    conn,
                    name,
                    ErrorCode::SessionBusy,
                    "the session has a publisher",
                );
            }
            Some(s) => {
                // The same publisher, resuming: its old connection, if it lingers, goes. In
                // a cluster it may come from another relay (this one held a mirror), and
                // it resends from the first chunk the store does not hold yet.
                let old = s.publisher.replace(conn);
                s.publisher_gone_since = None;
                s.remote = false;
                if s.player.is_some() && s.player != player {
                    s.player = None;
                    rewrite_key = s.key.filter(|_| s.archived);
                }
                let next = if self.config.cluster {
                    s.stored
                } else {
                    s.next_seq
                };
                if let Some(old) = old {
                    self.close(old);
                }
                next
            }
            None => {
                let mut s = Session::new(Some(conn), Some(resume::digest(&key)), archived);
                s.player = player.clone();
                self.sessions.insert(name.clone(), s);
                if archived {
                    // Its key file first, so that it can resume after a restart.
                    self.actions.push_back(RelayAction::ArchiveKey(
                        name.clone(),
                        ResumeKey::new(&key, player),
                    ));
                }
                0
            }
        };
        if let Some((end, index_at)) = reopen {
            self.actions.push_back(RelayAction::ArchiveReopen {
                session: name.clone(),
                end,
                index_at,
            });
        }
        if let Some(digest) = rewrite_key {
            // The player binding was cleared: so it stays after a restart (wire.md §4.1).
            let key = ResumeKey {
                digest,
                player: None,
            };
            self.actions
                .push_back(RelayAction::ArchiveKey(name.clone(), key));
        }
        self.set_stage(
            conn,
            Stage::Publisher {
                session: name.clone(),
            },
        );
        self.send(conn, Message::Resume(next));
        self.attach_waiting(&name);
        self.rearm_session(&name);
    }

    /// A `Publish` refused: the error sent, and the shell told who was refused what.
    pub(super) fn refuse(&mut self, conn: ConnId, session: String, code: ErrorCode, message: &str) {
        self.actions.push_back(RelayAction::Refused {
            conn,
            session,
            code,
        });
        self.fail(conn, code, message);
    }

    /// Publishers waiting for the archive's answer about session `name`, oldest first.
    pub(super) fn claiming(&self, name: &str) -> Vec<Claimer> {
        let mut out: Vec<Claimer> = self
            .conns
            .iter()
            .filter_map(|(&c, st)| match &st.stage {
                Stage::Claiming {
                    session,
                    key,
                    resume,
                    player,
                    ..
                } if session == name => Some((c, *key, *resume, player.clone())),
                _ => None,
            })
            .collect();
        out.sort_unstable_by_key(|e| e.0);
        out
    }

    /// The answer to [`RelayAction::Lookup`]: the session as found in the archive, if it is
    /// there. It comes back as an ended session whose viewers read it from the archive; or,
    /// cut short by a relay restart and with a key file, as a live session waiting for its
    /// publisher to resume it (`wire.md` §4.1), holding the key chunk and backlog read back
    /// ([`Archived::key_chunk`], [`Archived::backlog`]) as far as they check out.
    pub fn restored(&mut self, name: &str, found: Option<Archived>, now: u64) {
        self.now = now;
        self.lookups.remove(name);
        let claimers = self.claiming(name);
        let Some(a) = found else {
            // Nothing on disk: the first publisher starts the session, the others find it
            // taken (or resume it, with its key).
            for (conn, key, _, player) in claimers {
                self.claim(conn, name.to_string(), true, key, player);
            }
            return;
        };
        if !self.sessions.contains_key(name) {
            let key = a.key.as_ref().map(|k| k.digest);
            let mut s = Session::new(None, key, true);
            s.header = Some(a.header);
            s.next_seq = a.chunks;
            if !a.finished && a.key.is_some() {
                if self.config.cluster {
                    // Live in the cluster: a mirror of the store's stream until its
                    // publisher resumes here; it waits for no publisher (another relay has
                    // it).
                    s.remote = true;
                    s.stored = a.chunks;
                } else {
                    // Cut short by a restart, and resumable: live, waiting for its
                    // publisher as after a lost connection (the publisher timeout runs from
                    // now), with the backlog it held before the restart, as far as the file
                    // gives it back.
                    s.reopen = Some((a.end, a.index_at));
                    s.publisher_gone_since = Some(now);
                }
                s.player = a.key.and_then(|k| k.player);
                s.key_chunk = a
                    .key_chunk
                    .filter(|k| k.len() <= KEY_CHUNK_KEPT_MAX && is_key_chunk(k));
                let kept = self.restore_backlog(a.backlog, a.chunks);
                // As `GET /sessions` showed them before: the stream's bytes (up to its last
                // chunk of the publisher's, not an index written as it stopped) and the
                // latest frame chunk's song time (in the backlog read back, which ends with
                // the session's last chunk).
                s.bytes = a.index_at.unwrap_or(a.end);
                s.song_time = kept
                    .iter()
                    .filter_map(|k| frames_t0(&k.bytes))
                    .fold(0.0, f32::max);
                s.backlog_bytes = kept.iter().map(|k| k.bytes.len()).sum();
                self.backlog_total += s.backlog_bytes;
                s.backlog = kept;
            } else {
                s.ended = Some(if a.finished {
                    EndReason::Finished
                } else {
                    EndReason::PublisherGone
                });
            }
            self.sessions.insert(name.to_string(), s);
            for c in self.attach_waiting(name) {
                self.join(c);
            }
            self.rearm_session(name);
        } else if self.sessions.get(name).is_some_and(|s| s.remote) {
            // A mirror the lookup found ahead of it: caught up with the chunks read back
            // (in order from the next it lacks; the store's own feed gives the rest).
            let chunks = a.chunks;
            for c in a.backlog.iter().cloned() {
                self.mirrored(name, c, now);
            }
            if self.sessions.get(name).is_some_and(|s| s.next_seq < chunks) {
                // The chunks read back do not run on from where this mirror got to (they
                // start after a gap, and not at a keyframe chunk): it starts again from
                // what the lookup found, as a mirror looked up afresh would, rather than
                // take a publisher back from a point the store is past (its resent chunks
                // would be stored twice). Complete-mode viewers read the gap from the store.
                let kept = self.restore_backlog(a.backlog, chunks);
                if let Some(s) = self.sessions.get_mut(name) {
                    self.backlog_total -= s.backlog_bytes;
                    s.backlog_bytes = kept.iter().map(|k| k.bytes.len()).sum();
                    self.backlog_total += s.backlog_bytes;
                    s.backlog = kept;
                    s.next_seq = chunks;
                    s.stored = chunks;
                    s.bytes = s.bytes.max(a.end);
                }
            }
            if let Some(s) = self.sessions.get_mut(name) {
                s.stored = s.stored.max(chunks.min(s.next_seq));
            }
        }
        // Each publisher waiting resumes the session if it proves it is its publisher
        // (wire.md §4.1); any other finds it in the archive.
        for (conn, key, resume, player) in claimers {
            let proves = self.sessions.get(name).is_some_and(|s| {
                s.ended.is_none() && resume && s.key.is_some_and(|d| resume::proves(&d, &key))
            });
            // In a cluster, a live session found in the store is another relay's
            // publisher's: busy, as for any live session (`wire.md` §5).
            let live =
                self.config.cluster && self.sessions.get(name).is_some_and(|s| s.ended.is_none());
            if proves {
                self.claim(conn, name.to_string(), resume, key, player);
            } else if live {
                self.refuse(
                    conn,
                    name.to_string(),
                    ErrorCode::SessionBusy,
                    "the session has a publisher",
                );
            } else {
                self.refuse(
                    conn,
                    name.to_string(),
                    ErrorCode::SessionExists,
                    "a session of this name is in the archive",
                );
            }
        }
    }

    /// The backlog of a session resumed after a restart, from the chunks the shell read
    /// back ([`Archived::backlog`]): kept only if they are the session's last chunks, whole
    /// and in sequence up to chunk `chunks - 1`, and only as many of the last as the
    /// backlog's limits and the budget of all backlogs allow, as for chunks that come live
    /// (the newest stays over the session's bytes limit, not over the budget).
    fn restore_backlog(&self, read: Vec<Bytes>, chunks: u32) -> VecDeque<Kept> {
        let first = u32::try_from(read.len())
            .ok()
            .and_then(|n| chunks.checked_sub(n));
        let limits = self.backlog_limits();
        let mut kept = VecDeque::with_capacity(read.len());
        for (c, want) in read.into_iter().zip(first.unwrap_or(0)..) {
            match chunk_info(&c) {
                Some((seq, keyframe))
                    if first.is_some()
                        && seq == want
                        && c.len() <= limits.max_chunk
                        && matches!(
                            crate::net::wire::check_chunk_size(&c),
                            Ok(Some(n)) if n == c.len()
                        ) =>
                {
                    kept.push_back(Kept {
                        seq,
                        bytes: c,
                        keyframe,
                    });
                }
                // Not what the session held: none of it.
                _ => return VecDeque::new(),
            }
        }
        let room = self
            .config
            .total_backlog_bytes
            .saturating_sub(self.backlog_total);
        let mut bytes: usize = kept.iter().map(|k| k.bytes.len()).sum();
        while !kept.is_empty()
            && ((kept.len() > 1
                && (kept.len() > limits.chunks || bytes > self.config.backlog_bytes))
                || bytes > room)
        {
            if let Some(k) = kept.pop_front() {
                bytes -= k.bytes.len();
            }
        }
        kept
    }

    /// The shell could not write a session's archive: its viewers are served from memory
    /// only from now on.
    pub fn archive_failed(&mut self, name: &str) {
        if let Some(s) = self.sessions.get_mut(name) {
            s.archived = false;
        }
    }

    /// The publisher's `StreamHeader`: kept, archived, and sent to the viewers waiting.
    pub(super) fn header(&mut self, conn: ConnId, name: &str, h: Bytes) {
        match StreamHeader::parse_prefix_len(&h) {
            Ok(Some((_, len))) if len == h.len() => {}
            Ok(Some((_, len))) => {
                let extra = h.len() - len;
                return self.fail(
                    conn,
                    ErrorCode::BadStreamHeader,
                    &format!("{extra} bytes after the stream header"),
                );
            }
            Ok(None) => {
                return self.fail(
                    conn,
                    ErrorCode::BadStreamHeader,
                    "the stream header is cut short",
                );
            }
            Err(e) => {
                return self.fail(
                    conn,
                    ErrorCode::BadStreamHeader,
                    &format!("not a stream header: {e}"),
                );
            }
        }
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
        s.bytes = h.len() as u64;
        let viewers = s.viewers.clone();
        self.actions
            .push_back(RelayAction::ArchiveHeader(name.to_string(), h));
        for v in viewers {
            self.join(v);
        }
    }

    /// The publisher's next chunk: kept in the backlog, archived, acknowledged, and
    /// delivered to the viewers.
    pub(super) fn chunk(&mut self, conn: ConnId, name: &str, c: Bytes) {
        // The shell's codec refuses a chunk over its type's limit from its header; checked
        // again here, for chunks handed over by other means.
        if let Err(e) = crate::net::wire::check_chunk_size(&c) {
            return self.fail(conn, ErrorCode::MalformedChunk, &e.to_string());
        }
        let Some((seq, keyframe)) = chunk_info(&c) else {
            return self.fail(conn, ErrorCode::MalformedChunk, "no chunk header");
        };
        let limit = self.config.backlog_chunks.max(1);
        let (max_bytes, max_total) = (self.config.backlog_bytes, self.config.total_backlog_bytes);
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
        let cluster = self.config.cluster;
        if seq < s.next_seq {
            // Sent again by a resuming publisher: already stored (in a cluster, once the
            // store confirms it: the `Ack` waits for that).
            if !cluster || seq < s.stored {
                self.ack(conn, seq);
            }
            return;
        }
        if seq != s.next_seq {
            return self.fail(conn, ErrorCode::UnexpectedMessage, "chunk sequence gap");
        }
        // The relay's budget for all backlogs: what other sessions hold plus this chunk
        // must fit (this session's own backlog can be dropped to make room).
        let others = self.backlog_total - s.backlog_bytes;
        if others + c.len() > max_total {
            return self.fail(
                conn,
                ErrorCode::OverBudget,
                "the relay's backlog budget is spent",
            );
        }
        s.keep(
            seq,
            &c,
            keyframe,
            &mut self.backlog_total,
            (limit, max_bytes, max_total),
        );
        let viewers = s.viewers.clone();
        self.actions
            .push_back(RelayAction::ArchiveChunk(name.to_string(), c.clone()));
        if !cluster {
            self.ack(conn, seq);
        }
        for &v in &viewers {
            self.deliver(v, &c, keyframe);
        }
        #[cfg(feature = "integrity")]
        self.witness(conn, name, &c, &viewers);
    }

    /// A witness relay countersigns a checkpoint or final checkpoint it stored: the
    /// statement goes to the publisher, the session's viewers and the shell.
    #[cfg(feature = "integrity")]
    fn witness(&mut self, conn: ConnId, name: &str, chunk: &Bytes, viewers: &[ConnId]) {
        let Some((w, zero)) = &self.witness else {
            return;
        };
        let Some((h, hl)) = ChunkHeader::parse_at(chunk) else {
            return;
        };
        let ChunkType::Unknown(kind) = h.kind else {
            return;
        };
        let Some(payload) = chunk.get(hl..hl + h.len as usize) else {
            return;
        };
        let Some(statement) = w.countersign(kind, payload, zero.saturating_add(self.now)) else {
            return;
        };
        let bytes = Bytes::copy_from_slice(&statement.to_bytes());
        self.actions
            .push_back(RelayAction::ArchiveWitness(name.to_string(), bytes.clone()));
        for &c in std::iter::once(&conn).chain(viewers) {
            self.send_witness(c, bytes.clone());
        }
    }

    /// The session ends: live viewers get `End` now, complete-mode viewers after their last
    /// chunk.
    pub(super) fn end(&mut self, name: &str, reason: EndReason) {
        let Some(s) = self.sessions.get_mut(name) else {
            return;
        };
        if s.ended.is_some() {
            return;
        }
        s.ended = Some(reason);
        s.publisher = None;
        let viewers = s.viewers.clone();
        self.actions
            .push_back(RelayAction::SessionEnded(name.to_string(), reason));
        for v in viewers {
            let complete = self
                .conns
                .get(&v)
                .and_then(|c| c.viewer())
                .is_some_and(|x| x.mode == crate::net::wire::ViewMode::Complete);
            if complete {
                // It gets End after its last chunk (refill_complete_viewer).
                self.actions.push_back(RelayAction::Ready(v));
            } else {
                self.finish(v, reason);
            }
        }
        // The live viewers are closing: out of the session, so that it can be forgotten.
        let conns = &self.conns;
        if let Some(s) = self.sessions.get_mut(name) {
            s.viewers
                .retain(|c| conns.get(c).is_some_and(|c| c.viewer().is_some()));
        }
        self.rearm_session(name);
    }
}

/// The song time of a frame chunk's first frame (its `t0`), for `GET /sessions`; `None` for
/// another chunk or a time that is not finite.
pub(super) fn frames_t0(chunk: &[u8]) -> Option<f32> {
    let (h, _) = ChunkHeader::parse_at(chunk)?;
    (matches!(h.kind, ChunkType::Keyframes | ChunkType::Frames) && h.t0.is_finite()).then_some(h.t0)
}
