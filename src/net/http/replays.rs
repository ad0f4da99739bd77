//! The replay server's HTTP (`proto-spec/http.md` §7): `POST /replays`, `GET /replays`
//! (search), `GET|HEAD|DELETE /replays/ID`, `GET /replays/ID/events`,
//! `GET /replays/ID/frames`, `GET /replays/ID/verify`, `GET /reviews`, and the key
//! registry's `GET|POST /keys`, `POST /keys/challenge` and `DELETE /keys/KEY`. The archive's
//! `/replays/NAME.bsors` stays the relay's (`mod.rs`). What to do is decided by `crate::server`; this wires it to hyper.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap};
use hyper::{Method, Request, Response, StatusCode};

use super::rules::{self, Conditions, Plan};
use super::{empty, full, set, value, Body};
use crate::net::gate::ReadGate;
use crate::server::{self, plan, Filter, Grant, Record, Refusal, ReplayServer, Uploaded};

/// How long a request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);
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

/// A refusal's reply: its status and `{"error", "reason"}`.
pub fn refusal(f: &Refusal) -> Response<Body> {
    let status = StatusCode::from_u16(f.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = json(status, f.body());
    if f.status == 401 {
        set(&mut r, header::WWW_AUTHENTICATE, "Bearer");
    }
    if f.status == 413 {
        // The body was not read: the connection cannot carry another request.
        set(&mut r, header::CONNECTION, "close");
    }
    r
}

fn not_found() -> Refusal {
    Refusal::new(404, "not-found", "no such replay")
}

/// Answers a request the replay server claims.
pub(crate) async fn answer(
    srv: &Arc<ReplayServer>,
    route: Route<'_>,
    req: Request<Incoming>,
    gate: &ReadGate,
) -> Response<Body> {
    let method = req.method().clone();
    let allowed = match route {
        Route::List | Route::Keys => "GET, HEAD, POST",
        Route::Replay(_) => "GET, HEAD, DELETE",
        Route::Key(_) => "DELETE",
        Route::KeyChallenge => "POST",
        _ => "GET, HEAD",
    };
    let ok_method = match route {
        Route::Key(_) => method == Method::DELETE,
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
            405,
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
        (Route::List, Method::POST) => upload(srv, req, gate).await,
        (Route::List, _) => search(srv, &query).await,
        (Route::Replay(id), Method::DELETE) => delete(srv, id, req.headers()).await,
        (Route::Replay(id), _) => download(srv, id, &query, req.headers(), head).await,
        (Route::Events(id), _) => events(srv, id).await,
        (Route::Frames(id), _) => frames(srv, id, &query).await,
        (Route::Verify(id), _) => verify(srv, id).await,
        (Route::Reviews, _) => reviews(srv, req.headers()).await,
        (Route::Keys, Method::POST) => register_key(srv, req, gate).await,
        (Route::Keys, _) => list_keys(srv, &query).await,
        (Route::KeyChallenge, _) => key_challenge(srv, req, gate).await,
        (Route::Key(key), _) => revoke_key(srv, key, &query, req.headers()).await,
        (Route::Unknown, _) => Err(Refusal::new(404, "not-found", "no such resource")),
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
            401,
            "unauthorized",
            "an Authorization: Bearer TOKEN header is needed",
        ));
    };
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim)
        .unwrap_or("");
    srv.grant(token)
        .ok_or_else(|| Refusal::new(401, "unauthorized", "the token grants nothing here"))
}

/// The player a player's token grants; an admin token is refused (`wrong-player`): an admin
/// `what` ("does not upload").
fn player_of(srv: &ReplayServer, headers: &HeaderMap, what: &str) -> Result<String, Refusal> {
    match authorize(srv, headers)? {
        Grant::Player(p) => Ok(p),
        Grant::Admin => Err(Refusal::new(
            403,
            "wrong-player",
            format!("an admin token {what}; use the player's token"),
        )),
    }
}

async fn upload(
    srv: &Arc<ReplayServer>,
    req: Request<Incoming>,
    gate: &ReadGate,
) -> Result<Response<Body>, Refusal> {
    let player = player_of(srv, req.headers(), "does not upload")?;
    let gzip = match value(req.headers(), header::CONTENT_ENCODING).map(str::trim) {
        None | Some("identity") => false,
        Some(e) if e.eq_ignore_ascii_case("gzip") => true,
        Some(e) => {
            return Err(Refusal::new(
                415,
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
            Refusal::new(400, "bad-witness", "Bsor-Witness: not base64 (not ASCII)")
        })?)?),
        (Some(_), Some(_)) => {
            return Err(Refusal::new(
                400,
                "bad-witness",
                "Bsor-Witness: given more than once",
            ))
        }
    };
    // The budget is held until the upload is answered; the bytes go to the parser.
    let mut held = read_body(srv, req, srv.config.max_body, gate).await?;
    let bytes = std::mem::take(&mut held.bytes);
    // A gzip body may inflate to the inflated limit: one is inflated and parsed at a time.
    let _inflating = if gzip || plan::looks_gzipped(&bytes) {
        Some(
            srv.inflating
                .acquire()
                .await
                .map_err(|e| Refusal::new(500, "internal", e.to_string()))?,
        )
    } else {
        None
    };
    let s = srv.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let mut p = server::prepare(&bytes, gzip, &s.config, &player)?;
        if let Some(file) = &witness {
            p.witness(file, &s.config.trusted_witnesses);
        }
        Ok::<_, Refusal>(p)
    })
    .await
    .map_err(|e| Refusal::new(500, "internal", e.to_string()))??;
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

