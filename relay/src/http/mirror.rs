//! A map mirror (`serve --maps DIR --map-url TEMPLATE`): a map not in the maps folder is
//! fetched from `TEMPLATE` with `{hash}` replaced by its hash (lowercase), kept in the folder
//! as `HASH.zip`, and served from there (`http.md` §5.3).
//!
//! Bounds: at most [`MAX_MAP`] bytes, within [`FETCH_TIMEOUT`] in all; one fetch of a hash at a
//! time (a request for a map being fetched waits for that fetch) and at most [`FETCHES`]
//! fetches at once; no redirects followed. What arrives is written to a hidden temporary file
//! and renamed into place only whole, so a map is never served half-written. Fetched maps are
//! kept apart from the operator's, in the folder's `.mirror/`, at most [`MAX_CACHE`] bytes
//! of them (or [`Mirror::with_cache_limit`]'s): past it the oldest fetched are removed, so
//! that clients asking for map after map cannot fill the disk. The operator's own maps are
//! never removed.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

/// The largest map fetched (bytes).
pub const MAX_MAP: u64 = 64 << 20;
/// The longest a fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Fetches from the mirror at once, over all hashes.
pub const FETCHES: usize = 4;
/// The most bytes of fetched maps kept by default.
pub const MAX_CACHE: u64 = 2 << 30;
/// The subfolder of the maps folder fetched maps are kept in.
pub const CACHE_DIR: &str = ".mirror";

