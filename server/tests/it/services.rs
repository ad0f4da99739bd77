//! The replay server on the real services: blobs in the S3-compatible server (`--store
//! s3://BUCKET/PREFIX`) and the index in PostgreSQL (`--index postgres://…`), as a
//! leaderboard runs it at scale. Each test has a database and a key prefix of its own.
//! Skipped with a notice when `scripts/services.sh` has not started them (failing under
//! BSRS_REQUIRE_SERVICES=1).

use crate::services_env as services;

use crate::replay_http;

use std::sync::Arc;
use std::time::Duration;

use bsor_stream_core::bsor::{self, BsorString};
use bsor_stream_core::transcode;
use bsor_stream_server::{self as server, Config, Fault, Index, ReplayServer, Store, Uploaders};
use object_store::aws::AmazonS3Builder;
use replay_http::{assert_refusal, created, listen, play, request, upload, TOKENS};
use sqlx::postgres::PgPoolOptions;

/// A name no other run shares, so that runs against the same services do not collide.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// A PostgreSQL database of the test's own, created on the services' server and dropped by
/// [`Db::drop_now`]: its URL for [`Index::open`].
struct Db {
    admin: String,
    name: String,
    url: String,
}

impl Db {
    async fn create(admin: &str) -> Db {
        let name = unique("bsrs");
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect(admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let base = admin.rsplit_once('/').unwrap().0;
        Db {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        }
    }

    async fn drop_now(self) {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.admin)
            .await
            .unwrap();
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

/// The services, or `None` (after a notice) when they are not running.
fn services() -> Option<(String, services::S3)> {
    let pg = services::postgres();
    let s3 = services::s3();
    Some((pg?, s3?))
}

/// A replay server over the S3 bucket (under a prefix of its own) and `db`, noting ranges.
async fn open(s3: &services::S3, prefix: &str, db: &Db, config: Config) -> Arc<ReplayServer> {
    let store = Store::s3(&format!("s3://{}/{prefix}", s3.bucket))
        .unwrap()
        .logging();
    let index = Index::open(&db.url).await.unwrap();
    ReplayServer::new(store, index, config, Uploaders::parse(TOKENS))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_live_in_s3_and_postgres_and_come_back_whole() {
    let Some((pg, s3)) = services() else {
        return;
    };
    let db = Db::create(&pg).await;
    let prefix = unique("replays");
    let srv = open(&s3, &prefix, &db, Config::default()).await;
    let addr = listen(srv.clone()).await;

    let replay = play(21, 60.0, "p1");
    let bytes = bsor::to_vec(&replay).unwrap();
    let r = upload(addr, "tok1", &bytes).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    let record = srv.index.get(&id).await.unwrap().expect("the row");
    assert!(srv.store.exists(&record.blob).await.unwrap());

    // Whole, by a range, and as the stored stream.
    let path = format!("/replays/{id}");
    let got = request(addr, "GET", &path, &[], b"").await;
    assert_eq!(got.status, 200);
    assert!(got.body == bytes, "the BSOR served back differs");
    let part = request(addr, "GET", &path, &[("Range", "bytes=1000-1999")], b"").await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, bytes[1000..2000]);
    let bsors = request(addr, "GET", &format!("{path}?format=bsors"), &[], b"").await;
    let (back, rec) = transcode::decode_replay(&bsors.body).unwrap();
    assert!(rec.complete);
    assert_eq!(bsor::to_vec(&back).unwrap(), bytes);

    // The events by range reads of the S3 object: a small part of it.
    let before = srv.store.reads();
    let events = request(addr, "GET", &format!("{path}/events"), &[], b"").await;
    assert_eq!(events.status, 200);
    assert_eq!(
        events.json()["notes"].as_array().unwrap().len(),
        replay.notes.len()
    );
    let read = srv.store.reads().bytes - before.bytes;
    assert!(
        read * 10 < bsors.body.len() as u64,
        "the events read {read} of {} bytes",
        bsors.body.len()
    );
    let span = request(
        addr,
        "GET",
        &format!("{path}/frames?from=10&to=20"),
        &[],
        b"",
    )
    .await;
    assert_eq!(span.status, 200);
    assert!(span.body.len() < bsors.body.len());

    // The index answers search in PostgreSQL.
    let found = request(addr, "GET", "/replays?player=p1", &[], b"").await;
    let listed = found.json()["replays"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());

    // The same play under another player: refused and kept for review.
    let mut stolen = replay.clone();
    stolen.info.player_id = BsorString::new("p2");
    let theft = upload(addr, "tok2", &bsor::to_vec(&stolen).unwrap()).await;
    assert_refusal(&theft, 409, "same-play");
    assert_eq!(srv.reviews(10).await.unwrap().len(), 1);
    // One note time moved by one float step: another fingerprint, found by the play keys
    // in PostgreSQL and scored as the same play.
    let mut edited = stolen.clone();
    edited.notes[3].event_time = f32::from_bits(edited.notes[3].event_time.to_bits() + 1);
    let theft = upload(addr, "tok2", &bsor::to_vec(&edited).unwrap()).await;
    assert_refusal(&theft, 409, "similar-play");
    assert!(theft.json()["reason"].as_str().unwrap().contains(&id));
    assert_eq!(srv.reviews(10).await.unwrap().len(), 2);
    // Its keys name the owner's replay (the query the upload made).
    let play = server::play_of(&edited);
    let found = srv
        .index
        .similar_candidates(&play.keys, server::MAX_CANDIDATES)
        .await
        .unwrap();
    assert_eq!(found.first().map(|(r, _)| r.id.as_str()), Some(id.as_str()));

    // Deleted: the row at once, the object after.
    let gone = request(
        addr,
        "DELETE",
        &path,
        &[("Authorization", "Bearer tok1")],
        b"",
    )
    .await;
    assert_eq!(gone.status, 204);
    assert_refusal(
        &request(addr, "GET", &path, &[], b"").await,
        404,
        "not-found",
    );
    assert!(!srv.store.exists(&record.blob).await.unwrap());

    srv.index.close().await;
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_leaves_nothing_in_s3_once_swept() {
    let Some((pg, s3)) = services() else {
        return;
    };
    let db = Db::create(&pg).await;
    let prefix = unique("swept");
    let bytes = bsor::to_vec(&play(22, 8.0, "p1")).unwrap();
    for fault in [Fault::BeforeBlob, Fault::AfterBlob, Fault::BeforeCommit] {
        let config = Config {
            fault: Some(fault),
            lease: Duration::ZERO,
            ..Config::default()
        };
        let srv = open(&s3, &prefix, &db, config).await;
        let prepared = server::prepare(&bytes, false, &srv.config, "p1").unwrap();
        let id = prepared.record.id.clone();
        assert_eq!(
            srv.upload(prepared).await.unwrap_err().cause,
            server::Cause::Unavailable
        );
        assert!(srv.index.get(&id).await.unwrap().is_none(), "{fault:?}");
        let leased = srv.index.expired(i64::MAX, 10).await.unwrap();
        assert_eq!(leased.len(), 1, "{fault:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(srv.sweep(100).await.unwrap(), 1, "{fault:?}");
        assert!(!srv.store.exists(&leased[0]).await.unwrap(), "{fault:?}");
        assert!(srv.index.expired(i64::MAX, 10).await.unwrap().is_empty());
        srv.index.close().await;
    }
    let srv = open(&s3, &prefix, &db, Config::default()).await;
    let r = created(&srv, &bytes, "p1").await;
    assert!(srv.store.exists(&r.blob).await.unwrap());
    assert_eq!(srv.index.blobs(10).await.unwrap(), vec![r.blob.clone()]);
    assert_eq!(srv.sweep(100).await.unwrap(), 0);
    srv.index.close().await;
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_refuses_the_upload_and_a_retry_is_kept() {
    let Some((pg, s3)) = services() else {
        return;
    };
    let db = Db::create(&pg).await;
    let prefix = unique("retry");
    // A port held without listening: the store is down (and no test beside this one can
    // start listening on it meanwhile).
    let closed = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    closed
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = closed.local_addr().unwrap().as_socket().unwrap().port();
    let down = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_region(&s3.region)
        .with_access_key_id(&s3.access_key_id)
        .with_secret_access_key(&s3.secret_access_key);
    let store = Store::s3_from(&format!("s3://{}/{prefix}", s3.bucket), down).unwrap();
    let index = Index::open(&db.url).await.unwrap();
    let config = Config {
        lease: Duration::ZERO,
        ..Config::default()
    };
    let srv = ReplayServer::new(store, index, config, Uploaders::parse(TOKENS));
    let bytes = bsor::to_vec(&play(23, 8.0, "p1")).unwrap();
    let prepared = server::prepare(&bytes, false, &srv.config, "p1").unwrap();
    let id = prepared.record.id.clone();
    let refused = tokio::time::timeout(Duration::from_secs(60), srv.upload(prepared))
        .await
        .expect("the refusal within the store's retry limit")
        .unwrap_err();
    assert_eq!(
        (refused.cause, refused.code),
        (server::Cause::Unavailable, "unavailable")
    );
    assert!(srv.index.get(&id).await.unwrap().is_none());
    srv.index.close().await;

    // The store is back (the real one): the same upload is accepted, and the first try's
    // lease is swept without touching it.
    let srv = open(&s3, &prefix, &db, Config::default()).await;
    let r = created(&srv, &bytes, "p1").await;
    assert_eq!(r.id, id);
    assert_eq!(srv.sweep(100).await.unwrap(), 1);
    assert!(srv.store.exists(&r.blob).await.unwrap());
    let back = srv.bsor(&srv.index.get(&id).await.unwrap().unwrap()).await;
    assert!(back.unwrap() == bytes, "the retried upload differs");
    srv.index.close().await;
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witnessed_original_takes_the_play_in_postgres() {
    use bsor_stream_core::integrity::witness::{append_record, Witness};
    use bsor_stream_core::integrity::{self, Signer, SigningKey};
    use bsor_stream_core::stream::{split_stream, ChunkType, Profile, Settings};
    let Some((pg, s3)) = services() else {
        return;
    };
    let db = Db::create(&pg).await;
    let prefix = unique("owner");
    let witness = Witness::new(SigningKey::from_bytes(&[0x57; 32]));
    let config = Config {
        trusted_witnesses: vec![witness.public_key()],
        ..Config::default()
    };
    let srv = open(&s3, &prefix, &db, config).await;
    let original = play(24, 12.0, "p1");
    let mut copy = original.clone();
    copy.info.player_id = BsorString::new("p2");
    let thief = created(&srv, &bsor::to_vec(&copy).unwrap(), "p2").await;
    assert_eq!(thief.existed_by, thief.uploaded);

    let signer = Signer::new(SigningKey::from_bytes(&[3; 32]), [6; 16]);
    let signed =
        integrity::sign_replay(&original, Settings::archive(Profile::Lossless), signer).unwrap();
    let t0 = server::now_ms() as u64 - 3_600_000;
    let mut file = Vec::new();
    let (_, _, spans) = split_stream(&signed).unwrap();
    for c in &spans {
        if let ChunkType::Unknown(kind) = c.header.kind {
            if let Some(s) = witness.countersign(kind, &c.bytes(&signed)[c.header_len..], t0) {
                append_record(&mut file, &s);
            }
        }
    }
    let mut prepared = server::prepare(&signed, false, &srv.config, "p1").unwrap();
    prepared.witness(&file, &srv.config.trusted_witnesses);
    let server::Uploaded::Created(r) = srv.upload(prepared).await.unwrap() else {
        panic!("not created");
    };
    assert_eq!(r.existed_by, t0 as i64);
    assert_eq!(srv.index.get(&thief.id).await.unwrap(), None);
    assert_eq!(
        srv.index.by_fingerprint(&r.fingerprint).await.unwrap(),
        Some(r.clone())
    );
    let reviews = srv.reviews(10).await.unwrap();
    assert_eq!(reviews.len(), 1);
    assert_eq!((&*reviews[0].id, &*reviews[0].owner), (&*thief.id, &*r.id));
    for b in srv.index.blobs(10).await.unwrap() {
        assert!(srv.store.exists(&b).await.unwrap(), "{b}");
    }
    // The copy again: refused, one review entry kept.
    let again = server::prepare(&bsor::to_vec(&copy).unwrap(), false, &srv.config, "p2").unwrap();
    assert_eq!(
        srv.upload(again).await.unwrap_err().cause,
        server::Cause::Conflict
    );
    assert_eq!(srv.reviews(10).await.unwrap().len(), 1);
    srv.index.close().await;
    db.drop_now().await;
}
