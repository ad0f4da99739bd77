//! # bsor-stream-server
//!
//! The replay server (`proto-spec/http.md` §7): uploads are parsed,
//! validated and kept as `.bsors` streams in a [`Store`] (an object store; a directory by
//! default), described in an [`Index`] (SQLite by default, PostgreSQL at scale), and served
//! back whole (BSOR rebuilt byte for byte), by song time, or as events only, by range reads.
//!
//! What can be decided without I/O is in [`plan`] (what a body is, whether it is a play the
//! server keeps, IDs, the ranges a request reads, cursors) and [`prepare`] (an upload from
//! its bytes to what is stored and indexed); this module runs them against the store and
//! the index. The HTTP side is [`http`]: its [`Routes`](http::Routes) are mounted on the
//! relay's HTTP (crate `bsor-stream-relay`), which serves the page and the live sessions on
//! the same address.
//!
//! Nothing half-written (`http.md` §7.3): a lease row is written before a blob, and
//! committed away with the index row after it; [`ReplayServer::sweep`] removes the blobs of
//! expired leases (it reads the lease table, never lists the store), so several servers may
//! share one store and index.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod auth;
pub mod client;
pub mod http;
pub mod index;
pub mod keys;
pub mod plan;
pub mod rebuild;
pub mod store;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;

pub use self::auth::{Grant, Uploaders};
pub use self::index::{
    Committed, Filter, Index, IndexError, Issued, KeyRow, Play, Record, Registered, Review, Spent,
};
pub use self::keys::{KeyOwner, Ownership};
pub use self::store::{OpenError, Reads, Store, StoreError};
use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::integrity::{fingerprint::event_digest, hex, SigningKey};
use bsor_stream_core::stream::{
    ChunkType, EventBatch, IndexEntry, Profile, Settings, StreamDecoder, StreamHeader, StreamItem,
    Trailer,
};
use plan::Kind;

/// A refusal: its cause, a short code and a reason (`{"error": CODE, "reason": TEXT}`). The
/// HTTP side ([`http`]) answers each cause with its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal it is.
    pub cause: Cause,
    /// A short code a program can test.
    pub code: &'static str,
    /// What was wrong, for a person.
    pub reason: String,
}

/// What kind of refusal a [`Refusal`] is (`http.md` §8 gives each its status).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The request or what it carries is not valid.
    Invalid,
    /// No credentials, or ones the server does not know.
    Unauthenticated,
    /// The credentials do not allow it.
    Forbidden,
    /// No such replay, key or resource.
    NotFound,
    /// The resource does not take this operation.
    NotAllowed,
    /// The body came too slowly.
    TooSlow,
    /// It conflicts with what is stored (a replay already there, the same play).
    Conflict,
    /// The body is over its limit.
    TooLarge,
    /// The body is of a type the server does not take.
    WrongType,
    /// The range asked for is outside the resource.
    OutOfRange,
    /// Over the address's or the player's rate.
    RateLimited,
    /// The server failed.
    Internal,
    /// The server is busy, or its store or index cannot be reached: try again.
    Unavailable,
}

impl Refusal {
    /// A refusal.
    pub fn new(cause: Cause, code: &'static str, reason: impl Into<String>) -> Refusal {
        Refusal {
            cause,
            code,
            reason: reason.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::json!({"error": self.code, "reason": self.reason}).to_string()
    }

    fn unavailable(e: impl std::fmt::Display) -> Refusal {
        tracing::warn!(err = %e, "replay server");
        Refusal::new(
            Cause::Unavailable,
            "unavailable",
            "the store or the index cannot be reached; try again",
        )
    }
}

impl From<IndexError> for Refusal {
    fn from(e: IndexError) -> Self {
        Refusal::unavailable(e)
    }
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Refusal::unavailable(e)
    }
}

/// A step of an upload where a test makes it fail (`http.md` §7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// After the lease, before the blob is written.
    BeforeBlob,
    /// After the blob is written, before the commit.
    AfterBlob,
    /// In the commit, before the row is written.
    BeforeCommit,
}

/// The replay server's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The most bytes of a request body (as sent).
    pub max_body: u64,
    /// The most bytes of a gzip-encoded body once inflated.
    pub max_inflated: u64,
    /// Record counts accepted at most.
    pub counts: plan::Counts,
    /// How a BSOR upload is stored: `Lossless` (rebuilt byte for byte) or `Compact`.
    pub profile: Profile,
    /// How long a lease lasts: an upload not committed by then is swept.
    pub lease: Duration,
    /// Countersign each accepted upload with this key.
    pub key: Option<SigningKey>,
    /// The most stored bytes of frames a BSOR download reads at once: whole keyframe
    /// groups in order up to this (a larger group alone). Each read is one round trip to
    /// an object store, so groups of about a second each would cost a round trip a second
    /// of song; this bounds the memory a download holds instead.
    pub download_span: u64,
    /// Make uploads fail at this step (tests only).
    pub fault: Option<Fault>,
    /// The witness keys whose statements date a replay (`http.md` §8.2.2): `serve
    /// --trust-witness`, and the relay's own `--witness-key`.
    pub trusted_witnesses: Vec<[u8; 32]>,
    /// The server's name in key registration proofs (`http.md` §8.13): `serve
    /// --server-name`. Servers sharing an index share it, so that each honours the others'
    /// challenges.
    pub server_name: String,
    /// How long a key registration challenge stays valid.
    pub challenge_ttl: Duration,
    /// What one address, and all together, may hold at once (`http.md` §8.15).
    pub caps: admission::Caps,
    /// Where upload bodies are spooled while they arrive (when `None`: `LOCATION/spool` for
    /// a directory store opened by [`ReplayServer::open`], else the system's temporary
    /// folder).
    pub spool_dir: Option<std::path::PathBuf>,
    /// The slowest an upload body may arrive, in bytes a second, once [`Config::body_grace`]
    /// passed: a body behind that is cut with `408`.
    pub min_body_rate: u64,
    /// How long a body may send nothing before its rate counts.
    pub body_grace: Duration,
    /// Bytes a second of replies one address may take (a burst of two seconds' worth; 0:
    /// no pace).
    pub address_rate: u64,
    /// Review copies pending for one player at most: a refused upload past it is not kept.
    pub review_quota: i64,
    /// The folder `PUT /maps/HASH` writes map zips to (the relay's `serve --maps`, which
    /// serves them): `None`, maps are not taken.
    pub maps: Option<std::path::PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_body: 32 << 20,
            max_inflated: 64 << 20,
            counts: plan::Counts::default(),
            profile: Profile::Lossless,
            lease: Duration::from_secs(600),
            key: None,
            download_span: 256 << 10,
            fault: None,
            trusted_witnesses: Vec::new(),
            server_name: "localhost".into(),
            challenge_ttl: Duration::from_secs(300),
            caps: admission::Caps::default(),
            spool_dir: None,
            min_body_rate: 32 << 10,
            body_grace: Duration::from_secs(10),
            address_rate: 32 << 20,
            review_quota: 16,
            maps: None,
        }
    }
}

