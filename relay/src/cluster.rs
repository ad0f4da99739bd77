//! Relays that share sessions through NATS JetStream (`serve --cluster`, `wire.md` §5).
//!
//! The sans-IO relay runs as on one machine, with
//! [`RelayConfig::cluster`](bsor_stream_core::net::relay::RelayConfig::cluster) set: what it
//! asks the archive to write goes to JetStream instead, and what JetStream holds comes back
//! to it. This file is that shell:
//!
//! - **One stream, a subject per session**: `bsor.live.<hex of the name>` in the stream
//!   `BSOR_LIVE`; on each subject the stream header, then the chunks in sequence order (one
//!   to 8 consecutive whole chunks a message: a writer behind its publisher puts the chunks
//!   waiting in its queue into one message), then an end marker. The message kind is the
//!   header `Bsor-Kind` (`header`, `chunk`, `end`); an end marker says its reason in
//!   `Bsor-End` (`finished`, `gone`).
//! - **One writer per session a publisher here sends**: each message published with
//!   `Nats-Expected-Last-Subject-Sequence` (the last message this relay knows on the
//!   subject), so a relay that lost the session cannot write after the one that took it
//!   over, and `Nats-Msg-Id` `<hex>:<incarnation>:<seq>` (a retried publish is stored once).
//!   The publisher's `Ack` leaves only when JetStream acknowledged the chunk
//!   ([`Relay::stored`]); a refused write is [`Relay::store_failed`].
//! - **Sessions in a key-value bucket** (`bsor_sessions`, the key is the name in hex): the
//!   digest of the publisher's key, the player its token grants, and whether it ended. A
//!   new session's entry is created with JetStream's create-if-absent: of two publishers
//!   claiming one new name on two relays, one gets it.
//! - **A follower per live session held**: an ordered consumer on its subject, then its
//!   tap (the stream republishes each message it stores), feeds every chunk JetStream
//!   holds to [`Relay::mirrored`] (the chunks the relay has are dropped there), and the end
//!   marker to [`Relay::mirror_ended`]. A relay whose viewers watch a
//!   session published elsewhere serves them from it; a relay whose publisher moved learns
//!   it from it.
//! - **Lookups** ([`RelayAction::Lookup`]): the bucket's entry, then the subject read from
//!   its start (the header, the key chunk, the last chunks within the backlog's limits,
//!   and the stream sequence of every chunk, for complete-mode reads), handed to
//!   [`Relay::restored`]; a live one then keeps being followed. One watcher of the bucket
//!   looks a session up again when it starts while a viewer here waits for it.
//! - **Witness statements** a witnessing relay makes go on the subject after their chunk
//!   (`Bsor-Kind: witness`), for other relays' viewers ([`Relay::mirrored_witness`]) and the
//!   archive.
//! - **Archiving** ([`Cluster::archive_into`]): finished sessions, through a work queue, into
//!   the replay store of whichever relay takes the job, then purged.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use async_nats::HeaderMap;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::{mpsc, OnceCell};

use bsor_stream_core::net::archive::StreamWriter;
use bsor_stream_core::net::relay::{Archived, BacklogLimits, Fetch, Relay, RelayAction, ResumeKey};
use bsor_stream_core::net::wire::EndReason;
use bsor_stream_core::stream::{ChunkHeader, ChunkType};

/// The JetStream stream of live sessions.
pub const STREAM: &str = "BSOR_LIVE";
/// The key-value bucket of sessions.
pub const BUCKET: &str = "bsor_sessions";
/// The work queue of finished sessions to archive: one message per session
/// (`bsor.archive.<hex of the name>`), taken by one relay at a time.
pub const JOBS: &str = "BSOR_ARCHIVE";
const JOB_SUBJECTS: &str = "bsor.archive.*";
/// The durable consumer all archiving relays share.
const ARCHIVERS: &str = "archivers";
/// The subjects of [`STREAM`]: one per session.
const SUBJECTS: &str = "bsor.live.*";
/// Bytes of chunks a session's writer may have waiting for JetStream (a publisher sending a
/// whole song at once is within it: 1.6 MB for a 5-minute song): past this the store is
/// not keeping up, and the publisher is told ([`Relay::store_failed`]).
const WRITER_SESSION_BYTES: usize = 16 << 20;
/// Bytes of chunks all writers together may have waiting.
const WRITER_TOTAL_BYTES: usize = 256 << 20;
/// Sessions the directory of the cluster's sessions keeps (the bucket's entries age out
/// with the stream's `max_age`).
const DIRECTORY_MAX: usize = 100_000;
/// Consumers the stream of live sessions takes: followers and lookups, one per session per
/// relay holding it (100,000 sessions on 10 relays).
const MAX_CONSUMERS: i32 = 1_000_000;
/// How long a lookup may take to read a session's subject.
const SCAN_LIMIT: Duration = Duration::from_secs(10);
/// How long a follower waits for its next message before it asks whether the subject holds
/// more than it delivered (a stalled consumer is replaced).
const STALL_CHECK: Duration = Duration::from_secs(2);
/// How many times the end of a session is written to its entry (a second apart).
const MARK_ATTEMPTS: u32 = 10;
/// How long a session's writer sends a message again (the same message ID: stored once)
/// while JetStream does not answer or no stream does, before it gives up (and its
/// publisher is told): a stream's leader lost with its NATS node is elected again within
/// seconds.
const WRITE_PATIENCE: Duration = Duration::from_secs(10);
/// The pause before a message refused for a moment is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// At most this many bytes of chunks in one message (one larger chunk goes alone): well
/// under NATS's default limit of 1 MiB a message.
const MESSAGE_BYTES: usize = 256 << 10;
/// At most this many chunks in one message: what a writer caught up after a stall (a NATS
/// election's seconds) sends goes as several messages, each acknowledged in turn, not as
/// one that other relays would hand their live viewers at once, past the 64 messages a
/// viewer's queue holds (they would skip to a later keyframe group).
const MESSAGE_CHUNKS: u32 = 8;

/// How a relay joins a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// NATS servers (`nats://HOST:PORT`), any of which will do.
    pub urls: Vec<String>,
    /// Replicas of the stream and the bucket (1 for a single NATS server, 3 for a
    /// three-node NATS cluster).
    pub replicas: usize,
    /// How long a session stays in the stream at most (JetStream's `max_age`).
    pub max_age: Duration,
    /// Bytes the stream holds at most; when full, new writes are refused (the publisher is
    /// told), never old sessions dropped.
    pub max_bytes: i64,
    /// How long one JetStream request (a publish's acknowledgement, a lookup) may take.
    pub timeout: Duration,
    /// Sessions the cluster holds at most (live, or ended and not yet archived or aged
    /// out): the bucket's entries, enforced by JetStream (`max_msgs`, `discard new`); a
    /// publisher of a new session past it is refused with `OverBudget`.
    pub max_sessions: i64,
    /// How long a finished session stays in JetStream before it is archived (late viewers
    /// read it from the cluster meanwhile); only relays given a store
    /// ([`Cluster::archive_into`]) archive.
    pub keep_finished: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            urls: vec!["nats://127.0.0.1:4222".into()],
            replicas: 1,
            max_age: Duration::from_secs(24 * 3600),
            max_bytes: 8 << 30,
            timeout: Duration::from_secs(3),
            max_sessions: 100_000,
            keep_finished: Duration::from_secs(60),
        }
    }
}

/// Why the cluster could not be joined.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No NATS server address was given.
    #[error("no NATS server given (--cluster nats://HOST:PORT)")]
    NoServer,
    /// The client could not be set up.
    #[error("NATS: {0}")]
    Connect(#[from] async_nats::ConnectError),
}

/// Runs a closure on the relay (the shell's `with_relay`), and does what it asks.
pub(crate) type RelayCall = Arc<dyn Fn(Box<dyn FnOnce(&mut Relay, u64) + Send>) + Send + Sync>;

/// What a session's writer publishes, in the relay's order.
enum Write {
    Key(ResumeKey),
    Header(Bytes),
    Chunk(Bytes),
    Witness(Bytes),
    End(EndReason),
}

/// A finished session read whole from the cluster, for a [`SessionStore`].
#[derive(Debug)]
pub struct FinishedSession {
    /// The session's name.
    pub name: String,
    /// Its stream as `watch -o` writes it (header, chunks, footer).
    pub stream: Vec<u8>,
    /// The witness statements made on it, as a `.witness` file (`integrity.md` §12.2).
    pub witness: Option<Vec<u8>>,
    /// The player its publisher's token grants.
    pub player: Option<String>,
}

/// What a [`SessionStore`] did with a finished session.
#[derive(Debug)]
pub enum Filed {
    /// Stored, or found stored already, under this ID.
    Stored(String),
    /// Refused for good: the session stays in JetStream until it ages out.
    Refused(String),
    /// Not stored now (the store is unavailable, say): tried again later.
    Failed(String),
}

/// Where the relays of a cluster archive finished sessions (the replay server's store in
/// `serve`). Storing must be idempotent: a session may be handed over more than once (a
/// relay that stored it and died before it said so), and must then be stored once.
pub trait SessionStore: Send + Sync + 'static {
    /// The largest stream it takes, in bytes.
    fn max_bytes(&self) -> u64;
    /// Stores one finished session.
    fn store(
        &self,
        session: FinishedSession,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Filed> + Send + '_>>;
}

/// How long a job waits before it is tried again after a failure.
const RETRY: Duration = Duration::from_secs(5);
/// How long archiving one session may take before its job goes to another relay.
const ARCHIVE_WAIT: Duration = Duration::from_secs(120);

/// Where a new writer starts: the subject's last message as the relay knows it, and the
/// writer's number.
struct Start {
    last: Option<u64>,
    gen: u64,
}

/// What a message's ID names within its writer: a chunk's sequence number (the header's
/// and the end marker's are `u32::MAX` and `u32::MAX - 1`), or the writer's `n`th witness
/// statement.
#[derive(Clone, Copy, Debug)]
enum Id {
    Seq(u32),
    Statement(u32),
}

/// Why JetStream did not take a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Another relay wrote the session first (or holds its name).
    Taken,
    /// The stream or the bucket is at its limit.
    Full(&'static str),
    /// No answer, or another failure: the publisher may try again.
    Failed,
}

