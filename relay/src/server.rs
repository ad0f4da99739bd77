//! The relay's network shell, the same for every transport: the sans-IO [`Relay`] behind
//! one mutex, a clock, the archive's file I/O, and [`Server::drive`], which runs one
//! connection given its incoming messages and a sink for its outgoing ones. TCP (`tcp.rs`)
//! and WebSocket (`ws.rs`) differ only in how they turn a socket into those two.
//!
//! Per connection, a reader loop hands messages to the relay, and a writer task takes the
//! relay's messages for it when the relay says it has some, so a slow socket only slows
//! its own writer. Archive writes are done in the order the relay emits them (the archive
//! lock is taken before the relay's is let go); archive reads run on the blocking pool and
//! come back to the relay as [`Relay::fetched`] and [`Relay::restored`]. One timer task
//! sleeps until the relay's earliest deadline ([`Relay::poll_timeout`]) and is woken to
//! re-arm when a call leaves an earlier one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::sync::{watch, Notify};
use tracing::Instrument;

use crate::gate::ReadGate;
use bsor_stream_core::net::archive::{self, ArchiveError, ArchiveWriter};
use bsor_stream_core::net::relay::{ConnId, Fetch, Relay, RelayAction, RelayConfig, Tokens};
use bsor_stream_core::net::wire::{EndReason, Message, WireError, DEFAULT_MAX_FRAME};

/// Messages coming in on a connection, whatever the transport.
pub type MessageStream = Pin<Box<dyn Stream<Item = Result<Message, WireError>> + Send>>;
/// Messages going out on a connection, whatever the transport.
pub type MessageSink = Pin<Box<dyn Sink<Message, Error = WireError> + Send>>;

/// Messages a writer takes from the relay at a time.
const BATCH: usize = 64;
/// Archive reads running at once.
const READERS: usize = 8;
/// Bytes of chunks a writer takes from the relay at a time (one chunk at least).
const BATCH_BYTES: usize = 16 << 10;
/// How long a closing connection may take to send what waits for it.
const LINGER: Duration = Duration::from_secs(2);

/// The shell's settings (the relay's own are in [`RelayConfig`]).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The limit on a frame's length.
    pub max_frame: u32,
    /// Archive every session into this folder.
    pub archive: Option<PathBuf>,
    /// Connections served at once, over all listeners; one more is closed as soon as it is
    /// accepted. With the relay's per-connection queue bounds and `max_frame`, this bounds
    /// the relay's memory.
    pub max_connections: usize,
    /// Connections at once in their TLS handshake, or on the WebSocket listener and not
    /// upgraded (their HTTP requests included), over all addresses (0: no limit); one more
    /// is closed as soon as it is accepted. An HTTP connection may hold a 16 KiB request
    /// head, a 16 KiB file piece and hyper's buffers (about 35 KiB measured for a slow
    /// head, more for pipelined range requests), which `max_connections` alone would let
    /// reach hundreds of MB.
    pub max_handshakes: usize,
    /// With an archive: the file of each session whose song finished and whose archive is
    /// whole is sent here once it is closed (for a replay store to keep). Never waits: when
    /// the channel is full the session is logged and not sent.
    pub finished: Option<tokio::sync::mpsc::Sender<Finished>>,
    /// Share sessions with other relays through NATS JetStream (`wire.md` §5), in place of
    /// an archive folder (the two are not used together).
    #[cfg(feature = "cluster")]
    pub cluster: Option<crate::cluster::Cluster>,
}

/// A session that finished whole, for a replay store (`http.md` §8.12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Its archive file.
    pub path: PathBuf,
    /// The player its publisher's token grants (a `player:` line's), if any: the session
    /// may be stored as this player's replay only.
    pub player: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame: DEFAULT_MAX_FRAME,
            archive: None,
            max_connections: 10_000,
            max_handshakes: 2_048,
            finished: None,
            #[cfg(feature = "cluster")]
            cluster: None,
        }
    }
}

