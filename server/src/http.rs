//! The replay server's HTTP (`proto-spec/http.md` §7): `POST /replays`, `GET /replays`
//! (search), `GET|HEAD|DELETE /replays/ID`, `GET /replays/ID/events`,
//! `GET /replays/ID/frames`, `GET /replays/ID/verify`, `GET /reviews`, and the key
//! registry's `GET|POST /keys`, `POST /keys/challenge` and `DELETE /keys/KEY`. The archive's
//! `/replays/NAME.bsors` stays the relay's. What to do is decided by the crate's root; this
//! wires it to hyper, as a [`Mount`] on the relay's HTTP ([`Routes`]).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap};
use hyper::{Method, Request, Response, StatusCode};

use crate::admission::{Full, Share, Shares, PATIENCE};
use crate::{plan, Cause, Filter, Grant, Record, Refusal, ReplayServer, Uploaded};
use bsor_stream_core::net::pace::{ByAddress, Pace};
use bsor_stream_relay::gate::ReadGate;
use bsor_stream_relay::http::rules::{self, Conditions, Plan};
use bsor_stream_relay::http::{empty, full, set, value, Body, Mount};

/// How long a small body (a key registration's) may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of a spooled body taken from the disk budget at a time, when its length is not
/// given.
const SPOOL_STEP: u64 = 1 << 20;

/// The replay server's routes on the relay's HTTP (`Assets::with_mount`): every path
/// [`claims`] names.
pub struct Routes {
    srv: Arc<ReplayServer>,
    paces: Arc<ReplyPaces>,
}

impl Routes {
    /// The routes of `srv`.
    pub fn new(srv: Arc<ReplayServer>) -> Routes {
        Routes {
            srv,
            paces: Arc::new(ReplyPaces {
                by_address: Mutex::new(ByAddress::default()),
                origin: Instant::now(),
            }),
        }
    }
}

impl Mount for Routes {
    fn claims(&self, path: &str) -> bool {
        claims(path).is_some()
    }

    fn answer(
        &self,
        req: Request<Incoming>,
        gate: ReadGate,
        ip: Option<IpAddr>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send + '_>> {
        Box::pin(async move {
            let path = req.uri().path().to_string();
            let route = claims(&path).unwrap_or(Route::Unknown);
            let client = Client {
                ip,
                paces: self.paces.clone(),
            };
            answer(&self.srv, route, req, &gate, &client).await
        })
    }
}

/// What the replay server's replies have cost each address (`http.md` §8.15).
struct ReplyPaces {
    by_address: Mutex<ByAddress>,
    /// The origin of the paces' clock.
    origin: Instant,
}