/// Whether JetStream refused a publish because the subject's last message is not the one
/// expected: the code async-nats names, or the constant form newer servers send (10164,
/// which async-nats reports as `Other`).
fn wrong_last_sequence(e: &jetstream::context::PublishError) -> bool {
    use jetstream::ErrorCode;
    e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<jetstream::Error>())
            .is_some_and(|j| j.error_code() == ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
}

/// A JetStream error that says a limit was reached (`maximum messages exceeded`,
/// `maximum bytes exceeded`, ...).
fn is_full(e: &impl std::fmt::Display) -> bool {
    e.to_string().contains("maximum")
}

const SESSIONS_FULL: &str = "the cluster holds its maximum of sessions";
const BYTES_FULL: &str = "the cluster's store is full";

/// The JetStream handles, made once NATS answers.
struct Handles {
    stream: stream::Stream,
    kv: kv::Store,
}

/// What the shell keeps per session.
#[derive(Default)]
struct Held {
    /// The writer's queue, when a publisher here has sent something.
    writer: Option<mpsc::UnboundedSender<Write>>,
    /// Bytes of chunks waiting in it.
    pending: Arc<std::sync::atomic::AtomicUsize>,
    /// The follower, while one runs.
    follower: Option<tokio::task::AbortHandle>,
    /// The stream sequence of each chunk, by chunk sequence number (for complete-mode
    /// reads), as far as known.
    index: Vec<u64>,
    /// Ended by JetStream's end marker (written by another relay, or this one).
    ended: bool,
    /// The last message on the subject when this relay last learnt the session from
    /// JetStream (a lookup): a new writer expects it, not whatever is last when it writes
    /// (a write the relay asked for before another relay took the session over must fail).
    seen_last: Option<u64>,
    /// The current writer's number: a writer that is no longer current says nothing of
    /// its failures (they concern a state the relay has left).
    writer_gen: u64,
    /// The publisher's key when its claim of the name was refused (another's name, the
    /// cluster full): the relay still holds the session (its publisher may resume here),
    /// so every later writer claims the name first, and nothing is written unclaimed.
    unclaimed: Option<ResumeKey>,
    /// The stream sequence the session's follower feeds the relay next (the relay was
    /// given everything before it): a follower that a failed lookup replaced starts again
    /// there.
    fed: u64,
    /// The stream header this relay's publisher sent, until JetStream holds it: a writer
    /// after a refused one writes it before any chunk (a resuming publisher does not send
    /// it again).
    header: Option<Bytes>,
}

/// A relay's membership of a cluster (cheap to clone).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("urls", &self.inner.config.urls)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: ClusterConfig,
    js: jetstream::Context,
    handles: OnceCell<Handles>,
    held: Mutex<HashMap<String, Held>>,
    /// Bytes of chunks waiting in all writers' queues.
    pending: Arc<std::sync::atomic::AtomicUsize>,
    /// The live sessions of the cluster (for `/sessions`), as the bucket's watcher saw
    /// them; at most [`DIRECTORY_MAX`].
    directory: Mutex<std::collections::HashSet<String>>,
    /// Names looked up again each second while viewers here wait for them.
    retrying: Mutex<std::collections::HashSet<String>>,
    /// Names to look up again (a failed lookup's read), for the task `attach` starts.
    relook: mpsc::UnboundedSender<String>,
    relook_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// The relay, once the server is made.
    relay: OnceCell<RelayCall>,
    /// Where finished sessions are archived, on a relay given a store.
    store: std::sync::OnceLock<Arc<dyn SessionStore>>,
    /// The work queue of finished sessions to archive, made by archiving relays only.
    jobs: OnceCell<stream::Stream>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The subject of a session.
fn subject(name: &str) -> String {
    format!("bsor.live.{}", hex::encode(name))
}

/// Where the stream republishes what it stores on a session's subject (the tap its
/// followers listen to).
fn tap(name: &str) -> String {
    format!("bsor.tap.{}", hex::encode(name))
}

/// The stream's republication of every message it stores, on the session's tap.
fn republish() -> stream::Republish {
    stream::Republish {
        source: SUBJECTS.into(),
        destination: "bsor.tap.{{wildcard(1)}}".into(),
        headers_only: false,
    }
}

/// The bucket's key of a session.
fn key_of(name: &str) -> String {
    hex::encode(name)
}

/// A session's entry in the bucket.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// SHA-256 of the publisher's key, in hex.
    digest: String,
    /// The player its token grants.
    #[serde(default)]
    player: Option<String>,
    /// `live`, `finished` or `gone`.
    state: String,
}

impl Entry {
    fn key(&self) -> Option<ResumeKey> {
        let digest: [u8; 32] = hex::decode(&self.digest).ok()?.try_into().ok()?;
        Some(ResumeKey {
            digest,
            player: self.player.clone(),
        })
    }
}

impl Cluster {
    /// Joins the cluster at `config.urls`. Never waits for NATS: the client connects (and
    /// reconnects) in the background, and until it has, every write and lookup fails
    /// within `config.timeout` (a publisher is refused with a clear error, never left
    /// hanging).
    pub async fn connect(config: ClusterConfig) -> Result<Cluster, ClusterError> {
        if config.urls.is_empty() {
            return Err(ClusterError::NoServer);
        }
        let addrs: Vec<async_nats::ServerAddr> = config
            .urls
            .iter()
            .map(|u| u.parse())
            .collect::<Result<_, _>>()
            .map_err(|e: std::io::Error| {
                ClusterError::Connect(async_nats::ConnectError::with_source(
                    async_nats::ConnectErrorKind::ServerParse,
                    e,
                ))
            })?;
        let client = async_nats::ConnectOptions::new()
            .name(concat!("bsor-stream relay ", env!("CARGO_PKG_VERSION")))
            .retry_on_initial_connect()
            .connection_timeout(config.timeout)
            .request_timeout(Some(config.timeout))
            .connect(addrs)
            .await?;
        let (relook, relook_rx) = mpsc::unbounded_channel();
        let js = jetstream::ContextBuilder::new()
            .timeout(config.timeout)
            .build(client);
        Ok(Cluster {
            inner: Arc::new(Inner {
                config,
                js,
                handles: OnceCell::new(),
                held: Mutex::new(HashMap::new()),
                pending: Arc::default(),
                directory: Mutex::new(std::collections::HashSet::new()),
                retrying: Mutex::new(std::collections::HashSet::new()),
                relook,
                relook_rx: Mutex::new(Some(relook_rx)),
                relay: OnceCell::new(),
                store: std::sync::OnceLock::new(),
                jobs: OnceCell::new(),
            }),
        })
    }

