//! The key registry (`proto-spec/http.md` §8.13–8.14) on 127.0.0.1, with a temporary store
//! and its embedded SQLite index: every status of `POST /keys`, `GET /keys` and
//! `DELETE /keys/KEY`, and every `keyOwner` an upload and `GET /replays/ID/verify` report.

use crate::replay_http;
use crate::services_env as services;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::integrity::{self, Signer, SigningChunks, SigningKey};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_core::transcode;
use bsor_stream_server::{Config, Index, Registered, ReplayServer, Store, Uploaders};
use replay_http::{listen, TOKENS};
use serde_json::{json, Value};

/// A play of `player` (8 s), without user data so that a signature entry can be added
/// (integrity.md §13.3).
fn play(seed: u64, player: &str) -> Replay {
    let mut r = replay_http::play(seed, 8.0, player);
    r.user_data = None;
    r
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn public(seed: u8) -> String {
    integrity::hex(key(seed).verifying_key().as_bytes())
}

/// `replay` signed by key `seed`, as a `.bsors` stream.
fn signed(replay: &Replay, seed: u8) -> Vec<u8> {
    let signer = Signer::new(key(seed), [seed; 16]);
    integrity::sign_replay(replay, Settings::archive(Profile::Lossless), signer).unwrap()
}

/// `replay` signed by key `seed`, as a BSOR carrying the signature entry.
fn signed_bsor(replay: &Replay, seed: u8) -> Vec<u8> {
    let stream = signed(replay, seed);
    let chunks = SigningChunks::from_stream(&stream).unwrap();
    let (mut r, _) = transcode::decode_replay(&stream).unwrap();
    integrity::add_entry(&mut r, &chunks).unwrap();
    bsor::to_vec(&r).unwrap()
}

async fn serve(dir: &std::path::Path) -> (Arc<ReplayServer>, SocketAddr) {
    let store = Store::directory(&dir.join("store")).unwrap();
    let url = format!("sqlite://{}", dir.join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    let srv = ReplayServer::new(store, index, Config::default(), Uploaders::parse(TOKENS));
    let addr = listen(srv.clone()).await;
    (srv, addr)
}

/// One request on its own connection: the status and the body (JSON when it is JSON).
async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let r = replay_http::request(addr, method, target, &headers, body).await;
    let body = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, body)
}

