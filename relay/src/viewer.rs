//! The viewer over TCP or WebSocket with tokio: one task that carries out what the viewing
//! [`Client`] asks (handshake, pongs, reconnection, deadlines) and hands the owner what
//! arrives. `bsor-stream watch` and `demo` watch through it.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::time::Instant;

use crate::server::{MessageSink, MessageStream};
use bsor_stream_core::net::client::{
    Client, ClientConfig, ClientError, ClientEvent, Outgoing, Subscription,
};
use bsor_stream_core::net::wire::DEFAULT_MAX_FRAME;

/// Where a client connects: the relay's address and the transport.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `HOST:PORT` (or, over WebSocket, a whole `ws://` or `wss://` URL); several,
    /// comma-separated, for relays of one cluster (`wire.md` §5): the first is tried first,
    /// and each reconnection moves to the next.
    pub addr: String,
    /// Over WebSocket instead of plain TCP.
    pub websocket: bool,
    /// Over TLS, with this configuration (see [`bsor_stream_core::net::tls::client_config`]).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Watches `subscription` on the relay at `addr` until the stream ends (`Ok(true)`), the
/// owner breaks (`Ok(false)`), or the client fails. `on` sees every event but `Connect`
/// and `Disconnect`: the header, chunks, skips, losses and the end.
pub async fn watch(
    addr: &str,
    websocket: bool,
    subscription: Subscription,
    config: ClientConfig,
    on: impl FnMut(ClientEvent) -> ControlFlow<()>,
) -> Result<bool, ClientError> {
    let endpoint = Endpoint {
        addr: addr.into(),
        websocket,
        tls: None,
    };
    watch_at(&endpoint, subscription, config, on).await
}

/// [`watch`] at an [`Endpoint`] (over TLS, say).
pub async fn watch_at(
    endpoint: &Endpoint,
    subscription: Subscription,
    config: ClientConfig,
    mut on: impl FnMut(ClientEvent) -> ControlFlow<()>,
) -> Result<bool, ClientError> {
    let start = Instant::now();
    let now = move || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut client = Client::viewer(config, subscription, now());
    let mut conn: Option<(MessageSink, MessageStream)> = None;
    let mut attempt = 0;
    loop {
        while let Some(event) = client.poll_event() {
            match event {
                ClientEvent::Connect => {
                    let timeout = client.config().handshake_timeout_ms;
                    attempt += 1;
                    match connect(endpoint, attempt - 1, timeout).await {
                        Ok(c) => {
                            conn = Some(c);
                            client.connected(now());
                        }
                        Err(e) => client.connection_lost(now(), e),
                    }
                }
                ClientEvent::Disconnect => {
                    if let Some((mut tx, _)) = conn.take() {
                        let _ = tx.close().await;
                    }
                }
                ClientEvent::Failed(e) => return Err(e),
                ClientEvent::End(r) => {
                    let _ = on(ClientEvent::End(r));
                    return Ok(true);
                }
                e => {
                    if on(e).is_break() {
                        client.abandon();
                        return Ok(false);
                    }
                }
            }
        }
        if client.is_closed() {
            return Ok(false);
        }
        if let Some((tx, _)) = &mut conn {
            transmit(&mut client, tx, now()).await;
            if client.has_events() {
                continue;
            }
        }
        let deadline = client
            .poll_timeout()
            .map_or(start + Duration::from_secs(365 * 86400), |t| {
                start + Duration::from_millis(t)
            });
        let received = async {
            match &mut conn {
                Some((_, rx)) => rx.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => client.handle_timeout(now()),
            m = received => match m {
                Some(Ok(m)) => client.handle_message(m, now()),
                Some(Err(e)) => client.connection_lost(now(), e.to_string()),
                None => client.connection_lost(now(), "the relay closed the connection"),
            },
        }
    }
}

/// Sends what the client has to send (a viewer sends only control messages).
async fn transmit(client: &mut Client, tx: &mut MessageSink, now: u64) {
    let mut fed = false;
    while let Some(Outgoing::Message(m)) = client.poll_transmit() {
        fed = true;
        if let Err(e) = tx.feed(m).await {
            return client.connection_lost(now, e.to_string());
        }
    }
    if fed {
        if let Err(e) = tx.flush().await {
            client.connection_lost(now, e.to_string());
        }
    }
}

/// A transport to `endpoint` within `timeout_ms`: to its `attempt`-th address, counting
/// round its list.
pub(crate) async fn connect(
    endpoint: &Endpoint,
    attempt: usize,
    timeout_ms: u64,
) -> Result<(MessageSink, MessageStream), String> {
    let addrs: Vec<&str> = endpoint
        .addr
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    let addr = addrs
        .get(attempt % addrs.len().max(1))
        .copied()
        .unwrap_or(&endpoint.addr);
    let connecting = async {
        match (&endpoint.tls, endpoint.websocket) {
            (tls, true) => crate::ws::connect_with(addr, tls.clone(), DEFAULT_MAX_FRAME).await,
            (Some(tls), false) => {
                crate::tcp::connect_tls(addr, tls.clone(), DEFAULT_MAX_FRAME).await
            }
            (None, false) => crate::tcp::connect(addr, DEFAULT_MAX_FRAME).await,
        }
    };
    match tokio::time::timeout(Duration::from_millis(timeout_ms), connecting).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("{addr}: {e}")),
        Err(_) => Err(format!("{addr}: no connection within {timeout_ms} ms")),
    }
}
