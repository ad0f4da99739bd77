//! The relay over WebSocket (`ws://ADDR/`): the same frames as over TCP, one frame per binary
//! message (`wire.md` §1). Only how a WebSocket becomes messages lives here; the connection
//! itself is run by [`Server::drive`], as for TCP.

use std::time::Duration;

use bytes::BytesMut;
use futures_util::{future, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use super::gate::ReadGate;
use super::server::{MessageSink, MessageStream, Server};
use super::wire::{self, Message, WebSocketFault, WireError};

/// How long a client may take over the WebSocket opening handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

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
fn relay_config(max_frame: u32) -> WebSocketConfig {
    config(max_frame)
        .read_buffer_size(4 << 10)
        .write_buffer_size(0)
}

/// The most bytes the relay reads of a WebSocket opening handshake before it is done.
const HTTP_REQUEST_MAX: u64 = 16 << 10;

fn ws_error(e: WsError, max_frame: u32) -> WireError {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, .. }) => WireError::FrameTooLarge {
            length: size.saturating_sub(4).min(u32::MAX as usize) as u32,
            limit: max_frame,
        },
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
    let url = if addr.starts_with("ws://") {
        addr.to_string()
    } else {
        format!("ws://{addr}/")
    };
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config(max_frame)), true)
        .await
        .map_err(|e| ws_error(e, max_frame))?;
    Ok(transport(ws, max_frame))
}

/// Serves `server` over WebSocket on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, server: Server) {
    super::server::accept_each(listener, server, |socket, server| async move {
        let _ = socket.set_nodelay(true);
        let max = server.max_frame();
        let peer = socket.peer_addr().ok().map(|a| a.ip());
        // The opening handshake may take an HTTP request's worth; after it, the gate
        // follows the relay's frame limit for the connection.
        let gate = ReadGate::new(HTTP_REQUEST_MAX, 0);
        let accepted = tokio::time::timeout(
            HANDSHAKE,
            tokio_tungstenite::accept_async_with_config(gate.wrap(socket), Some(relay_config(max))),
        )
        .await;
        if let Ok(Ok(ws)) = accepted {
            let (sink, stream) = transport(ws, max);
            server.drive_from(peer, Some(gate), stream, sink).await;
        }
    })
    .await;
}