/// A request body, and its share of the server's body budget (given back on drop).
struct Held<'a> {
    bytes: Vec<u8>,
    budget: &'a tokio::sync::Semaphore,
    kib: u32,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.add_permits(self.kib as usize);
    }
}

/// Reads a request body of at most `limit` bytes: refused `413` by its `Content-Length`
/// before a byte is read, or as soon as more arrives; `408` when it takes longer than
/// [`BODY_TIMEOUT`]. Each KiB read takes a KiB of the server's body budget first, so that
/// bodies buffered at once stay within `max_body` however many connections send them (a
/// sender waits, unread, while the budget is spent).
async fn read_body<'a>(
    srv: &'a ReplayServer,
    req: Request<Incoming>,
    limit: u64,
    gate: &ReadGate,
) -> Result<Held<'a>, Refusal> {
    let too_large = || Refusal::new(413, "too-large", format!("the body is over {limit} bytes"));
    if let Some(len) = value(req.headers(), header::CONTENT_LENGTH) {
        match len.trim().parse::<u64>() {
            Ok(n) if n > limit => return Err(too_large()),
            Ok(_) => {}
            Err(_) => return Err(Refusal::new(400, "bad-request", "Content-Length")),
        }
    }
    // The body may now come through the connection's read gate.
    gate.taken(u32::try_from(limit).unwrap_or(u32::MAX));
    let mut body = req.into_body();
    let mut held = Held {
        bytes: Vec::new(),
        budget: &srv.bodies,
        kib: 0,
    };
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Refusal::new(400, "bad-request", format!("the body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                let total = held.bytes.len() as u64 + data.len() as u64;
                if total > limit {
                    return Err(too_large());
                }
                let need = u32::try_from(total.div_ceil(1024)).unwrap_or(u32::MAX);
                if need > held.kib {
                    srv.bodies
                        .acquire_many(need - held.kib)
                        .await
                        .map_err(|e| Refusal::new(500, "internal", e.to_string()))?
                        .forget();
                    held.kib = need;
                }
                held.bytes.extend_from_slice(&data);
                // The gate counts a chunked body's framing, the limit does not: the rest
                // of the body (and one byte past it, to be refused) may still come, so that
                // a body over the limit gets its 413 rather than a stall.
                gate.allow(limit - total + 1);
            }
        }
        Ok(())
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| Refusal::new(408, "timeout", "the body took too long"))??;
    Ok(held)
}