/// How the shell reaches one connection's writer task: woken when the relay has messages
/// for it, or told to close.
struct WriterHandle {
    wake: Notify,
    closing: watch::Sender<bool>,
}

struct Shared {
    relay: Mutex<Relay>,
    writers: Mutex<HashMap<ConnId, Arc<WriterHandle>>>,
    archive: Option<Mutex<ArchiveWriter>>,
    start: Instant,
    config: ServerConfig,
    /// The relay's handshake timeout, which bounds a TLS or WebSocket handshake too.
    handshake: Duration,
    /// Connections accepted and not yet ended.
    open: std::sync::atomic::AtomicUsize,
    /// Wakes the timer task to re-arm (or, when the server is dropped, to stop).
    timer: Arc<Notify>,
    /// The deadline the timer task sleeps until (`u64::MAX` for none), in the relay's
    /// milliseconds.
    armed: AtomicU64,
    /// Permits for archive reads running at once.
    readers: Arc<tokio::sync::Semaphore>,
    /// Connections from each address in a TLS handshake or WebSocket upgrade, and how many
    /// one address may have ([`RelayConfig::connections_per_address`]; 0: no limit).
    /// Connections in a handshake: per address, and in all.
    handshakes: Mutex<(HashMap<std::net::IpAddr, usize>, usize)>,
    handshakes_per_address: usize,
    /// The sessions' `.witness` files, with an archive.
    witness_files: Option<Mutex<WitnessFiles>>,
}

/// The `.witness` files beside the archive (`integrity.md` §12.2): opened for appending on
/// a session's first statement, each record written whole; synced after a final
/// checkpoint's statement, when the session ends, and at shutdown.
struct WitnessFiles {
    dir: PathBuf,
    open: HashMap<String, std::fs::File>,
}

