//! The storage services are real and answer: PostgreSQL through `sqlx` and the S3-compatible
//! server through `object_store`, the crates the replay server uses. Skipped with a notice
//! when `scripts/services.sh` has not started them (failing under BSRS_REQUIRE_SERVICES=1).

#[path = "common/services.rs"]
mod services;

use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sqlx::postgres::PgPoolOptions;
use sqlx::Row;

/// A name no other run shares, so that runs against the same services do not collide.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

#[tokio::test]
async fn postgres_stores_and_reads_back_rows() {
    let Some(url) = services::postgres() else {
        return;
    };
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
    let table = unique("svc_check");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id TEXT PRIMARY KEY, bytes BIGINT NOT NULL, body BYTEA NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let body: Vec<u8> = (0..=255u8).collect();
    sqlx::query(&format!(
        "INSERT INTO {table} (id, bytes, body) VALUES ($1, $2, $3)"
    ))
    .bind("00ff")
    .bind(body.len() as i64)
    .bind(&body)
    .execute(&pool)
    .await
    .unwrap();
    // A second row under the same key is refused by the database itself.
    let dup = sqlx::query(&format!(
        "INSERT INTO {table} (id, bytes, body) VALUES ($1, 0, '')"
    ))
    .bind("00ff")
    .execute(&pool)
    .await;
    assert!(dup.is_err(), "the primary key held no duplicate");
    let row = sqlx::query(&format!("SELECT bytes, body FROM {table} WHERE id = $1"))
        .bind("00ff")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>("bytes"), 256);
    assert_eq!(row.get::<Vec<u8>, _>("body"), body);
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn s3_stores_lists_ranges_and_deletes_objects() {
    let Some(s3) = services::s3() else {
        return;
    };
    // reqwest is built without a TLS provider of its own (Cargo.toml): ring's, for the
    // whole process; none is used over the test server's plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_bucket_name(&s3.bucket)
        .with_region(&s3.region)
        .with_access_key_id(&s3.access_key_id)
        .with_secret_access_key(&s3.secret_access_key)
        .build()
        .unwrap();
    let prefix = Path::from(unique("svc-check"));
    let path = prefix.clone().join("replay.bsors");
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    store
        .put(&path, PutPayload::from(body.clone()))
        .await
        .unwrap_or_else(|e| panic!("S3 at {}: {e}", s3.endpoint));
    let whole = store.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(&whole[..], &body[..]);
    let part = store.get_range(&path, 1000..1010).await.unwrap();
    assert_eq!(&part[..], &body[1000..1010]);
    let listed: Vec<_> = store.list(Some(&prefix)).collect().await;
    assert_eq!(listed.len(), 1);
    let meta = listed.into_iter().next().unwrap().unwrap();
    assert_eq!(
        (meta.location, meta.size),
        (path.clone(), body.len() as u64)
    );
    store.delete(&path).await.unwrap();
    let gone = store.get(&path).await;
    assert!(
        matches!(gone, Err(object_store::Error::NotFound { .. })),
        "{gone:?}"
    );
}
