//! A map mirror (`serve --maps DIR --map-url TEMPLATE`): a map not in the maps folder is
//! fetched from `TEMPLATE` with `{hash}` replaced by its hash (lowercase), kept in the folder
//! as `HASH.zip`, and served from there (`http.md` §5.3).
//!
//! Bounds: at most [`MAX_MAP`] bytes, within [`FETCH_TIMEOUT`] in all; one fetch of a hash at a
//! time (a request for a map being fetched waits for that fetch) and at most [`FETCHES`]
//! fetches at once; no redirects followed. What arrives is written to a hidden temporary file
//! in the folder and renamed into place only whole, so a map is never served half-written.

use std::collections::HashMap;
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
    pub fn new(template: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Mirror, String> {
        let bad = |why: &str| format!("--map-url {template}: {why}");
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
        })
    }

    /// Makes `dir/HASH.zip` from the mirror, unless it is already there (another request's
    /// fetch finished first). `hash` is 40 lowercase hex digits (`rules::map_hash`).
    pub async fn fetch(&self, hash: &str, dir: &Path) -> Result<Fetched, String> {
        let lock = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            inflight.entry(hash.to_string()).or_default().clone()
        };
        let result = {
            let _one = lock.lock().await;
            let dest = dir.join(format!("{hash}.zip"));
            if tokio::fs::metadata(&dest).await.is_ok_and(|m| m.is_file()) {
                Ok(Fetched::Stored)
            } else {
                let _permit = self
                    .fetches
                    .acquire()
                    .await
                    .map_err(|_| "the relay is stopping".to_string())?;
                match tokio::time::timeout(FETCH_TIMEOUT, self.download(hash, dir, &dest)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "no whole answer within {} s",
                        FETCH_TIMEOUT.as_secs()
                    )),
                }
            }
        };
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&lock) <= 2 {
            inflight.remove(hash);
        }
        result
    }

    async fn download(&self, hash: &str, dir: &Path, dest: &Path) -> Result<Fetched, String> {
        let path = self.path.replace("{hash}", hash);
        let tcp = tokio::net::TcpStream::connect((self.host.trim_matches(['[', ']']), self.port))
            .await
            .map_err(|e| format!("connecting to {}:{}: {e}", self.host, self.port))?;
        let req = Request::get(path)
            .header(hyper::header::HOST, self.authority())
            .header(hyper::header::USER_AGENT, "bsor-stream relay")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("the request: {e}"))?;
        if self.scheme_tls {
            let Some(config) = self.tls.clone() else {
                return Err("no TLS configuration".into());
            };
            let name = rustls::pki_types::ServerName::try_from(
                self.host.trim_matches(['[', ']']).to_string(),
            )
            .map_err(|e| format!("{}: {e}", self.host))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS with {}: {e}", self.host))?;
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
    ) -> Result<Fetched, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("the mirror's HTTP: {e}"))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let answer = sender
            .send_request(req)
            .await
            .map_err(|e| format!("the mirror's answer: {e}"));
        let result = match answer {
            Ok(res) => self.store(res, dir, dest).await,
            Err(e) => Err(e),
        };
        driver.abort();
        result
    }

    async fn store(
        &self,
        res: hyper::Response<hyper::body::Incoming>,
        dir: &Path,
        dest: &Path,
    ) -> Result<Fetched, String> {
        match res.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(Fetched::Missing),
            s => return Err(format!("the mirror answered {s}")),
        }
        let declared = res
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_MAP) {
            return Err(format!("the map is over {} MiB", MAX_MAP >> 20));
        }
        let part: PathBuf = dir.join(format!(
            ".{}.part",
            dest.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        let mut file = tokio::fs::File::create(&part)
            .await
            .map_err(|e| format!("{}: {e}", part.display()))?;
        let mut body = res.into_body();
        let mut n = 0u64;
        let outcome = async {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("the mirror's body: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    n += data.len() as u64;
                    if n > MAX_MAP {
                        return Err(format!("the map is over {} MiB", MAX_MAP >> 20));
                    }
                    file.write_all(&data)
                        .await
                        .map_err(|e| format!("{}: {e}", part.display()))?;
                }
            }
            if declared.is_some_and(|d| d != n) {
                return Err(format!("the mirror sent {n} bytes of {declared:?}"));
            }
            file.sync_all()
                .await
                .map_err(|e| format!("{}: {e}", part.display()))?;
            tokio::fs::rename(&part, dest)
                .await
                .map_err(|e| format!("{}: {e}", dest.display()))
        }
        .await;
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        }
        outcome.map(|()| Fetched::Stored)
    }
}