impl WitnessFiles {
    /// Appends one record (its length as a `u32`, then the statement).
    fn append(&mut self, session: &str, statement: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let file = match self.open.entry(session.to_string()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = archive::path(&self.dir, session).with_extension("witness");
                e.insert(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)?,
                )
            }
        };
        let mut record = Vec::with_capacity(4 + statement.len());
        record.extend_from_slice(&(statement.len() as u32).to_le_bytes());
        record.extend_from_slice(statement);
        file.write_all(&record)?;
        // Byte 49 of a statement is its subject: 1 for the final checkpoint.
        if statement.get(49) == Some(&1) {
            file.sync_data()?;
        }
        Ok(())
    }

    /// A session ended: its file is synced and closed.
    fn end(&mut self, session: &str) -> std::io::Result<()> {
        match self.open.remove(session) {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Every file synced and closed.
    fn close_all(&mut self) -> std::io::Result<()> {
        let mut first = Ok(());
        for (_, f) in self.open.drain() {
            if let Err(e) = f.sync_data() {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.timer.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A relay served over any number of listeners (cheap to clone).
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A server for a relay with these limits and credentials; with an archive folder,
    /// sessions are archived there (`relay.archive` is set to match). Starts the timer task
    /// that handles the relay's deadlines, so it must be called inside a tokio runtime.
    pub fn new(
        mut relay: RelayConfig,
        tokens: Tokens,
        config: ServerConfig,
    ) -> std::io::Result<Server> {
        let archive = match &config.archive {
            Some(dir) => Some(Mutex::new(ArchiveWriter::new(dir)?)),
            None => None,
        };
        relay.archive = archive.is_some();
        #[cfg(feature = "cluster")]
        if config.cluster.is_some() {
            if archive.is_some() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a cluster relay keeps its sessions in JetStream: no archive folder with it",
                ));
            }
            relay.cluster = true;
            relay.archive = true;
        }
        let witness_files = config.archive.as_ref().map(|dir| {
            Mutex::new(WitnessFiles {
                dir: dir.clone(),
                open: HashMap::new(),
            })
        });
        let handshake = Duration::from_millis(relay.handshake_timeout_ms);
        let handshakes_per_address = relay.connections_per_address;
        relay.publisher_frame_limit = relay.publisher_frame_limit.min(config.max_frame);
        relay.handshake_frame_limit = relay.handshake_frame_limit.min(config.max_frame);
        let shared = Arc::new(Shared {
            relay: Mutex::new(Relay::new(relay, tokens)),
            writers: Mutex::new(HashMap::new()),
            archive,
            start: Instant::now(),
            config,
            handshake,
            open: std::sync::atomic::AtomicUsize::new(0),
            timer: Arc::new(Notify::new()),
            armed: AtomicU64::new(u64::MAX),
            readers: Arc::new(tokio::sync::Semaphore::new(READERS)),
            handshakes: Mutex::new((HashMap::new(), 0)),
            handshakes_per_address,
            witness_files,
        });
        tokio::spawn(run_timer(Arc::downgrade(&shared), shared.timer.clone()));
        #[cfg(feature = "cluster")]
        if let Some(c) = &shared.config.cluster {
            let weak = Arc::downgrade(&shared);
            c.attach(Arc::new(move |f| {
                if let Some(s) = weak.upgrade() {
                    s.with_relay(f);
                }
            }));
        }
        Ok(Server { shared })
    }

    /// A place for a connection from `ip` in its TLS handshake or WebSocket upgrade, held
    /// until the returned guard is dropped. `None` when as many connections from that
    /// address as the per-address cap allows are in one already, or as many from all
    /// addresses as [`ServerConfig::max_handshakes`] allows: the connection is then closed
    /// without a message, since nothing can be said to it before its handshake (after it,
    /// the relay's own per-address cap answers `OverBudget`).
    pub(crate) fn handshake_slot(&self, ip: Option<std::net::IpAddr>) -> Option<HandshakeSlot> {
        let Some(ip) = ip else {
            return Some(HandshakeSlot {
                shared: None,
                ip: None,
            });
        };
        let cap = self.shared.handshakes_per_address;
        let total_cap = self.shared.config.max_handshakes;
        let mut guard = lock(&self.shared.handshakes);
        let (per_address, total) = &mut *guard;
        if total_cap > 0 && *total >= total_cap {
            tracing::info!(peer = %ip, cap = total_cap, "too many connections in a handshake; closing a new connection");
            return None;
        }
        let now = per_address.entry(ip).or_insert(0);
        if cap > 0 && *now >= cap {
            tracing::info!(peer = %ip, cap, "too many handshakes from one address; closing a new connection");
            return None;
        }
        *now += 1;
        *total += 1;
        Some(HandshakeSlot {
            shared: Some(self.shared.clone()),
            ip: Some(ip),
        })
    }

    /// The limit on a frame's length.
    pub fn max_frame(&self) -> u32 {
        self.shared.config.max_frame
    }

    /// Replaces the relay's credentials (see [`Relay::set_tokens`]).
    pub fn set_tokens(&self, tokens: Tokens) {
        lock(&self.shared.relay).set_tokens(tokens);
    }

    /// How long a client may take over its handshakes (TLS, WebSocket, `Hello`).
    pub fn handshake_timeout(&self) -> Duration {
        self.shared.handshake
    }

    /// Sessions the relay holds.
    pub fn sessions(&self) -> usize {
        lock(&self.shared.relay).sessions()
    }

    /// At most `max` of the sessions the relay holds (see [`Relay::session_views`]).
    /// In a cluster, the live sessions other relays hold follow, with their names only
    /// (what this relay knows of them without following them).
    pub fn session_views(&self, max: usize) -> Vec<bsor_stream_core::net::relay::SessionView> {
        #[allow(unused_mut)]
        let mut views = lock(&self.shared.relay).session_views(max);
        #[cfg(feature = "cluster")]
        if let Some(c) = &self.shared.config.cluster {
            let held: std::collections::HashSet<&str> =
                views.iter().map(|v| v.name.as_str()).collect();
            let more = c.elsewhere(&held, max.saturating_sub(views.len()));
            views.extend(
                more.into_iter()
                    .map(|name| bsor_stream_core::net::relay::SessionView {
                        name,
                        header: None,
                        live: true,
                        viewers: 0,
                        bytes: 0,
                        song_time: 0.0,
                    }),
            );
        }
        views
    }

    /// Whether session `name` is held and has not ended (see [`Relay::is_live`]).
    pub fn is_live(&self, name: &str) -> bool {
        lock(&self.shared.relay).is_live(name)
    }

    /// Makes the relay a witness with this key (`integrity.md` §12): its statements carry
    /// the system clock's Unix time at which each checkpoint came.
    #[cfg(feature = "integrity")]
    pub fn set_witness(&self, witness: bsor_stream_core::integrity::witness::Witness) {
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let zero = unix_now.saturating_sub(self.shared.now());
        lock(&self.shared.relay).set_witness(witness, zero);
    }

    /// The archive's folder, if sessions are archived.
    pub fn archive_dir(&self) -> Option<&std::path::Path> {
        self.shared.config.archive.as_deref()
    }

    /// Finishes the archive: every open file is synced and closed, a valid truncated
    /// stream (sessions still live get no footer). Call before the process exits.
    pub fn shutdown(&self) -> Result<(), ArchiveError> {
        let _relay = lock(&self.shared.relay);
        if let Some(w) = &self.shared.witness_files {
            if let Err(err) = lock(w).close_all() {
                tracing::warn!(%err, "syncing the witness files failed");
            }
        }
        match &self.shared.archive {
            Some(a) => lock(a).close_all(),
            None => Ok(()),
        }
    }

    /// Runs one connection until it closes: `incoming` to the relay, the relay's messages
    /// for it into `outgoing`.
    pub async fn drive(&self, incoming: MessageStream, outgoing: MessageSink) {
        self.drive_from(None, None, incoming, outgoing).await;
    }

    /// [`drive`](Self::drive) for a connection from `peer` (counted against the relay's
    /// per-address cap) whose socket reads through `gate`: after each message the gate
    /// lets the peer send one more frame of the relay's current limit for it
    /// ([`Relay::frame_limit`]), so a connection that is not a publisher makes the relay
    /// buffer at most about 1 KiB.
    pub async fn drive_from(
        &self,
        peer: Option<std::net::IpAddr>,
        gate: Option<ReadGate>,
        mut incoming: MessageStream,
        mut outgoing: MessageSink,
    ) {
        let shared = &self.shared;
        let (closing, mut closed) = watch::channel(false);
        let writer = Arc::new(WriterHandle {
            wake: Notify::new(),
            closing,
        });
        let conn = shared.with_relay(|r, now| match peer {
            Some(ip) => r.connect_from(now, ip),
            None => r.connect(now),
        });
        if let Some(g) = &gate {
            g.taken(shared.with_relay(|r, _| r.frame_limit(conn)));
        }
        tracing::debug!(conn, "connection opened");
        lock(&shared.writers).insert(conn, writer.clone());
        // Refused as it connected (over a budget): its error waits, and it closes after.
        if shared.with_relay(|r, _| r.is_closing(conn)) {
            writer.closing.send_replace(true);
        }
        let out_shared = shared.clone();
        let out_writer = writer.clone();
        let writing = tokio::spawn(async move {
            loop {
                // At most BATCH messages and about BATCH_BYTES of chunks at a time: what the
                // writer holds for a peer that does not read.
                let (batch, more): (Vec<Message>, bool) = out_shared.with_relay(|r, _| {
                    let mut bytes = 0;
                    let mut batch = Vec::new();
                    let mut more = true;
                    while batch.len() < BATCH && bytes < BATCH_BYTES {
                        let Some(m) = r.poll_outgoing(conn) else {
                            more = false;
                            break;
                        };
                        if let Message::Chunk(c) = &m {
                            bytes += c.len();
                        }
                        batch.push(m);
                    }
                    // A `Resume` or an `Ack` says the archive holds what it names (wire.md
                    // §3, §4.1), an `End` that the session's file is finished: the archive
                    // writes the relay asked for before it are done under the archive's
                    // lock, taken before the relay's was let go, so taking it (still under
                    // the relay's) waits for them.
                    let promises = batch.iter().any(|m| {
                        matches!(m, Message::Resume(_) | Message::Ack(_) | Message::End(_))
                    });
                    if let (true, Some(a)) = (promises, &out_shared.archive) {
                        drop(lock(a));
                    }
                    (batch, more)
                });
                for m in batch {
                    if outgoing.feed(m).await.is_err() {
                        return;
                    }
                }
                if outgoing.flush().await.is_err() {
                    return;
                }
                if more {
                    continue;
                }
                if *out_writer.closing.borrow() && out_shared.with_relay(|r, _| r.queued(conn)) == 0
                {
                    let _ = outgoing.close().await;
                    return;
                }
                out_writer.wake.notified().await;
            }
        });
        loop {
            tokio::select! {
                next = incoming.next() => match next {
                    Some(Ok(m)) => {
                        let limit = shared.with_relay(|r, now| {
                            r.receive(conn, m, now);
                            r.frame_limit(conn)
                        });
                        if let Some(g) = &gate {
                            g.taken(limit);
                        }
                    }
                    // The transport failed or the peer went away (a reset, an end of file
                    // mid-frame): a disconnect, not a fault, and nothing to tell the peer.
                    Some(Err(WireError::Io(e))) => {
                        if is_disconnect(&e) {
                            tracing::debug!(conn, err = %e, "peer disconnected");
                        } else {
                            tracing::info!(conn, err = %e, "connection lost");
                        }
                        break;
                    }
                    Some(Err(e)) => {
                        tracing::info!(conn, err = %e, code = ?e.code(), "protocol fault; closing the connection");
                        shared.with_relay(|r, _| r.reject(conn, &e));
                        break;
                    }
                    None => {
                        tracing::debug!(conn, "peer closed the connection");
                        break;
                    }
                },
                _ = closed.wait_for(|c| *c) => break,
            }
        }
        // Let the writer send what waits (an error, say) before the socket goes, but no
        // longer than LINGER (the peer may have stopped reading).
        writer.closing.send_replace(true);
        writer.wake.notify_one();
        let abort = writing.abort_handle();
        if tokio::time::timeout(LINGER, writing).await.is_err() {
            abort.abort();
        }
        shared.with_relay(|r, now| r.disconnect(conn, now));
        lock(&shared.writers).remove(&conn);
        tracing::debug!(conn, "connection closed");
    }
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Runs `f` on the relay, then does what it asked for.
    fn with_relay<T>(self: &Arc<Self>, f: impl FnOnce(&mut Relay, u64) -> T) -> T {
        let now = self.now();
        let mut relay = lock(&self.relay);
        let out = f(&mut relay, now);
        if relay
            .poll_timeout()
            .is_some_and(|d| d < self.armed.load(Ordering::Acquire))
        {
            self.timer.notify_one();
        }
        let actions: Vec<RelayAction> = std::iter::from_fn(|| relay.poll_action()).collect();
        // The cluster's writes are queued under the relay's lock: in the relay's order.
        #[cfg(feature = "cluster")]
        if let Some(c) = &self.config.cluster {
            for a in &actions {
                c.enqueue(a);
            }
        }
        // The players the finished sessions' publishers were granted, read while the
        // relay still holds the sessions.
        let granted: Vec<(String, Option<String>)> = actions
            .iter()
            .filter_map(|a| match a {
                RelayAction::SessionEnded(s, EndReason::Finished) => {
                    Some((s.clone(), relay.session_player(s).map(str::to_owned)))
                }
                _ => None,
            })
            .collect();
        let writes = actions.iter().any(|e| {
            matches!(
                e,
                RelayAction::ArchiveHeader(..)
                    | RelayAction::ArchiveChunk(..)
                    | RelayAction::SessionEnded(..)
                    | RelayAction::ArchiveKey(..)
                    | RelayAction::ArchiveReopen { .. }
            )
        });
        let witness_writes = actions.iter().any(|e| {
            matches!(
                e,
                RelayAction::ArchiveWitness(..) | RelayAction::SessionEnded(..)
            )
        });
        // The same for the witness files: statements in the order the relay made them.
        let witness = match (&self.witness_files, witness_writes) {
            (Some(w), true) => Some(lock(w)),
            _ => None,
        };
        // Archive writes keep the relay's order: their lock is taken before the relay's
        // is let go.
        let archive = match (&self.archive, writes) {
            (Some(a), true) => Some(lock(a)),
            _ => None,
        };
        drop(relay);
        if let Some(mut w) = witness {
            write_witness(&mut w, &actions);
        }
        // Most calls (a viewer's ack of nothing, a chunk with no viewer) ask for nothing:
        // skip the writers' lock then (with 1000 viewers it cost as much as the fan-out).
        if !actions.is_empty() {
            self.dispatch(actions, archive, &granted);
        }
        out
    }

    /// Does what the relay asked for (not generic, so that the tasks it starts may call
    /// [`with_relay`](Self::with_relay) again).
    fn dispatch(
        self: &Arc<Self>,
        actions: Vec<RelayAction>,
        archive: Option<std::sync::MutexGuard<'_, ArchiveWriter>>,
        granted: &[(String, Option<String>)],
    ) {
        // Writers are woken before the archive is written: a viewer's chunks go out while
        // the file is written (a writer sending an `Ack`, a `Resume` or an `End` waits for
        // the archive's lock, held until then); archive reads start after the writes.
        self.wake_writers(&actions);
        let failed = match archive {
            Some(mut a) => write_archive(&mut a, &actions),
            None => Vec::new(),
        };
        if let (Some(dir), Some(tx)) = (&self.config.archive, &self.config.finished) {
            announce_finished(dir, tx, &actions, &failed, granted);
        }
        for action in actions {
            #[cfg(feature = "cluster")]
            if let Some(c) = &self.config.cluster {
                if c.dispatch(&action) {
                    continue;
                }
            }
            match action {
                RelayAction::Ready(_) | RelayAction::Close(_) => {}
                RelayAction::Fetch(req) => self.spawn_fetch(req),
                RelayAction::Lookup(session) => self.spawn_lookup(session),
                RelayAction::SessionEnded(session, reason) => {
                    tracing::info!(%session, ?reason, "session ended");
                }
                RelayAction::ArchiveHeader(session, _) => {
                    tracing::info!(%session, "session started");
                }
                RelayAction::ArchiveReopen { session, end, .. } => {
                    tracing::info!(%session, end, "session resumed after a restart");
                }
                RelayAction::ArchiveChunk(..)
                | RelayAction::ArchiveWitness(..)
                | RelayAction::ArchiveKey(..) => {}
                RelayAction::Refused {
                    conn,
                    session,
                    code,
                } => {
                    // The peer's address is in the connection's span (accept_each).
                    tracing::warn!(conn, %session, ?code, "publisher refused");
                }
            }
        }
        if !failed.is_empty() {
            self.with_relay(|r, _| {
                for s in &failed {
                    r.archive_failed(s);
                }
            });
        }
    }

    /// Wakes the writers of the connections `actions` made ready or closed.
    fn wake_writers(&self, actions: &[RelayAction]) {
        let writers = lock(&self.writers);
        for action in actions {
            match action {
                RelayAction::Ready(c) => {
                    if let Some(w) = writers.get(c) {
                        w.wake.notify_one();
                    }
                }
                RelayAction::Close(c) => {
                    if let Some(w) = writers.get(c) {
                        w.closing.send_replace(true);
                        w.wake.notify_one();
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads chunks from the archive on the blocking pool, for [`Relay::fetched`].
    fn spawn_fetch(self: &Arc<Self>, req: Fetch) {
        let Some(dir) = self.config.archive.clone() else {
            return;
        };
        let me = self.clone();
        // At most READERS archive reads at once: each holds a read buffer and a blocking
        // thread (with 1,000 complete-mode viewers the pool grew to hundreds of threads).
        tokio::spawn(async move {
            let Ok(_permit) = me.readers.clone().acquire_owned().await else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || {
                let file = archive::path(&dir, &req.session);
                let got =
                    archive::read_chunks(&file, req.offset, req.seq, req.max_chunks, req.max_bytes);
                me.with_relay(|r, now| r.fetched(req.conn, req.seq, got, now));
            })
            .await;
        });
    }

    /// Looks a session up in the archive on the blocking pool, for [`Relay::restored`].
    fn spawn_lookup(self: &Arc<Self>, session: String) {
        let Some(dir) = self.config.archive.clone() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let file = archive::path(&dir, &session);
            let scanned = {
                let (file, session, me) = (file.clone(), session.clone(), me.clone());
                tokio::task::spawn_blocking(move || {
                    // As much of the stream as a backlog may hold now (the relay checks
                    // again when it takes it).
                    let limits = lock(&me.relay).backlog_limits();
                    let found = match archive::scan_backlog(&file, limits) {
                        Ok(found) => found,
                        Err(err) => {
                            tracing::warn!(%session, %err, "archive lookup failed");
                            None
                        }
                    };
                    // Its key file, if it may be resumed (wire.md §4.1); one that cannot be
                    // read resumes nothing.
                    found.map(|(mut a, span)| {
                        if !a.finished {
                            a.key = archive::read_key(&dir, &session).unwrap_or_else(|err| {
                                tracing::warn!(%session, %err, "reading the key file failed");
                                None
                            });
                        }
                        (a, span)
                    })
                })
                .await
            };
            let Ok(found) = scanned else {
                return;
            };
            // A resumable session gets back the live backlog it held, for its late joiners
            // (§4.1): one archive read among the READERS at once, of at most the backlog's
            // byte limit.
            let resumable = found.as_ref().is_some_and(|(a, _)| a.key.is_some());
            let permit = if resumable {
                me.readers.clone().acquire_owned().await.ok()
            } else {
                None
            };
            let _ = tokio::task::spawn_blocking(move || {
                let found = found.map(|(mut a, span)| {
                    if a.key.is_some() {
                        if let Err(err) = archive::read_backlog(&file, &span, &mut a) {
                            tracing::warn!(%session, %err, "reading the backlog back failed; late joiners start at the next keyframe");
                        }
                    }
                    a
                });
                drop(permit);
                me.with_relay(|r, now| r.restored(&session, found, now));
            })
            .await;
        });
    }
}

/// Does the archive writes among `actions`, in order; returns the sessions whose archive
/// failed (they go on without it).
fn write_archive(a: &mut ArchiveWriter, actions: &[RelayAction]) -> Vec<String> {
    let mut failed = Vec::new();
    for action in actions {
        let (session, result) = match action {
            RelayAction::ArchiveHeader(s, h) => (s, a.header(s, h)),
            RelayAction::ArchiveChunk(s, c) => (s, a.chunk(s, c)),
            RelayAction::SessionEnded(s, reason) => (s, a.end(s, *reason)),
            RelayAction::ArchiveReopen {
                session,
                end,
                index_at,
            } => (session, a.reopen(session, *end, *index_at)),
            RelayAction::ArchiveKey(s, key) => {
                // Without it the session goes on, but cannot be resumed after a restart.
                if let Err(err) = a.key(s, key) {
                    tracing::warn!(session = %s, %err, "writing the key file failed; the session cannot be resumed after a restart");
                }
                continue;
            }
            _ => continue,
        };
        if let Err(err) = result {
            tracing::warn!(%session, %err, "archive write failed; the session goes on without it");
            failed.push(session.clone());
        }
    }
    failed
}

/// Sends the archive files of the sessions among `actions` that finished whole to `tx`.
fn announce_finished(
    dir: &std::path::Path,
    tx: &tokio::sync::mpsc::Sender<Finished>,
    actions: &[RelayAction],
    failed: &[String],
    granted: &[(String, Option<String>)],
) {
    for action in actions {
        if let RelayAction::SessionEnded(s, EndReason::Finished) = action {
            if failed.contains(s) {
                continue;
            }
            let player = granted
                .iter()
                .find(|(g, _)| g == s)
                .and_then(|(_, p)| p.clone());
            let finished = Finished {
                path: archive::path(dir, s),
                player,
            };
            if let Err(e) = tx.try_send(finished) {
                tracing::warn!(session = %s, err = %e, "a finished session was not handed on");
            }
        }
    }
}

/// Appends the witness statements among `actions` to their sessions' files, and closes
/// the files of sessions that ended. A failed write is logged; the relay goes on (the
/// statements still went to the publisher and the viewers).
fn write_witness(w: &mut WitnessFiles, actions: &[RelayAction]) {
    for action in actions {
        let (session, result) = match action {
            RelayAction::ArchiveWitness(s, statement) => (s, w.append(s, statement)),
            RelayAction::SessionEnded(s, _) => (s, w.end(s)),
            _ => continue,
        };
        if let Err(err) = result {
            tracing::warn!(%session, %err, "witness file write failed");
        }
    }
}

/// An error that only says the peer went away.
fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected
    )
}

/// The timer task: sleeps until the relay's earliest deadline, handles it, and again; woken
/// early when a call leaves an earlier deadline. Holds the server only while it works, and
/// ends when the server is dropped.
async fn run_timer(weak: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(s) = weak.upgrade() else { return };
        let deadline = {
            let relay = lock(&s.relay);
            let next = relay.poll_timeout();
            // Stored under the relay's lock: a call that arms an earlier deadline after this
            // sees it, and wakes this task.
            s.armed.store(next.unwrap_or(u64::MAX), Ordering::Release);
            next.map(|d| s.start + Duration::from_millis(d))
        };
        drop(s);
        match deadline {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = wake.notified() => continue,
                }
            }
            None => {
                wake.notified().await;
                continue;
            }
        }
        let Some(s) = weak.upgrade() else { return };
        s.with_relay(|r, now| r.handle_timeout(now));
    }
}