impl ReplyPaces {
    /// Charges `n` bytes of a reply to `ip` at `rate` bytes a second (a burst of two
    /// seconds' worth; 0: no pace) and waits as long as that says.
    async fn pace(&self, ip: Option<IpAddr>, rate: u64, n: u64) {
        let Some(ip) = ip.filter(|_| rate > 0) else {
            return;
        };
        let wait = {
            let now = self.origin.elapsed();
            let mut paces = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
            paces
                .entry(ip, now, Pace::new(rate, rate.saturating_mul(2)))
                .charge(now, n)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Who asks: the address (for its caps and pace) and the paces of replies.
struct Client {
    /// The peer's address.
    ip: Option<IpAddr>,
    /// What replies have cost each address.
    paces: Arc<ReplyPaces>,
}

/// The refusal of a request whose share is full: `503` `busy`, with `Retry-After`.
fn busy(f: Full) -> Refusal {
    Refusal::new(Cause::Unavailable, "busy", f.to_string())
}
/// Replays a search returns at most per page (and by default).
pub const MAX_LIMIT: i64 = 100;
const DEFAULT_LIMIT: i64 = 20;
/// The longest query value accepted.
const MAX_VALUE: usize = 128;

/// The paths of the replay server (for the OpenAPI test): every one `claims` answers.
pub const PATHS: &[&str] = &[
    "/replays",
    "/replays/{id}",
    "/replays/{id}/events",
    "/replays/{id}/frames",
    "/replays/{id}/verify",
    "/reviews",
    "/keys",
    "/keys/challenge",
    "/keys/{key}",
    "/maps/{hash}",
];

/// The request header of an upload that carries witness statements (`http.md` §8.2.2).
pub const WITNESS_HEADER: &str = "bsor-witness";

/// The most bytes of a `POST /keys` body.
pub const MAX_KEY_BODY: u64 = 1024;

/// What a path names on the replay server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/replays`: search and upload.
    List,
    /// `/replays/ID`.
    Replay(&'a str),
    /// `/replays/ID/events`.
    Events(&'a str),
    /// `/replays/ID/frames`.
    Frames(&'a str),
    /// `/replays/ID/verify`.
    Verify(&'a str),
    /// `/reviews`.
    Reviews,
    /// `/keys`: list and register.
    Keys,
    /// `/keys/challenge`: a challenge to prove a key with.
    KeyChallenge,
    /// `/keys/KEY`: revoke (the key is checked by its handler, so that a bad one is a `400`
    /// saying why).
    Key(&'a str),
    /// `/maps/HASH` (40 hex digits, no `.zip`): `PUT` a map's zip (admins).
    Map(&'a str),
    /// Under `/replays/` but no resource: `404`.
    Unknown,
}

/// The replay server's route for `path`, or `None` when it is not the replay server's
/// (the archive's `/replays/NAME.bsors`, assets, sessions).
pub fn claims(path: &str) -> Option<Route<'_>> {
    if path == "/replays" {
        return Some(Route::List);
    }
    if path == "/reviews" {
        return Some(Route::Reviews);
    }
    if path == "/keys" {
        return Some(Route::Keys);
    }
    if path == "/keys/challenge" {
        return Some(Route::KeyChallenge);
    }
    if let Some(key) = path.strip_prefix("/keys/") {
        return Some(Route::Key(key));
    }
    // `/maps/HASH.zip` stays the relay's (`GET`); `/maps/HASH` is where maps are put.
    if let Some(hash) = path.strip_prefix("/maps/") {
        return (hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some(Route::Map(hash));
    }
    let rest = path.strip_prefix("/replays/")?;
    if rest.ends_with(".bsors") {
        return None;
    }
    let (id, sub) = rest.split_once('/').unwrap_or((rest, ""));
    if !plan::is_id(id) {
        return Some(Route::Unknown);
    }
    Some(match sub {
        "" => Route::Replay(id),
        "events" => Route::Events(id),
        "frames" => Route::Frames(id),
        "verify" => Route::Verify(id),
        _ => Route::Unknown,
    })
}

/// A JSON reply.
fn json(status: StatusCode, body: String) -> Response<Body> {
    let len = body.len();
    let mut r = Response::new(full(Bytes::from(body)));
    *r.status_mut() = status;
    set(&mut r, header::CONTENT_TYPE, "application/json");
    set(&mut r, header::CONTENT_LENGTH, &len.to_string());
    set(&mut r, header::CACHE_CONTROL, "no-store");
    r
}

/// The HTTP status of a refusal's cause (`http.md` §8).
pub fn status(cause: Cause) -> StatusCode {
    match cause {
        Cause::Invalid => StatusCode::BAD_REQUEST,
        Cause::Unauthenticated => StatusCode::UNAUTHORIZED,
        Cause::Forbidden => StatusCode::FORBIDDEN,
        Cause::NotFound => StatusCode::NOT_FOUND,
        Cause::NotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Cause::TooSlow => StatusCode::REQUEST_TIMEOUT,
        Cause::Conflict => StatusCode::CONFLICT,
        Cause::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Cause::WrongType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Cause::OutOfRange => StatusCode::RANGE_NOT_SATISFIABLE,
        Cause::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        Cause::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Cause::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// A refusal's reply: its status and `{"error", "reason"}`.
pub fn refusal(f: &Refusal) -> Response<Body> {
    let mut r = json(status(f.cause), f.body());
    if f.cause == Cause::Unauthenticated {
        set(&mut r, header::WWW_AUTHENTICATE, "Bearer");
    }
    if matches!(f.cause, Cause::TooSlow | Cause::TooLarge) || f.code == "busy" {
        // The body was not read (whole): the connection cannot carry another request.
        set(&mut r, header::CONNECTION, "close");
    }
    if f.code == "busy" {
        set(&mut r, header::RETRY_AFTER, "1");
    }
    r
}

fn not_found() -> Refusal {
    Refusal::new(Cause::NotFound, "not-found", "no such replay")
}

/// Answers a request the replay server claims.
async fn answer(
    srv: &Arc<ReplayServer>,
    route: Route<'_>,
    req: Request<Incoming>,
    gate: &ReadGate,
    client: &Client,
) -> Response<Body> {
    let method = req.method().clone();
    let allowed = match route {
        Route::List | Route::Keys => "GET, HEAD, POST",
        Route::Replay(_) => "GET, HEAD, DELETE",
        Route::Key(_) => "DELETE",
        Route::KeyChallenge => "POST",
        Route::Map(_) => "PUT",
        _ => "GET, HEAD",
    };
    let ok_method = match route {
        Route::Key(_) => method == Method::DELETE,
        Route::Map(_) => method == Method::PUT,
        Route::KeyChallenge => method == Method::POST,
        _ => {
            method == Method::GET
                || method == Method::HEAD
                || (method == Method::POST && matches!(route, Route::List | Route::Keys))
                || (method == Method::DELETE && matches!(route, Route::Replay(_)))
        }
    };
    if !ok_method {
        let mut r = refusal(&Refusal::new(
            Cause::NotAllowed,
            "method-not-allowed",
            format!("{method} is not allowed here (allowed: {allowed})"),
        ));
        set(&mut r, header::ALLOW, allowed);
        set(&mut r, header::CONNECTION, "close");
        return r;
    }
    let head = method == Method::HEAD;
    let query = req.uri().query().unwrap_or("").to_string();
    let result = match (route, method) {
        (Route::List, Method::POST) => upload(srv, req, gate, client).await,
        (Route::List, _) => search(srv, &query).await,
        (Route::Replay(id), Method::DELETE) => delete(srv, id, req.headers()).await,
        (Route::Replay(id), _) => download(srv, id, &query, req.headers(), head, client).await,
        (Route::Events(id), _) => events(srv, id, head, client).await,
        (Route::Frames(id), _) => frames(srv, id, &query, client).await,
        (Route::Verify(id), _) => verify(srv, id, client).await,
        (Route::Reviews, _) => reviews(srv, req.headers()).await,
        (Route::Keys, Method::POST) => register_key(srv, req, gate).await,
        (Route::Keys, _) => list_keys(srv, &query).await,
        (Route::KeyChallenge, _) => key_challenge(srv, req, gate).await,
        (Route::Key(key), _) => revoke_key(srv, key, &query, req.headers()).await,
        (Route::Map(hash), _) => put_map(srv, hash, req, gate, client).await,
        (Route::Unknown, _) => Err(Refusal::new(
            Cause::NotFound,
            "not-found",
            "no such resource",
        )),
    };
    let mut r = result.unwrap_or_else(|f| refusal(&f));
    if head {
        *r.body_mut() = empty();
    }
    r
}

/// What the `Authorization: Bearer TOKEN` header grants (`401` without one that grants).
fn authorize(srv: &ReplayServer, headers: &HeaderMap) -> Result<Grant, Refusal> {
    let Some(auth) = value(headers, header::AUTHORIZATION) else {
        return Err(Refusal::new(
            Cause::Unauthenticated,
            "unauthorized",
            "an Authorization: Bearer TOKEN header is needed",
        ));
    };
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim)
        .unwrap_or("");
    srv.grant(token).ok_or_else(|| {
        Refusal::new(
            Cause::Unauthenticated,
            "unauthorized",
            "the token grants nothing here",
        )
    })
}

/// The player a player's token grants; an admin token is refused (`wrong-player`): an admin
/// `what` ("does not upload").
fn player_of(srv: &ReplayServer, headers: &HeaderMap, what: &str) -> Result<String, Refusal> {
    match authorize(srv, headers)? {
        Grant::Player(p) => Ok(p),
        Grant::Admin => Err(Refusal::new(
            Cause::Forbidden,
            "wrong-player",
            format!("an admin token {what}; use the player's token"),
        )),
    }
}

async fn upload(
    srv: &Arc<ReplayServer>,
    req: Request<Incoming>,
    gate: &ReadGate,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let player = player_of(srv, req.headers(), "does not upload")?;
    let gzip = match value(req.headers(), header::CONTENT_ENCODING).map(str::trim) {
        None | Some("identity") => false,
        Some(e) if e.eq_ignore_ascii_case("gzip") => true,
        Some(e) => {
            return Err(Refusal::new(
                Cause::WrongType,
                "unsupported-encoding",
                format!("Content-Encoding {e:?}: only gzip is accepted"),
            ))
        }
    };
    // Witness statements ride in a header (the body stays the file as it is stored).
    let mut witness = req.headers().get_all(WITNESS_HEADER).iter();
    let witness = match (witness.next(), witness.next()) {
        (None, _) => None,
        (Some(v), None) => Some(plan::witness_header(v.to_str().map_err(|_| {
            Refusal::new(
                Cause::Invalid,
                "bad-witness",
                "Bsor-Witness: not base64 (not ASCII)",
            )
        })?)?),
        (Some(_), Some(_)) => {
            return Err(Refusal::new(
                Cause::Invalid,
                "bad-witness",
                "Bsor-Witness: given more than once",
            ))
        }
    };
    // The body goes to disk as it arrives (its bytes held against the spool's caps), then
    // waits for a store slot and a check slot (the store slot first, so that no upload
    // holds a check slot while it waits): memory holds at most that many bodies and
    // streams, and no upload waits on another's share to arrive. The check slot goes once
    // the stream is made, the store slot once it is stored and indexed.
    let spooled = spool_body(srv, req, srv.config.max_body, gate, client.ip).await?;
    let _store = slot(&srv.admission.stores).await?;
    let check = slot(&srv.admission.checks).await?;
    let s = srv.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(spooled.file.path()).map_err(|e| {
            Refusal::new(
                Cause::Internal,
                "internal",
                format!("reading the spooled body: {e}"),
            )
        })?;
        if bytes.len() as u64 != spooled.len {
            return Err(Refusal::new(
                Cause::Internal,
                "internal",
                "the spooled body changed",
            ));
        }
        drop(spooled);
        let mut p = crate::prepare(&bytes, gzip, &s.config, &player)?;
        if let Some(file) = &witness {
            p.witness(file, &s.config.trusted_witnesses);
        }
        Ok::<_, Refusal>(p)
    })
    .await
    .map_err(|e| Refusal::new(Cause::Internal, "internal", e.to_string()))??;
    drop(check);
    let signer = prepared.signer;
    let (status, record, owner) = match srv.upload(prepared).await? {
        Uploaded::Created(r) => {
            let owner = srv.ownership(signer, &r.player, r.uploaded).await?;
            (StatusCode::CREATED, r, owner)
        }
        // Another upload's bytes may be the stored ones: the stored replay is judged.
        Uploaded::Existing(r) => {
            let (_, owner) = srv.verify(&r).await?;
            (StatusCode::OK, r, owner)
        }
    };
    let mut v = serde_json::to_value(&record).unwrap_or_default();
    if let (Some(v), Ok(serde_json::Value::Object(o))) =
        (v.as_object_mut(), serde_json::to_value(&owner))
    {
        v.extend(o);
    }
    let mut r = json(status, v.to_string());
    set(&mut r, header::LOCATION, &format!("/replays/{}", record.id));
    Ok(r)
}

/// `PUT /maps/HASH`: an admin gives the relay a map's zip (`http.md` §8.16), under the
/// upload's body limit, spool caps and paces. It is written whole to the maps folder as
/// `HASH.zip` (the hash in lowercase), synced before the answer: `201` when new, `204` when
/// it replaced one. Whether the zip is the map of that hash the page checks (it hashes
/// Info.dat and the difficulties as BeatSaver does); here only its first bytes are checked
/// to be a zip's.
async fn put_map(
    srv: &Arc<ReplayServer>,
    hash: &str,
    req: Request<Incoming>,
    gate: &ReadGate,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    if authorize(srv, req.headers())? != Grant::Admin {
        return Err(Refusal::new(
            Cause::Forbidden,
            "not-admin",
            "maps are given by admins",
        ));
    }
    let Some(dir) = srv.config.maps.clone() else {
        return Err(Refusal::new(
            Cause::NotFound,
            "no-maps",
            "this server keeps no maps (serve --maps DIR)",
        ));
    };
    let spooled = spool_body(srv, req, srv.config.max_body, gate, client.ip).await?;
    let _store = slot(&srv.admission.stores).await?;
    let name = format!("{}.zip", hash.to_ascii_lowercase());
    let created = tokio::task::spawn_blocking(move || store_map(&spooled, &dir, &name))
        .await
        .map_err(|e| Refusal::new(Cause::Internal, "internal", e.to_string()))??;
    let mut r = Response::new(empty());
    *r.status_mut() = if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    set(
        &mut r,
        header::LOCATION,
        &format!("/maps/{}.zip", hash.to_ascii_lowercase()),
    );
    Ok(r)
}

/// Copies a spooled map into `dir/name` through a synced temporary file renamed into place
/// (the folder synced too); true when no map of that name was there.
fn store_map(spooled: &Spooled, dir: &std::path::Path, name: &str) -> Result<bool, Refusal> {
    use std::io::{Read, Write};
    let internal = |what: &str, e: std::io::Error| {
        Refusal::new(Cause::Internal, "internal", format!("{what}: {e}"))
    };
    let mut from = std::fs::File::open(spooled.file.path())
        .map_err(|e| internal("reading the spooled map", e))?;
    let mut magic = [0u8; 4];
    if spooled.len < 4 || from.read_exact(&mut magic).is_err() || magic != *b"PK\x03\x04" {
        return Err(Refusal::new(
            Cause::WrongType,
            "not-a-zip",
            "the body is not a zip (a map is a BeatSaver zip: Info.dat, difficulties, song)",
        ));
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| internal("a temporary file in the maps folder", e))?;
    tmp.write_all(&magic)
        .and_then(|()| std::io::copy(&mut from, &mut tmp).map(|_| ()))
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| internal("writing the map", e))?;
    let dest = dir.join(name);
    let created = !dest.exists();
    tmp.persist(&dest)
        .map_err(|e| internal("renaming the map into place", e.error))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| internal("syncing the maps folder", e))?;
    Ok(created)
}

/// One of an upload's slots (store or check), waited for.
async fn slot(s: &tokio::sync::Semaphore) -> Result<tokio::sync::SemaphorePermit<'_>, Refusal> {
    s.acquire()
        .await
        .map_err(|e| Refusal::new(Cause::Internal, "internal", e.to_string()))
}

/// A reply's rebuild or export slot, waited for as `http.md` §8.15 says, or `503` `busy`.
async fn reply_slot(shares: &Arc<Shares>, client: &Client) -> Result<Share, Refusal> {
    shares
        .wait_reply(client.ip, 1, PATIENCE)
        .await
        .map_err(busy)
}

/// A request body on disk: removed when dropped, its bytes held against the spool's caps
/// until then.
struct Spooled {
    file: tempfile::NamedTempFile,
    len: u64,
    _disk: Share,
}

/// Spools a request body of at most `limit` bytes to a file (`http.md` §8.15): refused
/// `413` by its `Content-Length` before a byte is read, or as soon as more arrives; `503`
/// `busy` when the spool's caps (for `ip`, or in all) cannot take it (by its length when
/// given, else a MiB at a time, never waiting); `408` when, after the grace period, it
/// arrives slower than the server's minimum rate.
async fn spool_body(
    srv: &ReplayServer,
    req: Request<Incoming>,
    limit: u64,
    gate: &ReadGate,
    ip: Option<std::net::IpAddr>,
) -> Result<Spooled, Refusal> {
    let too_large = || {
        Refusal::new(
            Cause::TooLarge,
            "too-large",
            format!("the body is over {limit} bytes"),
        )
    };
    let declared = declared_length(req.headers(), limit)?;
    // The disk is taken as the bytes come, a MiB at a time, not as declared: a client that
    // declares 32 MiB and sends one holds one.
    let mut disk = srv
        .admission
        .spool
        .take(ip, declared.unwrap_or(limit).min(SPOOL_STEP))
        .map_err(busy)?;
    let dir = srv
        .config
        .spool_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let internal =
        |e: std::io::Error| Refusal::new(Cause::Internal, "internal", format!("spooling: {e}"));
    let tmp = tokio::task::spawn_blocking(move || {
        tempfile::Builder::new()
            .prefix(crate::SPOOL_PREFIX)
            .tempfile_in(dir)
    })
    .await
    .map_err(|e| Refusal::new(Cause::Internal, "internal", e.to_string()))?
    .map_err(internal)?;
    // Written in pieces of 64 KiB: a write per frame of the body would be a trip to the
    // blocking pool per 16 KiB; a larger buffer is memory every upload in flight holds.
    let mut file = tokio::io::BufWriter::with_capacity(
        64 << 10,
        tokio::fs::File::from_std(tmp.reopen().map_err(internal)?),
    );
    // The body may now come through the connection's read gate.
    gate.taken(u32::try_from(limit).unwrap_or(u32::MAX));
    let mut body = req.into_body();
    let rate = srv.config.min_body_rate;
    let start = tokio::time::Instant::now();
    let mut total = 0u64;
    loop {
        // By now at least the minimum rate's worth of bytes must have come since the grace
        // period ended.
        let behind = if rate == 0 {
            Duration::from_secs(86_400)
        } else {
            Duration::from_secs_f64(total as f64 / rate as f64)
        };
        let due = start + srv.config.body_grace + behind;
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Err(_) => {
                return Err(Refusal::new(
                    Cause::TooSlow,
                    "timeout",
                    format!(
                    "the body arrives slower than {rate} bytes a second ({total} bytes in {:.1} s)",
                    start.elapsed().as_secs_f64()
                ),
                ))
            }
            Ok(None) => break,
            Ok(Some(frame)) => frame.map_err(|e| {
                Refusal::new(Cause::Invalid, "bad-request", format!("the body: {e}"))
            })?,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > limit {
            return Err(too_large());
        }
        if total > disk.amount() {
            let more = (total - disk.amount())
                .max(SPOOL_STEP)
                .min(limit - disk.amount());
            disk.grow(more).map_err(busy)?;
        }
        use tokio::io::AsyncWriteExt as _;
        file.write_all(&data).await.map_err(internal)?;
        // The gate counts a chunked body's framing, the limit does not: the rest of the
        // body (and one byte past it, to be refused) may still come, so that a body over
        // the limit gets its 413 rather than a stall.
        gate.allow(limit - total + 1);
    }
    {
        use tokio::io::AsyncWriteExt as _;
        file.flush().await.map_err(internal)?;
    }
    Ok(Spooled {
        file: tmp,
        len: total,
        _disk: disk,
    })
}

/// The body's `Content-Length`, if given: `413` over `limit`, `400` when not a number.
fn declared_length(headers: &HeaderMap, limit: u64) -> Result<Option<u64>, Refusal> {
    match value(headers, header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(len) => match len.trim().parse::<u64>() {
            Ok(n) if n > limit => Err(Refusal::new(
                Cause::TooLarge,
                "too-large",
                format!("the body is over {limit} bytes"),
            )),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(Refusal::new(
                Cause::Invalid,
                "bad-request",
                "Content-Length",
            )),
        },
    }
}

/// Reads a small request body (at most `limit` bytes, a key registration's) into memory:
/// `413` as for a spooled body, `408` when it takes longer than [`BODY_TIMEOUT`].
async fn small_body(
    req: Request<Incoming>,
    limit: u64,
    gate: &ReadGate,
) -> Result<Vec<u8>, Refusal> {
    let too_large = || {
        Refusal::new(
            Cause::TooLarge,
            "too-large",
            format!("the body is over {limit} bytes"),
        )
    };
    declared_length(req.headers(), limit)?;
    gate.taken(u32::try_from(limit).unwrap_or(u32::MAX));
    let mut body = req.into_body();
    let mut bytes = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                Refusal::new(Cause::Invalid, "bad-request", format!("the body: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() as u64 + data.len() as u64 > limit {
                    return Err(too_large());
                }
                bytes.extend_from_slice(&data);
                gate.allow(limit - bytes.len() as u64 + 1);
            }
        }
        Ok(())
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| Refusal::new(Cause::TooSlow, "timeout", "the body took too long"))??;
    Ok(bytes)
}

async fn verify(
    srv: &Arc<ReplayServer>,
    id: &str,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let r = record(srv, id).await?;
    // The stream is read whole and its signatures checked: a rebuild's share.
    let _share = reply_slot(&srv.admission.rebuilds, client).await?;
    let (report, owner) = srv.verify(&r).await?;
    Ok(json(
        StatusCode::OK,
        crate::keys::verify_json(&report, &r, &owner).to_string(),
    ))
}

/// `POST /keys/challenge`: a fresh challenge for the token's player (the body, if any, is
/// read and ignored).
async fn key_challenge(
    srv: &Arc<ReplayServer>,
    req: Request<Incoming>,
    gate: &ReadGate,
) -> Result<Response<Body>, Refusal> {
    let player = player_of(srv, req.headers(), "asks for no challenge")?;
    small_body(req, MAX_KEY_BODY, gate).await?;
    let c = srv.issue_challenge(&player).await?;
    Ok(json(
        StatusCode::CREATED,
        serde_json::to_string(&c).unwrap_or_default(),
    ))
}

/// `POST /keys` with `{"key": HEX, "challenge": HEX, "signature": HEX}`: registers the key
/// to the token's player once the signature proves it holds the key.
async fn register_key(
    srv: &Arc<ReplayServer>,
    req: Request<Incoming>,
    gate: &ReadGate,
) -> Result<Response<Body>, Refusal> {
    let player = player_of(srv, req.headers(), "registers no key")?;
    let body = small_body(req, MAX_KEY_BODY, gate).await?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        key: String,
        challenge: String,
        signature: String,
    }
    let asked: Asked = serde_json::from_slice(&body).map_err(|e| {
        Refusal::new(
            Cause::Invalid,
            "bad-json",
            format!(
                "the body is not {{\"key\": HEX, \"challenge\": HEX, \"signature\": HEX}}: {e}"
            ),
        )
    })?;
    let proof = crate::keys::Proof::parse(&asked.key, &asked.challenge, &asked.signature)?;
    let (status, row) = srv.register_key(&proof, &player).await?;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut r = json(status, serde_json::to_string(&row).unwrap_or_default());
    set(&mut r, header::LOCATION, &format!("/keys/{}", proof.key));
    Ok(r)
}

/// `GET /keys?player=ID`: the player's keys, revoked ones with their time.
async fn list_keys(srv: &Arc<ReplayServer>, query: &str) -> Result<Response<Body>, Refusal> {
    let mut player = None;
    for (k, v) in pairs(query)? {
        match k {
            "player" => player = Some(v),
            other => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    format!("unknown parameter {other:?}"),
                ))
            }
        }
    }
    let player =
        player.ok_or_else(|| Refusal::new(Cause::Invalid, "bad-query", "player=ID is needed"))?;
    let keys = srv.index.keys(player, crate::keys::MAX_KEYS).await?;
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "player": player, "keys": keys }).to_string(),
    ))
}