    /// Hands the cluster the relay it serves, and starts the bucket's watcher.
    pub(crate) fn attach(&self, relay: RelayCall) {
        if self.inner.relay.set(relay).is_ok() {
            // The streams and the bucket made (or checked) now, not at the first publisher:
            // a new NATS cluster elects its leaders meanwhile, and the first publisher does
            // not wait for it.
            let me = self.clone();
            tokio::spawn(async move {
                while let Err(err) = me.make_handles().await {
                    tracing::debug!(%err, "the cluster's streams are not ready yet");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            let me = self.clone();
            tokio::spawn(async move { me.watch().await });
            if let Some(mut rx) = lock(&self.inner.relook_rx).take() {
                let me = self.clone();
                tokio::spawn(async move {
                    while let Some(name) = rx.recv().await {
                        let me = me.clone();
                        tokio::spawn(async move { me.lookup(name).await });
                    }
                });
            }
        }
    }

    /// The stream and the bucket, waited for at most the request timeout: a lookup or a
    /// write fails then (its publisher refused with `Internal`, free to try again) rather
    /// than wait for a NATS cluster still electing its leaders.
    async fn handles(&self) -> Result<&Handles, String> {
        match tokio::time::timeout(self.inner.config.timeout, self.make_handles()).await {
            Ok(made) => made,
            Err(_) => Err("the cluster's streams are not ready yet".into()),
        }
    }

    /// The stream and the bucket, made if missing (once NATS answers), however long it takes.
    async fn make_handles(&self) -> Result<&Handles, String> {
        let inner = &self.inner;
        inner
            .handles
            .get_or_try_init(|| async {
                let c = &inner.config;
                let config = stream::Config {
                    name: STREAM.into(),
                    subjects: vec![SUBJECTS.into()],
                    storage: stream::StorageType::File,
                    num_replicas: c.replicas,
                    max_age: c.max_age,
                    max_bytes: c.max_bytes,
                    // Full: new writes are refused, no session is dropped.
                    discard: stream::DiscardPolicy::New,
                    duplicate_window: Duration::from_secs(120),
                    max_message_size: i32::try_from(bsor_stream_core::net::wire::DEFAULT_MAX_FRAME)
                        .unwrap_or(i32::MAX),
                    allow_direct: true,
                    // A follower or a lookup is a consumer: one per session per relay that
                    // holds it. Without a limit of its own, nats-server 2.15 refuses a
                    // stream's 1,001st consumer (300 sessions on three relays reach it).
                    max_consumers: MAX_CONSUMERS,
                    republish: Some(republish()),
                    ..Default::default()
                };
                let stream = inner
                    .js
                    .get_or_create_stream(config)
                    .await
                    .map_err(|e| format!("the stream {STREAM}: {e}"))?;
                // A stream made by an older relay gets the consumer limit and the tap (its
                // configuration as the answer above gave it).
                let found = &stream.cached_info().config;
                if found.max_consumers < MAX_CONSUMERS || found.republish != Some(republish()) {
                    let mut config = found.clone();
                    config.max_consumers = MAX_CONSUMERS;
                    config.republish = Some(republish());
                    inner
                        .js
                        .update_stream(config)
                        .await
                        .map_err(|e| format!("the stream {STREAM}: {e}"))?;
                }
                let kv = match inner.js.get_key_value(BUCKET).await {
                    Ok(kv) => kv,
                    Err(_) => match inner
                        .js
                        .create_key_value(kv::Config {
                            bucket: BUCKET.into(),
                            history: 1,
                            max_age: c.max_age,
                            storage: stream::StorageType::File,
                            num_replicas: c.replicas,
                            max_value_size: 4096,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(kv) => kv,
                        // Made meanwhile, or made and given its limit by another relay
                        // (its configuration is then not the one asked for): it is there.
                        Err(e) => inner
                            .js
                            .get_key_value(BUCKET)
                            .await
                            .map_err(|_| format!("the bucket {BUCKET}: {e}"))?,
                    },
                };
                // The bucket's stream holds at most `max_sessions` entries; a new one past
                // them is refused (an entry written again replaces its one message).
                let mut kv_config = kv.stream.cached_info().config.clone();
                if kv_config.max_messages != c.max_sessions
                    || kv_config.discard != stream::DiscardPolicy::New
                {
                    kv_config.max_messages = c.max_sessions;
                    kv_config.discard = stream::DiscardPolicy::New;
                    inner
                        .js
                        .update_stream(kv_config)
                        .await
                        .map_err(|e| format!("the bucket {BUCKET}: {e}"))?;
                }
                Ok(Handles { stream, kv })
            })
            .await
    }

    fn call(&self, f: impl FnOnce(&mut Relay, u64) + Send + 'static) {
        if let Some(r) = self.inner.relay.get() {
            r(Box::new(f));
        }
    }

    /// What `f` reads of the relay, under its lock (`None`: the relay is gone).
    fn ask<T: Send + 'static>(&self, f: impl FnOnce(&Relay) -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.call(move |r, _| {
            let _ = tx.send(f(r));
        });
        rx.try_recv().ok()
    }

    /// Whether the relay waits for session `name` (a viewer or a publisher of a session it
    /// does not hold).
    fn wanted(&self, name: &str) -> bool {
        let n = name.to_string();
        self.ask(move |r| r.wants(&n)).unwrap_or(false)
    }

    /// Whether the relay holds session `name` and it has not ended.
    fn holds_live(&self, name: &str) -> bool {
        let n = name.to_string();
        self.ask(move |r| r.is_live(&n)).unwrap_or(false)
    }

    /// Queues the writes among the relay's actions, called under the relay's lock so that
    /// they keep the relay's order. Never blocks and never calls the relay.
    pub(crate) fn enqueue(&self, action: &RelayAction) {
        match action {
            RelayAction::ArchiveKey(s, k) => self.write(s, Write::Key(k.clone())),
            RelayAction::ArchiveHeader(s, h) => self.write(s, Write::Header(h.clone())),
            RelayAction::ArchiveChunk(s, c) => self.write(s, Write::Chunk(c.clone())),
            RelayAction::ArchiveWitness(s, w) => self.write(s, Write::Witness(w.clone())),
            RelayAction::SessionEnded(s, reason) => {
                let mut held = lock(&self.inner.held);
                let Some(h) = held.get_mut(s) else { return };
                // A relay that learnt the end from the store writes nothing back; one whose
                // publisher (or its timeout) ended it writes the end, expecting the last
                // message it knows (refused if another relay wrote since).
                let write = !h.ended;
                drop(held);
                if write {
                    self.write(s, Write::End(*reason));
                }
            }
            _ => {}
        }
    }

    /// Starts the reads among the relay's actions (after its lock is let go). Returns
    /// whether the action was the cluster's to do.
    pub(crate) fn dispatch(&self, action: &RelayAction) -> bool {
        match action {
            RelayAction::Lookup(s) => {
                let me = self.clone();
                let s = s.clone();
                tokio::spawn(async move { me.lookup(s).await });
            }
            RelayAction::Fetch(f) => {
                let me = self.clone();
                let f = f.clone();
                tokio::spawn(async move { me.fetch(f).await });
            }
            RelayAction::ArchiveKey(..)
            | RelayAction::ArchiveHeader(..)
            | RelayAction::ArchiveChunk(..)
            | RelayAction::ArchiveReopen { .. }
            | RelayAction::ArchiveWitness(..) => {}
            _ => return false,
        }
        true
    }

    /// Queues a write for session `name`'s writer (started on its first write).
    fn write(&self, name: &str, w: Write) {
        use std::sync::atomic::Ordering::Relaxed;
        let size = match &w {
            Write::Chunk(c) | Write::Header(c) | Write::Witness(c) => c.len(),
            _ => 0,
        };
        let mut held = lock(&self.inner.held);
        let h = held.entry(name.to_string()).or_default();
        if let Write::Header(b) = &w {
            h.header = Some(b.clone());
        }
        let pending = h.pending.clone();
        let tx = match &h.writer {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                h.writer = Some(tx.clone());
                h.writer_gen += 1;
                let start = Start {
                    last: h.seen_last,
                    gen: h.writer_gen,
                };
                let me = self.clone();
                let name = name.to_string();
                let pending = pending.clone();
                tokio::spawn(async move { me.writer(name, rx, pending, start).await });
                tx
            }
        };
        drop(held);
        let total = &self.inner.pending;
        let over = pending.load(Relaxed) + size > WRITER_SESSION_BYTES
            || total.load(Relaxed) + size > WRITER_TOTAL_BYTES;
        if over || tx.send(w).is_err() {
            tracing::warn!(session = %name, "the cluster's store is not keeping up; the publisher is told");
            // Not from here: the relay's lock is held.
            let me = self.clone();
            let name = name.to_string();
            tokio::spawn(async move { me.call(move |r, now| r.store_failed(&name, false, now)) });
            return;
        }
        pending.fetch_add(size, Relaxed);
        total.fetch_add(size, Relaxed);
    }

    /// A session's writer: its messages published in order, each once JetStream
    /// acknowledged the one before.
    async fn writer(
        self,
        name: String,
        mut rx: mpsc::UnboundedReceiver<Write>,
        pending: Arc<std::sync::atomic::AtomicUsize>,
        start: Start,
    ) {
        let subject = subject(&name);
        // Tells this writer's messages from another's of the same session (a message ID
        // names one write, not one chunk): the clock's nanoseconds are unique enough, and
        // nothing rests on their secrecy.
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        // The last message on the subject this writer knows of: what the relay's lookup saw,
        // 0 for a session it creates, else (None) what JetStream says at the first write.
        let mut last: Option<u64> = start.last;
        // Statements this writer wrote (their message IDs).
        let mut statements = 0u32;
        // Whether a header an earlier writer did not get stored may still be due: looked at
        // once, before this writer's first chunk.
        let mut header_due = true;
        // Writes that go before the queue's: a name this relay failed to claim is claimed
        // before anything else is written, a header not yet stored before any chunk.
        let mut ahead: VecDeque<Write> = lock(&self.inner.held)
            .get(&name)
            .and_then(|h| h.unclaimed.clone())
            .map(Write::Key)
            .into_iter()
            .collect();
        loop {
            let w = match ahead.pop_front() {
                Some(w) => w,
                None => match rx.recv().await {
                    Some(w) => {
                        self.dequeued(&pending, &w);
                        w
                    }
                    None => break,
                },
            };
            let claiming = matches!(w, Write::Key(_));
            let outcome = match w {
                Write::Key(key) => {
                    let claimed = self.claim(&name, &key).await;
                    if let Some(h) = lock(&self.inner.held).get_mut(&name) {
                        h.unclaimed = match claimed {
                            Err(Refused::Full(_)) => Some(key),
                            _ => None,
                        };
                    }
                    claimed.map(|created| {
                        if created {
                            last = Some(0);
                        }
                    })
                }
                Write::Header(h) => {
                    let r = self
                        .publish(
                            &name,
                            &subject,
                            &mut last,
                            "header",
                            None,
                            h,
                            incarnation,
                            Id::Seq(u32::MAX),
                        )
                        .await;
                    if r.is_ok() {
                        if let Some(h) = lock(&self.inner.held).get_mut(&name) {
                            h.header = None;
                        }
                        // The entry written again: relays whose viewers wait for the session
                        // (their lookup found the entry and no header yet) look it up now.
                        self.touch(&name).await;
                    }
                    r.map(|_| ())
                }
                Write::Chunk(c) => {
                    let Some((head, _)) = ChunkHeader::parse_at(&c) else {
                        continue;
                    };
                    // A header an earlier writer did not get stored goes first.
                    let header = header_due
                        .then(|| lock(&self.inner.held).get(&name)?.header.clone())
                        .flatten();
                    header_due = false;
                    if let Some(header) = header {
                        ahead.push_front(Write::Chunk(c));
                        ahead.push_front(Write::Header(header));
                        continue;
                    }
                    let first = head.seq;
                    // The chunks waiting behind this one go with it, as many as fit: one
                    // acknowledgement for them all, so a session whose acknowledgements
                    // come slower than its chunks catches up instead of falling further
                    // behind with every chunk.
                    let mut through = first;
                    let mut more = Vec::new();
                    let mut size = c.len();
                    while ahead.is_empty() {
                        let Ok(w) = rx.try_recv() else { break };
                        self.dequeued(&pending, &w);
                        match w {
                            Write::Chunk(next)
                                if size + next.len() <= MESSAGE_BYTES
                                    && through - first + 1 < MESSAGE_CHUNKS
                                    && ChunkHeader::parse_at(&next).is_some_and(|(h, _)| {
                                        Some(h.seq) == through.checked_add(1)
                                    }) =>
                            {
                                through += 1;
                                size += next.len();
                                more.push(next);
                            }
                            w => ahead.push_back(w),
                        }
                    }
                    let payload = if more.is_empty() {
                        c
                    } else {
                        let mut m = BytesMut::with_capacity(size);
                        m.extend_from_slice(&c);
                        for next in &more {
                            m.extend_from_slice(next);
                        }
                        m.freeze()
                    };
                    let r = self
                        .publish(
                            &name,
                            &subject,
                            &mut last,
                            "chunk",
                            None,
                            payload,
                            incarnation,
                            Id::Seq(first),
                        )
                        .await;
                    if let Ok(at) = r {
                        for seq in first..=through {
                            self.note_index(&name, seq, at);
                        }
                        let n = name.clone();
                        self.call(move |r, now| r.stored(&n, through, now));
                    }
                    r.map(|_| ())
                }
                Write::Witness(w) => {
                    statements += 1;
                    self.publish(
                        &name,
                        &subject,
                        &mut last,
                        "witness",
                        None,
                        w,
                        incarnation,
                        Id::Statement(statements),
                    )
                    .await
                    .map(|_| ())
                }
                Write::End(reason) => {
                    let why = match reason {
                        EndReason::Finished => "finished",
                        _ => "gone",
                    };
                    // The chunks the session has: those whose place this relay knows (its
                    // lookup's and its writes'), 0 to n-1.
                    let chunks = lock(&self.inner.held)
                        .get(&name)
                        .map_or(0, |h| h.index.len() as u32);
                    let r = self
                        .publish(
                            &name,
                            &subject,
                            &mut last,
                            "end",
                            Some((why, chunks)),
                            Bytes::new(),
                            incarnation,
                            Id::Seq(u32::MAX - 1),
                        )
                        .await;
                    if r.is_ok() {
                        self.mark_ended(&name, why).await;
                    }
                    // Nothing to tell a publisher: the session has ended here either way.
                    break;
                }
            }
            .map(|_| ());
            if let Err(refused) = outcome {
                // Another relay's publisher has the name this relay claimed for a new
                // session: nothing of what this relay began is ever written (its header
                // least of all), and the relay drops it.
                let lost = claiming && refused == Refused::Taken;
                let current = {
                    let mut held = lock(&self.inner.held);
                    match held.get_mut(&name) {
                        Some(h) if h.writer_gen == start.gen => {
                            h.writer = None;
                            if lost {
                                h.header = None;
                            }
                            true
                        }
                        _ => false,
                    }
                };
                if !current {
                    break;
                }
                let n = name.clone();
                self.call(move |r, now| match refused {
                    _ if lost => r.claim_lost(&n, now),
                    Refused::Taken => r.store_failed(&n, true, now),
                    Refused::Failed => r.store_failed(&n, false, now),
                    Refused::Full(why) => r.store_full(&n, why, now),
                });
                if !lost {
                    // What the store holds from now on comes to the relay through the
                    // follower, restarted from the last message this writer stored.
                    self.follow(name.clone(), last.map_or(1, |l| l + 1));
                }
                break;
            }
        }
        // What is left is never written: out of the counts of bytes waiting.
        rx.close();
        while let Ok(w) = rx.try_recv() {
            self.dequeued(&pending, &w);
        }
    }

