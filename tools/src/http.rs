//! A plain HTTP/1.1 keep-alive client for the replay server, over the library's hyper:
//! `bsor-stream-serverload`'s uploads, downloads and events requests. Plain HTTP on
//! 127.0.0.1 only, so no TLS (the CLI's own client, for `keys register`, has it).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

type Sender = http1::SendRequest<Full<Bytes>>;

/// One keep-alive HTTP/1.1 connection to `addr` (`HOST:PORT`).
pub struct Conn {
    addr: String,
    timeout: Duration,
    sender: Option<Sender>,
}

/// What one request got.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The whole body.
    pub body: Bytes,
}

impl Conn {
    /// A connection to `addr` (`HOST:PORT`), made at the first request (and again after a
    /// request failed); each request gives up after `timeout`.
    pub fn new(addr: impl Into<String>, timeout: Duration) -> Conn {
        Conn {
            addr: addr.into(),
            timeout,
            sender: None,
        }
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

    /// A new connection, its driver spawned.
    async fn connect(&self) -> Result<Sender, String> {
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.addr))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
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
