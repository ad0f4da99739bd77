//! The relay's HTTP on its WebSocket address (`proto-spec/http.md`): the player's page
//! (embedded assets the caller supplies), `GET /sessions`, the archived streams by byte
//! ranges (`GET|HEAD /replays/NAME.bsors`), maps' zips from a folder by ranges
//! (`GET|HEAD /maps/HASH.zip`, [`Assets::with_maps`]), and the WebSocket upgrade, which
//! hands the connection to the relay as before (`ws.rs`).
//!
//! hyper's HTTP/1.1 server (not axum): the relay already judges an upgrade itself
//! ([`ws::judge`]: its 400/403 replies, Origin rules, subprotocol echo) and runs the
//! upgraded socket through its own read gate and budgets, so a router and tower's layers
//! would add a second way to do each of those without taking one away. hyper does the
//! protocol (parsing, keep-alive, pipelining, the header-read timeout, 400 for what does
//! not parse); what each request gets is decided by the plain functions of [`rules`], and
//! the archive's list by [`catalog`]. This module only wires them to sockets and files.
//!
//! Bounds: a request's head is read through the connection's [`ReadGate`] (16 KiB past the
//! previous request) and hyper's 16 KiB buffer; the head must come within the relay's
//! handshake timeout, which also closes a connection idle between requests; a connection
//! whose peer stops reading what it is sent is closed after [`STALL`]; connections from one
//! address are capped as the relay caps them (`Server::handshake_slot`, until upgraded); files are sent in [`PIECE`] byte reads, at
//! most [`READS`] at once; the
//! archive's list is built by one task at a time and reused for [`LIST_TTL`], and the whole
//! `/sessions` answer for [`SESSIONS_TTL`]. What requests cost is paced (`http.md` §1.1):
//! each request and each byte of a body is charged to its address ([`ADDRESS_RATE`]) and to
//! the listener ([`TOTAL_RATE`]), with [`Pace`]; a request that would wait more than
//! [`MAX_WAIT`] is answered `503` and its connection closed.

pub mod catalog;
pub mod events;
pub mod mirror;
pub mod rules;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use self::catalog::Catalog;
use self::rules::{Conditions, Entry, Plan, Target};
use crate::gate::ReadGate;
use crate::server::{HandshakeSlot, Server};
use crate::ws::{self, WsOptions, SUBPROTOCOL};
use bsor_stream_core::net::pace::{ByAddress, Pace};
use bsor_stream_core::stream::StreamHeader;

/// Bytes of a file read and sent at a time.
pub const PIECE: usize = 16 << 10;
/// File pieces read at once, over all connections of a listener (each read runs on the
/// blocking pool): what bounds the disk and CPU time HTTP takes from the live relay.
pub const READS: usize = 8;
/// How long the archive's list is reused before the folder is read again.
pub const LIST_TTL: Duration = Duration::from_secs(1);
/// How long a connection may make no progress (nothing read, nothing written) while a
/// reply waits to be sent before it is closed.
pub const STALL: Duration = Duration::from_secs(30);
/// Bytes a second the HTTP requests of one address may cost (a request costs
/// [`REQUEST_COST`] and the bytes of its reply's body).
pub const ADDRESS_RATE: u64 = 4 << 20;
/// Bytes one address may cost at once before its requests wait.
pub const ADDRESS_BURST: u64 = 4 << 20;
/// Bytes a second the HTTP requests of all addresses together may cost.
pub const TOTAL_RATE: u64 = 16 << 20;
/// Bytes all addresses may cost at once before requests wait.
pub const TOTAL_BURST: u64 = 16 << 20;
/// What a request costs before its body: a head parsed, a reply built and written.
pub const REQUEST_COST: u64 = 16 << 10;
/// The longest a request waits for its pace; one that would wait longer gets `503`.
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a `/sessions` answer is reused before it is built again.
pub const SESSIONS_TTL: Duration = Duration::from_millis(250);
/// The most bytes of a request's head (and what hyper buffers).
const HEAD_MAX: usize = 16 << 10;

/// A response body: whole bytes, or streamed from a file or a service.
pub type Body = BoxBody<Bytes, io::Error>;