    /// A write taken off a session's queue: its bytes no longer wait.
    fn dequeued(&self, pending: &std::sync::atomic::AtomicUsize, w: &Write) {
        if let Write::Chunk(c) | Write::Header(c) | Write::Witness(c) = w {
            use std::sync::atomic::Ordering::Relaxed;
            pending.fetch_sub(c.len(), Relaxed);
            self.inner.pending.fetch_sub(c.len(), Relaxed);
        }
    }

    /// A new session's entry (create-if-absent), or the same publisher's (the digest
    /// matches: a resume on this relay, or its player binding cleared); `Ok(true)` when it
    /// made it. `Err(Refused::Taken)`: the name is another publisher's.
    async fn claim(&self, name: &str, key: &ResumeKey) -> Result<bool, Refused> {
        let h = self.handles().await.map_err(|e| {
            tracing::warn!(session = %name, err = %e, "the cluster's store is unavailable");
            Refused::Failed
        })?;
        let entry = Entry {
            digest: hex::encode(key.digest),
            player: key.player.clone(),
            state: "live".into(),
        };
        let value = Bytes::from(serde_json::to_vec(&entry).unwrap_or_default());
        match h.kv.create(key_of(name), value.clone()).await {
            Ok(_) => {
                // The follower, from the subject's start: it sees another relay's writes if
                // the session moves.
                self.follow(name.to_string(), 1);
                Ok(true)
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let theirs =
                    h.kv.get(key_of(name))
                        .await
                        .ok()
                        .flatten()
                        .and_then(|v| serde_json::from_slice::<Entry>(&v).ok());
                match theirs {
                    Some(t) if t.digest == entry.digest && t.state == "live" => {
                        h.kv.put(key_of(name), value)
                            .await
                            .map_err(|_| Refused::Failed)?;
                        Ok(false)
                    }
                    _ => Err(Refused::Taken),
                }
            }
            Err(e) if is_full(&e) => {
                tracing::warn!(session = %name, err = %e, max = self.inner.config.max_sessions, "{SESSIONS_FULL}");
                Err(Refused::Full(SESSIONS_FULL))
            }
            Err(e) => {
                tracing::warn!(session = %name, err = %e, "the cluster's store is unavailable");
                Err(Refused::Failed)
            }
        }
    }

