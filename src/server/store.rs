//! Where the replay server keeps blobs: an [`object_store`] (a local directory by default),
//! behind a few methods that count what they read (requests and bytes), so that tests and
//! the bench can show what a request touched.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

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

/// Bytes and requests read from a store so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// Read requests (a whole blob or one range each).
    pub requests: u64,
    /// Bytes read.
    pub bytes: u64,
}

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
}

impl Store {
    /// A store in the directory `dir` (created if missing).
    pub fn directory(dir: &Path) -> Result<Store, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let fs =
            LocalFileSystem::new_with_prefix(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Store::new(Arc::new(fs), dir.display().to_string()))
    }

    /// A store over any object store; `location` names it in messages.
    pub fn new(inner: Arc<dyn ObjectStore>, location: String) -> Store {
        Store {
            inner,
            location,
            requests: Arc::default(),
            bytes: Arc::default(),
            log: None,
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