/// `DELETE /keys/KEY`: revokes the key (its player's token or an admin's); with
/// `?purge=1`, removes its row entirely (an admin's token only).
async fn revoke_key(
    srv: &Arc<ReplayServer>,
    key: &str,
    query: &str,
    headers: &HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let grant = authorize(srv, headers)?;
    let mut purge = false;
    for (k, v) in pairs(query)? {
        match (k, v) {
            ("purge", "1") => purge = true,
            ("purge", _) => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    "purge=1 or nothing",
                ))
            }
            (other, _) => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    format!("unknown parameter {other:?}"),
                ))
            }
        }
    }
    // The key's text is only checked to be 64 hex digits for a purge: a row that a later
    // check refuses (a weak key from before) can still be removed.
    if purge {
        let key = hex_key(key)?;
        let row = srv.purge_key(&key, &grant).await?;
        let mut v = serde_json::to_value(&row).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("purged".into(), true.into());
        }
        return Ok(json(StatusCode::OK, v.to_string()));
    }
    let key = hex_key(key)?;
    let row = srv.revoke_key(&key, &grant).await?;
    Ok(json(
        StatusCode::OK,
        serde_json::to_string(&row).unwrap_or_default(),
    ))
}

/// A key of a `/keys/KEY` path as the registry keeps it: 64 hex digits, lower-cased.
fn hex_key(key: &str) -> Result<String, Refusal> {
    if key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(key.to_ascii_lowercase())
    } else {
        Err(Refusal::new(
            Cause::Invalid,
            "bad-key",
            "a public key is 64 hex digits (32 bytes)",
        ))
    }
}

