//! Where the replay server keeps blobs: an [`object_store`] (a local directory by default),
//! behind a few methods that count what they read (requests and bytes), so that tests and
//! the bench can show what a request touched.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as S3Key};
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt, PutPayload};

/// A store failure: what was being done, to which blob, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what} {key}: {source}")]
pub struct StoreError {
    what: &'static str,
    key: String,
    #[source]
    source: object_store::Error,
}

impl StoreError {
    /// The blob is not there.
    pub fn is_missing(&self) -> bool {
        matches!(self.source, object_store::Error::NotFound { .. })
    }
}

/// Why a store could not be opened: its location and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A directory store's folder could not be made or used.
    #[error("{}: {source}", path.display())]
    Directory {
        /// The folder.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory store's folder, refused by the object store.
    #[error("{}: {source}", path.display())]
    Local {
        /// The folder.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: object_store::Error,
    },
    /// The location is not `s3://BUCKET[/PREFIX]`.
    #[error("{0}: not an s3:// location")]
    NotS3(String),
    /// The bucket's name is not one S3 allows.
    #[error("{0}: the bucket name must be 3 to 63 lowercase letters, digits, dots or dashes")]
    BucketName(String),
    /// The prefix is not a valid object key.
    #[error("{url}: the prefix: {source}")]
    Prefix {
        /// The location.
        url: String,
        /// Why.
        #[source]
        source: object_store::path::Error,
    },
    /// The S3 client could not be built from the settings.
    #[error("{url}: {source}")]
    S3 {
        /// The location.
        url: String,
        /// Why.
        #[source]
        source: object_store::Error,
    },
}

/// Bytes and requests read from a store so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// Read requests (a whole blob or one range each).
    pub requests: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// Range requests of one [`Store::get_ranges`] in flight at once on an object store.
pub const RANGES_IN_FLIGHT: usize = 8;

/// The ranges a logging store read: blob key and bytes.
type RangeLog = Arc<std::sync::Mutex<Vec<(String, Range<u64>)>>>;

/// The blobs of a replay server.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    location: String,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    log: Option<RangeLog>,
    /// A directory store's folder (for the files a write cut short leaves).
    dir: Option<std::path::PathBuf>,
}