/// An upload made ready to store: the stream, and its row (blob and time not yet set).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The stream to store.
    pub stream: Bytes,
    /// Its index row.
    pub record: Record,
    /// The signer's key, when its signature's key chunk verified (`keys::upload_signer`).
    pub signer: Option<[u8; 32]>,
    /// The earliest receive time (Unix milliseconds) of a trusted witness statement that
    /// checked against the stream ([`Prepared::witness`]).
    pub witnessed: Option<i64>,
    /// Its play keys and motion signature (`integrity.md` §11.4).
    pub play: Play,
}

impl Prepared {
    /// Dates the stream by the witness statements of `file` (a `.witness` file's bytes,
    /// `integrity.md` §12.2) whose keys are in `trusted`: `witnessed` becomes the earliest
    /// receive time of those that check against the stream (§12.3), when the stream's
    /// signatures hold (verdict `valid`, `integrity.md` §8); otherwise nothing changes.
    pub fn witness(&mut self, file: &[u8], trusted: &[[u8; 32]]) {
        if let Some(t) = witnessed(&self.stream, file, trusted) {
            self.witnessed = Some(self.witnessed.map_or(t, |w| w.min(t)));
        }
    }
}

/// The earliest receive time (Unix milliseconds) of a statement in `file` by a key in
/// `trusted` that checks against `stream`, when the stream's signatures hold (verdict
/// `valid`): a stream whose bytes were changed around another recording's checkpoints is
/// dated by nothing. Statements of other keys are left out before any signature is checked,
/// so that untrusted ones cost nothing.
pub fn witnessed(stream: &[u8], file: &[u8], trusted: &[[u8; 32]]) -> Option<i64> {
    use bsor_stream_core::integrity::witness::{self, STATEMENT_LEN};
    let mut kept = Vec::new();
    for rec in witness::parse_file(file).records {
        let key = rec.get(1..33).and_then(|k| <[u8; 32]>::try_from(k).ok());
        if rec.len() == STATEMENT_LEN && key.is_some_and(|k| trusted.contains(&k)) {
            kept.extend_from_slice(&(STATEMENT_LEN as u32).to_le_bytes());
            kept.extend_from_slice(rec);
        }
    }
    if kept.is_empty() {
        return None;
    }
    let (report, witnesses) = witness::verify_witnessed(stream, &kept, trusted);
    if report.verdict != bsor_stream_core::integrity::Verdict::Valid {
        return None;
    }
    witnesses.existed_by_ms.and_then(|t| i64::try_from(t).ok())
}

/// Inflates a gzip body, stopping at `limit` bytes (a gzip bomb is refused there, having
/// taken at most `limit` bytes of memory).
pub fn inflate(body: &[u8], limit: u64) -> Result<Vec<u8>, Refusal> {
    use std::io::Read;
    // Deflate makes at most 1,032 bytes of each byte: room for that (up to the limit) is
    // taken at once, so that the buffer never doubles with both copies alive (a bomb's
    // resident cost stays the limit, not twice it).
    let room = (body.len() as u64)
        .saturating_mul(1032)
        .saturating_add(64)
        .min(limit + 1);
    let mut out = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
    let mut d = flate2::read::MultiGzDecoder::new(body).take(limit + 1);
    d.read_to_end(&mut out).map_err(|e| {
        Refusal::new(
            Cause::Invalid,
            "bad-encoding",
            format!("the gzip body: {e}"),
        )
    })?;
    if out.len() as u64 > limit {
        return Err(Refusal::new(
            Cause::TooLarge,
            "too-large",
            format!("the body inflates to more than {limit} bytes"),
        ));
    }
    Ok(out)
}

/// An upload from its bytes (gzip-encoded when `gzip`, or when its magic says so) to what
/// is stored and indexed, for the token's `player`: parsed completely, validated
/// ([`plan::validate`]), and refused unless its player ID is `player` (`403`). The file is
/// never rewritten: a BSOR is stored as the stream of `config.profile`, a `.bsors` as it came.
pub fn prepare(
    body: &[u8],
    gzip: bool,
    config: &Config,
    player: &str,
) -> Result<Prepared, Refusal> {
    let inflated;
    let body = if gzip || plan::looks_gzipped(body) {
        inflated = inflate(body, config.max_inflated)?;
        &inflated[..]
    } else {
        body
    };
    let bad = |what: String| Refusal::new(Cause::Invalid, "unparsable", what);
    let (replay, stream, bsor_bytes) = match plan::sniff(body) {
        Some(Kind::Bsor) => {
            let replay = bsor::parse(body).map_err(|e| bad(format!("the BSOR: {e}")))?;
            match bsor::to_vec(&replay) {
                Ok(b) if b == body => {}
                _ => {
                    return Err(Refusal::new(
                        Cause::Invalid,
                        "unparsable",
                        "the BSOR holds bytes its model does not keep; it cannot be rebuilt byte for byte",
                    ))
                }
            }
            plan::validate(&replay, &config.counts)
                .map_err(|e| Refusal::new(Cause::Invalid, "invalid-replay", e.to_string()))?;
            let stream = bsor_stream_core::transcode::encode_replay(
                &replay,
                Settings::archive(config.profile),
            );
            (replay, stream, body.to_vec())
        }
        Some(Kind::Stream) => {
            let (replay, recovery) = bsor_stream_core::transcode::decode_replay(body)
                .map_err(|e| bad(format!("the stream: {e}")))?;
            // A signed stream is taken as its verifier decodes it, or not at all: its
            // replay is the records the signatures cover (integrity.md §8), so what is
            // stored and indexed is exactly what was signed.
            let replay = match signing_chunks(body) {
                false => replay,
                true => {
                    let v = bsor_stream_core::integrity::decode_verified(body);
                    match v.replay {
                        Some(signed) => signed,
                        None => {
                            return Err(Refusal::new(
                                Cause::Invalid,
                                "bad-signature",
                                format!(
                                    "the stream is signed but does not verify ({}): {}",
                                    v.report.verdict.name(),
                                    v.report.reason.unwrap_or_default()
                                ),
                            ))
                        }
                    }
                }
            };
            if !recovery.complete {
                return Err(bad(format!(
                    "the stream is not whole ({} damage reports, or no trailer)",
                    recovery.damage.len()
                )));
            }
            plan::validate(&replay, &config.counts)
                .map_err(|e| Refusal::new(Cause::Invalid, "invalid-replay", e.to_string()))?;
            let bsor_bytes = bsor::to_vec(&replay)
                .map_err(|e| bad(format!("the stream's replay cannot be written: {e}")))?;
            let indexed = bsor_stream_core::transcode::read_index(&mut std::io::Cursor::new(body))
                .ok()
                .flatten()
                .is_some();
            // A finished stream is kept as it came (with any signature chunks); one
            // without an index is encoded again, so that range reads can find its parts.
            let stream = if indexed {
                body.to_vec()
            } else {
                bsor_stream_core::transcode::encode_replay(
                    &replay,
                    Settings::archive(config.profile),
                )
            };
            (replay, stream, bsor_bytes)
        }
        Some(Kind::LegacyJson) => {
            // proto-spec/legacy-import.md: the legacy form names no player, so the replay is
            // the token's player's; it is stored as the BSOR the import makes.
            let mut replay = bsor_stream_core::legacy::import(
                body,
                &bsor_stream_core::legacy::ImportLimits::default(),
            )
            .map_err(|e| Refusal::new(Cause::Invalid, "invalid-legacy-json", e.to_string()))?;
            if replay.info.player_id.bytes.is_empty() {
                replay.info.player_id = bsor::BsorString::new(player);
            }
            plan::validate(&replay, &config.counts)
                .map_err(|e| Refusal::new(Cause::Invalid, "invalid-replay", e.to_string()))?;
            let bsor_bytes = bsor::to_vec(&replay)
                .map_err(|e| bad(format!("the imported replay cannot be written: {e}")))?;
            let stream = bsor_stream_core::transcode::encode_replay(
                &replay,
                Settings::archive(config.profile),
            );
            (replay, stream, bsor_bytes)
        }
        None => {
            return Err(Refusal::new(
                Cause::Invalid,
                "unknown-format",
                "the body is not a BSOR, a .bsors stream or a legacy replay JSON",
            ))
        }
    };
    let claimed = replay.info.player_id.to_string_lossy();
    if claimed != player {
        return Err(Refusal::new(
            Cause::Forbidden,
            "wrong-player",
            format!("the replay is player {claimed:?}'s; this token uploads as {player:?}"),
        ));
    }
    let record = describe(&replay, &stream, bsor_bytes.len())?;
    let play = play_of(&replay);
    let is_bsor = plan::sniff(body) == Some(Kind::Bsor);
    let signer = keys::upload_signer(body, is_bsor, record.signed);
    if is_bsor && signer.is_none() && keys::names_signature(body) {
        let r = bsor_stream_core::integrity::verify_bsor(body);
        if r.verdict != bsor_stream_core::integrity::Verdict::Unsigned {
            return Err(Refusal::new(
                Cause::Invalid,
                "bad-signature",
                format!(
                    "the BSOR is signed but does not verify ({}): {}",
                    r.verdict.name(),
                    r.reason.unwrap_or_default()
                ),
            ));
        }
    }
    Ok(Prepared {
        signer,
        witnessed: None,
        play,
        stream: Bytes::from(stream),
        record: Record {
            id: plan::replay_id(&bsor_bytes),
            ..record
        },
    })
}

