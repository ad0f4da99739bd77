//! The relay over WebSocket (`ws://ADDR/`, or `wss://ADDR/` over TLS): the same frames as
//! over TCP, one frame per binary message, under the subprotocol [`SUBPROTOCOL`] (`wire.md`
//! §1). Only how a WebSocket becomes messages lives here; the connection itself is run by
//! [`Server::drive`], as for TCP.
//!
//! The server judges the upgrade request itself ([`judge`], without I/O) rather than
//! through tungstenite's `accept_hdr_async`: tungstenite closes the socket without a reply
//! when a request is not an upgrade at all or has the wrong version, and a browser's
//! developer then sees nothing. The request is read by the relay's HTTP stack
//! ([`crate::http`], which serves the page and the archive on the same address): every
//! refusal is an HTTP error with a short text body (400, or 403 for an Origin not allowed),
//! and an accepted request gets the 101 reply (with the subprotocol echoed) before
//! tungstenite takes the socket over.

use std::sync::Arc;

use bytes::BytesMut;
use futures_util::{future, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use crate::gate::ReadGate;
use crate::http::{serve_connection, Peer};
use crate::server::{MessageSink, MessageStream, Server};
use bsor_stream_core::net::wire::{self, Message, WebSocketFault, WireError};

/// The WebSocket subprotocol of this protocol (`wire.md` §1): a client that asks for
/// subprotocols must ask for this one, and gets it echoed.
pub const SUBPROTOCOL: &str = "bsor-stream.v1";

/// WebSocket limits matching a frame limit: a message holds one frame and its length field,
/// and a longer one is refused from its WebSocket header, before it is buffered.
pub fn config(max_frame: u32) -> WebSocketConfig {
    let max = max_frame as usize + 4;
    WebSocketConfig::default()
        .max_frame_size(Some(max))
        .max_message_size(Some(max))
}

/// The relay's WebSocket limits: [`config`]'s, with small buffers (tungstenite reads in
/// 128 KiB blocks by default, which 10,000 connections would make over a gigabyte) and
/// writes sent as they come.
pub(crate) fn relay_config(max_frame: u32) -> WebSocketConfig {
    config(max_frame)
        .read_buffer_size(4 << 10)
        .write_buffer_size(0)
}

/// The most bytes the relay reads of a WebSocket opening handshake before it is done.
const HTTP_REQUEST_MAX: u64 = 16 << 10;

/// The most a connection's socket holds written but not yet sent (`TCP_NOTSENT_LOWAT`,
/// Linux): a reply is produced only as fast as its peer takes it, not until the kernel's
/// send buffer (autotuned to megabytes) is full. An unread BSOR download then costs the
/// rebuild of this much plus its peer's receive window, not of megabytes; the bytes in
/// flight are not bounded by it, so a fast peer far away still fills its path.
#[cfg(any(target_os = "linux", target_os = "android"))]
const UNSENT_MAX: u32 = 128 << 10;

fn ws_error(e: WsError, max_frame: u32) -> WireError {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, .. }) => WireError::FrameTooLarge {
            length: size.saturating_sub(4).min(u32::MAX as usize) as u32,
            limit: max_frame,
        },
        // The peer closed the socket without a close frame (a browser tab shut): it went
        // away, which is not a fault.
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            WireError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "closed without a close frame",
            ))
        }
        WsError::Capacity(_) | WsError::Protocol(_) | WsError::Utf8(_) => {
            WireError::WebSocket(WebSocketFault::Invalid)
        }
        WsError::Io(e) => WireError::Io(e),
        e => WireError::Io(std::io::Error::other(e.to_string())),
    }
}