async fn record(srv: &ReplayServer, id: &str) -> Result<Record, Refusal> {
    srv.index.get(id).await?.ok_or_else(not_found)
}

/// A representation of a stored replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Bsor,
    Bsors,
    Json,
}

/// The representation asked for: `?format=` first, then `Accept`, BSOR by default.
fn format(query: &str, headers: &HeaderMap) -> Result<Format, Refusal> {
    let mut asked = None;
    for (k, v) in pairs(query)? {
        if k != "format" {
            return Err(Refusal::new(
                Cause::Invalid,
                "bad-query",
                format!("unknown parameter {k:?}"),
            ));
        }
        asked = Some(match v {
            "bsor" => Format::Bsor,
            "bsors" => Format::Bsors,
            "json" => Format::Json,
            other => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    format!("format {other:?}: bsor, bsors or json"),
                ))
            }
        });
    }
    if let Some(f) = asked {
        return Ok(f);
    }
    let accept = value(headers, header::ACCEPT).unwrap_or("");
    Ok(if accept.contains("application/x-bsors") {
        Format::Bsors
    } else if accept.contains("application/json") && !accept.contains("application/octet-stream") {
        Format::Json
    } else {
        Format::Bsor
    })
}

async fn download(
    srv: &Arc<ReplayServer>,
    id: &str,
    query: &str,
    headers: &HeaderMap,
    head: bool,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let fmt = format(query, headers)?;
    let r = record(srv, id).await?;
    let (tag, ctype, len) = match fmt {
        Format::Bsor => ("bsor", "application/octet-stream", r.bsor_bytes as u64),
        Format::Bsors => ("bsors", "application/x-bsors", r.stored_bytes as u64),
        Format::Json => ("json", "application/json", 0),
    };
    // A stored replay never changes: its ID and the representation name it.
    let etag = format!("\"{id}-{tag}\"");
    let conditions = Conditions {
        range: value(headers, header::RANGE),
        if_range: value(headers, header::IF_RANGE),
        if_none_match: value(headers, header::IF_NONE_MATCH),
    };
    if fmt == Format::Json {
        return export(srv, &r, &etag, conditions.if_none_match, head, client).await;
    }
    let plan = rules::plan(&conditions, len, &etag);
    let (status, first, count) = match plan {
        Plan::Whole => (StatusCode::OK, 0, len),
        Plan::Part { first, last } => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
        Plan::NotModified => {
            let mut resp = Response::new(empty());
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            set(&mut resp, header::ETAG, &etag);
            set(&mut resp, header::ACCEPT_RANGES, "bytes");
            return Ok(resp);
        }
        Plan::Unsatisfiable => {
            let mut resp = refusal(&Refusal::new(
                Cause::OutOfRange,
                "range-not-satisfiable",
                "range not satisfiable",
            ));
            set(&mut resp, header::CONTENT_RANGE, &format!("bytes */{len}"));
            set(&mut resp, header::ETAG, &etag);
            return Ok(resp);
        }
    };
    let body = if head || count == 0 {
        empty()
    } else {
        // Read or rebuilt as it goes out, under one of the server's rebuild shares.
        let share = reply_slot(&srv.admission.rebuilds, client).await?;
        let out = Outgoing::new(share, client, srv);
        if fmt == Format::Bsors {
            let read = srv.stored_read(&r, std::iter::once(first..first + count));
            pieces(Source::Stored(read), out)
        } else {
            // The BSOR, or the part asked for, from the keyframe groups that cover it
            // (http.md §8.6).
            let part =
                (status == StatusCode::PARTIAL_CONTENT).then_some((first, first + count - 1));
            pieces(
                Source::Bsor(Box::new(srv.bsor_download(&r, part).await?)),
                out,
            )
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    set(&mut resp, header::CONTENT_TYPE, ctype);
    set(&mut resp, header::CONTENT_LENGTH, &count.to_string());
    set(&mut resp, header::ACCEPT_RANGES, "bytes");
    set(&mut resp, header::ETAG, &etag);
    set(
        &mut resp,
        header::CACHE_CONTROL,
        "public, max-age=31536000, immutable",
    );
    if status == StatusCode::PARTIAL_CONTENT {
        set(
            &mut resp,
            header::CONTENT_RANGE,
            &format!("bytes {first}-{}/{len}", first + count - 1),
        );
    }
    Ok(resp)
}

/// The JSON export of `r` (http.md §8.6): written as the BSOR is rebuilt, a keyframe
/// group at a time, so that memory stays one group's whatever the replay's length; its
/// length is not known before, so it has no ranges (`Accept-Ranges: none`, a `Range` is
/// answered with the whole `200`) and a `HEAD` builds nothing.
async fn export(
    srv: &Arc<ReplayServer>,
    r: &Record,
    etag: &str,
    if_none_match: Option<&str>,
    head: bool,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let unchanged = if_none_match.is_some_and(|v| {
        v.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == etag
        })
    });
    let mut resp = if unchanged {
        let mut resp = Response::new(empty());
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp
    } else if head {
        Response::new(empty())
    } else {
        let share = reply_slot(&srv.admission.exports, client).await?;
        let out = Outgoing::new(share, client, srv);
        let export = JsonExport::new(srv.bsor_download(r, None).await?);
        Response::new(pieces(Source::Json(Box::new(export)), out))
    };
    set(&mut resp, header::CONTENT_TYPE, "application/json");
    set(&mut resp, header::ACCEPT_RANGES, "none");
    set(&mut resp, header::ETAG, etag);
    set(
        &mut resp,
        header::CACHE_CONTROL,
        "public, max-age=31536000, immutable",
    );
    Ok(resp)
}