/// The play keys and motion signature of a replay, as the index keeps them.
pub fn play_of(replay: &Replay) -> Play {
    use base64::Engine as _;
    use bsor_stream_core::integrity::fingerprint::{play_keys, MotionSignature};
    Play {
        keys: play_keys(replay),
        signature: base64::engine::general_purpose::STANDARD
            .encode(MotionSignature::of(replay).to_bytes()),
    }
}

/// The most stored plays an upload is scored against (those sharing the most play keys
/// with it, `integrity.md` §11.4).
pub const MAX_CANDIDATES: i64 = 32;

/// The index row of a replay stored as `stream` (ID, blob and time left empty).
fn describe(replay: &Replay, stream: &[u8], bsor_bytes: usize) -> Result<Record, Refusal> {
    let (header, header_len) = StreamHeader::parse_prefix_len(stream)
        .ok()
        .flatten()
        .ok_or_else(|| Refusal::new(Cause::Invalid, "unparsable", "the stream header"))?;
    let signed = signing_chunks(stream);
    let text = |s: &bsor::BsorString| s.to_string_lossy();
    let i = &replay.info;
    Ok(Record {
        id: String::new(),
        blob: String::new(),
        player: text(&i.player_id),
        player_name: text(&i.player_name),
        map_hash: text(&i.hash),
        song: text(&i.song_name),
        difficulty: text(&i.difficulty),
        mode: text(&i.mode),
        score: i64::from(i.score),
        played: text(&i.timestamp).trim().parse::<i64>().unwrap_or(0).max(0),
        uploaded: 0,
        duration: replay
            .frames
            .last()
            .map_or(0.0, |f| f64::from(f.time.max(0.0))),
        format: match header.settings.profile {
            Profile::Custom(_) => "custom".into(),
            p => p.to_string(),
        },
        stored_bytes: stream.len() as i64,
        bsor_bytes: bsor_bytes as i64,
        header_bytes: header_len as i64,
        fingerprint: hex(&event_digest(replay)),
        signed,
        countersigned: false,
        existed_by: 0,
    })
}

/// Whether a stream holds any signing chunk (`integrity.md` §2), wherever it is.
fn signing_chunks(stream: &[u8]) -> bool {
    bsor_stream_core::stream::split_stream(stream).is_some_and(|(_, _, spans)| {
        spans.iter().any(|s| {
            stream
                .get(s.offset + 1)
                .is_some_and(|k| bsor_stream_core::integrity::is_integrity_chunk(*k))
        })
    })
}

/// What the index holds of an upload's replay or play ([`ReplayServer::already`]).
enum Already {
    /// The answer: it is there, or refused as another player's play.
    Answer(Result<Uploaded, Refusal>),
    /// Neither the replay nor its play.
    New,
    /// The play is this owner's, whose existed-by time is later than the upload's.
    Earlier(Record),
}

/// How an upload ended.
#[derive(Clone, Debug)]
pub enum Uploaded {
    /// Stored now: `201`.
    Created(Record),
    /// The same replay (or the same play) by the same player was there already: `200`.
    Existing(Record),
}

/// The server's countersignature of an accepted upload (`http.md` §7.4), stored as JSON
/// beside the blob.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Statement {
    /// What this is.
    pub statement: &'static str,
    /// The replay's ID.
    pub id: String,
    /// Its event digest.
    pub fingerprint: String,
    /// BLAKE3 of the stored stream, hex.
    pub stream_hash: String,
    /// The player it was accepted for.
    pub player: String,
    /// When it was accepted (Unix milliseconds).
    pub accepted: i64,
    /// The server's public key, hex.
    pub key: String,
    /// Ed25519 over the canonical message, hex.
    pub signature: String,
}

/// What the server signs: one line per field, in this order.
pub fn statement_message(
    id: &str,
    fingerprint: &str,
    stream_hash: &str,
    player: &str,
    accepted: i64,
) -> String {
    format!("bsor-stream server countersignature v1\n{id}\n{fingerprint}\n{stream_hash}\n{player}\n{accepted}\n")
}

/// The key of the statement beside a blob.
pub fn statement_key(blob: &str) -> String {
    format!("{blob}.statement.json")
}

