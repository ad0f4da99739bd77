//! The relay over TCP: frames straight on the byte stream, through [`Framing`], in the
//! clear or inside TLS. Only how a socket becomes messages lives here; the connection itself
//! is run by [`Server::drive`], as for WebSocket.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

use crate::gate::ReadGate;
use crate::server::{MessageSink, MessageStream, Server};
use bsor_stream_core::net::wire::{Message, WireCodec, WireError};

/// A TCP socket as messages in and out.
pub fn transport(socket: TcpStream, max_frame: u32) -> (MessageSink, MessageStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    (
        Box::pin(FramedWrite::new(write, Framing(WireCodec::new(max_frame)))),
        Box::pin(FramedRead::new(read, Framing(WireCodec::new(max_frame)))),
    )
}

/// Any byte stream (a TLS stream, say) as messages in and out.
pub fn transport_over<S>(io: S, max_frame: u32) -> (MessageSink, MessageStream)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    (
        Box::pin(FramedWrite::new(write, Framing(WireCodec::new(max_frame)))),
        Box::pin(FramedRead::new(read, Framing(WireCodec::new(max_frame)))),
    )
}

/// Connects to a relay at `addr` (`HOST:PORT`).
pub async fn connect(
    addr: &str,
    max_frame: u32,
) -> Result<(MessageSink, MessageStream), WireError> {
    let socket = TcpStream::connect(addr).await?;
    Ok(transport(socket, max_frame))
}

/// Connects to a relay at `addr` (`HOST:PORT`) over TLS, checking its certificate against
/// `tls`'s roots and the host part of `addr`.
pub async fn connect_tls(
    addr: &str,
    tls: Arc<rustls::ClientConfig>,
    max_frame: u32,
) -> Result<(MessageSink, MessageStream), WireError> {
    let stream = tls_stream(addr, tls).await?;
    Ok(transport_over(stream, max_frame))
}

/// A TCP connection to `addr` with the TLS handshake done.
pub async fn tls_stream(
    addr: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, WireError> {
    let name = bsor_stream_core::net::tls::server_name(addr).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect(addr).await?;
    let _ = socket.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, socket)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("TLS: {e}")))?;
    Ok(stream)
}

/// The relay's side of a TCP socket: reads through `gate` into a small buffer that grows
/// only as bytes come, frames limited by the gate's current limit (the relay's, for this
/// connection) and a publisher's chunks by their type's limit.
pub fn relay_transport(socket: TcpStream, gate: &ReadGate) -> (MessageSink, MessageStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let codec = GatedCodec { gate: gate.clone() };
    let mut sink = FramedWrite::with_capacity(write, Framing::default(), BUFFER);
    sink.set_backpressure_boundary(BUFFER);
    (
        Box::pin(sink),
        Box::pin(FramedRead::with_capacity(gate.wrap(read), codec, BUFFER)),
    )
}

/// The relay's side of any byte stream (a TLS stream, say), as [`relay_transport`] reads a
/// TCP socket.
pub fn relay_transport_over<S>(io: S, gate: &ReadGate) -> (MessageSink, MessageStream)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    let codec = GatedCodec { gate: gate.clone() };
    let mut sink = FramedWrite::with_capacity(write, Framing::default(), BUFFER);
    sink.set_backpressure_boundary(BUFFER);
    (
        Box::pin(sink),
        Box::pin(FramedRead::with_capacity(gate.wrap(read), codec, BUFFER)),
    )
}

/// The initial size of a relay connection's read and write buffers (tokio's default is
/// 8 KiB each: 160 MB for 10,000 connections before they send anything).
const BUFFER: usize = 1024;

/// The core's sans-IO [`WireCodec`] as `tokio_util`'s codec: whole frames out of a byte
/// stream, messages into one.
#[derive(Debug, Default)]
pub struct Framing(pub WireCodec);

impl Decoder for Framing {
    type Item = Message;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        self.0.decode_from(src)
    }
}

impl Encoder<Message> for Framing {
    type Error = WireError;

    fn encode(&mut self, m: Message, dst: &mut BytesMut) -> Result<(), WireError> {
        m.encode(dst);
        Ok(())
    }
}

/// The wire codec, its frame limit read from the connection's gate.
struct GatedCodec {
    gate: ReadGate,
}

impl Decoder for GatedCodec {
    type Item = Message;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        WireCodec::new(self.gate.limit()).decode_from(src)
    }
}

/// Serves `server` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, server: Server) {
    crate::server::accept_each(listener, server, |socket, server| async move {
        let peer = socket.peer_addr().ok().map(|a| a.ip());
        let gate = ReadGate::new(0, 0);
        let (sink, stream) = relay_transport(socket, &gate);
        server.drive_from(peer, Some(gate), stream, sink).await;
    })
    .await;
}

/// Serves `server` over TLS on `listener` until the task is dropped. A TLS handshake that
/// fails or outlasts the relay's handshake timeout is logged with the peer's address and
/// closes that connection only.
pub async fn serve_tls(listener: TcpListener, server: Server, tls: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    crate::server::accept_each(listener, server, move |socket, server| {
        let acceptor = acceptor.clone();
        async move {
            let peer = socket.peer_addr().ok().map(|a| a.ip());
            let Some(slot) = server.handshake_slot(peer) else {
                return;
            };
            let Some(stream) = accept_tls(&acceptor, socket, server.handshake_timeout()).await
            else {
                return;
            };
            drop(slot);
            let gate = ReadGate::new(0, 0);
            let (sink, stream) = relay_transport_over(stream, &gate);
            server.drive_from(peer, Some(gate), stream, sink).await;
        }
    })
    .await;
}

/// The server's side of a TLS handshake within `timeout`; a failure is logged with the
/// peer's address.
pub(crate) async fn accept_tls(
    acceptor: &tokio_rustls::TlsAcceptor,
    socket: TcpStream,
    timeout: Duration,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let _ = socket.set_nodelay(true);
    let peer = socket
        .peer_addr()
        .map_or_else(|_| "an unknown address".to_string(), |a| a.to_string());
    match tokio::time::timeout(timeout, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(err)) => {
            tracing::info!(%peer, %err, "TLS handshake failed; closing the connection");
            None
        }
        Err(_) => {
            tracing::info!(%peer, ?timeout, "no TLS handshake in time; closing the connection");
            None
        }
    }
}