fn refused(got: &(u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"], code, "{}", got.1);
    assert!(!got.1["reason"].as_str().unwrap().is_empty());
}

/// Registers `key` with its proof (http.md §8.13) when it is one of the test keys, the
/// token's challenge signed for its player on the default server name; another text is
/// sent with a challenge and a signature that do not matter (it is refused first).
async fn register(addr: SocketAddr, token: &str, key: &str) -> (u16, Value) {
    let player = match token {
        "tok1" => "p1",
        "tok2" => "p2",
        _ => "admin",
    };
    let (_, c) = request(addr, "POST", "/keys/challenge", Some(token), b"").await;
    let challenge = c
        .get("challenge")
        .and_then(Value::as_str)
        .map_or_else(|| "00".repeat(32), str::to_string);
    let secret = (0..=255u8).find(|s| public(*s).eq_ignore_ascii_case(key));
    let signature = match secret {
        Some(s) => {
            let ch: [u8; 32] = integrity::from_hex(&challenge).unwrap().try_into().unwrap();
            integrity::hex(
                &integrity::sign_key_registration(&key_of(s), player, "localhost", &ch).unwrap(),
            )
        }
        None => "00".repeat(64),
    };
    let body = json!({ "key": key, "challenge": challenge, "signature": signature }).to_string();
    request(addr, "POST", "/keys", Some(token), body.as_bytes()).await
}

fn key_of(seed: u8) -> SigningKey {
    key(seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_registered_listed_and_revoked_by_their_player() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr) = serve(dir.path()).await;
    let (k1, k2) = (public(1), public(2));

    // Who may register.
    let body = json!({ "key": k1 }).to_string();
    refused(
        &request(addr, "POST", "/keys", None, body.as_bytes()).await,
        401,
        "unauthorized",
    );
    refused(&register(addr, "nope", &k1).await, 401, "unauthorized");
    refused(&register(addr, "root", &k1).await, 403, "wrong-player");

    // What a key is.
    refused(
        &register(addr, "tok1", &"zz".repeat(32)).await,
        400,
        "bad-key",
    );
    refused(&register(addr, "tok1", &k1[..62]).await, 400, "bad-key");
    refused(
        &register(addr, "tok1", &format!("{k1}00")).await,
        400,
        "bad-key",
    );
    let not_a_point = format!("02{}", "00".repeat(31));
    refused(&register(addr, "tok1", &not_a_point).await, 400, "bad-key");
    for body in [
        &b"not json"[..],
        b"{\"key\": \"ab\"}",
        b"{\"key\": 5}",
        b"{\"key\": \"ab\", \"x\": 1}",
        b"",
    ] {
        refused(
            &request(addr, "POST", "/keys", Some("tok1"), body).await,
            400,
            "bad-json",
        );
    }
    let big = json!({ "key": "a".repeat(2000) }).to_string();
    refused(
        &request(addr, "POST", "/keys", Some("tok1"), big.as_bytes()).await,
        413,
        "too-large",
    );

    // Registered once, again idempotently, and not by another player.
    let (status, row) = register(addr, "tok1", &k1.to_uppercase()).await;
    assert_eq!(status, 201, "{row}");
    assert_eq!(row["key"], k1.as_str());
    assert_eq!(row["player"], "p1");
    assert!(row["revoked"].is_null());
    let (status, again) = register(addr, "tok1", &k1).await;
    assert_eq!(status, 200);
    assert_eq!(again, row);
    refused(&register(addr, "tok2", &k1).await, 409, "key-taken");
    assert_eq!(register(addr, "tok1", &k2).await.0, 201);

    // Listed by player, oldest first; a query that is not an ID is refused.
    let (status, list) = request(addr, "GET", "/keys?player=p1", None, b"").await;
    assert_eq!(status, 200);
    let keys = list["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], row);
    let (_, none) = request(addr, "GET", "/keys?player=p2", None, b"").await;
    assert!(none["keys"].as_array().unwrap().is_empty());
    refused(
        &request(addr, "GET", "/keys", None, b"").await,
        400,
        "bad-query",
    );
    for q in ["player=..%2f..%2fx", "player=1'%20OR%20'1'='1", "who=p1"] {
        let r = request(addr, "GET", &format!("/keys?{q}"), None, b"").await;
        refused(&r, 400, "bad-query");
    }

    // Revoked by its player or an admin, never by another player; revoking again keeps
    // the first time.
    let path = format!("/keys/{k1}");
    refused(
        &request(addr, "DELETE", &path, None, b"").await,
        401,
        "unauthorized",
    );
    refused(
        &request(addr, "DELETE", &path, Some("tok2"), b"").await,
        403,
        "not-owner",
    );
    refused(
        &request(
            addr,
            "DELETE",
            &format!("/keys/{}", public(9)),
            Some("tok1"),
            b"",
        )
        .await,
        404,
        "not-found",
    );
    refused(
        &request(
            addr,
            "DELETE",
            "/keys/..%2f..%2findex.sqlite",
            Some("root"),
            b"",
        )
        .await,
        400,
        "bad-key",
    );
    refused(
        &request(addr, "GET", &path, None, b"").await,
        405,
        "method-not-allowed",
    );
    let (status, revoked) = request(addr, "DELETE", &path, Some("tok1"), b"").await;
    assert_eq!(status, 200, "{revoked}");
    let when = revoked["revoked"].as_i64().unwrap();
    assert!(when >= row["registered"].as_i64().unwrap());
    let (status, twice) = request(addr, "DELETE", &path, Some("root"), b"").await;
    assert_eq!(status, 200);
    assert_eq!(twice["revoked"], when);
    let (status, by_admin) =
        request(addr, "DELETE", &format!("/keys/{k2}"), Some("root"), b"").await;
    assert_eq!(status, 200);
    assert!(by_admin["revoked"].is_i64());

    // A revoked key stays listed, and is not registered again.
    let (_, list) = request(addr, "GET", "/keys?player=p1", None, b"").await;
    assert_eq!(list["keys"][0]["revoked"], when);
    refused(&register(addr, "tok1", &k1).await, 409, "key-revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_holds_a_bounded_number_of_keys() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    let new = |r: Registered| matches!(r, Registered::New(_));
    assert!(new(index
        .register_key(&public(1), "p", 1, 2)
        .await
        .unwrap()));
    assert!(new(index
        .register_key(&public(2), "p", 2, 2)
        .await
        .unwrap()));
    assert_eq!(
        index.register_key(&public(3), "p", 3, 2).await.unwrap(),
        Registered::TooMany
    );
    // A key already there is reported as it is, even at the cap.
    let again = index.register_key(&public(1), "p", 4, 2).await.unwrap();
    assert!(matches!(again, Registered::Existing(r) if r.registered == 1));
    assert!(new(index
        .register_key(&public(3), "q", 5, 2)
        .await
        .unwrap()));
    index.close().await;
}

/// The registry's queries on PostgreSQL (`scripts/services.sh`), with names no other run
/// shares: the same statements as on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_runs_on_postgresql_too() {
    let Some(url) = services::postgres() else {
        return;
    };
    let index = Index::open(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let player = format!("pg-{}-{nanos}", std::process::id());
    let other = format!("{player}-b");
    // Keys of this run: derived from its player name.
    let k = |i: u8| {
        let seed = blake3::hash(format!("{player}/{i}").as_bytes());
        integrity::hex(
            SigningKey::from_bytes(seed.as_bytes())
                .verifying_key()
                .as_bytes(),
        )
    };
    let new = |r: Registered| matches!(r, Registered::New(_));
    assert!(new(index
        .register_key(&k(1), &player, 10, 2)
        .await
        .unwrap()));
    assert!(new(index
        .register_key(&k(2), &player, 20, 2)
        .await
        .unwrap()));
    assert_eq!(
        index.register_key(&k(3), &player, 30, 2).await.unwrap(),
        Registered::TooMany
    );
    let taken = index.register_key(&k(1), &other, 40, 2).await.unwrap();
    assert!(matches!(taken, Registered::Existing(r) if r.player == player));
    let revoked = index.revoke_key(&k(1), 50).await.unwrap().unwrap();
    assert_eq!(revoked.revoked, Some(50));
    assert_eq!(
        index.revoke_key(&k(1), 60).await.unwrap().unwrap().revoked,
        Some(50)
    );
    assert_eq!(index.revoke_key(&k(9), 60).await.unwrap(), None);
    let list = index.keys(&player, 100).await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!((list[0].registered, list[0].revoked), (10, Some(50)));
    assert_eq!((list[1].registered, list[1].revoked), (20, None));
    index.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_and_verify_say_whose_key_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr) = serve(dir.path()).await;
    let upload = |body: Vec<u8>, token: &'static str| async move {
        let r = request(addr, "POST", "/replays", Some(token), &body).await;
        assert!(r.0 == 201 || r.0 == 200, "{}", r.1);
        r
    };
    let verify = |id: String| async move {
        let r = request(addr, "GET", &format!("/replays/{id}/verify"), None, b"").await;
        assert_eq!(r.0, 200, "{}", r.1);
        r.1
    };
    let id = |v: &Value| v["id"].as_str().unwrap().to_string();

    // Unsigned.
    let (status, plain) = upload(bsor::to_vec(&play(1, "p1")).unwrap(), "tok1").await;
    assert_eq!(status, 201);
    assert_eq!(plain["keyOwner"], "unsigned");
    let v = verify(id(&plain)).await;
    assert_eq!(v["keyOwner"], "unsigned");
    assert_eq!(v["verdict"], "unsigned");
    assert_eq!(v["fingerprint"], plain["fingerprint"]);

    // Signed by key 1, which no one registered yet.
    let (_, s1) = upload(signed(&play(2, "p1"), 1), "tok1").await;
    assert_eq!(s1["keyOwner"], "unregistered");
    assert!(s1["keyRevoked"].is_null());
    let v = verify(id(&s1)).await;
    assert_eq!(v["keyOwner"], "unregistered");
    assert_eq!(v["verdict"], "valid");
    assert_eq!(v["signerKey"], public(1).as_str());
    assert_eq!(v["playerId"], "p1");
    assert_eq!(v["player"], "p1");

    // Registered to p1 now: the same replay is p1's key's.
    assert_eq!(register(addr, "tok1", &public(1)).await.0, 201);
    assert_eq!(verify(id(&s1)).await["keyOwner"], "registered");
    // Uploaded again (200): judged as stored, now registered.
    let (status, again) = upload(signed(&play(2, "p1"), 1), "tok1").await;
    assert_eq!(status, 200);
    assert_eq!(again["keyOwner"], "registered");

    // A signed BSOR carries its signature in its user data; judged the same way.
    let (status, sb) = upload(signed_bsor(&play(3, "p1"), 1), "tok1").await;
    assert_eq!(status, 201, "{sb}");
    assert_eq!(sb["keyOwner"], "registered");
    let v = verify(id(&sb)).await;
    assert_eq!(v["keyOwner"], "registered");
    assert_eq!(v["verdict"], "valid");

    // Key 2 is p2's: a p1 replay signed with it is another player's key.
    assert_eq!(register(addr, "tok2", &public(2)).await.0, 201);
    let (_, s2) = upload(signed(&play(4, "p1"), 2), "tok1").await;
    assert_eq!(s2["keyOwner"], "other-player");
    assert_eq!(verify(id(&s2)).await["keyOwner"], "other-player");

    // Key 1 revoked: replays uploaded before say so, one uploaded after too.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, _) = request(
        addr,
        "DELETE",
        &format!("/keys/{}", public(1)),
        Some("tok1"),
        b"",
    )
    .await;
    assert_eq!(status, 200);
    let v = verify(id(&s1)).await;
    assert_eq!(v["keyOwner"], "revoked");
    assert!(v["keyRevoked"].is_i64());
    assert_eq!(v["uploadedBeforeRevocation"], true);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, late) = upload(signed(&play(5, "p1"), 1), "tok1").await;
    assert_eq!(status, 201);
    assert_eq!(late["keyOwner"], "revoked");
    assert_eq!(late["uploadedBeforeRevocation"], false);
    assert_eq!(verify(id(&late)).await["uploadedBeforeRevocation"], false);

    // No such replay.
    let r = request(
        addr,
        "GET",
        &format!("/replays/{}/verify", "0".repeat(32)),
        None,
        b"",
    )
    .await;
    refused(&r, 404, "not-found");
}