/// A service mounted on the relay's HTTP, such as the replay server (crate
/// `bsor-stream-server`): the paths it claims are its to answer, before the relay's own. Its
/// requests are paced like every other (their request cost; bodies are not charged), and
/// the relay adds its common headers to its answers.
pub trait Mount: Send + Sync {
    /// Whether `path` is this service's.
    fn claims(&self, path: &str) -> bool;
    /// The answer to a request for a path it claims, from the peer at `ip`; `gate` bounds
    /// what the connection reads (a request body is read through it).
    fn answer(
        &self,
        req: Request<Incoming>,
        gate: ReadGate,
        ip: Option<IpAddr>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send + '_>>;
}

/// The page's files, served from memory: name (flat, as `/NAME` asks for it) to bytes.
#[derive(Clone, Default)]
pub struct Assets {
    files: HashMap<String, (Bytes, String)>,
    /// A service answering the paths it claims on the same address (the replay server).
    mount: Option<Arc<dyn Mount>>,
    /// The folder of map zips `GET /maps/HASH.zip` serves (`HASH.zip`, the hash in
    /// lowercase or uppercase).
    maps: Option<PathBuf>,
    /// Where a map not in `maps` is fetched from (`--map-url`).
    mirror: Option<Arc<mirror::Mirror>>,
}

impl std::fmt::Debug for Assets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.files.keys().collect();
        names.sort();
        f.debug_struct("Assets").field("files", &names).finish()
    }
}

impl Assets {
    /// Assets from (name, bytes) pairs; `index.html` is the page at `/`.
    pub fn new<N: Into<String>>(files: impl IntoIterator<Item = (N, Bytes)>) -> Self {
        let files = files
            .into_iter()
            .map(|(n, b)| {
                let tag = rules::asset_etag(&b);
                (n.into(), (b, tag))
            })
            .collect();
        Assets {
            files,
            mount: None,
            maps: None,
            mirror: None,
        }
    }

    /// The same assets, with `GET /maps/HASH.zip` serving `dir/HASH.zip` (ranges, ETag).
    pub fn with_maps(mut self, dir: impl Into<PathBuf>) -> Self {
        self.maps = Some(dir.into());
        self
    }

    /// The same assets, with `mount` answering the paths it claims on the same address.
    pub fn with_mount(mut self, mount: Arc<dyn Mount>) -> Self {
        self.mount = Some(mount);
        self
    }

    /// The same assets, with maps not in the maps folder fetched from `mirror` and kept there.
    pub fn with_map_mirror(mut self, mirror: mirror::Mirror) -> Self {
        self.mirror = Some(Arc::new(mirror));
        self
    }

    /// The asset `name`, with its entity tag.
    pub fn get(&self, name: &str) -> Option<&(Bytes, String)> {
        self.files.get(name)
    }

    /// The names of the assets, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.files.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// What one listener's connections share: the archive's catalog, the list last built,
/// and the connections open per address.
pub(crate) struct Site {
    assets: Assets,
    catalog: Option<Arc<Catalog>>,
    listed: tokio::sync::Mutex<Option<(Instant, Arc<Vec<Entry>>)>>,
    /// Permits for file pieces read at once ([`READS`]).
    reads: Arc<tokio::sync::Semaphore>,
    /// What requests have cost, per address and in all.
    paces: Mutex<Paces>,
    /// The origin of the paces' clock.
    origin: Instant,
    /// The last `/sessions` body and when it was built.
    answer: tokio::sync::Mutex<Option<(Instant, Bytes)>>,
}

struct Paces {
    total: Pace,
    by_address: ByAddress,
}

impl Site {
    pub(crate) fn new(server: &Server, assets: Assets) -> Arc<Site> {
        Arc::new(Site {
            assets,
            catalog: server.archive_dir().map(|d| Arc::new(Catalog::new(d))),
            listed: tokio::sync::Mutex::new(None),
            reads: Arc::new(tokio::sync::Semaphore::new(READS)),
            paces: Mutex::new(Paces {
                total: Pace::new(TOTAL_RATE, TOTAL_BURST),
                by_address: ByAddress::default(),
            }),
            origin: Instant::now(),
            answer: tokio::sync::Mutex::new(None),
        })
    }