/// A connection's place among its address's handshakes ([`Server::handshake_slot`]).
pub(crate) struct HandshakeSlot {
    shared: Option<Arc<Shared>>,
    ip: Option<std::net::IpAddr>,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        if let (Some(shared), Some(ip)) = (&self.shared, self.ip) {
            let mut guard = lock(&shared.handshakes);
            let (per_address, total) = &mut *guard;
            *total = total.saturating_sub(1);
            if let Some(n) = per_address.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_address.remove(&ip);
                }
            }
        }
    }
}

/// Accepts connections on `listener` until the task is dropped, and runs `serve_one` on
/// each in a task of its own: the accept loop every transport shares. Beyond
/// [`ServerConfig::max_connections`] a new connection is closed at once. A failing accept
/// (out of file descriptors, say) waits 100 ms instead of spinning.
pub(crate) async fn accept_each<F, Fut>(
    listener: tokio::net::TcpListener,
    server: Server,
    serve_one: F,
) where
    F: Fn(tokio::net::TcpStream, Server) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let shared = &server.shared;
                if shared.open.fetch_add(1, Ordering::AcqRel) >= shared.config.max_connections {
                    shared.open.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(%peer, "connection limit reached; closing a new connection");
                    drop(socket);
                    continue;
                }
                let done = server.clone();
                let task = serve_one(socket, server.clone());
                // Every log line about this connection names its peer (an error-level span
                // is shown at any log level).
                let span = tracing::error_span!("peer", %peer);
                tokio::spawn(
                    async move {
                        task.await;
                        done.shared.open.fetch_sub(1, Ordering::AcqRel);
                    }
                    .instrument(span),
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