/// Why [`ReplayServer::open`] could not start a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] OpenError),
    /// An S3 store was given without an index.
    #[error(
        "{0}: an S3 store needs --index (postgres://… for several servers, or sqlite://FILE for one)"
    )]
    IndexNeeded(String),
    /// The spool folder (what a killed server left there) could not be cleared.
    #[error("{}: {source}", path.display())]
    Spool {
        /// The folder.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The index could not be opened.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// A replay server: its store, index, settings and uploaders.
#[derive(Debug)]
pub struct ReplayServer {
    /// The blobs.
    pub store: Store,
    /// The index.
    pub index: Index,
    /// The settings.
    pub config: Config,
    uploaders: std::sync::RwLock<Uploaders>,
    /// What requests hold at once (`http.md` §8.15).
    pub admission: admission::Admission,
    /// Where replies' pieces are made.
    replies: ReplyThreads,
}

/// The threads that make replies' pieces (rebuilt BSOR, JSON, events; `http.md` §8.15): a
/// runtime of their own beside the one that serves connections and the relay's live
/// sessions. On one runtime a live chunk's task waited in the queue behind every admitted
/// reply's decoding (a viewer's p99 270 ms under the 1,000-connection burst); on two, the
/// OS shares the cores between them and runs the relay's mostly idle threads as soon as
/// they wake.
#[derive(Debug)]
struct ReplyThreads(Option<tokio::runtime::Runtime>);

impl ReplyThreads {
    fn new() -> ReplyThreads {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("replies")
            .enable_all()
            .build();
        match rt {
            Ok(rt) => ReplyThreads(Some(rt)),
            Err(e) => {
                tracing::warn!(error = %e, "no threads of their own for replies: they share the server's");
                ReplyThreads(None)
            }
        }
    }
}

impl Drop for ReplyThreads {
    fn drop(&mut self) {
        // Dropped where blocking is not allowed (the server's own runtime): its replies end.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl ReplayServer {
    /// A replay server over `store` and `index`.
    pub fn new(store: Store, index: Index, config: Config, uploaders: Uploaders) -> Arc<Self> {
        Arc::new(ReplayServer {
            store,
            index,
            admission: admission::Admission::new(config.caps),
            config,
            uploaders: std::sync::RwLock::new(uploaders),
            replies: ReplyThreads::new(),
        })
    }

    /// Where replies' pieces are made: the replies' threads, or `None` for the caller's.
    pub(crate) fn reply_threads(&self) -> Option<tokio::runtime::Handle> {
        self.replies.0.as_ref().map(|rt| rt.handle().clone())
    }

    /// Opens the store at `location` (a directory, or `s3://BUCKET[/PREFIX]`, see
    /// [`Store::s3`]) and the index at `index_url`; for a directory the index defaults to
    /// `sqlite://LOCATION/index.sqlite`, for S3 it must be given.
    pub async fn open(
        location: &str,
        index_url: Option<&str>,
        config: Config,
        uploaders: Uploaders,
    ) -> Result<Arc<Self>, StartError> {
        let (store, url) = if location.starts_with("s3://") {
            // An S3 bucket holds no SQLite file: the index is named.
            let url = index_url.ok_or_else(|| StartError::IndexNeeded(location.to_string()))?;
            (Store::s3(location)?, url.to_string())
        } else {
            let dir = std::path::Path::new(location);
            let url = match index_url {
                Some(u) => u.to_string(),
                None => format!("sqlite://{}", dir.join("index.sqlite").display()),
            };
            (Store::directory(dir)?, url)
        };
        let mut config = config;
        if config.spool_dir.is_none() && !location.starts_with("s3://") {
            // Bodies spool beside the blobs, in `LOCATION/spool`: what a killed server left
            // there is removed now (one server owns a directory store).
            let spool = std::path::Path::new(location).join("spool");
            clear_spool(&spool).map_err(|source| StartError::Spool {
                path: spool.clone(),
                source,
            })?;
            config.spool_dir = Some(spool);
        }
        let index = Index::open(&url).await?;
        Ok(ReplayServer::new(store, index, config, uploaders))
    }

    /// Replaces the uploaders (the token file was read again).
    pub fn set_uploaders(&self, u: Uploaders) {
        *self.uploaders.write().unwrap_or_else(|p| p.into_inner()) = u;
    }

    /// What `token` may do.
    pub fn grant(&self, token: &str) -> Option<Grant> {
        self.uploaders
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .grant(token)
    }

    /// Stores a live session that ended whole (`http.md` §8.12): its archived stream, under
    /// the player its header names, with the same validation, ID and answers as an upload;
    /// `witness` is its `.witness` file's bytes, if there is one (statements by trusted
    /// keys date it, [`Prepared::witness`]).
    ///
    /// `granted` is the player the session's publisher's token grants (`http.md` §8.12):
    /// the session is stored only when its header names that player; otherwise it is
    /// refused (`403 not-granted`) and stays in the relay's archive only.
    pub async fn store_session(
        &self,
        stream: &[u8],
        witness: Option<&[u8]>,
        granted: Option<&str>,
    ) -> Result<Uploaded, Refusal> {
        if plan::sniff(stream) != Some(Kind::Stream) {
            return Err(Refusal::new(
                Cause::Invalid,
                "unknown-format",
                "the session is not a stream",
            ));
        }
        // The header alone names the player (prepare reads the rest).
        let header = match bsor_stream_core::stream::StreamHeader::parse_prefix(stream) {
            Ok(Some(h)) => h,
            Ok(None) => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "unparsable",
                    "the session's stream header is cut short",
                ))
            }
            Err(e) => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "unparsable",
                    format!("the session's stream header: {e}"),
                ))
            }
        };
        let player = header.info.player_id.to_string_lossy();
        if granted != Some(player.as_str()) {
            return Err(Refusal::new(
                Cause::Forbidden,
                "not-granted",
                match granted {
                    Some(g) => format!(
                        "the session's header names player {player:?}; its publisher's token \
                         grants player {g:?}"
                    ),
                    None => format!(
                        "the session's header names player {player:?}; its publisher's token \
                         grants no player"
                    ),
                },
            ));
        }
        let mut prepared = prepare(stream, false, &self.config, &player)?;
        if let Some(file) = witness {
            prepared.witness(file, &self.config.trusted_witnesses);
        }
        self.upload(prepared).await
    }

    /// Stores an upload prepared for the token's player (`http.md` §8.2–8.3): a new play,
    /// or one whose owner existed later than this upload did (§8.2.2: the owner's replay
    /// becomes a review entry in the same transaction).
    pub async fn upload(&self, prepared: Prepared) -> Result<Uploaded, Refusal> {
        let Prepared {
            stream,
            mut record,
            witnessed,
            play,
            ..
        } = prepared;
        for _ in 0..2 {
            record.uploaded = now_ms();
            record.existed_by = witnessed.map_or(record.uploaded, |w| w.min(record.uploaded));
            let former = match self.already(&record, &play, &stream).await? {
                Already::Answer(done) => return done,
                Already::New => None,
                Already::Earlier(owner) => Some(owner),
            };
            let nonce = bsor_stream_core::integrity::random_nonce()
                .map_err(|e| Refusal::unavailable(format!("randomness: {e}")))?;
            record.blob = format!("replays/{}.{}.bsors", record.id, hex(&nonce[..8]));
            let expires = record.uploaded + self.config.lease.as_millis() as i64;
            self.index.lease(&record.blob, expires).await?;
            self.fail_at(Fault::BeforeBlob)?;
            self.store.put(&record.blob, stream.clone()).await?;
            if let Some(key) = &self.config.key {
                let st = countersign(key, &record, &stream);
                let json = serde_json::to_vec(&st).unwrap_or_default();
                self.store
                    .put(&statement_key(&record.blob), Bytes::from(json))
                    .await?;
                record.countersigned = true;
            }
            self.fail_at(Fault::AfterBlob)?;
            self.fail_at(Fault::BeforeCommit)?;
            let committed = match &former {
                None => self.index.commit(&record, &play).await?,
                Some(former) => {
                    let now = now_ms();
                    let review = Review {
                        id: former.id.clone(),
                        blob: former.blob.clone(),
                        player: former.player.clone(),
                        owner: record.id.clone(),
                        fingerprint: former.fingerprint.clone(),
                        uploaded: now,
                        state: "pending".into(),
                        reason: format!(
                            "replay {} of player {:?} existed by {} (Unix ms), before this \
                             replay's {}: the play is its now",
                            record.id, record.player, record.existed_by, former.existed_by
                        ),
                    };
                    self.index
                        .transfer(&record, &play, former, &review, now)
                        .await?
                }
            };
            match committed {
                Committed::Done => return Ok(Uploaded::Created(record)),
                // Another upload of the same ID or play committed first: drop this blob
                // (its lease stays until it is gone) and answer as that one says.
                Committed::Conflict => self.remove_blob(&record.blob).await,
            }
        }
        Err(Refusal::new(
            Cause::Unavailable,
            "unavailable",
            "the upload kept conflicting with others; try again",
        ))
    }

    /// Whether the replay, or its play, is there already (`http.md` §8.2.2).
    async fn already(&self, r: &Record, play: &Play, stream: &Bytes) -> Result<Already, Refusal> {
        if let Some(found) = self.index.get(&r.id).await? {
            return Ok(Already::Answer(Ok(Uploaded::Existing(found))));
        }
        let Some(owner) = self.index.by_fingerprint(&r.fingerprint).await? else {
            return self.similar(r, play, stream).await;
        };
        if owner.player == r.player {
            // The same play by the same player, in other bytes: the first one stays.
            return Ok(Already::Answer(Ok(Uploaded::Existing(owner))));
        }
        if r.existed_by < owner.existed_by {
            // This one existed first (a trusted witness dated it): it takes the play.
            return Ok(Already::Earlier(owner));
        }
        let reason = format!(
            "the same play (fingerprint {}) is replay {} of player {:?}, which existed by {} \
             (Unix ms), not later than this upload's {}",
            r.fingerprint, owner.id, owner.player, owner.existed_by, r.existed_by
        );
        let reason = self.keep_for_review(r, stream, &owner, reason).await?;
        Ok(Already::Answer(Err(Refusal::new(
            Cause::Conflict,
            "same-play",
            reason,
        ))))
    }

    /// Whether another player's accepted replay is the same play as this upload by the
    /// similarity score (`integrity.md` §11.4): the stored plays that share a play key with
    /// it are scored by their signatures in the index. One that reaches the threshold and is
    /// another player's keeps the upload for review (`409 similar-play`); it never moves the
    /// play. The player's own similar replay does not stop it.
    async fn similar(&self, r: &Record, play: &Play, stream: &Bytes) -> Result<Already, Refusal> {
        use base64::Engine as _;
        use bsor_stream_core::integrity::fingerprint::{similarity, MotionSignature, THRESHOLD};
        let candidates = self
            .index
            .similar_candidates(&play.keys, MAX_CANDIDATES)
            .await?;
        if candidates.is_empty() {
            return Ok(Already::New);
        }
        let decode = |b64: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .and_then(|b| MotionSignature::from_bytes(&b))
        };
        let Some(mine) = decode(&play.signature) else {
            return Ok(Already::New);
        };
        let mut best: Option<(f64, Record)> = None;
        for (owner, sig) in candidates {
            if owner.player == r.player {
                continue;
            }
            let Some(theirs) = decode(&sig) else { continue };
            let score = similarity(&theirs, &mine).score;
            if score >= THRESHOLD && best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, owner));
            }
        }
        let Some((score, owner)) = best else {
            return Ok(Already::New);
        };
        let reason = format!(
            "a similar play (motion and timing score {score:.3}, threshold {THRESHOLD}) is \
             replay {} of player {:?}",
            owner.id, owner.player
        );
        let reason = self.keep_for_review(r, stream, &owner, reason).await?;
        Ok(Already::Answer(Err(Refusal::new(
            Cause::Conflict,
            "similar-play",
            reason,
        ))))
    }

    /// Stores a refused upload for review, under a lease like any blob, unless its player
    /// has [`Config::review_quota`] copies pending already; returns `reason` with which of
    /// the two happened. The same refused upload again keeps the first copy.
    async fn keep_for_review(
        &self,
        r: &Record,
        stream: &Bytes,
        owner: &Record,
        reason: String,
    ) -> Result<String, Refusal> {
        let pending = self.index.pending_reviews(&r.player).await?;
        if pending >= self.config.review_quota {
            return Ok(format!(
                "{reason}; this upload is not kept for review: player {:?} has {pending} \
                 review copies pending (at most {})",
                r.player, self.config.review_quota
            ));
        }
        let reason = format!("{reason}; this upload is kept for review");
        let nonce = bsor_stream_core::integrity::random_nonce()
            .map_err(|e| Refusal::unavailable(format!("randomness: {e}")))?;
        let blob = format!("reviews/{}.{}.bsors", r.id, hex(&nonce[..8]));
        let now = now_ms();
        self.index
            .lease(&blob, now + self.config.lease.as_millis() as i64)
            .await?;
        self.store.put(&blob, stream.clone()).await?;
        let review = Review {
            id: r.id.clone(),
            blob: blob.clone(),
            player: r.player.clone(),
            owner: owner.id.clone(),
            fingerprint: r.fingerprint.clone(),
            uploaded: now,
            state: "pending".into(),
            reason: reason.clone(),
        };
        if let Committed::Conflict = self.index.commit_review(&review).await? {
            self.remove_blob(&blob).await;
        }
        Ok(reason)
    }

    fn fail_at(&self, step: Fault) -> Result<(), Refusal> {
        if self.config.fault == Some(step) {
            return Err(Refusal::new(
                Cause::Unavailable,
                "unavailable",
                format!("fault injected at {step:?}"),
            ));
        }
        Ok(())
    }

    /// Removes a blob and its statement, then its lease; on a failure the lease stays for
    /// the sweeper.
    async fn remove_blob(&self, blob: &str) {
        let gone = self.store.delete(blob).await.is_ok()
            && self.store.delete(&statement_key(blob)).await.is_ok();
        if gone {
            let _ = self.index.end_lease(blob).await;
        }
    }

    /// Removes the blobs of expired leases (at most `limit`), unless a row points at one:
    /// how many were removed.
    pub async fn sweep(&self, limit: i64) -> Result<usize, Refusal> {
        let expired = self.index.expired(now_ms(), limit).await?;
        let mut removed = 0;
        for blob in expired {
            if self.index.referenced(&blob).await? {
                // Committed after all (a lease a commit did not end): keep the blob.
                self.index.end_lease(&blob).await?;
                continue;
            }
            self.store.delete(&blob).await?;
            self.store.delete(&statement_key(&blob)).await?;
            self.store.remove_staged(&blob)?;
            self.store.remove_staged(&statement_key(&blob))?;
            self.index.end_lease(&blob).await?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes replay `id`: its row at once, its blob after (`None`: no such replay).
    pub async fn delete(&self, id: &str) -> Result<Option<()>, Refusal> {
        let Some(blob) = self.index.delete(id, now_ms()).await? else {
            return Ok(None);
        };
        self.remove_blob(&blob).await;
        Ok(Some(()))
    }

    /// The stored stream of `r`, whole.
    pub async fn stream(&self, r: &Record) -> Result<Bytes, Refusal> {
        Ok(self.store.get(&r.blob).await?)
    }

    /// The BSOR of `r`, rebuilt whole from its stream (for a range of it; a whole download
    /// is [`ReplayServer::bsor_download`]).
    pub async fn bsor(&self, r: &Record) -> Result<Vec<u8>, Refusal> {
        let stream = self.stream(r).await?;
        tokio::task::spawn_blocking(move || rebuild(&stream))
            .await
            .map_err(Refusal::unavailable)?
    }

    /// The header and index of a stored stream, read by ranges (the header's bytes, the
    /// footer, the index chunk).
    async fn header_and_index(
        &self,
        r: &Record,
    ) -> Result<(StreamHeader, Vec<IndexEntry>, u64), Refusal> {
        let damaged = || {
            Refusal::new(
                Cause::Internal,
                "damaged",
                "the stored stream's index cannot be read",
            )
        };
        let len = r.stored_bytes as u64;
        let footer_at = len
            .checked_sub(bsor_stream_core::stream::FOOTER_SIZE as u64)
            .ok_or_else(damaged)?;
        let footer = self.store.get_range(&r.blob, footer_at..len).await?;
        let (at, n) = plan::index_span(&footer, len).ok_or_else(damaged)?;
        let head = self
            .store
            .get_range(&r.blob, 0..r.header_bytes as u64)
            .await?;
        let header = StreamHeader::parse_prefix(&head)
            .ok()
            .flatten()
            .ok_or_else(damaged)?;
        let chunk = self.store.get_range(&r.blob, at..at + n).await?;
        let mut d = StreamDecoder::with_header(header.clone());
        d.push(&chunk);
        d.finish();
        while let Ok(Some(item)) = d.next_item() {
            if let StreamItem::Index(entries) = item {
                return Ok((header, entries, at));
            }
        }
        Err(damaged())
    }

    /// Whole chunks (header and payload) of `r` at `offsets`, by ranges read together:
    /// the chunk headers a few bytes at a time as their varints show their lengths, then
    /// the payloads.
    async fn chunks_at(&self, r: &Record, offsets: &[u64]) -> Result<Vec<Vec<u8>>, Refusal> {
        let damaged = |offset: u64| {
            Refusal::new(
                Cause::Internal,
                "damaged",
                format!("the stored stream's chunk at byte {offset} cannot be read"),
            )
        };
        let len = r.stored_bytes as u64;
        let mut chunks: Vec<Vec<u8>> = vec![Vec::new(); offsets.len()];
        let mut ends: Vec<Option<u64>> = vec![None; offsets.len()];
        loop {
            let mut want = Vec::new();
            let mut whose = Vec::new();
            for (i, (chunk, &offset)) in chunks.iter().zip(offsets).enumerate() {
                if ends[i].is_some() {
                    continue;
                }
                if let Some((h, hlen)) = bsor_stream_core::stream::ChunkHeader::parse_at(chunk) {
                    let end = offset + hlen as u64 + u64::from(h.len);
                    if end > len {
                        return Err(damaged(offset));
                    }
                    ends[i] = Some(end);
                    continue;
                }
                let need = plan::chunk_header_needs(chunk) as u64;
                let have = chunk.len() as u64;
                if need <= have || offset + need > len || need > 64 {
                    return Err(damaged(offset));
                }
                want.push(offset + have..offset + need);
                whose.push(i);
            }
            if want.is_empty() {
                break;
            }
            let got = self.store.get_ranges(&r.blob, &want).await?;
            for (&i, bytes) in whose.iter().zip(got) {
                chunks[i].extend_from_slice(&bytes);
            }
        }
        let mut want = Vec::new();
        let mut whose = Vec::new();
        for (i, ((chunk, &offset), end)) in chunks.iter().zip(offsets).zip(&ends).enumerate() {
            let start = offset + chunk.len() as u64;
            match *end {
                Some(end) if end > start => {
                    want.push(start..end);
                    whose.push(i);
                }
                Some(_) => {}
                None => return Err(damaged(offset)),
            }
        }
        let got = self.store.get_ranges(&r.blob, &want).await?;
        for (&i, bytes) in whose.iter().zip(got) {
            chunks[i].extend_from_slice(&bytes);
        }
        Ok(chunks)
    }

    /// Every event of `r` through `index`, each section from its first record (a record
    /// sent twice is kept once), and whether a section has a gap.
    async fn gather_events(
        &self,
        r: &Record,
        header: StreamHeader,
        index: &[IndexEntry],
    ) -> Result<(EventBatch, bool), Refusal> {
        let damaged = || {
            Refusal::new(
                Cause::Internal,
                "damaged",
                "the stored stream's events cannot be read",
            )
        };
        let mut d = StreamDecoder::with_header(header);
        let mut all = EventBatch::default();
        let mut gaps = false;
        let mut entries: Vec<&IndexEntry> = index
            .iter()
            .filter(|e| matches!(e.kind, ChunkType::Events | ChunkType::Keyframes))
            .collect();
        entries.sort_by_key(|e| e.offset);
        // The event chunks are read together and decoded in order, a new group at each
        // keyframe chunk.
        let offsets: Vec<u64> = entries
            .iter()
            .filter(|e| e.kind == ChunkType::Events)
            .map(|e| e.offset)
            .collect();
        let mut chunks = self.chunks_at(r, &offsets).await?.into_iter();
        for e in entries {
            if e.kind == ChunkType::Keyframes {
                d.new_group();
                continue;
            }
            let Some(chunk) = chunks.next() else {
                return Err(damaged());
            };
            let b = d.decode_events_chunk(&chunk).map_err(|_| damaged())?;
            bsor_stream_core::transcode::EventSections {
                notes: &mut all.notes.records,
                walls: &mut all.walls.records,
                heights: &mut all.heights.records,
                pauses: &mut all.pauses.records,
            }
            .place(&b, &mut gaps);
        }
        Ok((all, gaps))
    }

    /// Every event of `r`, read through its index: the header, the footer, the index and
    /// the event chunks, by ranges; never a byte of a frame chunk.
    pub async fn events(&self, r: &Record) -> Result<EventBatch, Refusal> {
        let (header, index, _) = self.header_and_index(r).await?;
        Ok(self.gather_events(r, header, &index).await?.0)
    }

    /// The BSOR of `r` as a [`BsorDownload`] that rebuilds it piece by piece
    /// (`http.md` §8.6): the header, the index and the trailer are read now (an error here
    /// comes before any byte of the reply), the chunks between header and trailer (frames
    /// and events) in order as the pieces are taken.
    ///
    /// `range` (first and last byte, within the BSOR's length) rebuilds only what covers
    /// it: the head when it starts there, the keyframe groups whose frame records (92 bytes
    /// each after the head) it touches, and the tail (from the event chunks, read by the
    /// index) when it reaches past the frames.
    pub async fn bsor_download(
        &self,
        r: &Record,
        range: Option<(u64, u64)>,
    ) -> Result<BsorDownload, Refusal> {
        let damaged = |what: String| Refusal::new(Cause::Internal, "damaged", what);
        let (header, index, index_at) = self.header_and_index(r).await?;
        let trailer_at = index
            .iter()
            .find(|e| e.kind == ChunkType::Trailer)
            .map(|e| e.offset)
            .filter(|&at| at < index_at)
            .ok_or_else(|| damaged("the stored stream's index has no trailer".into()))?;
        // The trailer chunk ends where the index chunk begins (format.md §2).
        let chunk = self.store.get_range(&r.blob, trailer_at..index_at).await?;
        let mut d = StreamDecoder::with_header(header.clone());
        d.push(&chunk);
        d.finish();
        let mut trailer = None;
        while let Ok(Some(item)) = d.next_item() {
            if let StreamItem::Trailer(t) = item {
                trailer = Some(t);
            }
        }
        let trailer =
            trailer.ok_or_else(|| damaged("the stored stream's trailer cannot be read".into()))?;
        let head =
            rebuild::head(&trailer).map_err(|e| damaged(format!("the stored stream: {e}")))?;
        let frame_size = bsor::FRAME_SIZE as u64;
        let head_len = head.len() as u64;
        let frames_end = head_len.saturating_add(trailer.counts.frames.saturating_mul(frame_size));
        let len = r.bsor_bytes as u64;
        if frames_end > len {
            return Err(damaged(format!(
                "the rebuilt BSOR would be over {frames_end} bytes, the record says {len}"
            )));
        }
        let (first, last) = range.unwrap_or((0, len.saturating_sub(1)));
        if len == 0 || first > last || last >= len {
            return Err(Refusal::new(
                Cause::OutOfRange,
                "range-not-satisfiable",
                format!("bytes {first}-{last} of {len}"),
            ));
        }
        // The frames lie between the header and the trailer: a group starts at each
        // keyframe chunk, with the frame its header names.
        let start = r.header_bytes as u64;
        let mut keys: Vec<(u64, u64)> = index
            .iter()
            .filter(|e| e.kind == ChunkType::Keyframes && e.offset > start && e.offset < trailer_at)
            .map(|e| (e.offset, u64::from(e.first)))
            .collect();
        keys.sort_unstable();
        keys.insert(0, (start, 0));
        keys.dedup_by_key(|k| k.0);
        let groups: Vec<(std::ops::Range<u64>, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &(at, frame))| {
                let end = keys.get(i + 1).map_or(trailer_at, |k| k.0);
                (at..end, frame)
            })
            .collect();
        // The groups whose frames the window touches: from the one holding its first frame
        // to the one holding its last.
        let wants_frames = first < frames_end && last >= head_len && frames_end > head_len;
        let selected: &[(std::ops::Range<u64>, u64)] = if wants_frames {
            let f0 = (first.max(head_len) - head_len) / frame_size;
            let f1 = (last.min(frames_end - 1) - head_len) / frame_size;
            let mut from = groups.iter().rposition(|g| g.1 <= f0).unwrap_or(0);
            // Chunks before the first keyframe chunk (events only) start at the same frame.
            while from > 0 && groups[from - 1].1 == groups[from].1 {
                from -= 1;
            }
            let to = groups
                .iter()
                .position(|g| g.1 > f1)
                .unwrap_or(groups.len())
                .max(from + 1);
            &groups[from..to]
        } else {
            &[]
        };
        let wants_tail = last >= frames_end;
        let first_frame = selected.first().map_or(0, |g| g.1);
        // The tail needs every event: gathered among the frames when the groups are read
        // from the start, else read through the index (event chunks only).
        let events = if wants_tail && (selected.is_empty() || first_frame != 0) {
            let (events, gaps) = self.gather_events(r, header.clone(), &index).await?;
            if gaps {
                return Err(damaged("the event chunks leave a gap".into()));
            }
            Some(events)
        } else {
            None
        };
        // Whole groups, read together up to the span.
        let mut spans: Vec<std::ops::Range<u64>> = Vec::new();
        for (g, _) in selected {
            match spans.last_mut() {
                Some(last) if g.end - last.start <= self.config.download_span => last.end = g.end,
                _ => spans.push(g.clone()),
            }
        }
        Ok(BsorDownload {
            store: self.store.clone(),
            blob: r.blob.clone(),
            len,
            first,
            last,
            pos: if first < head_len {
                0
            } else if selected.is_empty() {
                frames_end
            } else {
                head_len + first_frame * frame_size
            },
            sent: 0,
            tail_len: len - frames_end,
            frames_end,
            head: (first < head_len).then_some(head),
            groups: spans.into_iter(),
            frames: (!selected.is_empty())
                .then(|| rebuild::Frames::starting_at(header, first_frame, trailer.counts.frames)),
            read: None,
            events,
            trailer: wants_tail.then_some(trailer),
        })
    }

    /// A `.bsors` of the keyframe groups of `r` that cover song time `from..=to`: the
    /// ranges of the stored stream that make it (the stream header, then those chunks as
    /// stored, with the events among them), found through the index.
    pub async fn frames(
        &self,
        r: &Record,
        from: f32,
        to: f32,
    ) -> Result<Vec<std::ops::Range<u64>>, Refusal> {
        let (_, index, index_at) = self.header_and_index(r).await?;
        let len = r.stored_bytes as u64;
        let mut out = Vec::with_capacity(2);
        out.push(0..r.header_bytes as u64);
        if let Some((begin, end)) = plan::span_range(&index, from, to, index_at.min(len)) {
            out.push(begin..end);
        }
        Ok(out)
    }

    /// Bytes `ranges` of the stored stream of `r`, read as they are taken, at most
    /// [`Config::download_span`] at a time.
    pub fn stored_read(
        &self,
        r: &Record,
        ranges: impl IntoIterator<Item = std::ops::Range<u64>>,
    ) -> StoredRead {
        StoredRead {
            store: self.store.clone(),
            blob: r.blob.clone(),
            ranges: ranges.into_iter().filter(|r| r.start < r.end).collect(),
            span: self.config.download_span.max(1),
        }
    }

    /// The uploads kept for review.
    pub async fn reviews(&self, limit: i64) -> Result<Vec<Review>, Refusal> {
        Ok(self.index.reviews(limit).await?)
    }
}

