//! A client of the replay server's HTTP (`proto-spec/http.md` §8): one keep-alive HTTP/1.1
//! connection (plain, or TLS trusting the certificates of one CA file) over hyper, for
//! `bsor-stream keys register` and the server-load tool.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::Request;

/// The request methods, hyper's.
pub use hyper::Method;
use hyper_util::rt::TokioIo;

use bsor_stream_core::net::tls::{client_config, TlsError};
use bsor_stream_relay::tcp::tls_stream;

type Sender = http1::SendRequest<Full<Bytes>>;

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The CA file could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// No connection to the server.
    #[error("connecting to {addr}: {reason}")]
    Connect {
        /// The server's address.
        addr: String,
        /// What failed.
        reason: String,
    },
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP handshake: {0}")]
    Handshake(hyper::Error),
    /// The request could not be made from what was given.
    #[error("{path}: {source}")]
    Request {
        /// The request's path.
        path: String,
        /// What was wrong.
        source: hyper::http::Error,
    },
    /// The request or its reply failed on the way.
    #[error("{path}: {source}")]
    Exchange {
        /// The request's path.
        path: String,
        /// What failed.
        source: hyper::Error,
    },
    /// No reply within the connection's timeout.
    #[error("{path}: no answer in {timeout:?}")]
    Timeout {
        /// The request's path.
        path: String,
        /// The timeout.
        timeout: Duration,
    },
}

/// An HTTP/1.1 client connection over `io`, its driver spawned.
async fn handshake<T>(io: T) -> Result<Sender, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(ClientError::Handshake)?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Makes a TLS connection to an address, with the HTTP handshake done.
type Connector = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Sender, ClientError>> + Send>>
        + Send
        + Sync,
>;

/// One keep-alive HTTP/1.1 connection to `addr` (`HOST:PORT`).
pub struct Conn {
    addr: String,
    tls: Option<Connector>,
    timeout: Duration,
    sender: Option<http1::SendRequest<Full<Bytes>>>,
}

/// What one request got.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The whole body.
    pub body: Bytes,
}

impl Conn {
    /// A connection to `addr` (`HOST:PORT`), made at the first request; each request gives
    /// up after `timeout`.
    pub fn new(addr: impl Into<String>, timeout: Duration) -> Conn {
        Conn {
            addr: addr.into(),
            tls: None,
            timeout,
            sender: None,
        }
    }

    /// Over TLS, trusting only the certificates in `ca_file` (PEM), the server's
    /// certificate checked against the host of the address.
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Conn, ClientError> {
        let tls = client_config(ca_file)?;
        self.tls = Some(Arc::new(move |addr: String| {
            let tls = tls.clone();
            Box::pin(async move {
                let stream = tls_stream(&addr, tls)
                    .await
                    .map_err(|e| ClientError::Connect {
                        reason: e.to_string(),
                        addr,
                    })?;
                handshake(stream).await
            })
        }));
        Ok(self)
    }

    /// `method` on `path`, with `Authorization: Bearer TOKEN` when `token` is given and
    /// `content_type` for the body.
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: Bytes,
    ) -> Result<Reply, ClientError> {
        tokio::time::timeout(
            self.timeout,
            self.request_inner(method, path, token, content_type, body),
        )
        .await
        .map_err(|_| ClientError::Timeout {
            path: path.to_string(),
            timeout: self.timeout,
        })?
    }

    async fn connect(&self) -> Result<Sender, ClientError> {
        if let Some(tls) = &self.tls {
            return tls(self.addr.clone()).await;
        }
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| ClientError::Connect {
                addr: self.addr.clone(),
                reason: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        handshake(stream).await
    }

    async fn request_inner(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: Bytes,
    ) -> Result<Reply, ClientError> {
        let ready = match &mut self.sender {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        // Taken out while in use, put back once the exchange went through.
        let mut sender = match self.sender.take() {
            Some(s) if ready => s,
            _ => self.connect().await?,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.as_str())
            .header("cache-control", "no-cache");
        if let Some(t) = token {
            req = req
                .header("authorization", format!("Bearer {t}"))
                .header("content-type", content_type);
        }
        let exchange = |source| ClientError::Exchange {
            path: path.to_string(),
            source,
        };
        let req = req
            .body(Full::new(body))
            .map_err(|source| ClientError::Request {
                path: path.to_string(),
                source,
            })?;
        let resp = sender.send_request(req).await.map_err(exchange)?;
        self.sender = Some(sender);
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(exchange)?
            .to_bytes();
        Ok(Reply { status, body })
    }
}