async fn verify(srv: &Arc<ReplayServer>, id: &str) -> Result<Response<Body>, Refusal> {
    let r = record(srv, id).await?;
    let (report, owner) = srv.verify(&r).await?;
    Ok(json(
        StatusCode::OK,
        server::keys::verify_json(&report, &r, &owner).to_string(),
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
    read_body(srv, req, MAX_KEY_BODY, gate).await?;
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
    let body = read_body(srv, req, MAX_KEY_BODY, gate).await?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        key: String,
        challenge: String,
        signature: String,
    }
    let asked: Asked = serde_json::from_slice(&body.bytes).map_err(|e| {
        Refusal::new(
            400,
            "bad-json",
            format!(
                "the body is not {{\"key\": HEX, \"challenge\": HEX, \"signature\": HEX}}: {e}"
            ),
        )
    })?;
    let proof = server::keys::Proof::parse(&asked.key, &asked.challenge, &asked.signature)?;
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
                    400,
                    "bad-query",
                    format!("unknown parameter {other:?}"),
                ))
            }
        }
    }
    let player = player.ok_or_else(|| Refusal::new(400, "bad-query", "player=ID is needed"))?;
    let keys = srv.index.keys(player, server::keys::MAX_KEYS).await?;
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
            ("purge", _) => return Err(Refusal::new(400, "bad-query", "purge=1 or nothing")),
            (other, _) => {
                return Err(Refusal::new(
                    400,
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
            400,
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
                400,
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
                    400,
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
        return export(srv, &r, &etag, conditions.if_none_match, head).await;
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
                416,
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
    } else if fmt == Format::Bsors {
        full(srv.stream_range(&r, first, first + count - 1).await?)
    } else {
        // The BSOR, or the part asked for, rebuilt as it goes out from the keyframe groups
        // that cover it (http.md §8.6).
        let dl = srv
            .bsor_download(
                &r,
                (status == StatusCode::PARTIAL_CONTENT).then_some((first, first + count - 1)),
            )
            .await?;
        pieces(dl)
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
        let dl = srv.bsor_download(r, None).await?;
        Response::new(json_pieces(dl))
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

/// A body of `dl`'s pieces turned into JSON as they come (`bsor::JsonWriter` over the
/// rebuilt BSOR's events): a task of its own makes them, one at a time ahead of the peer,
/// and stops when the peer goes. A stored stream found damaged ends the body with an
/// error, which closes the connection before the JSON is whole.
fn json_pieces(mut dl: server::BsorDownload) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
    tokio::spawn(async move {
        let mut parser = crate::bsor::PushParser::new();
        let mut writer = crate::bsor::JsonWriter::new();
        loop {
            let piece = dl.next_piece().await;
            let mut out = Vec::new();
            let made = match piece {
                Some(Ok(bytes)) => {
                    parser.push(&bytes);
                    Ok(false)
                }
                Some(Err(f)) => Err(f.reason),
                None => {
                    parser.finish();
                    Ok(true)
                }
            }
            .and_then(|last| {
                while let Some(e) = parser.next_event().map_err(|e| e.to_string())? {
                    writer.event(e, &mut out)?;
                }
                if last && !writer.is_done() {
                    return Err("the rebuilt BSOR ended early".into());
                }
                Ok(last)
            });
            let (frame, stop) = match made {
                Ok(last) => (Ok(Frame::data(Bytes::from(out))), last),
                Err(why) => {
                    tracing::warn!(reason = %why, "a JSON export stopped short");
                    (Err(std::io::Error::other(why)), true)
                }
            };
            if tx.send(frame).await.is_err() || stop {
                break;
            }
        }
    });
    receiver_body(rx)
}

fn receiver_body(rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>) -> Body {
    let pieces = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    BodyExt::boxed(StreamBody::new(pieces))
}

/// A body of `dl`'s pieces as they are rebuilt. The status line is out before the frames
/// are read: a stored stream found damaged then ends the body with an error, which closes
/// the connection short of `Content-Length`. The pieces are made by a task of their own
/// and handed over one at a time (the reply's body must be Sync, a store read's future is
/// not); the task stops when the peer goes.
fn pieces(mut dl: server::BsorDownload) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
    tokio::spawn(async move {
        while let Some(piece) = dl.next_piece().await {
            let piece = piece.map(Frame::data).map_err(|f| {
                tracing::warn!(reason = %f.reason, "a BSOR download stopped short");
                std::io::Error::other(f.reason)
            });
            let stop = piece.is_err();
            if tx.send(piece).await.is_err() || stop {
                break;
            }
        }
    });
    receiver_body(rx)
}

async fn events(srv: &Arc<ReplayServer>, id: &str) -> Result<Response<Body>, Refusal> {
    let r = record(srv, id).await?;
    let batch = srv.events(&r).await?;
    let v = serde_json::json!({
        "notes": batch.notes.records,
        "walls": batch.walls.records,
        "heights": batch.heights.records,
        "pauses": batch.pauses.records,
    });
    let mut resp = json(StatusCode::OK, v.to_string());
    set(&mut resp, header::ETAG, &format!("\"{id}-events\""));
    Ok(resp)
}

async fn frames(srv: &Arc<ReplayServer>, id: &str, query: &str) -> Result<Response<Body>, Refusal> {
    let mut from = 0.0f32;
    let mut to = f32::MAX;
    for (k, v) in pairs(query)? {
        let t: f32 = v
            .parse()
            .ok()
            .filter(|t: &f32| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                Refusal::new(
                    400,
                    "bad-query",
                    format!("{k}={v:?}: song seconds, 0 or more"),
                )
            })?;
        match k {
            "from" => from = t,
            "to" => to = t,
            other => {
                return Err(Refusal::new(
                    400,
                    "bad-query",
                    format!("unknown parameter {other:?}"),
                ))
            }
        }
    }
    if from > to {
        return Err(Refusal::new(400, "bad-query", "from is after to"));
    }
    let r = record(srv, id).await?;
    let bytes = srv.frames(&r, from, to).await?;
    let len = bytes.len();
    let mut resp = Response::new(full(Bytes::from(bytes)));
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
                403,
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
            403,
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
    let bad = |k: &str, why: &str| Refusal::new(400, "bad-query", format!("{k}: {why}"));
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
                400,
                "bad-query",
                "a query value is 1 to 128 of A-Z a-z 0-9 . _ -",
            ));
        }
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(Refusal::new(
                400,
                "bad-query",
                format!("{k} is given twice"),
            ));
        }
        out.push((k, v));
    }
    if out.len() > 16 {
        return Err(Refusal::new(400, "bad-query", "too many parameters"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
