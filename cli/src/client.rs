//! The CLI's HTTP/1.1 client: a keep-alive connection (plain, or TLS trusting given roots)
//! over the library's hyper, for `bsor-stream keys register`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

type Sender = http1::SendRequest<Full<Bytes>>;

/// An HTTP/1.1 client connection over `io`, its driver spawned.
async fn handshake<T>(io: T) -> Result<Sender, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Makes a TLS connection to an address, with the HTTP handshake done.
type Connector = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Sender, String>> + Send>> + Send + Sync,
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
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Conn, String> {
        let tls = bsor_stream::net::tls::client_config(ca_file).map_err(|e| e.to_string())?;
        self.tls = Some(Arc::new(move |addr: String| {
            let tls = tls.clone();
            Box::pin(async move {
                let stream = bsor_stream::net::tcp::tls_stream(&addr, tls)
                    .await
                    .map_err(|e| format!("connecting to {addr}: {e}"))?;
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
    ) -> Result<Reply, String> {
        tokio::time::timeout(
            self.timeout,
            self.request_inner(method, path, token, content_type, body),
        )
        .await
        .map_err(|_| format!("{path}: no answer in {:?}", self.timeout))?
    }

    async fn connect(&self) -> Result<Sender, String> {
        if let Some(tls) = &self.tls {
            return tls(self.addr.clone()).await;
        }
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.addr))?;
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
    ) -> Result<Reply, String> {
        let ready = match &mut self.sender {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            self.sender = Some(self.connect().await?);
        }
        let sender = self.sender.as_mut().ok_or("no connection")?;
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
        let req = req
            .body(Full::new(body))
            .map_err(|e| format!("{path}: {e}"))?;
        let resp = sender.send_request(req).await.map_err(|e| {
            self.sender = None;
            format!("{path}: {e}")
        })?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{path}: reading the body: {e}"))?
            .to_bytes();
        Ok(Reply { status, body })
    }
}