/// Where a reply's pieces come from.
enum Source {
    /// Stored bytes as they are.
    Stored(crate::StoredRead),
    /// The BSOR rebuilt.
    Bsor(Box<crate::BsorDownload>),
    /// The JSON export written from the BSOR rebuilt.
    Json(Box<JsonExport>),
    /// The events' JSON written from their records.
    Events(Box<EventsJson>),
}

impl Source {
    async fn next_piece(&mut self) -> Option<Result<Bytes, String>> {
        match self {
            Source::Stored(s) => s.next_piece().await.map(|p| p.map_err(|f| f.reason)),
            Source::Bsor(d) => d.next_piece().await.map(|p| p.map_err(|f| f.reason)),
            Source::Json(j) => j.next_piece().await,
            Source::Events(e) => e.next_piece().await,
        }
    }
}

/// What a reply's pieces are sent under: the share that admitted it (held until the last
/// piece went or the peer left) and the pace of its address.
struct Outgoing {
    threads: Option<tokio::runtime::Handle>,
    share: Share,
    paces: Arc<ReplyPaces>,
    ip: Option<IpAddr>,
    rate: u64,
}

impl Outgoing {
    fn new(share: Share, client: &Client, srv: &ReplayServer) -> Outgoing {
        Outgoing {
            threads: srv.reply_threads(),
            share,
            paces: client.paces.clone(),
            ip: client.ip,
            rate: srv.config.address_rate,
        }
    }
}