/// The frame records a download decodes at once, at least (a keyframe group's more): a
/// download read [`Config::download_span`] of stored bytes at a time, but holds only this
/// much decoded, so that an unread download costs its read, not its read's rebuild.
const DOWNLOAD_PIECE: usize = 64 << 10;

/// A BSOR download rebuilt as it goes out ([`ReplayServer::bsor_download`]): its pieces
/// in order, the head, each keyframe group's frames, then the tail (from the events met
/// among the frames, or read through the index), cut to the bytes asked for. After an
/// error (the stored stream found damaged) there are no more pieces.
#[derive(Debug)]
pub struct BsorDownload {
    store: Store,
    blob: String,
    /// The BSOR's length.
    pub len: u64,
    /// The first byte asked for.
    pub first: u64,
    /// The last byte asked for.
    pub last: u64,
    /// Where the next piece made starts in the BSOR.
    pos: u64,
    /// Bytes given so far.
    sent: u64,
    /// The tail's length the record implies.
    tail_len: u64,
    /// Where the frames end in the BSOR.
    frames_end: u64,
    head: Option<Vec<u8>>,
    groups: std::vec::IntoIter<std::ops::Range<u64>>,
    frames: Option<rebuild::Frames>,
    /// The stored bytes read last, for an error's message.
    read: Option<std::ops::Range<u64>>,
    /// The events, when read through the index rather than among the frames.
    events: Option<EventBatch>,
    trailer: Option<Box<Trailer>>,
}