    /// The paces' clock: the time since the site was made.
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Charges `cost` bytes to `ip` and to the listener and returns how long that waits;
    /// or, when the wait would pass `refuse_past`, charges nothing and returns `None`.
    fn charge(
        &self,
        ip: Option<IpAddr>,
        cost: u64,
        refuse_past: Option<Duration>,
    ) -> Option<Duration> {
        let now = self.now();
        let mut paces = self.paces.lock().unwrap_or_else(|p| p.into_inner());
        let Paces { total, by_address } = &mut *paces;
        let fresh = Pace::new(ADDRESS_RATE, ADDRESS_BURST);
        let own = ip.map(|ip| by_address.get(ip).unwrap_or(fresh));
        let wait = total
            .wait(now, cost)
            .max(own.map_or(Duration::ZERO, |p| p.wait(now, cost)));
        if refuse_past.is_some_and(|most| wait > most) {
            return None;
        }
        total.charge(now, cost);
        if let Some(ip) = ip {
            by_address.entry(ip, now, fresh).charge(now, cost);
        }
        Some(wait)
    }

    /// Charges `cost` bytes to `ip` and to the listener, and waits as long as that says.
    async fn pace(&self, ip: Option<IpAddr>, cost: u64) {
        if let Some(wait) = self.charge(ip, cost, None) {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// Admits a request from `ip`: waits for its pace, or says no (`false`) when that
    /// would take more than [`MAX_WAIT`].
    async fn admit(&self, ip: Option<IpAddr>) -> bool {
        match self.charge(ip, REQUEST_COST, Some(MAX_WAIT)) {
            None => false,
            Some(wait) => {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                true
            }
        }
    }

    /// The archived sessions, built at most once per [`LIST_TTL`] (and by one task).
    async fn archived(&self) -> Arc<Vec<Entry>> {
        let Some(catalog) = &self.catalog else {
            return Arc::new(Vec::new());
        };
        let mut listed = self.listed.lock().await;
        if let Some((at, list)) = &*listed {
            if at.elapsed() < LIST_TTL {
                return list.clone();
            }
        }
        let c = catalog.clone();
        let list = Arc::new(
            tokio::task::spawn_blocking(move || c.list())
                .await
                .unwrap_or_default(),
        );
        *listed = Some((Instant::now(), list.clone()));
        list
    }
}

/// Where a connection comes from and how it is read.
pub(crate) struct Peer {
    /// The address, for logs.
    pub(crate) peer: String,
    /// The address, for the per-address caps.
    pub(crate) ip: Option<IpAddr>,
    /// The gate its reads pass.
    pub(crate) gate: ReadGate,
    /// Its place among its address's connections before an upgrade, given up once
    /// upgraded (the relay counts it then).
    pub(crate) slot: HandshakeSlot,
}

/// Serves one connection: HTTP requests until it closes, or an accepted WebSocket upgrade
/// after which it is the relay's.
pub(crate) async fn serve_connection<S>(
    io: S,
    tls: bool,
    options: Arc<WsOptions>,
    site: Arc<Site>,
    from: Peer,
    server: Server,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let progress = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let io = Watched {
        io,
        progress: progress.clone(),
        start,
    };
    let upgrade: Arc<Mutex<Option<hyper::upgrade::OnUpgrade>>> = Arc::default();
    let ctx = Arc::new(Ctx {
        tls,
        options,
        site,
        server: server.clone(),
        gate: from.gate.clone(),
        upgrade: upgrade.clone(),
        ip: from.ip,
    });
    let service = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(ctx.answer(req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(server.handshake_timeout())
        .max_buf_size(HEAD_MAX)
        .max_headers(64);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    // hyper's timeout covers a request's head; this covers a reply the peer does not read.
    let stalled = async {
        loop {
            tokio::time::sleep(STALL / 4).await;
            let last = Duration::from_millis(progress.load(Ordering::Acquire));
            if start.elapsed().saturating_sub(last) > STALL {
                return;
            }
        }
    };
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(peer = %from.peer, err = %e, "HTTP connection ended");
            }
        }
        () = stalled => {
            tracing::info!(peer = %from.peer, "HTTP peer made no progress; closing the connection");
            return;
        }
    }
    let pending = upgrade.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(pending) = pending else {
        return;
    };
    let Ok(upgraded) = pending.await else {
        tracing::info!(peer = %from.peer, "WebSocket upgrade not completed");
        return;
    };
    // The relay counts the connection from here on (its own per-address cap).
    drop(from.slot);
    let max = server.max_frame();
    let ws = WebSocketStream::from_raw_socket(
        TokioIo::new(upgraded),
        Role::Server,
        Some(ws::relay_config(max)),
    )
    .await;
    let (sink, stream) = ws::transport(ws, max);
    server
        .drive_from(from.ip, Some(from.gate), stream, sink)
        .await;
}

/// What a connection's requests are answered with.
struct Ctx {
    tls: bool,
    options: Arc<WsOptions>,
    site: Arc<Site>,
    server: Server,
    gate: ReadGate,
    upgrade: Arc<Mutex<Option<hyper::upgrade::OnUpgrade>>>,
    /// The peer's address, for its pace.
    ip: Option<IpAddr>,
}

impl Ctx {
    async fn answer(&self, mut req: Request<Incoming>) -> Response<Body> {
        // The next request's head may take another HEAD_MAX bytes.
        self.gate.taken(HEAD_MAX as u32);
        if req.headers().contains_key(header::UPGRADE) {
            return self.upgrade(&mut req);
        }
        if let Some(mount) = &self.site.assets.mount {
            if mount.claims(req.uri().path()) {
                // Paced like every other request (its request cost; bodies are not charged).
                if !self.site.admit(self.ip).await {
                    let mut r = closing(text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the relay's HTTP is busy: try again in a few seconds",
                    ));
                    set(&mut r, header::RETRY_AFTER, "5");
                    return r;
                }
                let mut r = mount.answer(req, self.gate.clone(), self.ip).await;
                set_common(&mut r);
                return r;
            }
        }
        // Upgrades are the relay's to bound (its caps and budgets); every other request is
        // paced. What the answer needs is copied out first, so that a request waiting for
        // its pace does not hold hyper's read buffer (its header values point into it).
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let mut headers = HeaderMap::new();
        for name in [header::RANGE, header::IF_RANGE, header::IF_NONE_MATCH] {
            if let Some(v) = req.headers().get(&name) {
                if let Ok(v) = HeaderValue::from_bytes(v.as_bytes()) {
                    headers.insert(name, v);
                }
            }
        }
        drop(req);
        if !self.site.admit(self.ip).await {
            let mut r = closing(text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the relay's HTTP is busy: try again in a few seconds",
            ));
            set(&mut r, header::RETRY_AFTER, "5");
            return r;
        }
        if method != Method::GET && method != Method::HEAD {
            let mut r = closing(text(
                StatusCode::METHOD_NOT_ALLOWED,
                "only GET and HEAD here",
            ));
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let head = method == Method::HEAD;
        let target = rules::route(&path);
        let mut r = match target {
            Target::Asset(name) => self.asset(name, &headers),
            Target::Sessions => self.sessions().await,
            Target::Replay(name) => self.replay(name, &headers, head).await,
            Target::SessionEvents(name) => self.session_events(name).await,
            Target::Map(ref hash) => self.map(hash, &headers, head).await,
            Target::BadName => text(StatusCode::BAD_REQUEST, "not a file or session name"),
        };
        // A replay's body is paced piece by piece as it is read (`file_body`); a reply from
        // memory, here.
        if !head
            && matches!(
                target,
                Target::Asset(_) | Target::Sessions | Target::SessionEvents(_)
            )
        {
            let len = value(r.headers(), header::CONTENT_LENGTH)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0u64);
            self.site.pace(self.ip, len).await;
        }
        if head {
            // hyper sends no body for HEAD; the length stays what a GET would get.
            *r.body_mut() = empty();
        }
        set_common(&mut r);
        r
    }