/// A body of `source`'s pieces as they are made. The status line is out before they are:
/// a stored stream found damaged then ends the body with an error, which closes the
/// connection short of `Content-Length` (or of a chunked body's end). The pieces are made
/// by a task of their own, one ahead of the peer (the reply's body must be Sync, a store
/// read's future is not), each charged to the address's pace before it goes; the task
/// stops, and gives back its share, when the peer goes.
fn pieces(mut source: Source, out: Outgoing) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
    // Set when the task ends after the last piece (not cut by an error, its peer or a
    // reclaimed share).
    let whole = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let whole_task = whole.clone();
    let Outgoing {
        threads,
        share,
        paces,
        ip,
        rate,
    } = out;
    let work = async move {
        // While the reply waits for its peer (or its address's pace) its share may be given
        // to another request once the server's cap is full (`http.md` §8.15): it ends then.
        let stall = share.stall();
        let revoked = async {
            match &stall {
                Some(s) => s.revoked().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(revoked);
        let waiting = |yes: bool| {
            if let Some(s) = &stall {
                s.waiting(yes);
            }
        };
        let mut cut = true;
        loop {
            let Some(piece) = source.next_piece().await else {
                cut = false;
                break;
            };
            let piece = match piece {
                Ok(b) => {
                    // A peer that leaves while its pace holds the piece ends the work now.
                    waiting(true);
                    tokio::select! {
                        () = paces.pace(ip, rate, b.len() as u64) => {}
                        () = tx.closed() => break,
                        () = &mut revoked => break,
                    }
                    Ok(Frame::data(b))
                }
                Err(why) => {
                    tracing::warn!(reason = %why, "a reply stopped short");
                    Err(std::io::Error::other(why))
                }
            };
            let stop = piece.is_err();
            waiting(true);
            let sent = tokio::select! {
                sent = tx.send(piece) => sent.is_ok(),
                () = &mut revoked => false,
            };
            waiting(false);
            if !sent || stop {
                break;
            }
        }
        if stall.as_ref().is_some_and(|s| s.is_revoked()) {
            tracing::debug!("a reply waiting for its peer gave its share to another request");
        } else if !cut {
            whole_task.store(true, std::sync::atomic::Ordering::Release);
        }
        drop(share);
    };
    // On the replies' threads (`ReplayServer::reply_threads`), apart from the relay's.
    match threads {
        Some(rt) => drop(rt.spawn(work)),
        None => drop(tokio::spawn(work)),
    }
    // A body whose task stopped before the last piece ends with an error, never as if whole
    // (a chunked body would otherwise end cleanly, short).
    let pieces = futures_util::stream::unfold(Some(rx), move |rx| {
        let whole = whole.clone();
        async move {
            let mut rx = rx?;
            match rx.recv().await {
                Some(piece) => Some((piece, Some(rx))),
                None if whole.load(std::sync::atomic::Ordering::Acquire) => None,
                None => Some((Err(std::io::Error::other("the reply was cut short")), None)),
            }
        }
    });
    BodyExt::boxed(StreamBody::new(pieces))
}

/// Bytes of the rebuilt BSOR parsed at a time for the JSON export: a JSON piece stays a
/// few times this, whatever a keyframe group's size.
const JSON_STEP: usize = 64 << 10;

/// The JSON export written as the BSOR is rebuilt (`bsor::JsonWriter` over the push
/// parser's events).
struct JsonExport {
    download: crate::BsorDownload,
    parser: bsor_stream_core::bsor::PushParser,
    writer: bsor_stream_core::bsor::JsonWriter,
    /// Rebuilt bytes not parsed yet.
    pending: Bytes,
    /// The rebuilt BSOR ended (or failed).
    ended: bool,
    /// Nothing more is written.
    done: bool,
}

impl JsonExport {
    fn new(download: crate::BsorDownload) -> JsonExport {
        JsonExport {
            download,
            parser: bsor_stream_core::bsor::PushParser::new(),
            writer: bsor_stream_core::bsor::JsonWriter::new(),
            pending: Bytes::new(),
            ended: false,
            done: false,
        }
    }

    async fn next_piece(&mut self) -> Option<Result<Bytes, String>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        loop {
            if self.pending.is_empty() && !self.ended {
                match self.download.next_piece().await {
                    Some(Ok(b)) => self.pending = b,
                    Some(Err(f)) => {
                        self.done = true;
                        return Some(Err(f.reason));
                    }
                    None => {
                        self.ended = true;
                        self.parser.finish();
                    }
                }
            }
            let step = self.pending.split_to(self.pending.len().min(JSON_STEP));
            self.parser.push(&step);
            let written = (|| {
                while let Some(e) = self.parser.next_event().map_err(|e| e.to_string())? {
                    self.writer.event(e, &mut out).map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            })();
            if let Err(why) = written {
                self.done = true;
                return Some(Err(why));
            }
            if self.ended && self.pending.is_empty() {
                self.done = true;
                if !self.writer.is_done() {
                    return Some(Err("the rebuilt BSOR ended early".into()));
                }
                return Some(Ok(Bytes::from(out)));
            }
            if !out.is_empty() {
                return Some(Ok(Bytes::from(out)));
            }
        }
    }
}

async fn events(
    srv: &Arc<ReplayServer>,
    id: &str,
    head: bool,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let r = record(srv, id).await?;
    let etag = format!("\"{id}-events\"");
    // A HEAD reads nothing of the store: the length is the body's, not known before.
    let body = if head {
        empty()
    } else {
        let share = reply_slot(&srv.admission.rebuilds, client).await?;
        let batch = srv.events(&r).await?;
        pieces(
            Source::Events(Box::new(EventsJson::new(batch))),
            Outgoing::new(share, client, srv),
        )
    };
    let mut resp = Response::new(body);
    set(&mut resp, header::CONTENT_TYPE, "application/json");
    set(&mut resp, header::CACHE_CONTROL, "no-store");
    set(&mut resp, header::ETAG, &etag);
    Ok(resp)
}

/// The events' JSON (`http.md` §8.7) written from the decoded records a piece at a time:
/// the records are kept as the codec decoded them (a few dozen bytes each), never as one
/// JSON tree or string. The bytes are those of `serde_json`'s `Value` of the whole: the
/// sections in key order, each record's fields in key order.
struct EventsJson {
    batch: bsor_stream_core::stream::EventBatch,
    /// The section being written (in key order: heights, notes, pauses, walls), and the
    /// next record in it.
    section: usize,
    next: usize,
    done: bool,
}

impl EventsJson {
    /// The sections in the order `serde_json` writes an object's keys.
    const SECTIONS: [&'static str; 4] = ["heights", "notes", "pauses", "walls"];

    fn new(batch: bsor_stream_core::stream::EventBatch) -> EventsJson {
        EventsJson {
            batch,
            section: 0,
            next: 0,
            done: false,
        }
    }

    /// Record `i` of section `section` as JSON, if there is one.
    fn record(&self, section: usize, i: usize, out: &mut Vec<u8>) -> Option<Result<(), String>> {
        fn put<T: serde::Serialize>(
            v: Option<&T>,
            out: &mut Vec<u8>,
        ) -> Option<Result<(), String>> {
            let v = v?;
            Some(
                serde_json::to_value(v)
                    .and_then(|v| serde_json::to_writer(&mut *out, &v))
                    .map_err(|e| format!("writing the events: {e}")),
            )
        }
        let b = &self.batch;
        match section {
            0 => put(b.heights.records.get(i), out),
            1 => put(b.notes.records.get(i), out),
            2 => put(b.pauses.records.get(i), out),
            _ => put(b.walls.records.get(i), out),
        }
    }

    async fn next_piece(&mut self) -> Option<Result<Bytes, String>> {
        self.piece()
    }

    /// The next piece: at least [`JSON_STEP`] bytes but the last.
    fn piece(&mut self) -> Option<Result<Bytes, String>> {
        if self.done {
            return None;
        }
        let mut out = Vec::with_capacity(JSON_STEP + 1024);
        while out.len() < JSON_STEP {
            if self.section == Self::SECTIONS.len() {
                out.push(b'}');
                self.done = true;
                break;
            }
            if self.next == 0 {
                out.push(if self.section == 0 { b'{' } else { b',' });
                out.push(b'"');
                out.extend_from_slice(Self::SECTIONS[self.section].as_bytes());
                out.extend_from_slice(b"\":[");
            }
            // A record's comma is taken back when there is no record.
            let mark = out.len();
            if self.next > 0 {
                out.push(b',');
            }
            match self.record(self.section, self.next, &mut out) {
                Some(Ok(())) => self.next += 1,
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    out.truncate(mark);
                    out.push(b']');
                    self.section += 1;
                    self.next = 0;
                }
            }
        }
        Some(Ok(Bytes::from(out)))
    }
}

async fn frames(
    srv: &Arc<ReplayServer>,
    id: &str,
    query: &str,
    client: &Client,
) -> Result<Response<Body>, Refusal> {
    let mut from = 0.0f32;
    let mut to = f32::MAX;
    for (k, v) in pairs(query)? {
        let t: f32 = v
            .parse()
            .ok()
            .filter(|t: &f32| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    format!("{k}={v:?}: song seconds, 0 or more"),
                )
            })?;
        match k {
            "from" => from = t,
            "to" => to = t,
            other => {
                return Err(Refusal::new(
                    Cause::Invalid,
                    "bad-query",
                    format!("unknown parameter {other:?}"),
                ))
            }
        }
    }
    if from > to {
        return Err(Refusal::new(
            Cause::Invalid,
            "bad-query",
            "from is after to",
        ));
    }
    let r = record(srv, id).await?;
    let share = reply_slot(&srv.admission.rebuilds, client).await?;
    let read = srv.stored_read(&r, srv.frames(&r, from, to).await?);
    let len = read.len();
    let mut resp = Response::new(pieces(
        Source::Stored(read),
        Outgoing::new(share, client, srv),
    ));
    set(&mut resp, header::CONTENT_TYPE, "application/x-bsors");
    set(&mut resp, header::CONTENT_LENGTH, &len.to_string());
    set(
        &mut resp,
        header::CACHE_CONTROL,
        "public, max-age=31536000, immutable",
    );
    Ok(resp)
}