impl BsorDownload {
    /// How many bytes the download gives.
    pub fn count(&self) -> u64 {
        self.last - self.first + 1
    }

    /// The next piece of the bytes asked for; `None` at their end or after an error (and
    /// an error when the pieces end short of them).
    pub async fn next_piece(&mut self) -> Option<Result<Bytes, Refusal>> {
        loop {
            if self.sent == self.count() {
                return None;
            }
            let made = match self.head.take() {
                Some(head) => Ok(Some(head)),
                None => self.frames_piece().await,
            };
            let made = match made {
                Ok(Some(m)) => m,
                Ok(None) => {
                    self.stop();
                    self.sent = self.count();
                    return Some(Err(Refusal::new(
                        Cause::Internal,
                        "damaged",
                        "the rebuilt BSOR ended before the bytes asked for",
                    )));
                }
                Err(e) => {
                    self.stop();
                    self.sent = self.count();
                    return Some(Err(e));
                }
            };
            let at = self.pos;
            self.pos += made.len() as u64;
            // The part of the piece inside the window.
            let from = self.first.max(at);
            let to = (self.last + 1).min(self.pos);
            if from < to {
                let piece = Bytes::from(made).slice((from - at) as usize..(to - at) as usize);
                self.sent += piece.len() as u64;
                return Some(Ok(piece));
            }
        }
    }