/// A WebSocket as messages in and out: each outgoing message one binary message; each
/// incoming binary message exactly one frame; a text message is `Malformed`; a close ends
/// the stream. WebSocket pings are answered by the WebSocket layer.
pub fn transport<S>(ws: WebSocketStream<S>, max_frame: u32) -> (MessageSink, MessageStream)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    let sink = sink
        .sink_map_err(move |e| ws_error(e, max_frame))
        .with(|m: Message| {
            let mut b = BytesMut::new();
            m.encode(&mut b);
            future::ready(Ok::<_, WireError>(WsMessage::Binary(b.freeze())))
        });
    let stream = stream
        .take_while(|m| future::ready(!matches!(m, Ok(WsMessage::Close(_)))))
        .filter_map(move |m| {
            future::ready(match m {
                Ok(WsMessage::Binary(b)) => Some(wire::decode_frame(b, max_frame)),
                Ok(WsMessage::Text(_)) => Some(Err(WireError::WebSocket(WebSocketFault::Text))),
                Ok(_) => None,
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => None,
                Err(e) => Some(Err(ws_error(e, max_frame))),
            })
        });
    (Box::pin(sink), Box::pin(stream))
}

/// Connects to a relay's WebSocket at `addr` (`HOST:PORT`, or a whole `ws://` URL).
pub async fn connect(
    addr: &str,
    max_frame: u32,
) -> Result<(MessageSink, MessageStream), WireError> {
    connect_with(addr, None, max_frame).await
}

/// Connects to a relay's WebSocket at `addr` (`HOST:PORT`, or a whole `ws://` or `wss://`
/// URL), over TLS (`wss://`) when `tls` is given, asking for [`SUBPROTOCOL`].
pub async fn connect_with(
    addr: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    max_frame: u32,
) -> Result<(MessageSink, MessageStream), WireError> {
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let url = if addr.starts_with("ws://") || addr.starts_with("wss://") {
        addr.to_string()
    } else {
        format!("{scheme}://{addr}/")
    };
    let (scheme, rest) = url.split_once("://").unwrap_or((scheme, url.as_str()));
    let authority = with_port(rest.split('/').next().unwrap_or_default(), scheme);
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ws_error(e, max_frame))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static(SUBPROTOCOL),
    );
    let config = Some(config(max_frame));
    let fail = |e| ws_error(e, max_frame);
    match tls {
        Some(tls) => {
            let stream = crate::tcp::tls_stream(&authority, tls).await?;
            let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, config)
                .await
                .map_err(fail)?;
            Ok(transport(ws, max_frame))
        }
        None => {
            let socket = TcpStream::connect(&authority).await?;
            let _ = socket.set_nodelay(true);
            let (ws, _) = tokio_tungstenite::client_async_with_config(request, socket, config)
                .await
                .map_err(fail)?;
            Ok(transport(ws, max_frame))
        }
    }
}

/// `host[:port]` with the scheme's default port when it has none (a URL may leave it out).
fn with_port(authority: &str, scheme: &str) -> String {
    let bare_v6 = authority.starts_with('[') && authority.ends_with(']');
    if bare_v6 || !authority.starts_with('[') && !authority.contains(':') {
        let port = if scheme == "wss" { 443 } else { 80 };
        format!("{authority}:{port}")
    } else {
        authority.to_string()
    }
}

/// How the WebSocket listener serves: in the clear or over TLS, and which pages may
/// connect.
#[derive(Clone, Debug, Default)]
pub struct WsOptions {
    /// Serve `wss://` with this configuration.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Origins (`https://host[:port]`) whose pages may connect; `*` allows any. Empty: only
    /// a page whose Origin has the host and port of the request's `Host`. A request with no
    /// Origin (not from a browser) is accepted either way.
    pub allowed_origins: Vec<String>,
}

/// Serves `server` over WebSocket on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, server: Server) {
    serve_with(listener, server, WsOptions::default()).await;
}

/// Serves `server` over WebSocket on `listener`, as `options` say, until the task is
/// dropped, with the relay's HTTP on the same address and no page ([`serve_site`]).
pub async fn serve_with(listener: TcpListener, server: Server, options: WsOptions) {
    serve_site(listener, server, options, crate::http::Assets::default()).await;
}