/// Why a mirror cannot be made, or a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorError {
    /// The `--map-url` template is not one this relay can fetch from.
    #[error("--map-url {template}: {why}")]
    Template {
        /// The template.
        template: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The mirror could not be reached.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// Its host and port.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS handshake with the mirror failed.
    #[error("TLS with {host}: {source}")]
    Tls {
        /// The mirror's host.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// The mirror's host is not a name TLS can check.
    #[error("{host}: not a TLS server name")]
    ServerName {
        /// The host.
        host: String,
    },
    /// The request could not be made (a path the template makes is not a URI path).
    #[error("the request to the mirror: {0}")]
    Request(#[from] hyper::http::Error),
    /// HTTP with the mirror failed.
    #[error("the mirror's HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// The mirror answered neither 200 nor 404.
    #[error("the mirror answered {0}")]
    Status(StatusCode),
    /// The map is over [`MAX_MAP`].
    #[error("the map is over {} MiB", MAX_MAP >> 20)]
    TooLarge,
    /// The body was not as long as its `Content-Length`.
    #[error("the mirror sent {got} bytes of {declared}")]
    Short {
        /// Bytes received.
        got: u64,
        /// Bytes declared.
        declared: u64,
    },
    /// A file in the maps folder could not be written, renamed or removed.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The fetch took longer than [`FETCH_TIMEOUT`].
    #[error("no whole answer within {} s", FETCH_TIMEOUT.as_secs())]
    Timeout,
    /// The relay is stopping.
    #[error("the relay is stopping")]
    Stopping,
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> MirrorError + '_ {
    move |source| MirrorError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// The fetched maps kept: their total size and their hashes, oldest first.
#[derive(Debug, Default)]
struct Cache {
    /// Whether `.mirror/` was read (at the first fetch).
    read: bool,
    bytes: u64,
    kept: VecDeque<(String, u64)>,
}

/// Where maps not in the folder come from.
pub struct Mirror {
    scheme_tls: bool,
    host: String,
    port: u16,
    /// The path and query, with `{hash}` still in it.
    path: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// One lock per hash being fetched.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    fetches: tokio::sync::Semaphore,
    cache: tokio::sync::Mutex<Cache>,
    cache_limit: u64,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .finish()
    }
}

/// What a fetch came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The map is now in the folder.
    Stored,
    /// The mirror has no such map (`404`).
    Missing,
}

impl Mirror {
    /// A mirror from `template` (`http://HOST[:PORT]/PATH` or `https://…`, with `{hash}`
    /// in its path); `tls` is the client configuration for `https` (the CAs it trusts).
    pub fn new(
        template: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Mirror, MirrorError> {
        let bad = |why: &'static str| MirrorError::Template {
            template: template.to_string(),
            why,
        };
        let (tls_scheme, rest) = if let Some(r) = template.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = template.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("not an http:// or https:// URL"));
        };
        if !template.contains("{hash}") {
            return Err(bad("no {hash} in it"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => return Err(bad("no path")),
        };
        if authority.contains('{') || authority.contains('@') || authority.is_empty() {
            return Err(bad("the host must be given plainly"));
        }
        let default = if tls_scheme { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            match v6.split_once(']') {
                Some((h, "")) => (format!("[{h}]"), default),
                Some((h, p)) => match p.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
                    Some(p) => (format!("[{h}]"), p),
                    None => return Err(bad("a bad port")),
                },
                None => return Err(bad("a bad host")),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => match p.parse::<u16>() {
                    Ok(p) => (h.to_string(), p),
                    Err(_) => return Err(bad("a bad port")),
                },
                None => (authority.to_string(), default),
            }
        };
        if tls_scheme && tls.is_none() {
            return Err(bad("https needs the CAs to trust (--map-url-ca)"));
        }
        Ok(Mirror {
            scheme_tls: tls_scheme,
            host,
            port,
            path: path.to_string(),
            tls,
            inflight: Mutex::new(HashMap::new()),
            fetches: tokio::sync::Semaphore::new(FETCHES),
            cache: tokio::sync::Mutex::new(Cache::default()),
            cache_limit: MAX_CACHE,
        })
    }

    /// The same mirror keeping at most `bytes` of fetched maps (always the one just fetched).
    pub fn with_cache_limit(mut self, bytes: u64) -> Self {
        self.cache_limit = bytes;
        self
    }

    /// Where a fetched map is kept: `dir/.mirror/HASH.zip`.
    pub fn kept(dir: &Path, hash: &str) -> PathBuf {
        dir.join(CACHE_DIR).join(format!("{hash}.zip"))
    }

    /// Counts a map just stored, then removes the oldest fetched maps past the limit (never
    /// the one just stored).
    async fn keep(&self, dir: &Path, hash: &str, size: u64) -> Result<(), MirrorError> {
        let mut cache = self.cache.lock().await;
        if !cache.read {
            cache.read = true;
            let mut found = Vec::new();
            let folder = dir.join(CACHE_DIR);
            if let Ok(mut list) = tokio::fs::read_dir(&folder).await {
                while let Ok(Some(e)) = list.next_entry().await {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let Some(h) = name.strip_suffix(".zip") else {
                        continue;
                    };
                    if h == hash {
                        continue;
                    }
                    if let Ok(m) = e.metadata().await {
                        let when = m.modified().unwrap_or(std::time::UNIX_EPOCH);
                        found.push((when, h.to_string(), m.len()));
                    }
                }
            }
            found.sort();
            for (_, h, n) in found {
                cache.bytes += n;
                cache.kept.push_back((h, n));
            }
        }
        cache.bytes += size;
        cache.kept.push_back((hash.to_string(), size));
        while cache.bytes > self.cache_limit && cache.kept.len() > 1 {
            let Some((old, n)) = cache.kept.pop_front() else {
                break;
            };
            let path = Self::kept(dir, &old);
            match tokio::fs::remove_file(&path).await {
                Ok(()) => cache.bytes -= n,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => cache.bytes -= n,
                Err(e) => {
                    cache.kept.push_front((old, n));
                    return Err(file_error(&path)(e));
                }
            }
        }
        Ok(())
    }

    /// Makes `dir/.mirror/HASH.zip` ([`Mirror::kept`]) from the mirror, unless it is
    /// already there (another request's fetch finished first). `hash` is 40 lowercase hex
    /// digits (`rules::map_hash`).
    pub async fn fetch(&self, hash: &str, dir: &Path) -> Result<Fetched, MirrorError> {
        let lock = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            inflight.entry(hash.to_string()).or_default().clone()
        };
        let result = {
            let _one = lock.lock().await;
            let dest = Self::kept(dir, hash);
            if tokio::fs::metadata(&dest).await.is_ok_and(|m| m.is_file()) {
                Ok(Fetched::Stored)
            } else {
                let _permit = self
                    .fetches
                    .acquire()
                    .await
                    .map_err(|_| MirrorError::Stopping)?;
                let folder = dir.join(CACHE_DIR);
                tokio::fs::create_dir_all(&folder)
                    .await
                    .map_err(file_error(&folder))?;
                match tokio::time::timeout(FETCH_TIMEOUT, self.download(hash, &folder, &dest)).await
                {
                    Ok(Ok((Fetched::Stored, size))) => {
                        self.keep(dir, hash, size).await.map(|()| Fetched::Stored)
                    }
                    Ok(r) => r.map(|(f, _)| f),
                    Err(_) => Err(MirrorError::Timeout),
                }
            }
        };
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&lock) <= 2 {
            inflight.remove(hash);
        }
        result
    }

    async fn download(
        &self,
        hash: &str,
        dir: &Path,
        dest: &Path,
    ) -> Result<(Fetched, u64), MirrorError> {
        let path = self.path.replace("{hash}", hash);
        let tcp = tokio::net::TcpStream::connect((self.host.trim_matches(['[', ']']), self.port))
            .await
            .map_err(|source| MirrorError::Connect {
                addr: format!("{}:{}", self.host, self.port),
                source,
            })?;
        let req = Request::get(path)
            .header(hyper::header::HOST, self.authority())
            .header(hyper::header::USER_AGENT, "bsor-stream relay")
            .body(Empty::<Bytes>::new())?;
        if self.scheme_tls {
            let server_name = || MirrorError::ServerName {
                host: self.host.clone(),
            };
            // `new` refuses https without a configuration.
            let config = self.tls.clone().ok_or_else(server_name)?;
            let name = rustls::pki_types::ServerName::try_from(
                self.host.trim_matches(['[', ']']).to_string(),
            )
            .map_err(|_| server_name())?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|source| MirrorError::Tls {
                    host: self.host.clone(),
                    source,
                })?;
            self.exchange(TokioIo::new(stream), req, dir, dest).await
        } else {
            self.exchange(TokioIo::new(tcp), req, dir, dest).await
        }
    }

    fn authority(&self) -> String {
        let default = if self.scheme_tls { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    async fn exchange<S>(
        &self,
        io: TokioIo<S>,
        req: Request<Empty<Bytes>>,
        dir: &Path,
        dest: &Path,
    ) -> Result<(Fetched, u64), MirrorError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let result = match sender.send_request(req).await {
            Ok(res) => self.store(res, dir, dest).await,
            Err(e) => Err(e.into()),
        };
        driver.abort();
        result
    }

    async fn store(
        &self,
        res: hyper::Response<hyper::body::Incoming>,
        dir: &Path,
        dest: &Path,
    ) -> Result<(Fetched, u64), MirrorError> {
        match res.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok((Fetched::Missing, 0)),
            s => return Err(MirrorError::Status(s)),
        }
        let declared = res
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_MAP) {
            return Err(MirrorError::TooLarge);
        }
        let part: PathBuf = dir.join(format!(
            ".{}.part",
            dest.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        let mut file = tokio::fs::File::create(&part)
            .await
            .map_err(file_error(&part))?;
        let mut body = res.into_body();
        let mut n = 0u64;
        let outcome = async {
            while let Some(frame) = body.frame().await {
                let frame = frame?;
                if let Ok(data) = frame.into_data() {
                    n += data.len() as u64;
                    if n > MAX_MAP {
                        return Err(MirrorError::TooLarge);
                    }
                    file.write_all(&data).await.map_err(file_error(&part))?;
                }
            }
            if let Some(declared) = declared.filter(|&d| d != n) {
                return Err(MirrorError::Short { got: n, declared });
            }
            file.sync_all().await.map_err(file_error(&part))?;
            tokio::fs::rename(&part, dest)
                .await
                .map_err(file_error(dest))
        }
        .await;
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        }
        outcome.map(|()| (Fetched::Stored, n))
    }
}
