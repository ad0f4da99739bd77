//! The publisher over TCP or WebSocket with tokio: one task that carries out what the
//! [`Client`](crate::net::client::Client) asks, for the command-line tool.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Input, Pending, Progress, PublishError, Target};
use crate::net::client::ClientEvent;
use crate::net::server::{MessageSink, MessageStream};
use crate::net::viewer::connect;

/// Publishes `header` and the chunks that come through `input` to the relay, until
/// [`Input::Finished`] (then `End` once every chunk is acknowledged) or until the input
/// closes (then the connection just closes, and the relay ends the session if the publisher
/// does not come back). Reconnects with the publisher key and resumes from the relay's
/// `Resume next_seq`, within the target's retry budget.
pub async fn publish(
    target: Target,
    header: Bytes,
    mut input: mpsc::UnboundedReceiver<Input>,
    mut progress: impl FnMut(Progress),
) -> Result<(), PublishError> {
    let start = Instant::now();
    let now = move || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut p = Pending::new(&target, header, now());
    let mut conn: Option<(MessageSink, MessageStream)> = None;
    let mut input_open = true;
    loop {
        while let Some(event) = p.client.poll_event() {
            match event {
                ClientEvent::Connect => match connect(
                    &target.addr,
                    target.websocket,
                    p.client.config().handshake_timeout_ms,
                )
                .await
                {
                    Ok(c) => {
                        conn = Some(c);
                        p.client.connected(now());
                    }
                    Err(e) => p.client.connection_lost(now(), e),
                },
                ClientEvent::Disconnect => {
                    if let Some((mut tx, _)) = conn.take() {
                        // What the client queued last (its End) goes out first.
                        while let Some(m) = p.next_message()? {
                            let _ = tx.feed(m).await;
                        }
                        let _ = tx.close().await;
                    }
                }
                ClientEvent::Established { next_seq } => progress(Progress::Connected(next_seq)),
                ClientEvent::Lost(e) => progress(Progress::Lost(e.to_string())),
                ClientEvent::Acked(n) => {
                    p.acked();
                    progress(Progress::Acked(n));
                }
                ClientEvent::Failed(e) => return Err(e.into()),
                ClientEvent::End(_) => {
                    if let Some((mut tx, _)) = conn.take() {
                        let _ = tx.close().await;
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        if p.client.is_closed() {
            return Ok(());
        }
        if let Some((tx, _)) = &mut conn {
            let mut fed = false;
            while let Some(m) = p.next_message()? {
                fed = true;
                if let Err(e) = tx.feed(m).await {
                    p.client.connection_lost(now(), e.to_string());
                    break;
                }
            }
            if fed {
                if let Err(e) = tx.flush().await {
                    p.client.connection_lost(now(), e.to_string());
                }
            }
            if p.client.has_events() {
                continue;
            }
        }
        let deadline = p
            .client
            .poll_timeout()
            .map(|t| start + std::time::Duration::from_millis(t));
        let sleep = tokio::time::sleep_until(deadline.unwrap_or_else(|| Instant::now() + FOREVER));
        tokio::pin!(sleep);
        let received = async {
            match &mut conn {
                Some((_, rx)) => rx.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut sleep => p.client.handle_timeout(now()),
            m = input.recv(), if input_open => match m {
                Some(Input::Chunk(c)) => {
                    if p.take(c)? && p.client.spilled() == 1 {
                        progress(Progress::Spilling);
                    }
                }
                Some(Input::Finished) => p.client.finish(now()),
                None => {
                    input_open = false;
                    // Stopped without finishing: leave the session to the relay.
                    if !p.client.is_finishing() {
                        p.client.abandon();
                    }
                }
            },
            m = received => match m {
                Some(Ok(m)) => p.client.handle_message(m, now()),
                Some(Err(e)) => p.client.connection_lost(now(), e.to_string()),
                None => p.client.connection_lost(now(), "the relay closed the connection"),
            },
        }
    }
}

const FOREVER: std::time::Duration = std::time::Duration::from_secs(365 * 86400);