/// Serves `server` over WebSocket on `listener`, as `options` say, until the task is
/// dropped, with the relay's HTTP on the same address (`http.md`, [`crate::http`]): the
/// page `assets`, the session list and the archive. The TLS handshake and each request's
/// head have the relay's handshake timeout; a failure closes that connection only.
pub async fn serve_site(
    listener: TcpListener,
    server: Server,
    options: WsOptions,
    assets: crate::http::Assets,
) {
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let options = Arc::new(options);
    let site = crate::http::Site::new(&server, assets);
    crate::server::accept_each(listener, server, move |socket, server| {
        let acceptor = acceptor.clone();
        let options = options.clone();
        let site = site.clone();
        async move {
            let timeout = server.handshake_timeout();
            let addr = socket.peer_addr().ok();
            let peer = addr.map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
            // A request's head may take an HTTP request's worth; after an upgrade, the
            // gate follows the relay's frame limit for the connection. Connections of one
            // address before their upgrade are capped as the relay caps upgraded ones.
            let Some(slot) = server.handshake_slot(addr.map(|a| a.ip())) else {
                return;
            };
            let gate = ReadGate::new(HTTP_REQUEST_MAX, 0);
            let from = Peer {
                peer,
                ip: addr.map(|a| a.ip()),
                gate: gate.clone(),
                slot,
            };
            let _ = socket.set_nodelay(true);
            #[cfg(any(target_os = "linux", target_os = "android"))]
            let _ = socket2::SockRef::from(&socket).set_tcp_notsent_lowat(UNSENT_MAX);
            match acceptor {
                Some(acceptor) => {
                    let Some(stream) = crate::tcp::accept_tls(&acceptor, socket, timeout).await
                    else {
                        return;
                    };
                    let io = gate.wrap(stream);
                    serve_connection(io, true, options, site, from, server).await;
                }
                None => {
                    let io = gate.wrap(socket);
                    serve_connection(io, false, options, site, from, server).await;
                }
            }
        }
    })
    .await;
}

/// An upgrade request, as [`judge`] sees it.
#[derive(Debug)]
pub struct Request<'a> {
    /// `GET`, for an upgrade.
    pub method: &'a str,
    /// The HTTP minor version (1 for HTTP/1.1).
    pub version: u8,
    /// Header names and values, in order (a name may repeat).
    pub headers: Vec<(&'a str, &'a str)>,
}

/// An accepted upgrade.
#[derive(Debug, PartialEq, Eq)]
pub struct Accept {
    /// The `Sec-WebSocket-Accept` value.
    pub key: String,
    /// Echo [`SUBPROTOCOL`] (the client asked for it).
    pub subprotocol: bool,
}

/// A refused upgrade: the HTTP status and a short text body.
#[derive(Debug, PartialEq, Eq)]
pub struct UpgradeRefusal {
    /// 400, or 403 for an Origin not allowed.
    pub status: u16,
    /// Why, in a line.
    pub body: String,
}

impl UpgradeRefusal {
    fn bad(why: &str) -> Self {
        UpgradeRefusal {
            status: 400,
            body: why.into(),
        }
    }

    /// The whole HTTP reply.
    pub fn reply(&self) -> String {
        let reason = if self.status == 403 {
            "Forbidden"
        } else {
            "Bad Request"
        };
        let body = format!("{}\n", self.body);
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nSec-WebSocket-Version: 13\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
    }
}

