//! Key squatting refused (`proto-spec/http.md` §8.13): a key is registered only with a
//! signature by its secret key over a challenge the server issued to the registering player
//! (`POST /keys/challenge`), on 127.0.0.1 with a temporary store and its SQLite index. A
//! thief who has only the public key (every key chunk carries it) cannot bind it; weak and
//! mixed-order keys are refused; a row from before proofs (unproven) does not block the
//! key's holder; an admin's purge removes a row.

use crate::replay_http;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bsor_stream_core::integrity::{self, Signer, SigningKey};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_server::{Config, Index, ReplayServer, Store, Uploaders};
use curve25519_dalek::constants::EIGHT_TORSION;
use curve25519_dalek::edwards::CompressedEdwardsY;
use replay_http::{listen, TOKENS};
use serde_json::{json, Value};

/// The server's name in these tests (`serve --server-name`).
const NAME: &str = "proof-test";

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn public(seed: u8) -> String {
    integrity::hex(key(seed).verifying_key().as_bytes())
}

fn hex32(s: &str) -> [u8; 32] {
    integrity::from_hex(s).unwrap().try_into().unwrap()
}

async fn serve(dir: &std::path::Path, ttl: Duration) -> (Arc<ReplayServer>, SocketAddr, String) {
    let store = Store::directory(&dir.join("store")).unwrap();
    let url = format!("sqlite://{}", dir.join("index.sqlite").display());
    let index = Index::open(&url).await.unwrap();
    let config = Config {
        server_name: NAME.into(),
        challenge_ttl: ttl,
        ..Config::default()
    };
    let srv = ReplayServer::new(store, index, config, Uploaders::parse(TOKENS));
    let addr = listen(srv.clone()).await;
    (srv, addr, url)
}

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

/// A fresh challenge for the holder of `token`.
async fn challenge(addr: SocketAddr, token: &str) -> String {
    let (status, c) = request(addr, "POST", "/keys/challenge", Some(token), b"").await;
    assert_eq!(status, 201, "{c}");
    c["challenge"].as_str().unwrap().to_string()
}

/// `POST /keys` with these three fields.
async fn post_key(
    addr: SocketAddr,
    token: &str,
    key: &str,
    challenge: &str,
    signature: &str,
) -> (u16, Value) {
    let body = json!({ "key": key, "challenge": challenge, "signature": signature }).to_string();
    request(addr, "POST", "/keys", Some(token), body.as_bytes()).await
}

/// The signature of `signer` over the registration of `key` to `player` on `server`.
fn sign(signer: &SigningKey, player: &str, server: &str, challenge: &str, key: &str) -> String {
    let m = integrity::key_registration_message(player, server, &hex32(challenge), &hex32(key))
        .unwrap();
    integrity::hex(&ed25519_dalek::Signer::sign(signer, &m).to_bytes())
}

/// The honest registration of key `seed` by `player` (token `token`).
async fn register(addr: SocketAddr, token: &str, player: &str, seed: u8) -> (u16, Value) {
    let c = challenge(addr, token).await;
    let sig = sign(&key(seed), player, NAME, &c, &public(seed));
    post_key(addr, token, &public(seed), &c, &sig).await
}

/// A row as the registry kept one before proofs: inserted without its `proven` column.
async fn old_row(url: &str, key: &str, player: &str) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    sqlx::query("INSERT INTO keys (key, player, registered) VALUES ($1, $2, $3)")
        .bind(key)
        .bind(player)
        .bind(1_i64)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