    /// A WebSocket upgrade: judged as before (`ws::judge`), 101 and the socket handed to
    /// the relay, or the refusal's status and text, and the connection closed.
    fn upgrade(&self, req: &mut Request<Incoming>) -> Response<Body> {
        let version = match req.version() {
            hyper::Version::HTTP_10 | hyper::Version::HTTP_09 => 0,
            _ => 1,
        };
        let verdict = {
            let request = ws::Request {
                method: req.method().as_str(),
                version,
                headers: req
                    .headers()
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("")))
                    .collect(),
            };
            ws::judge(&request, self.tls, &self.options.allowed_origins)
        };
        match verdict {
            Ok(accept) => {
                *self.upgrade.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(hyper::upgrade::on(req));
                let mut r = Response::new(empty());
                *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                let h = r.headers_mut();
                h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
                h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
                if let Ok(v) = HeaderValue::from_str(&accept.key) {
                    h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
                }
                if accept.subprotocol {
                    h.insert(
                        header::SEC_WEBSOCKET_PROTOCOL,
                        HeaderValue::from_static(SUBPROTOCOL),
                    );
                }
                r
            }
            Err(refusal) => {
                tracing::info!(status = refusal.status, why = %refusal.body, "WebSocket upgrade refused");
                let status =
                    StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
                let mut r = closing(text(status, &refusal.body));
                r.headers_mut().insert(
                    header::SEC_WEBSOCKET_VERSION,
                    HeaderValue::from_static("13"),
                );
                r
            }
        }
    }

    fn asset(&self, name: &str, headers: &HeaderMap) -> Response<Body> {
        let Some((bytes, tag)) = self.site.assets.get(name) else {
            return text(StatusCode::NOT_FOUND, "no such file");
        };
        let not_modified =
            value(headers, header::IF_NONE_MATCH).is_some_and(|h| rules::none_match(h, tag));
        let mut r = if not_modified {
            status_only(StatusCode::NOT_MODIFIED)
        } else {
            let mut r = Response::new(full(bytes.clone()));
            set(&mut r, header::CONTENT_TYPE, rules::content_type(name));
            set(&mut r, header::CONTENT_LENGTH, &bytes.len().to_string());
            r
        };
        set(&mut r, header::CONTENT_SECURITY_POLICY, rules::CSP);
        set(&mut r, header::ETAG, tag);
        set(&mut r, header::CACHE_CONTROL, "no-cache");
        r
    }

    async fn sessions(&self) -> Response<Body> {
        let body = self.session_list().await;
        let len = body.len();
        let mut r = Response::new(full(body));
        set(&mut r, header::CONTENT_TYPE, "application/json");
        set(&mut r, header::CONTENT_LENGTH, &len.to_string());
        set(&mut r, header::CACHE_CONTROL, "no-store");
        r
    }

    /// The `/sessions` body, built by one task at a time and reused for [`SESSIONS_TTL`].
    async fn session_list(&self) -> Bytes {
        let mut answer = self.site.answer.lock().await;
        if let Some((at, body)) = &*answer {
            if at.elapsed() < SESSIONS_TTL {
                return body.clone();
            }
        }
        let live: Vec<Entry> = self
            .server
            .session_views(rules::MAX_SESSIONS * 2)
            .into_iter()
            .filter(|v| v.live)
            .map(|v| {
                let header = v
                    .header
                    .as_deref()
                    .and_then(|h| StreamHeader::parse_prefix(h).ok().flatten());
                Entry {
                    live: true,
                    duration: rules::seconds(v.song_time),
                    viewers: v.viewers as u64,
                    bytes: v.bytes,
                    ..Entry::new(&v.name, header.as_ref())
                }
            })
            .collect();
        let archived = self.site.archived().await;
        let body = Bytes::from(rules::session_list(live, archived.as_ref().clone()));
        *answer = Some((Instant::now(), body.clone()));
        body
    }

    /// `GET /sessions/NAME/events` (`http.md` §4.1): the event chunks of the session's
    /// archive file so far, live or ended.
    async fn session_events(&self, name: &str) -> Response<Body> {
        let Some(dir) = self.site.catalog.as_ref().map(|c| c.dir().to_path_buf()) else {
            return text(
                StatusCode::NOT_FOUND,
                "no such session (the relay keeps no archive)",
            );
        };
        let path: PathBuf = bsor_stream_core::net::archive::path(&dir, name);
        let read = tokio::task::spawn_blocking(move || events::read(&path)).await;
        let body = match read {
            Ok(Ok(events::Events::Body(b))) => b,
            Ok(Ok(events::Events::NoHeader)) => {
                return text(
                    StatusCode::NOT_FOUND,
                    "the session has no stream header yet",
                )
            }
            Ok(Ok(events::Events::TooLarge)) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the session's events are over 16 MiB",
                )
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::NotFound => {
                return text(StatusCode::NOT_FOUND, "no such session")
            }
            Ok(Err(e)) => {
                tracing::warn!(session = name, err = %e, "reading a session's events");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the session cannot be read",
                );
            }
            Err(_) => {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the session cannot be read",
                )
            }
        };
        let len = body.len();
        let mut r = Response::new(full(Bytes::from(body)));
        set(&mut r, header::CONTENT_TYPE, "application/octet-stream");
        set(&mut r, header::CONTENT_LENGTH, &len.to_string());
        set(&mut r, header::CACHE_CONTROL, "no-store");
        r
    }

    async fn replay(&self, name: &str, headers: &HeaderMap, head: bool) -> Response<Body> {
        if self.server.is_live(name) {
            return text(
                StatusCode::CONFLICT,
                "the session is live: watch it over WebSocket; its replay is served once it ends",
            );
        }
        let Some(dir) = self.site.catalog.as_ref().map(|c| c.dir().to_path_buf()) else {
            return text(
                StatusCode::NOT_FOUND,
                "no such replay (the relay keeps no archive)",
            );
        };
        let path: PathBuf = bsor_stream_core::net::archive::path(&dir, name);
        let file = match tokio::fs::File::open(&path).await {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return text(StatusCode::NOT_FOUND, "no such replay")
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), err = %e, "opening an archived replay");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the replay cannot be read",
                );
            }
        };
        self.send_file(file, &path, name, "application/octet-stream", headers, head)
            .await
    }

    /// `GET /maps/HASH.zip`: the map's zip from the maps folder, `HASH.zip` with the hash
    /// in lowercase, else in uppercase (the hash is hex digits only: `rules::map_hash`).
    async fn map(&self, hash: &str, headers: &HeaderMap, head: bool) -> Response<Body> {
        let Some(dir) = self.site.assets.maps.clone() else {
            return text(
                StatusCode::NOT_FOUND,
                "no such map (the relay serves no maps)",
            );
        };
        let mut found = None;
        for name in [hash.to_string(), hash.to_ascii_uppercase()] {
            let path = dir.join(format!("{name}.zip"));
            match tokio::fs::File::open(&path).await {
                Ok(file) => {
                    found = Some((file, path));
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), err = %e, "opening a map");
                    return text(StatusCode::INTERNAL_SERVER_ERROR, "the map cannot be read");
                }
            }
        }
        let (file, path) = match found {
            Some(found) => found,
            None => {
                let Some(mirror) = self.site.assets.mirror.clone() else {
                    return text(StatusCode::NOT_FOUND, "no such map");
                };
                match mirror.fetch(hash, &dir).await {
                    Ok(mirror::Fetched::Stored) => {
                        let path = mirror::Mirror::kept(&dir, hash);
                        match tokio::fs::File::open(&path).await {
                            Ok(file) => (file, path),
                            Err(_) => {
                                return text(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "the map cannot be read",
                                )
                            }
                        }
                    }
                    Ok(mirror::Fetched::Missing) => {
                        return text(StatusCode::NOT_FOUND, "no such map (nor on the mirror)")
                    }
                    Err(e) => {
                        tracing::warn!(hash, err = %e, "fetching a map from the mirror");
                        return text(StatusCode::BAD_GATEWAY, "the map's mirror failed");
                    }
                }
            }
        };
        let label = format!("{hash}.zip");
        self.send_file(file, &path, &label, "application/zip", headers, head)
            .await
    }

    /// An open file as the answer to a GET or HEAD: whole, a range, `304` or `416` as the
    /// request's conditions say (`rules::plan`), with a strong ETag from its length and
    /// modification time; the body read piece by piece, paced. `label` names it in the log.
    async fn send_file(
        &self,
        mut file: tokio::fs::File,
        path: &std::path::Path,
        label: &str,
        content_type: &str,
        headers: &HeaderMap,
        head: bool,
    ) -> Response<Body> {
        let meta = match file.metadata().await {
            Ok(m) if m.is_file() => m,
            _ => return text(StatusCode::NOT_FOUND, "no such file"),
        };
        let len = meta.len();
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let tag = rules::etag(len, mtime);
        let conditions = Conditions {
            range: value(headers, header::RANGE),
            if_range: value(headers, header::IF_RANGE),
            if_none_match: value(headers, header::IF_NONE_MATCH),
        };
        let (status, first, count) = match rules::plan(&conditions, len, &tag) {
            Plan::Whole => (StatusCode::OK, 0, len),
            Plan::Part { first, last } => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
            Plan::NotModified => {
                let mut r = status_only(StatusCode::NOT_MODIFIED);
                set(&mut r, header::ETAG, &tag);
                set(&mut r, header::ACCEPT_RANGES, "bytes");
                return r;
            }
            Plan::Unsatisfiable => {
                let mut r = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
                set(&mut r, header::CONTENT_RANGE, &format!("bytes */{len}"));
                set(&mut r, header::ETAG, &tag);
                set(&mut r, header::ACCEPT_RANGES, "bytes");
                return r;
            }
        };
        let body = if head || count == 0 {
            empty()
        } else {
            if let Err(e) = file.seek(io::SeekFrom::Start(first)).await {
                tracing::warn!(file = %path.display(), err = %e, "seeking a file");
                return text(StatusCode::INTERNAL_SERVER_ERROR, "the file cannot be read");
            }
            if count > 0 {
                // (`http.md` §5.2; the browser tests read this line.)
                tracing::debug!("served {label} bytes {first}-{}", first + count - 1);
            }
            file.set_max_buf_size(PIECE);
            file_body(file, count, self.site.clone(), self.ip)
        };
        let mut r = Response::new(body);
        *r.status_mut() = status;
        set(&mut r, header::CONTENT_TYPE, content_type);
        set(&mut r, header::CONTENT_LENGTH, &count.to_string());
        set(&mut r, header::ACCEPT_RANGES, "bytes");
        set(&mut r, header::ETAG, &tag);
        set(&mut r, header::CACHE_CONTROL, "no-cache");
        if status == StatusCode::PARTIAL_CONTENT {
            let last = first + count - 1;
            set(
                &mut r,
                header::CONTENT_RANGE,
                &format!("bytes {first}-{last}/{len}"),
            );
        }
        r
    }
}