/// Judges an upgrade request (RFC 6455 §4.2.1, and `wire.md` §1's subprotocol and Origin
/// rules); `tls` says whether it came over TLS (for the `Host` header's default port);
/// `allowed_origins` as in [`WsOptions`].
pub fn judge(
    request: &Request<'_>,
    tls: bool,
    allowed_origins: &[String],
) -> Result<Accept, UpgradeRefusal> {
    fn header<'a>(request: &'a Request<'a>, name: &'static str) -> impl Iterator<Item = &'a str> {
        request
            .headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }
    fn tokens<'a>(request: &'a Request<'a>, name: &'static str) -> Vec<&'a str> {
        header(request, name)
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect()
    }
    let values = |name: &'static str| header(request, name);
    let tokens = |name: &'static str| tokens(request, name);
    let has = |name: &'static str, token: &str| {
        tokens(name).iter().any(|t| t.eq_ignore_ascii_case(token))
    };
    if request.method != "GET" || request.version < 1 || !has("Upgrade", "websocket") {
        return Err(UpgradeRefusal::bad(
            "not a WebSocket upgrade: this is a bsor-stream relay (wire.md)",
        ));
    }
    if !has("Connection", "upgrade") {
        return Err(UpgradeRefusal::bad(
            "a WebSocket upgrade needs `Connection: Upgrade`",
        ));
    }
    if values("Sec-WebSocket-Version").next() != Some("13") {
        return Err(UpgradeRefusal::bad(
            "unsupported WebSocket version: 13 only",
        ));
    }
    let key = match values("Sec-WebSocket-Key").next() {
        Some(k) if is_key(k) => k,
        _ => {
            return Err(UpgradeRefusal::bad(
                "missing or malformed Sec-WebSocket-Key",
            ))
        }
    };
    let Some(host) = values("Host").next() else {
        return Err(UpgradeRefusal::bad("no Host header"));
    };
    if let Some(origin) = values("Origin").next() {
        if !origin_allowed(origin, host, tls, allowed_origins) {
            return Err(UpgradeRefusal {
                status: 403,
                body: format!("origin {origin} is not allowed"),
            });
        }
    }
    let asked = tokens("Sec-WebSocket-Protocol");
    let subprotocol = asked.contains(&SUBPROTOCOL);
    if !asked.is_empty() && !subprotocol {
        return Err(UpgradeRefusal::bad(&format!(
            "subprotocol {SUBPROTOCOL} not among those asked for"
        )));
    }
    Ok(Accept {
        key: derive_accept_key(key.as_bytes()),
        subprotocol,
    })
}

/// A `Sec-WebSocket-Key`: 16 bytes in base64 (24 characters, the last two `==`).
fn is_key(k: &str) -> bool {
    k.len() == 24
        && k.ends_with("==")
        && k[..22]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// Whether a page of `origin` may connect to a relay reached as `host`.
fn origin_allowed(origin: &str, host: &str, tls: bool, allowed: &[String]) -> bool {
    let Some(from) = parse_origin(origin) else {
        // `null` (a sandboxed page or a file) or garbage: only when listed.
        return allowed
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(origin));
    };
    if allowed.is_empty() {
        let own = authority(host, if tls { 443 } else { 80 });
        return own.is_some_and(|(h, p)| h == from.1 && p == from.2);
    }
    allowed
        .iter()
        .any(|a| a == "*" || parse_origin(a).is_some_and(|a| a == from))
}

/// `scheme://host[:port]` as (scheme, host, port), lowercased, with the scheme's default
/// port filled in.
fn parse_origin(origin: &str) -> Option<(String, String, u16)> {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://")?;
    let default = match scheme {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        _ => return None,
    };
    let (host, port) = authority(rest, default)?;
    Some((scheme.to_string(), host, port))
}