impl Store {
    /// A store in the directory `dir` (created if missing).
    pub fn directory(dir: &Path) -> Result<Store, OpenError> {
        std::fs::create_dir_all(dir).map_err(|source| OpenError::Directory {
            path: dir.to_path_buf(),
            source,
        })?;
        // Durable before acknowledged (http.md §8.3): each blob and its folder are synced
        // before the write returns, so the index row committed after it never names a
        // file a power cut could lose.
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|source| OpenError::Local {
                path: dir.to_path_buf(),
                source,
            })?
            .with_fsync(true);
        Ok(Store {
            dir: Some(dir.to_path_buf()),
            ..Store::new(Arc::new(fs), dir.display().to_string())
        })
    }

    /// A store in an S3-compatible bucket, `s3://BUCKET` or `s3://BUCKET/PREFIX`, with the
    /// credentials, region and endpoint from the usual `AWS_*` environment variables
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT` and
    /// `AWS_ALLOW_HTTP` for a server of one's own). A request times out after 30 s (5 s to
    /// connect) and is retried at most 3 times within 15 s, so that an unreachable store
    /// fails an upload with an error the client can retry instead of holding it minutes.
    pub fn s3(url: &str) -> Result<Store, OpenError> {
        Store::s3_from(url, AmazonS3Builder::from_env())
    }

    /// A store in the bucket `url` names (as [`Store::s3`]) with the settings of `builder`
    /// instead of the environment's (the bucket, timeouts and retries are set here).
    pub fn s3_from(url: &str, builder: AmazonS3Builder) -> Result<Store, OpenError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| OpenError::NotS3(url.to_string()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/');
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(OpenError::BucketName(url.to_string()));
        }
        let prefix = Key::parse(prefix).map_err(|source| OpenError::Prefix {
            url: url.to_string(),
            source,
        })?;
        // reqwest is built with rustls and no provider of its own (Cargo.toml): ring's, for
        // the whole process, unless the embedding program installed one first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let s3 = builder
            .with_bucket_name(bucket)
            .with_config(S3Key::Client(ClientConfigKey::Timeout), "30s")
            .with_config(S3Key::Client(ClientConfigKey::ConnectTimeout), "5s")
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: std::time::Duration::from_secs(15),
                ..Default::default()
            })
            .build()
            .map_err(|source| OpenError::S3 {
                url: url.to_string(),
                source,
            })?;
        let inner: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
        };
        Ok(Store::new(inner, url.to_string()))
    }

    /// A store over any object store; `location` names it in messages.
    pub fn new(inner: Arc<dyn ObjectStore>, location: String) -> Store {
        Store {
            inner,
            location,
            requests: Arc::default(),
            bytes: Arc::default(),
            log: None,
            dir: None,
        }
    }

    /// The same store, also noting every range read (key and bytes) for [`Store::ranges`].
    pub fn logging(mut self) -> Store {
        self.log = Some(Arc::default());
        self
    }

    /// Where the store is.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// What was read so far.
    pub fn reads(&self) -> Reads {
        Reads {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// The ranges read so far (a logging store only; others give none).
    pub fn ranges(&self) -> Vec<(String, Range<u64>)> {
        self.log.as_ref().map_or_else(Vec::new, |l| {
            l.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }

    fn note(&self, key: &str, range: Range<u64>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(range.end.saturating_sub(range.start), Ordering::Relaxed);
        if let Some(l) = &self.log {
            l.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((key.to_string(), range));
        }
    }

    /// Writes a whole blob.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        self.inner
            .put(&Key::from(key), PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|source| StoreError {
                what: "writing",
                key: key.to_string(),
                source,
            })
    }

    /// Reads a whole blob.
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let err = |source| StoreError {
            what: "reading",
            key: key.to_string(),
            source,
        };
        let got = self.inner.get(&Key::from(key)).await.map_err(err)?;
        let bytes = got.bytes().await.map_err(err)?;
        self.note(key, 0..bytes.len() as u64);
        Ok(bytes)
    }

    /// Reads bytes `range` of a blob.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let bytes = self
            .inner
            .get_range(&Key::from(key), range.clone())
            .await
            .map_err(|source| StoreError {
                what: "reading",
                key: key.to_string(),
                source,
            })?;
        self.note(key, range);
        Ok(bytes)
    }

    /// Ranges of one blob, in the order given, and no byte outside them. A directory
    /// store reads them from one open file in one blocking task; another store gets one
    /// request per range, [`RANGES_IN_FLIGHT`] at a time (its own `get_ranges` would merge
    /// ranges less than 1 MiB apart, reading the bytes between them).
    pub async fn get_ranges(
        &self,
        key: &str,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>, StoreError> {
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        let error = |source| StoreError {
            what: "reading",
            key: key.to_string(),
            source,
        };
        let got = if self.dir.is_some() {
            self.inner
                .get_ranges(&Key::from(key), ranges)
                .await
                .map_err(error)?
        } else {
            use futures_util::{StreamExt as _, TryStreamExt as _};
            let location = Key::from(key);
            futures_util::stream::iter(ranges.iter().cloned())
                .map(|r| self.inner.get_range(&location, r))
                .buffered(RANGES_IN_FLIGHT)
                .try_collect()
                .await
                .map_err(error)?
        };
        for r in ranges {
            self.note(key, r.clone());
        }
        Ok(got)
    }

    /// Removes a blob; one already gone is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.inner.delete(&Key::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(StoreError {
                what: "removing",
                key: key.to_string(),
                source,
            }),
        }
    }

    /// Removes what a write of `key` cut short may have left in a directory store: the
    /// local store writes a blob to `KEY#N` (N from 1, the first name not taken) and then
    /// renames it, so a process killed in between leaves that file, which is no blob and
    /// which nothing else removes. Blob keys are unique per attempt (`http.md` §8.3), so
    /// the first few names are all there can be. Other stores write a blob whole or not at
    /// all: nothing to do.
    pub fn remove_staged(&self, key: &str) -> Result<(), StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        for n in 1..=4 {
            let path = dir.join(format!("{key}#{n}"));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(StoreError {
                        what: "removing the staged write of",
                        key: key.to_string(),
                        source: object_store::Error::Generic {
                            store: "local",
                            source: Box::new(e),
                        },
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether a blob is there (for tests and the sweeper's checks).
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self.inner.head(&Key::from(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(StoreError {
                what: "looking up",
                key: key.to_string(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        Store::s3_from(url, AmazonS3Builder::new().with_region("us-east-1"))
            .err()
            .unwrap_or_else(|| panic!("{url} was accepted"))
            .to_string()
    }

    #[test]
    fn s3_locations_name_a_valid_bucket_and_prefix() {
        let ok = Store::s3_from(
            "s3://replays-1.example/eu/2026",
            AmazonS3Builder::new().with_region("us-east-1"),
        )
        .unwrap();
        assert_eq!(ok.location(), "s3://replays-1.example/eu/2026");
        assert!(refused("s3://").contains("bucket name"));
        assert!(refused("s3://ab").contains("bucket name"));
        assert!(refused("s3://Replays").contains("bucket name"));
        assert!(refused("s3://re_plays/x").contains("bucket name"));
        assert!(refused("s3://replays/a/../b").contains("the prefix"));
        assert!(refused("/var/replays").contains("not an s3:// location"));
    }

    #[tokio::test]
    async fn an_s3_store_needs_a_named_index() {
        let opened = crate::ReplayServer::open(
            "s3://replays",
            None,
            crate::Config::default(),
            crate::Uploaders::parse(""),
        )
        .await;
        let Err(e) = opened else {
            panic!("opened without an index");
        };
        assert!(matches!(e, crate::StartError::IndexNeeded(_)), "{e}");
        assert!(e.to_string().contains("--index"), "{e}");
    }
}