    fn stop(&mut self) {
        self.frames = None;
        self.trailer = None;
        self.groups = Vec::new().into_iter();
    }

    /// The frames of the next group (skipping groups without frames), then the tail when
    /// asked for, or `None` when nothing more is made.
    async fn frames_piece(&mut self) -> Result<Option<Vec<u8>>, Refusal> {
        let damaged = |what: String| Refusal::new(Cause::Internal, "damaged", what);
        if let Some(frames) = self.frames.as_mut() {
            loop {
                let out = frames.next(DOWNLOAD_PIECE).map_err(|e| {
                    let (a, b) = self.read.clone().map_or((0, 0), |r| (r.start, r.end));
                    damaged(format!("{e} (stored bytes {a}..{b})"))
                })?;
                if !out.is_empty() {
                    return Ok(Some(out));
                }
                let Some(range) = self.groups.next() else {
                    break;
                };
                let bytes = self.store.get_range(&self.blob, range.clone()).await?;
                frames.feed(&bytes);
                self.read = Some(range);
            }
            // Every group asked for was read: the frames still held, checked whole when the
            // tail follows them.
            let out = if self.trailer.is_some() {
                frames.finish().map_err(|e| damaged(e.to_string()))?
            } else {
                frames.end().map_err(|e| damaged(e.to_string()))?
            };
            if !out.is_empty() {
                return Ok(Some(out));
            }
            let frames = self.frames.take();
            if self.events.is_none() && self.trailer.is_some() {
                self.events = frames
                    .map(|f| f.events())
                    .transpose()
                    .map_err(|e| damaged(format!("the stored stream: {e}")))?;
            }
        }
        let Some(trailer) = self.trailer.take() else {
            return Ok(None);
        };
        if self.pos != self.frames_end {
            return Err(damaged(format!(
                "the rebuilt frames end at byte {}, the trailer's count at {}",
                self.pos, self.frames_end
            )));
        }
        let events = self.events.take().unwrap_or_default();
        let tail = rebuild::tail(&trailer, events)
            .map_err(|e| damaged(format!("the stored stream: {e}")))?;
        if tail.len() as u64 != self.tail_len {
            return Err(damaged(format!(
                "the rebuilt BSOR's tail is {} bytes, the record implies {}",
                tail.len(),
                self.tail_len
            )));
        }
        Ok(Some(tail))
    }
}