/// `host[:port]` (or `[v6][:port]`) as (host, port), lowercased, `default` when no port.
fn authority(a: &str, default: u16) -> Option<(String, u16)> {
    let a = a.trim().to_ascii_lowercase();
    let (host, port) = match a.strip_prefix('[') {
        Some(v6) => {
            let (h, rest) = v6.split_once(']')?;
            (format!("[{h}]"), rest.strip_prefix(':'))
        }
        None => match a.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (a.clone(), None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn request<'a>(extra: &[(&'a str, &'a str)]) -> Request<'a> {
        let mut headers = vec![
            ("Host", "relay.example:8443"),
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", KEY),
        ];
        for (n, v) in extra {
            headers.retain(|(h, _)| !h.eq_ignore_ascii_case(n));
            if !v.is_empty() {
                headers.push((n, v));
            }
        }
        Request {
            method: "GET",
            version: 1,
            headers,
        }
    }

    fn status(r: Result<Accept, UpgradeRefusal>) -> u16 {
        r.map_or_else(|e| e.status, |_| 101)
    }

    #[test]
    fn a_plain_upgrade_is_accepted_with_the_rfc_key() {
        let a = judge(&request(&[]), false, &[]).unwrap();
        // RFC 6455 §1.3's example.
        assert_eq!(a.key, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(!a.subprotocol);
    }

    #[test]
    fn the_subprotocol_is_echoed_and_required_when_any_is_asked_for() {
        let a = judge(
            &request(&[("Sec-WebSocket-Protocol", "chat, bsor-stream.v1")]),
            false,
            &[],
        )
        .unwrap();
        assert!(a.subprotocol);
        let r = judge(&request(&[("Sec-WebSocket-Protocol", "chat")]), false, &[]);
        assert_eq!(status(r), 400);
    }

    #[test]
    fn bad_upgrades_get_400() {
        let mut post = request(&[]);
        post.method = "POST";
        assert_eq!(status(judge(&post, false, &[])), 400);
        let cases: [&[(&str, &str)]; 6] = [
            &[("Upgrade", "")],
            &[("Upgrade", "h2c")],
            &[("Connection", "keep-alive")],
            &[("Sec-WebSocket-Version", "8")],
            &[("Sec-WebSocket-Key", "short")],
            &[("Host", "")],
        ];
        for case in cases {
            assert_eq!(status(judge(&request(case), false, &[])), 400, "{case:?}");
        }
    }

    #[test]
    fn origins_default_to_the_same_host_and_port() {
        let with = |origin, tls, allowed: &[String]| {
            status(judge(&request(&[("Origin", origin)]), tls, allowed))
        };
        assert_eq!(with("https://relay.example:8443", true, &[]), 101);
        assert_eq!(with("https://RELAY.example:8443/", true, &[]), 101);
        assert_eq!(with("https://relay.example", true, &[]), 403);
        assert_eq!(with("https://evil.example:8443", true, &[]), 403);
        assert_eq!(with("null", false, &[]), 403);
        // Default ports on both sides.
        let r = request(&[
            ("Host", "relay.example"),
            ("Origin", "https://relay.example"),
        ]);
        assert_eq!(status(judge(&r, true, &[])), 101);
        assert_eq!(status(judge(&r, false, &[])), 403);
    }

    #[test]
    fn an_allow_list_replaces_the_default() {
        let allowed = vec!["https://player.example".to_string()];
        let with = |origin, allowed: &[String]| {
            status(judge(&request(&[("Origin", origin)]), true, allowed))
        };
        assert_eq!(with("https://player.example", &allowed), 101);
        assert_eq!(with("https://player.example:443", &allowed), 101);
        assert_eq!(with("http://player.example", &allowed), 403);
        assert_eq!(with("https://relay.example:8443", &allowed), 403);
        assert_eq!(with("https://anything.example", &["*".to_string()]), 101);
        // No Origin: not a browser.
        assert_eq!(status(judge(&request(&[]), true, &allowed)), 101);
    }

    #[test]
    fn a_url_without_a_port_gets_its_scheme_s() {
        assert_eq!(with_port("relay.example", "wss"), "relay.example:443");
        assert_eq!(with_port("relay.example", "ws"), "relay.example:80");
        assert_eq!(with_port("relay.example:7443", "wss"), "relay.example:7443");
        assert_eq!(with_port("[::1]", "wss"), "[::1]:443");
        assert_eq!(with_port("[::1]:7443", "ws"), "[::1]:7443");
    }

    #[test]
    fn a_refusal_is_a_whole_http_reply() {
        let r = UpgradeRefusal {
            status: 403,
            body: "origin x is not allowed".into(),
        };
        let reply = r.reply();
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{reply}"
        );
        assert_eq!(body, "origin x is not allowed\n");
    }
}