    /// Publishes one message of a session, expecting `last` to be the subject's last
    /// message; on success `last` is the new one.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &self,
        name: &str,
        subject: &str,
        last: &mut Option<u64>,
        kind: &str,
        end: Option<(&str, u32)>,
        payload: Bytes,
        incarnation: u64,
        id: Id,
    ) -> Result<u64, Refused> {
        self.handles().await.map_err(|e| {
            tracing::warn!(session = %name, err = %e, "the cluster's store is unavailable");
            Refused::Failed
        })?;
        let expected = match *last {
            Some(l) => l,
            None => self.last_sequence(name).await.map_err(|e| {
                tracing::warn!(session = %name, err = %e, "the cluster's store is unavailable");
                Refused::Failed
            })?,
        };
        let mut headers = HeaderMap::new();
        headers.insert("Bsor-Kind", kind);
        if let Some((why, chunks)) = end {
            headers.insert("Bsor-End", why);
            headers.insert("Bsor-Chunks", chunks.to_string().as_str());
        }
        let id = match id {
            Id::Seq(seq) => format!("{}:{incarnation:016x}:{seq}", key_of(name)),
            Id::Statement(n) => format!("{}:{incarnation:016x}:w{n}", key_of(name)),
        };
        // A stream's leader lost with its NATS node is elected again within seconds: the
        // writer sends again meanwhile rather than fail its publisher at once.
        let patience = tokio::time::Instant::now() + WRITE_PATIENCE;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let waiting = tokio::time::Instant::now() < patience;
            let message = jetstream::message::PublishMessage::build()
                .payload(payload.clone())
                .headers(headers.clone())
                .message_id(&id)
                .expected_last_subject_sequence(expected);
            let t0 = std::time::Instant::now();
            let ack = match self
                .inner
                .js
                .send_publish(subject.to_string(), message)
                .await
            {
                Ok(f) => {
                    let t1 = t0.elapsed();
                    let a = f.await;
                    tracing::debug!(session = %name, %id, sent = ?t1, acked = ?t0.elapsed(), "published");
                    a
                }
                Err(e) => Err(e),
            };
            match ack {
                Ok(a) => {
                    *last = Some(a.sequence);
                    return Ok(a.sequence);
                }
                Err(e) if wrong_last_sequence(&e) => {
                    // What the subject holds decides, not the error: a stream's new leader
                    // refuses for a moment after a NATS node is lost.
                    let (at, mine) = match self.last_message(name).await {
                        Ok((at, i)) => (at, i.as_deref() == Some(id.as_str())),
                        Err(err) if !waiting => {
                            tracing::warn!(session = %name, %err, "the cluster's store is unavailable");
                            return Err(Refused::Failed);
                        }
                        // Not known yet: sent again.
                        Err(_) => (expected, false),
                    };
                    // A send again whose first JetStream stored, its acknowledgement lost.
                    if mine {
                        *last = Some(at);
                        return Ok(at);
                    }
                    if at != expected {
                        tracing::info!(session = %name, "another relay holds the session now");
                        return Err(Refused::Taken);
                    }
                    // The subject is as this writer left it: sent again.
                    if !waiting {
                        tracing::warn!(session = %name, %e, attempt, "the cluster's store did not take a message");
                        return Err(Refused::Failed);
                    }
                    tracing::info!(session = %name, %e, attempt, "a write refused for a moment");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) if waiting && e.kind() == jetstream::context::PublishErrorKind::TimedOut => {
                }
                // No stream answered (its leader being elected after a NATS node was lost):
                // nothing was stored; sent again.
                Err(e)
                    if waiting
                        && e.kind() == jetstream::context::PublishErrorKind::StreamNotFound =>
                {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) if is_full(&e) => {
                    tracing::warn!(session = %name, err = %e, "{BYTES_FULL}");
                    return Err(Refused::Full(BYTES_FULL));
                }
                Err(e) => {
                    tracing::warn!(session = %name, err = %e, "the cluster's store did not take a message");
                    return Err(Refused::Failed);
                }
            }
        }
    }

    /// Writes a session's entry again as it is (a watcher sees it change).
    async fn touch(&self, name: &str) {
        let Ok(h) = self.handles().await else { return };
        if let Ok(Some(v)) = h.kv.get(key_of(name)).await {
            if let Err(err) = h.kv.put(key_of(name), v).await {
                tracing::debug!(session = %name, %err, "writing the entry again failed");
            }
        }
    }

    /// The bucket says the session ended (what the archivers wait for), tried again for a
    /// while when JetStream cannot take it (a NATS node lost, its leaders being elected).
    async fn mark_ended(&self, name: &str, why: &str) {
        for attempt in 1..=MARK_ATTEMPTS {
            let err = match self.try_mark_ended(name, why).await {
                Ok(()) => return,
                Err(err) => err,
            };
            tracing::warn!(session = %name, %err, attempt, "marking the session ended failed");
            if attempt < MARK_ATTEMPTS {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    async fn try_mark_ended(&self, name: &str, why: &str) -> Result<(), String> {
        let h = self.handles().await?;
        let Some(v) = h.kv.get(key_of(name)).await.map_err(|e| e.to_string())? else {
            return Ok(()); // no entry: nothing to mark
        };
        let Ok(mut e) = serde_json::from_slice::<Entry>(&v) else {
            return Ok(());
        };
        e.state = why.to_string();
        let v = serde_json::to_vec(&e).map_err(|e| e.to_string())?;
        h.kv.put(key_of(name), v.into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn note_index(&self, name: &str, seq: u32, at: u64) {
        let mut held = lock(&self.inner.held);
        let h = held.entry(name.to_string()).or_default();
        let i = seq as usize;
        if i == h.index.len() {
            h.index.push(at);
        } else if i < h.index.len() {
            h.index[i] = at;
        }
    }

    /// Follows session `name` from stream sequence `from` on: every chunk to
    /// [`Relay::mirrored`], the end marker to [`Relay::mirror_ended`]. Replaces a follower
    /// already running.
    fn follow(&self, name: String, from: u64) {
        let me = self.clone();
        let n = name.clone();
        let task = tokio::spawn(async move { me.keep_following(n, from, None).await });
        let mut held = lock(&self.inner.held);
        let h = held.entry(name).or_default();
        h.fed = from;
        if let Some(old) = h.follower.replace(task.abort_handle()) {
            old.abort();
        }
    }

    /// The consumer of a follower or a lookup: an ordered consumer of the session's subject
    /// from stream sequence `from`.
    async fn consumer(&self, name: &str, from: u64) -> Result<consumer::pull::Ordered, String> {
        let h = self.handles().await?;
        let c = h
            .stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: subject(name),
                deliver_policy: if from <= 1 {
                    consumer::DeliverPolicy::All
                } else {
                    consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: from,
                    }
                },
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        c.messages().await.map_err(|e| e.to_string())
    }

    /// Feeds a session's messages to the relay, until its end marker or until the relay
    /// holds it no more. With `scan`, the messages up to stream sequence `scan.0` are
    /// gathered into `scan.1` first (a lookup), and handed to the relay in one
    /// [`Relay::restored`] when they are all read.
    /// [`run_follower`](Self::run_follower) again from where it got to, for as long as the
    /// relay holds the session live: a NATS node lost, a consumer gone, a reconnection,
    /// none of them stops a session's delivery (waits from 100 ms doubling to 2 s). A lookup
    /// whose scan fails is a failed lookup.
    async fn keep_following(self, name: String, mut from: u64, mut scan: Option<(u64, Scan)>) {
        let mut wait = Duration::from_millis(100);
        loop {
            let looking = scan.is_some();
            let err = match self.run_follower(&name, &mut from, &mut scan).await {
                Ok(true) => return,
                Ok(false) => "the consumer's messages ended".to_string(),
                Err(e) => e,
            };
            if looking && scan.is_some() {
                tracing::warn!(session = %name, %err, "cluster lookup failed");
                let n = name.clone();
                self.call(move |r, now| r.lookup_failed(&n, now));
                // A session the relay holds live (a mirror whose publisher came to resume
                // here): this task replaced its follower, so it follows again, from where
                // the relay's viewers got to.
                if self.holds_live(&name) {
                    scan = None;
                    from = lock(&self.inner.held)
                        .get(&name)
                        .map_or(1, |h| h.fed.max(1));
                    tracing::info!(session = %name, from, "following the session again");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                // Viewers still waiting: looked up afresh (a new consumer, another node).
                if self.wanted(&name) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = self.inner.relook.send(name);
                }
                return;
            }
            if !self.holds_live(&name) {
                return;
            }
            tracing::info!(session = %name, %err, from, "following the session again");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// Feeds a session's messages from stream sequence `from` to the relay (`from` moves on
    /// past each), until its end marker (`Ok(true)`) or an error. What the subject holds
    /// from `from` on is read through a consumer; then the tap (the stream's republication
    /// of each message it stores) brings the rest as it is stored, with no read of the
    /// store: a message that does not follow the last one fed (one lost on the way, a NATS
    /// node lost), or 2 s of quiet while the subject holds more, sends the follower back to
    /// the consumer from where it got to. With `scan`, the messages up to stream sequence
    /// `scan.0` are gathered into `scan.1` first (a lookup), and handed to the relay in one
    /// [`Relay::restored`] when they are all read.
    async fn run_follower(
        &self,
        name: &str,
        from: &mut u64,
        scan: &mut Option<(u64, Scan)>,
    ) -> Result<bool, String> {
        // Subscribed before the consumer reads: nothing stored meanwhile is missed.
        let mut tap = self
            .inner
            .js
            .client()
            .subscribe(tap(name))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let upto = match scan {
                Some((upto, _)) => *upto,
                None => self.held_through(name).await?,
            };
            if upto >= *from && self.catch_up(name, from, upto, scan).await? {
                return Ok(true);
            }
            loop {
                let m = match tokio::time::timeout(STALL_CHECK, tap.next()).await {
                    Ok(Some(m)) => m,
                    Ok(None) => return Err("the tap's subscription ended".into()),
                    // Quiet: a paused song, or a message lost on the way.
                    Err(_) => {
                        let last = self.held_through(name).await?;
                        tracing::debug!(session = %name, last, from = *from, "a quiet follower");
                        if last >= *from {
                            tracing::info!(session = %name, last, from = *from, "the subject holds what the tap did not bring");
                            break;
                        }
                        continue;
                    }
                };
                let number = |key: &str| {
                    m.headers
                        .as_ref()
                        .and_then(|h| h.get(key))
                        .and_then(|v| v.as_str().parse::<u64>().ok())
                };
                let (Some(at), Some(before)) =
                    (number("Nats-Sequence"), number("Nats-Last-Sequence"))
                else {
                    continue;
                };
                if at < *from {
                    continue; // read through the consumer already
                }
                if before.checked_add(1) != Some(*from) {
                    tracing::info!(session = %name, at, before, from = *from, "the tap skipped a message");
                    break;
                }
                if self.take_message(name, from, scan, m.headers.as_ref(), m.payload, at) {
                    return Ok(true);
                }
            }
        }
    }

    /// Reads session `name`'s subject through a consumer from `from` to stream sequence
    /// `upto`, feeding each message; `Ok(true)` at its end marker.
    async fn catch_up(
        &self,
        name: &str,
        from: &mut u64,
        upto: u64,
        scan: &mut Option<(u64, Scan)>,
    ) -> Result<bool, String> {
        let mut messages = self.consumer(name, *from).await?;
        // Bounded: a consumer that stalls (its node lost) fails the read, which is tried
        // again, rather than leave viewers waiting on it.
        let by = tokio::time::Instant::now() + SCAN_LIMIT;
        while *from <= upto {
            let m = tokio::time::timeout_at(by, messages.next())
                .await
                .map_err(|_| "the consumer's read timed out".to_string())?
                .ok_or("the consumer's messages ended")?
                .map_err(|e| e.to_string())?;
            let at = m.info().map(|i| i.stream_sequence).unwrap_or(0);
            if at < *from {
                continue; // delivered again after a restart: already fed
            }
            let payload = m.message.payload.clone();
            if self.take_message(name, from, scan, m.message.headers.as_ref(), payload, at) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One message of session `name`'s subject, at stream sequence `at` (`from` moves past
    /// it): into the lookup's scan while there is one, else to the relay. True at the end
    /// marker.
    fn take_message(
        &self,
        name: &str,
        from: &mut u64,
        scan: &mut Option<(u64, Scan)>,
        headers: Option<&HeaderMap>,
        payload: Bytes,
        at: u64,
    ) -> bool {
        *from = at + 1;
        let header = |key: &str| {
            headers
                .and_then(|h| h.get(key))
                .map(|v| v.as_str().to_string())
        };
        let kind = header("Bsor-Kind").unwrap_or_default();
        let end = header("Bsor-End");
        if let Some((upto, s)) = scan.as_mut() {
            s.take(&kind, end.as_deref(), payload, at);
            if at >= *upto {
                if let Some((_, s)) = scan.take() {
                    let live = s.end.is_none();
                    self.finish_scan(name, s, *from);
                    return !live;
                }
            }
            return false;
        }
        if let Some(h) = lock(&self.inner.held).get_mut(name) {
            h.fed = *from;
        }
        match kind.as_str() {
            "chunk" => {
                let Some(chunks) = chunks_of(&payload) else {
                    tracing::warn!(session = %name, at, "a chunk message that does not parse");
                    return false;
                };
                for (head, _) in &chunks {
                    self.note_index(name, head.seq, at);
                }
                let n = name.to_string();
                self.call(move |r, now| {
                    for (_, c) in chunks {
                        r.mirrored(&n, c, now);
                    }
                });
            }
            "witness" => {
                let n = name.to_string();
                self.call(move |r, now| r.mirrored_witness(&n, payload, now));
            }
            "end" => {
                let reason = end_reason(end.as_deref());
                if let Some(h) = lock(&self.inner.held).get_mut(name) {
                    h.ended = true;
                    h.follower = None;
                }
                let n = name.to_string();
                self.call(move |r, now| r.mirror_ended(&n, reason, now));
                return true;
            }
            _ => {}
        }
        false
    }

    /// A lookup's answer to the relay, and what the shell keeps of it.
    fn finish_scan(&self, name: &str, s: Scan, fed: u64) {
        {
            let mut held = lock(&self.inner.held);
            let h = held.entry(name.to_string()).or_default();
            h.fed = fed;
            h.index = s.index.clone();
            h.ended = s.end.is_some();
            // The relay now holds the session as the scan found it: a writer from here on
            // expects the scan's last message (an earlier writer's state is left behind).
            h.seen_last = Some(s.last_at);
            h.writer = None;
        }
        let found = s.into_archived();
        let n = name.to_string();
        self.call(move |r, now| r.restored(&n, found, now));
    }

    /// Looks session `name` up: its entry, then its subject read from the start.
    /// Not found (or the store unreachable) while viewers here wait for it: looked up
    /// again every second until found or nobody here waits any more (one such loop a
    /// name), so a viewer never depends on the bucket's watcher alone (a watcher lost with
    /// a NATS node, say).
    async fn lookup(&self, name: String) {
        let found = match self.try_lookup(&name).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(session = %name, err = %e, "cluster lookup failed");
                let n = name.clone();
                self.call(move |r, now| r.lookup_failed(&n, now));
                false
            }
        };
        if found || !lock(&self.inner.retrying).insert(name.clone()) {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if !self.wanted(&name) || self.try_lookup(&name).await.unwrap_or(false) {
                break;
            }
        }
        lock(&self.inner.retrying).remove(&name);
    }

    /// One lookup: `Ok(true)` when the session was found (its scan and follower started),
    /// `Ok(false)` when the store has not got it (yet).
    async fn try_lookup(&self, name: &str) -> Result<bool, String> {
        let h = self.handles().await?;
        let entry =
            h.kv.get(key_of(name))
                .await
                .map_err(|e| e.to_string())?
                .and_then(|v| serde_json::from_slice::<Entry>(&v).ok());
        let Some(entry) = entry else {
            let n = name.to_string();
            self.call(move |r, now| r.restored(&n, None, now));
            return Ok(false);
        };
        let last = self.held_through(name).await?;
        let limits = self.limits();
        let scan = Scan::new(entry, limits);
        if last == 0 {
            // Claimed, and nothing written yet (or its relay died before the header): not
            // found. A publisher with its key takes it as new (its entry is its own); a
            // viewer waits, and is looked up for again when the header's writer writes the
            // entry again (the bucket's watcher).
            let n = name.to_string();
            self.call(move |r, now| r.restored(&n, None, now));
            return Ok(false);
        }
        let me = self.clone();
        let n = name.to_string();
        let task = tokio::spawn(async move { me.keep_following(n, 1, Some((last, scan))).await });
        let mut held = lock(&self.inner.held);
        let h = held.entry(name.to_string()).or_default();
        if let Some(old) = h.follower.replace(task.abort_handle()) {
            old.abort();
        }
        Ok(true)
    }

    /// The stream sequence of the last message on session `name`'s subject (0: none), as
    /// any of the stream's replicas has it (a direct get, which does not queue behind
    /// JetStream's API requests as the stream leader's reads do: at a start of hundreds of
    /// sessions at once, lookups and writers' claims did): for lookups and followers, which
    /// take anything stored after it from the tap.
    async fn held_through(&self, name: &str) -> Result<u64, String> {
        let h = self.handles().await?;
        match h.stream.direct_get_last_for_subject(subject(name)).await {
            Ok(m) => Ok(m.sequence),
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The stream sequence of the last message on session `name`'s subject (0: none), as
    /// the stream's leader has it.
    async fn last_sequence(&self, name: &str) -> Result<u64, String> {
        Ok(self.last_message(name).await?.0)
    }

    /// The stream sequence and the message ID of the last message on session `name`'s
    /// subject (`(0, None)`: none).
    async fn last_message(&self, name: &str) -> Result<(u64, Option<String>), String> {
        let h = self.handles().await?;
        match h
            .stream
            .get_last_raw_message_by_subject(&subject(name))
            .await
        {
            Ok(m) => {
                let id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string());
                Ok((m.sequence, id))
            }
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok((0, None)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn limits(&self) -> BacklogLimits {
        self.ask(|r| r.backlog_limits()).unwrap_or(BacklogLimits {
            chunks: 1,
            bytes: 0,
            max_chunk: 0,
        })
    }

    /// Reads chunks for a complete-mode viewer from the stream.
    async fn fetch(&self, f: Fetch) {
        let got = self.try_fetch(&f).await;
        let (conn, seq) = (f.conn, f.seq);
        self.call(move |r, now| {
            r.fetched(
                conn,
                seq,
                got.map_err(|e| bsor_stream_core::net::archive::ArchiveError::Read {
                    file: std::path::PathBuf::from(format!("JetStream stream {STREAM}")),
                    source: std::io::Error::other(e),
                }),
                now,
            )
        });
    }

    /// Chunks `f.seq` on (at least one, at most `f.max_chunks`, no more once `f.max_bytes`
    /// are reached), each message that holds them read once.
    async fn try_fetch(&self, f: &Fetch) -> Result<Vec<Bytes>, String> {
        let h = self.handles().await?;
        let mut wanted: Vec<u64> = {
            let held = lock(&self.inner.held);
            let index = held.get(&f.session).map(|h| &h.index[..]).unwrap_or(&[]);
            index
                .iter()
                .skip(f.seq as usize)
                .take(f.max_chunks.max(1))
                .copied()
                .collect()
        };
        wanted.dedup();
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut next = f.seq;
        for at in wanted {
            let m = h
                .stream
                .get_raw_message(at)
                .await
                .map_err(|e| e.to_string())?;
            let chunks = chunks_of(&m.payload)
                .ok_or_else(|| format!("the message at stream sequence {at} holds no chunks"))?;
            // A message's chunks before the one wanted were sent already.
            for (head, chunk) in chunks {
                if head.seq < next {
                    continue;
                }
                if head.seq != next {
                    return Err(format!(
                        "stream sequence {at} holds chunk {} where {next} was due",
                        head.seq
                    ));
                }
                next += 1;
                bytes += chunk.len();
                out.push(chunk);
                if bytes >= f.max_bytes || out.len() >= f.max_chunks.max(1) {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// Watches the bucket: a session that starts elsewhere while somebody here waits for it
    /// is looked up.
    async fn watch(self) {
        loop {
            let watch = match self.handles().await {
                Ok(h) => h.kv.watch_all().await.map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match watch {
                Ok(mut w) => {
                    while let Some(Ok(e)) = w.next().await {
                        let Some(name) = hex::decode(&e.key)
                            .ok()
                            .and_then(|b| String::from_utf8(b).ok())
                        else {
                            continue;
                        };
                        let state = match e.operation {
                            kv::Operation::Put => serde_json::from_slice::<Entry>(&e.value)
                                .map(|v| v.state)
                                .unwrap_or_default(),
                            _ => String::new(),
                        };
                        {
                            // Only live sessions: an ended one leaves room for another.
                            let mut d = lock(&self.inner.directory);
                            if state == "live" {
                                if d.len() < DIRECTORY_MAX {
                                    d.insert(name.clone());
                                }
                            } else {
                                d.remove(&name);
                            }
                        }
                        if state == "finished" && self.inner.store.get().is_some() {
                            // Every archiving relay that sees it queues the job (one job:
                            // the same message ID), after the time finished sessions stay.
                            let me = self.clone();
                            let n = name.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(me.inner.config.keep_finished).await;
                                me.queue_job(&n).await;
                            });
                        }
                        if self.wanted(&name) {
                            let me = self.clone();
                            tokio::spawn(async move { me.lookup(name).await });
                        }
                    }
                }
                Err(e) => tracing::debug!(err = %e, "the cluster's bucket cannot be watched yet"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

impl Cluster {
    /// The live sessions of the cluster not in `held` (for `/sessions`), at most `max`.
    pub(crate) fn elsewhere(
        &self,
        held: &std::collections::HashSet<&str>,
        max: usize,
    ) -> Vec<String> {
        lock(&self.inner.directory)
            .iter()
            .filter(|n| !held.contains(n.as_str()))
            .take(max)
            .cloned()
            .collect()
    }
}

/// Archiving finished sessions, on relays given a store: the bucket's watcher queues a job
/// per finished session into the work queue [`JOBS`]; one relay at a time takes it (the
/// shared durable consumer), reads the session whole, stores it, then purges it from
/// JetStream and only then acknowledges the job. A relay that dies on the way leaves the job
/// to be delivered again (after 120 s) to another: storing is idempotent, so the
/// session is stored once in effect, and it stays whole in JetStream until it is stored.
impl Cluster {
    /// Archives the cluster's finished sessions into `store` from now on (with the other
    /// relays given one). Sessions that finished before are queued too (the watcher sees
    /// every entry when it starts).
    pub fn archive_into(&self, store: Arc<dyn SessionStore>) {
        if self.inner.store.set(store.clone()).is_ok() {
            let me = self.clone();
            tokio::spawn(async move {
                loop {
                    if let Err(err) = me.run_archiver(&*store).await {
                        tracing::debug!(%err, "the cluster's archive jobs cannot be read yet");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
    }

    /// The work queue of archive jobs, made if missing.
    async fn jobs(&self) -> Result<&stream::Stream, String> {
        let inner = &self.inner;
        inner
            .jobs
            .get_or_try_init(|| async {
                let c = &inner.config;
                inner
                    .js
                    .get_or_create_stream(stream::Config {
                        name: JOBS.into(),
                        subjects: vec![JOB_SUBJECTS.into()],
                        retention: stream::RetentionPolicy::WorkQueue,
                        storage: stream::StorageType::File,
                        num_replicas: c.replicas,
                        max_age: c.max_age,
                        duplicate_window: Duration::from_secs(120),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| format!("the stream {JOBS}: {e}"))
            })
            .await
    }

    /// Queues session `name`'s archive job (stored once whoever queues it: its message ID
    /// is the session's).
    async fn queue_job(&self, name: &str) {
        if let Err(err) = self.jobs().await {
            tracing::warn!(session = %name, %err, "queueing a finished session for the archive failed");
            return;
        }
        let message = jetstream::message::PublishMessage::build()
            .payload(Bytes::new())
            .message_id(format!("{}:archive", key_of(name)));
        let sent = self
            .inner
            .js
            .send_publish(format!("bsor.archive.{}", key_of(name)), message)
            .await;
        let acked = match sent {
            Ok(f) => f.await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(err) = acked {
            // Queued again by the next relay that starts (its watcher sees the entry).
            tracing::warn!(session = %name, %err, "queueing a finished session for the archive failed");
        }
    }

    /// Takes archive jobs until the consumer fails.
    async fn run_archiver(&self, store: &dyn SessionStore) -> Result<(), String> {
        let consumer: consumer::PullConsumer = self
            .jobs()
            .await?
            .get_or_create_consumer(
                ARCHIVERS,
                consumer::pull::Config {
                    durable_name: Some(ARCHIVERS.into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ARCHIVE_WAIT,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        let mut jobs = consumer.messages().await.map_err(|e| e.to_string())?;
        while let Some(job) = jobs.next().await {
            let job = job.map_err(|e| e.to_string())?;
            let name = job
                .subject
                .as_str()
                .strip_prefix("bsor.archive.")
                .and_then(|h| hex::decode(h).ok())
                .and_then(|b| String::from_utf8(b).ok());
            let done = match name {
                Some(name) => self.archive_one(&name, store).await,
                None => Ok(()),
            };
            let acked = match done {
                Ok(()) => job.double_ack().await,
                Err(after) => job.ack_with(jetstream::AckKind::Nak(Some(after))).await,
            };
            if let Err(err) = acked {
                tracing::debug!(%err, "answering an archive job failed (it comes again)");
            }
        }
        Ok(())
    }

    /// One job: `Ok` when it is done (stored and purged, or nothing to do), `Err(after)`
    /// to have it delivered again after that long.
    async fn archive_one(&self, name: &str, store: &dyn SessionStore) -> Result<(), Duration> {
        let h = self.handles().await.map_err(|_| RETRY)?;
        let entry = match h.kv.get(key_of(name)).await {
            Ok(v) => v.and_then(|v| serde_json::from_slice::<Entry>(&v).ok()),
            Err(err) => {
                tracing::debug!(session = %name, %err, "reading a session's entry to archive it");
                return Err(RETRY);
            }
        };
        // No entry: archived already. Gone: kept until it ages out, as an archive keeps a
        // session cut short.
        let Some(entry) = entry.filter(|e| e.state == "finished") else {
            return Ok(());
        };
        let whole = match self.read_whole(name, store.max_bytes()).await {
            Ok(Some(w)) => w,
            Ok(None) => return Ok(()),
            Err(err) => {
                tracing::warn!(session = %name, %err, "reading a finished session to archive it");
                return Err(RETRY);
            }
        };
        let session = match whole {
            Whole::Refused(why) => {
                tracing::warn!(session = %name, %why, "a finished session was not archived; it stays in JetStream until it ages out");
                return Ok(());
            }
            Whole::Read { stream, witness } => FinishedSession {
                name: name.to_string(),
                stream,
                witness: (!witness.is_empty()).then_some(witness),
                player: entry.player,
            },
        };
        match store.store(session).await {
            Filed::Stored(id) => {
                tracing::info!(session = %name, %id, "finished session archived");
            }
            Filed::Refused(why) => {
                tracing::warn!(session = %name, %why, "a finished session was not stored; it stays in JetStream until it ages out");
                return Ok(());
            }
            Filed::Failed(why) => {
                tracing::warn!(session = %name, %why, "storing a finished session failed; tried again");
                return Err(RETRY);
            }
        }
        // Stored: out of JetStream, its messages then its entry (no marker left to count
        // against the cluster's sessions).
        let purged = async {
            h.stream.purge().filter(subject(name)).await?;
            h.kv.stream
                .purge()
                .filter(format!("$KV.{BUCKET}.{}", key_of(name)))
                .await
        };
        if let Err(err) = purged.await {
            tracing::warn!(session = %name, %err, "purging an archived session failed; tried again");
            return Err(RETRY);
        }
        Ok(())
    }

    /// A session's subject read whole (`None`: nothing on it), within `max` bytes.
    async fn read_whole(&self, name: &str, max: u64) -> Result<Option<Whole>, String> {
        let last = self.last_sequence(name).await?;
        if last == 0 {
            return Ok(None);
        }
        let mut messages = self.consumer(name, 1).await?;
        let by = tokio::time::Instant::now() + ARCHIVE_WAIT / 2;
        let mut whole = Assembly::new(max);
        loop {
            let m = tokio::time::timeout_at(by, messages.next())
                .await
                .map_err(|_| "the read timed out".to_string())?
                .ok_or("the consumer's messages ended")?
                .map_err(|e| e.to_string())?;
            let at = m.info().map(|i| i.stream_sequence).unwrap_or(0);
            let headers = m.message.headers.as_ref();
            let kind = headers.and_then(|h| h.get("Bsor-Kind")).map(|v| v.as_str());
            let end = headers.and_then(|h| h.get("Bsor-End")).map(|v| v.as_str());
            let count = headers
                .and_then(|h| h.get("Bsor-Chunks"))
                .map(|v| v.as_str());
            if !whole.take(kind, end, count, &m.message.payload) || at >= last {
                break;
            }
        }
        Ok(Some(whole.finish()))
    }
}

/// A finished session's subject as read to archive it.
#[derive(Debug, PartialEq, Eq)]
enum Whole {
    /// The stream `watch -o` would have written (header, chunks 0..n, footer), and the
    /// `.witness` file of its statements.
    Read { stream: Vec<u8>, witness: Vec<u8> },
    /// Not archived, and why.
    Refused(String),
}

/// A session's subject taken message by message, in the stream's order, into what is
/// archived: only a header, then chunks 0..n each once, whole and in order, then the end
/// marker `finished` make a stream; anything else is refused, never mended (what is stored
/// is exactly what the publisher's relays wrote, or nothing).
struct Assembly {
    out: StreamWriter<Vec<u8>>,
    witness: Vec<u8>,
    chunks: u32,
    end: Option<bool>,
    refused: Option<String>,
    max: u64,
}

impl Assembly {
    fn new(max: u64) -> Assembly {
        Assembly {
            out: StreamWriter::new(Vec::new()),
            witness: Vec::new(),
            chunks: 0,
            end: None,
            refused: None,
            max,
        }
    }

    /// Takes one message (its `Bsor-Kind`, `Bsor-End`, `Bsor-Chunks` and payload); false
    /// once nothing more can change the outcome.
    fn take(
        &mut self,
        kind: Option<&str>,
        end: Option<&str>,
        count: Option<&str>,
        payload: &Bytes,
    ) -> bool {
        if self.refused.is_some() || self.end.is_some() {
            return false;
        }
        let refusal = match kind {
            Some("header") if self.out.is_empty() => {
                (self.out.write(payload).is_err()).then(|| "the header".to_string())
            }
            Some("header") => Some("a second header".into()),
            Some("chunk") if self.out.is_empty() => Some("a chunk before the header".into()),
            Some("chunk") => match chunks_of(payload) {
                Some(chunks) => chunks
                    .iter()
                    .find_map(|(c, chunk)| self.take_chunk(c, chunk)),
                None => Some(format!("chunk {} does not parse", self.chunks)),
            },
            Some("witness") => {
                self.witness
                    .extend_from_slice(&(payload.len() as u32).to_le_bytes());
                self.witness.extend_from_slice(payload);
                None
            }
            // A subject cut short after any chunk reads as whole but for the count the end
            // marker gives.
            Some("end") if count.and_then(|c| c.parse::<u32>().ok()) != Some(self.chunks) => {
                Some(format!(
                    "{} chunks where its end marker says {}",
                    self.chunks,
                    count.unwrap_or("nothing")
                ))
            }
            Some("end") => {
                self.end = Some(end == Some("finished"));
                None
            }
            _ => None,
        };
        if refusal.is_some() {
            self.refused = refusal;
        } else if self.out.len() + self.witness.len() as u64 > self.max {
            self.refused = Some(format!("over the store's limit of {} bytes", self.max));
        }
        self.refused.is_none() && self.end.is_none()
    }

    /// One chunk of a `chunk` message: why the subject is refused, if it is.
    fn take_chunk(&mut self, c: &ChunkHeader, chunk: &[u8]) -> Option<String> {
        if c.seq != self.chunks {
            return Some(format!("chunk {} where {} was due", c.seq, self.chunks));
        }
        if let Err(e) = bsor_stream_core::net::wire::check_chunk(chunk) {
            return Some(format!("chunk {}: {e}", c.seq));
        }
        self.chunks += 1;
        (self.out.write(chunk).is_err()).then(|| "a chunk".to_string())
    }

    fn finish(self) -> Whole {
        if let Some(why) = self.refused {
            return Whole::Refused(why);
        }
        match self.end {
            Some(true) => match self.out.finish(true) {
                Ok(stream) => Whole::Read {
                    stream,
                    witness: self.witness,
                },
                Err(e) => Whole::Refused(e.to_string()),
            },
            Some(false) => Whole::Refused("its publisher went before the end".into()),
            None => Whole::Refused("it has no end marker".into()),
        }
    }
}

/// The whole chunks a `chunk` message holds, back to back, with their headers; `None`
/// when it holds anything else (an empty payload, a chunk cut short, bytes after the last
/// one). A chunk's CRCs are not checked here.
fn chunks_of(payload: &Bytes) -> Option<Vec<(ChunkHeader, Bytes)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let (head, head_len) = ChunkHeader::parse_at(&payload[at..])?;
        let end = at.checked_add(head_len)?.checked_add(head.len as usize)?;
        if end > payload.len() {
            return None;
        }
        out.push((head, payload.slice(at..end)));
        at = end;
    }
    (!out.is_empty()).then_some(out)
}

fn end_reason(why: Option<&str>) -> EndReason {
    match why {
        Some("finished") => EndReason::Finished,
        _ => EndReason::PublisherGone,
    }
}

/// A session's subject read from the start, for [`Relay::restored`].
struct Scan {
    entry: Entry,
    limits: BacklogLimits,
    header: Option<Bytes>,
    key_chunk: Option<Bytes>,
    chunks: u32,
    bytes: u64,
    /// The last chunks, within the limits (as the relay's own backlog keeps them).
    backlog: VecDeque<Bytes>,
    backlog_bytes: usize,
    index: Vec<u64>,
    end: Option<EndReason>,
    broken: bool,
    /// The stream sequence of the last message read.
    last_at: u64,
}

impl Scan {
    fn new(entry: Entry, limits: BacklogLimits) -> Scan {
        Scan {
            entry,
            limits,
            header: None,
            key_chunk: None,
            chunks: 0,
            bytes: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            index: Vec::new(),
            end: None,
            broken: false,
            last_at: 0,
        }
    }

    fn take(&mut self, kind: &str, end: Option<&str>, payload: Bytes, at: u64) {
        self.last_at = self.last_at.max(at);
        if self.broken || self.end.is_some() {
            return;
        }
        match kind {
            "header" if self.header.is_none() => {
                self.bytes = payload.len() as u64;
                self.header = Some(payload);
            }
            "chunk" => {
                let Some(chunks) = chunks_of(&payload) else {
                    self.broken = true;
                    return;
                };
                for (h, chunk) in chunks {
                    self.take_chunk(h, chunk, at);
                    if self.broken {
                        return;
                    }
                }
            }
            "end" => self.end = Some(end_reason(end)),
            _ => {}
        }
    }

    /// One chunk of a message at stream sequence `at`.
    fn take_chunk(&mut self, h: ChunkHeader, chunk: Bytes, at: u64) {
        if h.seq != self.chunks || self.header.is_none() {
            self.broken = true;
            return;
        }
        self.chunks += 1;
        self.bytes += chunk.len() as u64;
        self.index.push(at);
        if h.seq == 0 && h.kind == ChunkType::Unknown(0x10) && chunk.len() <= 4096 {
            self.key_chunk = Some(chunk.clone());
        }
        self.backlog_bytes += chunk.len();
        self.backlog.push_back(chunk);
        while self.backlog.len() > 1
            && (self.backlog.len() > self.limits.chunks || self.backlog_bytes > self.limits.bytes)
        {
            if let Some(b) = self.backlog.pop_front() {
                self.backlog_bytes -= b.len();
            }
        }
    }

    fn into_archived(self) -> Option<Archived> {
        let header = self.header?;
        if self.broken {
            return None;
        }
        let live = self.end.is_none() && self.entry.state == "live";
        Some(Archived {
            header,
            chunks: self.chunks,
            end: self.bytes,
            index_at: None,
            key: if live { self.entry.key() } else { None },
            finished: self.end == Some(EndReason::Finished),
            key_chunk: if live { self.key_chunk } else { None },
            backlog: if live {
                self.backlog.into()
            } else {
                Vec::new()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bsor_stream_core::stream::{split_stream, Profile, Settings};
    use bsor_stream_core::{synth, transcode};
    use proptest::prelude::*;

    /// A published session: its header and chunks, and the stream `watch -o` wrote of it.
    fn published() -> (Bytes, Vec<Bytes>, Vec<u8>) {
        let r = synth::replay(synth::Settings {
            seed: 7,
            seconds: 4.0,
            fps: 60,
        });
        let s = transcode::encode_replay(&r, Settings::live(Profile::Lossless));
        let (_, header_len, spans) = split_stream(&s).unwrap();
        let header = Bytes::copy_from_slice(&s[..header_len]);
        let chunks: Vec<Bytes> = spans
            .iter()
            .map(|c| Bytes::copy_from_slice(c.bytes(&s)))
            .collect();
        let mut w = StreamWriter::new(Vec::new());
        w.write(&header).unwrap();
        for c in &chunks {
            w.write(c).unwrap();
        }
        let reference = w.finish(true).unwrap();
        // The reference is the publisher's stream, which decodes to the replay.
        let (back, rec) = transcode::decode_replay(&reference).unwrap();
        assert!(rec.complete);
        assert_eq!(
            bsor_stream_core::bsor::to_vec(&back).unwrap(),
            bsor_stream_core::bsor::to_vec(&r).unwrap()
        );
        (header, chunks, reference)
    }

    /// What may happen to a subject between the publisher and the archive.
    #[derive(Clone, Debug)]
    enum Op {
        /// A witness statement after chunk message i (harmless).
        Witness(usize, Vec<u8>),
        /// A message of a kind this version does not know (harmless).
        Unknown(usize),
        /// Something after the end marker (harmless: the end is the end).
        AfterEnd,
        /// Chunk message i missing.
        Drop(usize),
        /// Chunk message i twice.
        Dup(usize),
        /// Chunk messages i and i+1 in the wrong order.
        Swap(usize),
        /// A byte of chunk message i changed.
        Corrupt(usize, usize, u8),
        /// A second header after chunk message i.
        SecondHeader(usize),
        /// The end marker says the publisher went.
        EndGone,
        /// No end marker.
        NoEnd,
    }

    impl Op {
        /// Leaves the subject whole.
        fn harmless(&self) -> bool {
            matches!(self, Op::Witness(..) | Op::Unknown(_) | Op::AfterEnd)
        }
    }

    /// A message's whole chunks come back as they went in; a message cut anywhere, or
    /// with anything after its last chunk, holds none.
    #[test]
    fn a_message_holds_whole_chunks_or_none() {
        let (header, chunks, _) = published();
        let three = Bytes::from(chunks[..3].concat());
        let got = chunks_of(&three).unwrap();
        assert_eq!(got.len(), 3);
        for (k, (head, c)) in got.iter().enumerate() {
            assert_eq!(head.seq, k as u32);
            assert_eq!(c, &chunks[k]);
        }
        for cut in 1..three.len() {
            let parts = chunks_of(&three.slice(..cut));
            let whole = cut == chunks[0].len() || cut == chunks[0].len() + chunks[1].len();
            assert_eq!(
                parts.map(|p| p.len()),
                whole.then_some(if cut == chunks[0].len() { 1 } else { 2 }),
                "cut at {cut}"
            );
        }
        let mut trailing = three.to_vec();
        trailing.push(0);
        assert!(chunks_of(&Bytes::from(trailing)).is_none());
        assert!(chunks_of(&Bytes::new()).is_none());
        assert!(chunks_of(&header).is_none());
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                any::<usize>(),
                proptest::collection::vec(any::<u8>(), 1..200)
            )
                .prop_map(|(i, w)| Op::Witness(i, w)),
            any::<usize>().prop_map(Op::Unknown),
            Just(Op::AfterEnd),
            any::<usize>().prop_map(Op::Drop),
            any::<usize>().prop_map(Op::Dup),
            any::<usize>().prop_map(Op::Swap),
            (any::<usize>(), any::<usize>(), 1..=255u8).prop_map(|(i, b, x)| Op::Corrupt(i, b, x)),
            any::<usize>().prop_map(Op::SecondHeader),
            Just(Op::EndGone),
            Just(Op::NoEnd),
        ]
    }

    type Message = (Option<&'static str>, Option<&'static str>, Bytes);

    /// Chunk message i's place in `msgs` (counting round the chunk messages there are).
    fn place(msgs: &[Message], i: usize) -> usize {
        let places: Vec<usize> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.0 == Some("chunk"))
            .map(|(k, _)| k)
            .collect();
        places[i % places.len()]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Whatever the archive reads as whole is exactly the stream the publisher sent,
        /// with exactly the statements on the subject; a subject that lost, repeated,
        /// reordered or changed anything, or did not finish, is refused. The chunks go
        /// into messages as a writer puts them (`groups`: how many chunks each message
        /// holds, taken in turn), and the ops act on messages.
        #[test]
        fn what_is_archived_is_exactly_what_was_published(
            ops in proptest::collection::vec(op(), 0..4),
            groups in proptest::collection::vec(1..5usize, 1..8),
            small in any::<bool>(),
        ) {
            let (header, chunks, reference) = published();
            let n = chunks.len();
            let mut msgs: Vec<Message> = vec![(Some("header"), None, header.clone())];
            let mut rest = &chunks[..];
            for g in groups.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (these, after) = rest.split_at((*g).min(rest.len()));
                msgs.push((Some("chunk"), None, Bytes::from(these.concat())));
                rest = after;
            }
            let mut end = Some((Some("end"), Some("finished"), Bytes::new()));
            let mut after = Vec::new();
            for op in &ops {
                match op {
                    Op::Witness(i, w) => {
                        let k = place(&msgs, *i);
                        msgs.insert(k + 1, (Some("witness"), None, Bytes::from(w.clone())));
                    }
                    Op::Unknown(i) => {
                        let k = place(&msgs, *i);
                        msgs.insert(k + 1, (Some("later"), None, Bytes::from_static(b"?")));
                    }
                    Op::AfterEnd => after.push((Some("chunk"), None, chunks[0].clone())),
                    Op::Drop(i) => {
                        let k = place(&msgs, *i);
                        msgs.remove(k);
                    }
                    Op::Dup(i) => {
                        let k = place(&msgs, *i);
                        let m = msgs[k].clone();
                        msgs.insert(k + 1, m);
                    }
                    Op::Swap(i) => {
                        let (k, k2) = (place(&msgs, *i), place(&msgs, *i + 1));
                        msgs.swap(k, k2);
                    }
                    Op::Corrupt(i, b, x) => {
                        let k = place(&msgs, *i);
                        let mut c = msgs[k].2.to_vec();
                        let j = b % c.len();
                        c[j] ^= x;
                        msgs[k].2 = Bytes::from(c);
                    }
                    Op::SecondHeader(i) => {
                        let k = place(&msgs, *i);
                        msgs.insert(k + 1, (Some("header"), None, header.clone()));
                    }
                    Op::EndGone => end = Some((Some("end"), Some("gone"), Bytes::new())),
                    Op::NoEnd => end = None,
                }
            }
            // Broken or not is what the subject holds, not which ops ran (two swaps of one
            // pair, one byte changed twice, a message repeated then dropped leave it as it
            // was): the chunks exactly the published ones in order (the messages' bytes
            // those of the chunks: every message holds whole chunks), one header, a
            // finished end marker.
            let kept: Vec<u8> =
                msgs.iter().filter(|m| m.0 == Some("chunk")).flat_map(|m| m.2.to_vec()).collect();
            let chunks_intact = kept == chunks.concat();
            let headers = msgs.iter().filter(|m| m.0 == Some("header")).count();
            let broken = !(chunks_intact
                && headers == 1
                && end.as_ref().is_some_and(|e| e.1 == Some("finished")));
            prop_assert!(
                broken
                    || ops.iter().all(|o| o.harmless()
                        || matches!(o, Op::Swap(_) | Op::Corrupt(..) | Op::Dup(_) | Op::Drop(_)))
            );
            let mut statements = Vec::new();
            for m in &msgs {
                if m.0 == Some("witness") {
                    statements.extend_from_slice(&(m.2.len() as u32).to_le_bytes());
                    statements.extend_from_slice(&m.2);
                }
            }
            let max = if small { reference.len() as u64 / 2 } else { u64::MAX };
            let mut a = Assembly::new(max);
            // The end marker says how many chunks the publisher's relays wrote: all of them.
            let count = n.to_string();
            for m in msgs.iter().chain(end.iter()).chain(after.iter()) {
                let c = (m.0 == Some("end")).then_some(count.as_str());
                if !a.take(m.0, m.1, c, &m.2) {
                    break;
                }
            }
            match a.finish() {
                Whole::Read { stream, witness } => {
                    prop_assert!(!broken, "a broken subject was read whole: {ops:?}");
                    prop_assert!(!small);
                    prop_assert!(stream == reference, "not the published stream: {ops:?}");
                    prop_assert_eq!(witness, statements);
                }
                Whole::Refused(why) => {
                    prop_assert!(broken || small, "refused ({why}) though whole: {ops:?}");
                    prop_assert!(!why.is_empty());
                }
            }
        }
    }
}