/// Creates the spool folder `dir`, or empties it of the bodies a killed server left.
fn clear_spool(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with(SPOOL_PREFIX) {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

/// The name every spooled body's file starts with.
pub const SPOOL_PREFIX: &str = "bsrs-upload-";

/// Stored bytes read piece by piece ([`ReplayServer::stored_read`]).
#[derive(Debug)]
pub struct StoredRead {
    store: Store,
    blob: String,
    ranges: std::collections::VecDeque<std::ops::Range<u64>>,
    span: u64,
}

impl StoredRead {
    /// How many bytes the read gives.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// True when it gives none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next piece; `None` at the end (or after an error).
    pub async fn next_piece(&mut self) -> Option<Result<Bytes, Refusal>> {
        let range = self.ranges.front_mut()?;
        let end = range.end.min(range.start.saturating_add(self.span));
        let piece = range.start..end;
        range.start = end;
        if range.start >= range.end {
            self.ranges.pop_front();
        }
        match self.store.get_range(&self.blob, piece).await {
            Ok(b) => Some(Ok(b)),
            Err(e) => {
                self.ranges.clear();
                Some(Err(e.into()))
            }
        }
    }
}

/// The BSOR of a stored stream.
pub fn rebuild(stream: &[u8]) -> Result<Vec<u8>, Refusal> {
    let damaged = |what: String| Refusal::new(Cause::Internal, "damaged", what);
    let (replay, recovery) = bsor_stream_core::transcode::decode_replay(stream)
        .map_err(|e| damaged(format!("the stored stream: {e}")))?;
    if !recovery.complete {
        return Err(damaged("the stored stream is not whole".into()));
    }
    bsor::to_vec(&replay).map_err(|e| damaged(format!("writing the BSOR: {e}")))
}

/// The server's statement for `r` stored as `stream`.
fn countersign(key: &SigningKey, r: &Record, stream: &[u8]) -> Statement {
    use ed25519_dalek::Signer as _;
    let stream_hash = hex(blake3::hash(stream).as_bytes());
    let msg = statement_message(&r.id, &r.fingerprint, &stream_hash, &r.player, r.uploaded);
    let signature = key.sign(msg.as_bytes());
    Statement {
        statement: "bsor-stream server countersignature v1",
        id: r.id.clone(),
        fingerprint: r.fingerprint.clone(),
        stream_hash,
        player: r.player.clone(),
        accepted: r.uploaded,
        key: hex(key.verifying_key().as_bytes()),
        signature: hex(&signature.to_bytes()),
    }
}