async fn delete(
    srv: &Arc<ReplayServer>,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let grant = authorize(srv, headers)?;
    let r = record(srv, id).await?;
    if let Grant::Player(p) = &grant {
        if *p != r.player {
            return Err(Refusal::new(
                Cause::Forbidden,
                "not-owner",
                "only the replay's player or an admin deletes it",
            ));
        }
    }
    srv.delete(id).await?.ok_or_else(not_found)?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}

async fn reviews(srv: &Arc<ReplayServer>, headers: &HeaderMap) -> Result<Response<Body>, Refusal> {
    if authorize(srv, headers)? != Grant::Admin {
        return Err(Refusal::new(
            Cause::Forbidden,
            "not-admin",
            "the review list is for admins",
        ));
    }
    let list = srv.reviews(1000).await?;
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "reviews": list }).to_string(),
    ))
}

async fn search(srv: &Arc<ReplayServer>, query: &str) -> Result<Response<Body>, Refusal> {
    let mut f = Filter::default();
    let mut limit = DEFAULT_LIMIT;
    let bad = |k: &str, why: &str| Refusal::new(Cause::Invalid, "bad-query", format!("{k}: {why}"));
    let seconds = |k: &str, v: &str| -> Result<i64, Refusal> {
        v.parse::<i64>()
            .ok()
            .filter(|s| (0..=i64::MAX / 1000).contains(s))
            .map(|s| s * 1000)
            .ok_or_else(|| bad(k, "Unix seconds"))
    };
    for (k, v) in pairs(query)? {
        match k {
            "player" => f.player = Some(v.to_string()),
            "map" => f.map = Some(v.to_string()),
            "difficulty" => f.difficulty = Some(v.to_string()),
            "mode" => f.mode = Some(v.to_string()),
            "since" => f.since = Some(seconds(k, v)?),
            "until" => f.until = Some(seconds(k, v)?),
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(k, "1 to 100"))?
            }
            "cursor" => {
                f.after = Some(plan::parse_cursor(v).ok_or_else(|| bad(k, "not a cursor"))?)
            }
            other => return Err(bad(other, "unknown parameter")),
        }
    }
    let mut rows = srv.index.search(&f, limit + 1).await?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| plan::cursor(r.uploaded, &r.id))
    } else {
        None
    };
    Ok(json(
        StatusCode::OK,
        serde_json::json!({ "replays": rows, "next": next }).to_string(),
    ))
}

