//! The relay over TCP: frames straight on the byte stream, through [`WireCodec`]. Only how
//! a socket becomes messages lives here; the connection itself is run by
//! [`Server::drive`], as for WebSocket.

use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::server::{MessageSink, MessageStream, Server};
use super::wire::{WireCodec, WireError};

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

/// Serves `server` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, server: Server) {
    super::server::accept_each(listener, server, |socket, server| async move {
        let (sink, stream) = transport(socket, server.max_frame());
        server.drive(stream, sink).await;
    })
    .await;
}