/// A replay of `player` signed by key `seed`, uploaded: its ID.
async fn signed_upload(addr: SocketAddr, token: &str, player: &str, seed: u64) -> String {
    let mut r = replay_http::play(seed, 4.0, player);
    r.user_data = None;
    let signer = Signer::new(key(1), [1; 16]);
    let body = integrity::sign_replay(&r, Settings::archive(Profile::Lossless), signer).unwrap();
    let (status, v) = request(addr, "POST", "/replays", Some(token), &body).await;
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

async fn key_owner(addr: SocketAddr, id: &str) -> Value {
    let (status, v) = request(addr, "GET", &format!("/replays/{id}/verify"), None, b"").await;
    assert_eq!(status, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thief_without_the_secret_key_cannot_register_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr, _) = serve(dir.path(), Duration::from_secs(300)).await;
    // The victim is p1 with key 1 (public: every key chunk carries it); the thief is p2.
    let victim = public(1);

    // The bare key, as before proofs: refused.
    let bare = json!({ "key": victim }).to_string();
    refused(
        &request(addr, "POST", "/keys", Some("tok2"), bare.as_bytes()).await,
        400,
        "bad-json",
    );

    // A made-up challenge, and a real one with a made-up signature.
    let c = challenge(addr, "tok2").await;
    let junk = "ab".repeat(64);
    refused(
        &post_key(addr, "tok2", &victim, &"cd".repeat(32), &junk).await,
        403,
        "unknown-challenge",
    );
    refused(
        &post_key(addr, "tok2", &victim, &c, &junk).await,
        403,
        "bad-proof",
    );
    // Challenges are single use: that one went with the refusal.
    let thief_sig = sign(&key(2), "p2", NAME, &c, &victim);
    refused(
        &post_key(addr, "tok2", &victim, &c, &thief_sig).await,
        403,
        "unknown-challenge",
    );

    // Signed by the thief's own key, over the victim's key.
    let c = challenge(addr, "tok2").await;
    let thief_sig = sign(&key(2), "p2", NAME, &c, &victim);
    refused(
        &post_key(addr, "tok2", &victim, &c, &thief_sig).await,
        403,
        "bad-proof",
    );

    // The victim's own proof (for p1), replayed by the thief: the challenge is p1's.
    let c = challenge(addr, "tok1").await;
    let victim_sig = sign(&key(1), "p1", NAME, &c, &victim);
    refused(
        &post_key(addr, "tok2", &victim, &c, &victim_sig).await,
        403,
        "unknown-challenge",
    );
    // ... and the thief's attempt did not spend the victim's challenge.
    assert_eq!(
        post_key(addr, "tok1", &victim, &c, &victim_sig).await.0,
        201
    );

    // A proof made for another player or another server does not carry over.
    let (k3, c) = (public(3), challenge(addr, "tok2").await);
    let for_p1 = sign(&key(3), "p1", NAME, &c, &k3);
    refused(
        &post_key(addr, "tok2", &k3, &c, &for_p1).await,
        403,
        "bad-proof",
    );
    let c = challenge(addr, "tok2").await;
    let elsewhere = sign(&key(3), "p2", "another-server", &c, &k3);
    refused(
        &post_key(addr, "tok2", &k3, &c, &elsewhere).await,
        403,
        "bad-proof",
    );

    // A used challenge is not accepted twice, even with a right proof.
    let c = challenge(addr, "tok2").await;
    let good = sign(&key(3), "p2", NAME, &c, &k3);
    assert_eq!(post_key(addr, "tok2", &k3, &c, &good).await.0, 201);
    let k4 = public(4);
    let again = sign(&key(4), "p2", NAME, &c, &k4);
    refused(
        &post_key(addr, "tok2", &k4, &c, &again).await,
        403,
        "unknown-challenge",
    );

    // Malformed fields.
    let c = challenge(addr, "tok2").await;
    refused(
        &post_key(addr, "tok2", &k4, "xyz", &good).await,
        400,
        "bad-challenge",
    );
    refused(
        &post_key(addr, "tok2", &k4, &c, "abcd").await,
        400,
        "bad-signature",
    );

    // The victim's key is the victim's, proven; the thief's later try is refused.
    let (_, list) = request(addr, "GET", "/keys?player=p1", None, b"").await;
    assert_eq!(list["keys"][0]["key"], victim.as_str());
    assert_eq!(list["keys"][0]["proven"], true);
    let (_, list) = request(addr, "GET", "/keys?player=p2", None, b"").await;
    assert_eq!(list["keys"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenges_are_the_players_few_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr, _) = serve(dir.path(), Duration::from_millis(400)).await;

    // Who may ask: a player's token only.
    refused(
        &request(addr, "POST", "/keys/challenge", None, b"").await,
        401,
        "unauthorized",
    );
    refused(
        &request(addr, "POST", "/keys/challenge", Some("root"), b"").await,
        403,
        "wrong-player",
    );
    let (status, c) = request(addr, "POST", "/keys/challenge", Some("tok1"), b"").await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["challenge"].as_str().unwrap().len(), 64);
    assert_eq!(c["player"], "p1");
    assert_eq!(c["serverName"], NAME);
    assert!(c["expires"].as_i64().unwrap() > 0);

    // At most 8 outstanding a player; the other player is not held by them.
    for _ in 0..7 {
        challenge(addr, "tok1").await;
    }
    refused(
        &request(addr, "POST", "/keys/challenge", Some("tok1"), b"").await,
        429,
        "too-many-challenges",
    );
    challenge(addr, "tok2").await;

    // An expired challenge is refused, even with a right proof; the cap frees up.
    let first = c["challenge"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let good = sign(&key(1), "p1", NAME, &first, &public(1));
    let got = post_key(addr, "tok1", &public(1), &first, &good).await;
    assert_eq!(got.0, 403, "{}", got.1);
    assert_eq!(got.1["error"], "expired-challenge", "{}", got.1);
    let fresh = challenge(addr, "tok1").await;
    let good = sign(&key(1), "p1", NAME, &fresh, &public(1));
    assert_eq!(
        post_key(addr, "tok1", &public(1), &fresh, &good).await.0,
        201
    );
}

/// Spends p1's challenge `c` on key 9: a key refused before its challenge is looked at
/// leaves the challenge outstanding, and a player holds at most 8.
async fn spend(addr: SocketAddr, c: &str) {
    let good = sign(&key(9), "p1", NAME, c, &public(9));
    let got = post_key(addr, "tok1", &public(9), c, &good).await;
    assert!(got.0 == 201 || got.0 == 200, "{}", got.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_and_mixed_order_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr, _) = serve(dir.path(), Duration::from_secs(300)).await;
    let junk = "ab".repeat(64);
    for t in EIGHT_TORSION {
        let small = integrity::hex(t.compress().as_bytes());
        let c = challenge(addr, "tok1").await;
        let got = post_key(addr, "tok1", &small, &c, &junk).await;
        refused(&got, 400, "small-order-key");
        assert!(got.1["reason"].as_str().unwrap().contains("small order"));
        spend(addr, &c).await;
    }
    // An honest key plus a torsion point: the signatures of such a key can be made to
    // verify under some verifiers and not others.
    let honest = CompressedEdwardsY(hex32(&public(1))).decompress().unwrap();
    for t in &EIGHT_TORSION[1..] {
        let mixed = integrity::hex((honest + t).compress().as_bytes());
        let c = challenge(addr, "tok1").await;
        let got = post_key(addr, "tok1", &mixed, &c, &junk).await;
        refused(&got, 400, "mixed-order-key");
        assert!(got.1["reason"].as_str().unwrap().contains("torsion"));
        spend(addr, &c).await;
    }
    let (_, list) = request(addr, "GET", "/keys?player=p1", None, b"").await;
    assert_eq!(list["keys"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unproven_row_does_not_block_the_keys_holder() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr, url) = serve(dir.path(), Duration::from_secs(300)).await;
    // A squat from before proofs: the victim's key bound to the thief.
    old_row(&url, &public(1), "p2").await;
    let (_, list) = request(addr, "GET", "/keys?player=p2", None, b"").await;
    assert_eq!(list["keys"][0]["proven"], false);
    let id = signed_upload(addr, "tok1", "p1", 1).await;
    let v = key_owner(addr, &id).await;
    assert_eq!(v["keyOwner"], "other-player");
    assert_eq!(v["keyProven"], false);

    // The holder proves it: the key is theirs, the unproven row is gone.
    let (status, row) = register(addr, "tok1", "p1", 1).await;
    assert_eq!(status, 201, "{row}");
    assert_eq!(row["player"], "p1");
    assert_eq!(row["proven"], true);
    let v = key_owner(addr, &id).await;
    assert_eq!(v["keyOwner"], "registered");
    assert_eq!(v["keyProven"], true);
    let (_, list) = request(addr, "GET", "/keys?player=p2", None, b"").await;
    assert!(list["keys"].as_array().unwrap().is_empty());

    // A proven row is not replaced: the thief cannot prove it back.
    let (status, row) = register(addr, "tok2", "p2", 2).await;
    assert_eq!(status, 201, "{row}");
    // (Only a holder of the secret key proves it: one who shares it is still refused.)
    refused(&register(addr, "tok1", "p1", 2).await, 409, "key-taken");

    // An unproven row of the player's own is proven in place (200).
    old_row(&url, &public(5), "p1").await;
    let (status, row) = register(addr, "tok1", "p1", 5).await;
    assert_eq!(status, 200, "{row}");
    assert_eq!(row["proven"], true);
    assert_eq!(row["registered"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_purge_undoes_a_squat() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, addr, url) = serve(dir.path(), Duration::from_secs(300)).await;
    old_row(&url, &public(1), "p2").await;
    let id = signed_upload(addr, "tok1", "p1", 2).await;
    assert_eq!(key_owner(addr, &id).await["keyOwner"], "other-player");

    let path = format!("/keys/{}?purge=1", public(1));
    // Only an admin purges: not the row's player, not the key's holder.
    refused(
        &request(addr, "DELETE", &path, None, b"").await,
        401,
        "unauthorized",
    );
    for tok in ["tok1", "tok2"] {
        refused(
            &request(addr, "DELETE", &path, Some(tok), b"").await,
            403,
            "not-admin",
        );
    }
    refused(
        &request(
            addr,
            "DELETE",
            &format!("/keys/{}?purge=2", public(1)),
            Some("root"),
            b"",
        )
        .await,
        400,
        "bad-query",
    );
    let (status, gone) = request(addr, "DELETE", &path, Some("root"), b"").await;
    assert_eq!(status, 200, "{gone}");
    assert_eq!(gone["purged"], true);
    assert_eq!(gone["player"], "p2");
    let (_, list) = request(addr, "GET", "/keys?player=p2", None, b"").await;
    assert!(list["keys"].as_array().unwrap().is_empty());
    assert_eq!(key_owner(addr, &id).await["keyOwner"], "unregistered");
    refused(
        &request(addr, "DELETE", &path, Some("root"), b"").await,
        404,
        "not-found",
    );

    // A purged revoked row goes too: the holder can register the key after.
    assert_eq!(register(addr, "tok1", "p1", 1).await.0, 201);
    let revoke = format!("/keys/{}", public(1));
    assert_eq!(
        request(addr, "DELETE", &revoke, Some("tok1"), b"").await.0,
        200
    );
    refused(&register(addr, "tok1", "p1", 1).await, 409, "key-revoked");
    assert_eq!(
        request(addr, "DELETE", &path, Some("root"), b"").await.0,
        200
    );
    assert_eq!(register(addr, "tok1", "p1", 1).await.0, 201);
    assert_eq!(key_owner(addr, &id).await["keyOwner"], "registered");
}