/// A header's value as text, if it is there and is text.
pub fn value(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Sets a header (values here are ASCII; one that is not is left out).
pub fn set(r: &mut Response<Body>, name: header::HeaderName, v: &str) {
    if let Ok(v) = HeaderValue::from_str(v) {
        r.headers_mut().insert(name, v);
    }
}

/// A body of `b`.
pub fn full(b: Bytes) -> Body {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(empty());
    *r.status_mut() = status;
    set_common(&mut r);
    r
}

/// A short text reply.
fn text(status: StatusCode, why: &str) -> Response<Body> {
    let body = format!("{why}\n");
    let mut r = Response::new(full(Bytes::from(body.clone())));
    *r.status_mut() = status;
    set(&mut r, header::CONTENT_TYPE, "text/plain; charset=utf-8");
    set(&mut r, header::CONTENT_LENGTH, &body.len().to_string());
    set_common(&mut r);
    r
}

/// The connection closes after this reply.
fn closing(mut r: Response<Body>) -> Response<Body> {
    set(&mut r, header::CONNECTION, "close");
    r
}

fn set_common(r: &mut Response<Body>) {
    set(r, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
}

/// `count` bytes of `file` from where it is, read [`PIECE`] bytes at a time as the peer
/// takes them, each piece paced for `ip` and read with one of the site's read permits.
fn file_body(file: tokio::fs::File, count: u64, site: Arc<Site>, ip: Option<IpAddr>) -> Body {
    let state = (file, count, site);
    let pieces = futures_util::stream::unfold(state, move |(mut f, left, reads)| async move {
        if left == 0 {
            return None;
        }
        let want = left.min(PIECE as u64);
        reads.pace(ip, want).await;
        let mut buf = vec![0u8; want as usize];
        let read = match reads.reads.clone().acquire_owned().await {
            Ok(_permit) => f.read(&mut buf).await,
            Err(_) => Err(io::Error::other("the relay is stopping")),
        };
        match read {
            Ok(0) => {
                let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the replay got shorter");
                Some((Err(e), (f, 0, reads)))
            }
            Ok(n) => {
                buf.truncate(n);
                Some((
                    Ok(Frame::data(Bytes::from(buf))),
                    (f, left - n as u64, reads),
                ))
            }
            Err(e) => Some((Err(e), (f, 0, reads))),
        }
    });
    BodyExt::boxed(StreamBody::new(pieces))
}

/// A socket that notes when it last made progress (read or wrote a byte), in milliseconds
/// since `start`.
struct Watched<S> {
    io: S,
    progress: Arc<AtomicU64>,
    start: Instant,
}

impl<S> Watched<S> {
    fn moved(&self) {
        self.progress
            .store(self.start.elapsed().as_millis() as u64, Ordering::Release);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