/// A query's `key=value` pairs. Values are not percent-decoded: a value is 1 to 128 of
/// `[A-Za-z0-9._-]` (IDs, hashes, names of difficulties and modes, numbers), anything else
/// is refused (`400`), and so is a key given twice.
fn pairs(query: &str) -> Result<Vec<(&str, &str)>, Refusal> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= MAX_VALUE
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        };
        if !ok(k) || !ok(v) {
            return Err(Refusal::new(
                Cause::Invalid,
                "bad-query",
                "a query value is 1 to 128 of A-Z a-z 0-9 . _ -",
            ));
        }
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(Refusal::new(
                Cause::Invalid,
                "bad-query",
                format!("{k} is given twice"),
            ));
        }
        out.push((k, v));
    }
    if out.len() > 16 {
        return Err(Refusal::new(
            Cause::Invalid,
            "bad-query",
            "too many parameters",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events' JSON as one `serde_json` tree would write it.
    fn whole(b: &bsor_stream_core::stream::EventBatch) -> String {
        serde_json::json!({
            "notes": b.notes.records,
            "walls": b.walls.records,
            "heights": b.heights.records,
            "pauses": b.pauses.records,
        })
        .to_string()
    }

    fn streamed(b: bsor_stream_core::stream::EventBatch) -> (String, usize) {
        let mut e = EventsJson::new(b);
        let (mut out, mut pieces) = (Vec::new(), 0);
        while let Some(p) = e.piece() {
            let p = p.unwrap();
            assert!(!p.is_empty(), "an empty piece");
            out.extend_from_slice(&p);
            pieces += 1;
        }
        (String::from_utf8(out).unwrap(), pieces)
    }

    #[test]
    fn events_json_is_written_in_pieces_as_one_tree_writes_it() {
        let r = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 5,
            seconds: 600.0,
            fps: 90,
        });
        assert!(!r.walls.is_empty() && !r.heights.is_empty() && !r.pauses.is_empty());
        let full = bsor_stream_core::transcode::encode_replay(
            &r,
            bsor_stream_core::stream::Settings::archive(
                bsor_stream_core::stream::Profile::Lossless,
            ),
        );
        let (_, batch) = bsor_stream_core::transcode::read_events(&mut std::io::Cursor::new(&full))
            .unwrap()
            .unwrap();
        let want = whole(&batch);
        let (got, pieces) = streamed(batch.clone());
        assert_eq!(got, want);
        assert!(pieces > 1, "a 10-minute replay's events in {pieces} piece");
        assert!(want.len() / pieces <= JSON_STEP + 1024);
        // Empty sections, first, middle and last, and nothing at all.
        let mut b = batch.clone();
        b.heights.records.clear();
        b.walls.records.clear();
        assert_eq!(streamed(b.clone()).0, whole(&b));
        b.notes.records.clear();
        b.pauses.records.clear();
        assert_eq!(streamed(b.clone()).0, whole(&b));
        assert_eq!(
            streamed(b).0,
            r#"{"heights":[],"notes":[],"pauses":[],"walls":[]}"#
        );
    }

    #[test]
    fn routes_leave_the_archive_to_the_relay() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(claims("/replays"), Some(Route::List));
        assert_eq!(claims("/reviews"), Some(Route::Reviews));
        assert_eq!(claims(&format!("/replays/{id}")), Some(Route::Replay(id)));
        assert_eq!(
            claims(&format!("/replays/{id}/events")),
            Some(Route::Events(id))
        );
        assert_eq!(
            claims(&format!("/replays/{id}/frames")),
            Some(Route::Frames(id))
        );
        assert_eq!(
            claims(&format!("/replays/{id}/verify")),
            Some(Route::Verify(id))
        );
        assert_eq!(claims("/keys"), Some(Route::Keys));
        assert_eq!(claims("/keys/challenge"), Some(Route::KeyChallenge));
        assert_eq!(claims("/keys/ab/../x"), Some(Route::Key("ab/../x")));
        assert_eq!(claims("/replays/demo.bsors"), None);
        assert_eq!(claims("/sessions"), None);
        assert_eq!(claims("/"), None);
        for bad in [
            "/replays/../index.sqlite",
            "/replays/..%2findex.sqlite",
            "/replays/ABCDEF",
            &format!("/replays/{id}/x"),
            &format!("/replays/{id}/events/x"),
        ] {
            assert_eq!(claims(bad), Some(Route::Unknown), "{bad}");
        }
    }

    #[test]
    fn query_values_are_plain_and_single() {
        assert_eq!(
            pairs("player=76561&map=ABC123&limit=5").unwrap(),
            [("player", "76561"), ("map", "ABC123"), ("limit", "5")]
        );
        assert!(pairs("").unwrap().is_empty());
        for bad in [
            "player=1%27%20OR%201=1",
            "player='",
            "player=a&player=b",
            "player=",
            "=x",
            &format!("map={}", "a".repeat(129)),
        ] {
            assert!(pairs(bad).is_err(), "{bad}");
        }
    }
}
