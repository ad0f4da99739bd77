//! The relay over TCP: frames straight on the byte stream, through [`WireCodec`]. Only how
//! a socket becomes messages lives here; the connection itself is run by
//! [`Server::drive`], as for WebSocket.

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Decoder, FramedRead, FramedWrite};

use super::gate::ReadGate;
use super::server::{MessageSink, MessageStream, Server};
use super::wire::{Message, WireCodec, WireError};

/// A TCP socket as messages in and out.
pub fn transport(socket: TcpStream, max_frame: u32) -> (MessageSink, MessageStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    (
        Box::pin(FramedWrite::new(write, WireCodec::new(max_frame))),
        Box::pin(FramedRead::new(read, WireCodec::new(max_frame))),
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

/// The relay's side of a TCP socket: reads through `gate` into a small buffer that grows
/// only as bytes come, frames limited by the gate's current limit (the relay's, for this
/// connection) and a publisher's chunks by their type's limit.
pub fn relay_transport(socket: TcpStream, gate: &ReadGate) -> (MessageSink, MessageStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let codec = GatedCodec { gate: gate.clone() };
    let mut sink = FramedWrite::with_capacity(write, WireCodec::default(), BUFFER);
    sink.set_backpressure_boundary(BUFFER);
    (
        Box::pin(sink),
        Box::pin(FramedRead::with_capacity(gate.wrap(read), codec, BUFFER)),
    )
}

/// The initial size of a relay connection's read and write buffers (tokio's default is
/// 8 KiB each: 160 MB for 10,000 connections before they send anything).
const BUFFER: usize = 1024;

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
    super::server::accept_each(listener, server, |socket, server| async move {
        let peer = socket.peer_addr().ok().map(|a| a.ip());
        let gate = ReadGate::new(0, 0);
        let (sink, stream) = relay_transport(socket, &gate);
        server.drive_from(peer, Some(gate), stream, sink).await;
    })
    .await;
}
