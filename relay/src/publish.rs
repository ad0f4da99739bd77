//! The publisher over TCP or WebSocket with tokio: one task that carries out what the
//! [`Client`](bsor_stream_core::net::client::Client) asks, for the command-line tool.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::server::{MessageSink, MessageStream};
use crate::viewer::{connect, Endpoint};
use bsor_stream_core::net::client::ClientEvent;
use bsor_stream_core::net::publisher::{Input, Pending, Progress, PublishError, Target};

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
    let tls = match &target.ca_file {
        Some(ca) => Some(bsor_stream_core::net::tls::client_config(ca)?),
        None => None,
    };
    let endpoint = Endpoint {
        addr: target.addr.clone(),
        websocket: target.websocket,
        tls,
    };
    let mut shell = Shell {
        p: Pending::new(&target, header, 0),
        endpoint,
        conn: None,
        start,
        attempt: 0,
    };
    let mut input_open = true;
    loop {
        if let Some(done) = shell.carry_out(&mut progress).await? {
            return Ok(done);
        }
        shell.transmit().await?;
        if shell.p.client.has_events() {
            continue;
        }
        let deadline = shell
            .p
            .client
            .poll_timeout()
            .map_or(start + FOREVER, |t| start + Duration::from_millis(t));
        let received = async {
            match &mut shell.conn {
                Some((_, rx)) => rx.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => shell.p.client.handle_timeout(ms(start)),
            m = input.recv(), if input_open => match m {
                Some(Input::Chunk(c)) => {
                    if shell.p.take(c)? && shell.p.client.spilled() == 1 {
                        progress(Progress::Spilling);
                    }
                }
                Some(Input::Finished) => shell.p.client.finish(ms(start)),
                None => {
                    input_open = false;
                    // Stopped without finishing: leave the session to the relay.
                    if !shell.p.client.is_finishing() {
                        shell.p.client.abandon();
                    }
                }
            },
            m = received => match m {
                Some(Ok(m)) => shell.p.client.handle_message(m, ms(start)),
                Some(Err(e)) => shell.p.client.connection_lost(ms(start), e.to_string()),
                None => shell.p.client.connection_lost(ms(start), "the relay closed the connection"),
            },
        }
    }
}

const FOREVER: Duration = Duration::from_secs(365 * 86400);

/// Milliseconds since `start`: the client's clock.
fn ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The client with its spill file, and the transport it asked for.
struct Shell {
    p: Pending,
    endpoint: Endpoint,
    conn: Option<(MessageSink, MessageStream)>,
    start: Instant,
    /// Connections tried: the next goes to the endpoint's next address.
    attempt: usize,
}

impl Shell {
    fn now(&self) -> u64 {
        ms(self.start)
    }

    /// Carries out the client's events; `Some(())` once it is done.
    async fn carry_out(
        &mut self,
        progress: &mut impl FnMut(Progress),
    ) -> Result<Option<()>, PublishError> {
        while let Some(event) = self.p.client.poll_event() {
            match event {
                ClientEvent::Connect => {
                    let timeout = self.p.client.config().handshake_timeout_ms;
                    self.attempt += 1;
                    match connect(&self.endpoint, self.attempt - 1, timeout).await {
                        Ok(c) => {
                            self.conn = Some(c);
                            self.p.client.connected(self.now());
                        }
                        Err(e) => self.p.client.connection_lost(self.now(), e),
                    }
                }
                ClientEvent::Disconnect => self.close().await?,
                ClientEvent::End(_) => {
                    self.close().await?;
                    return Ok(Some(()));
                }
                other => self.p.report(other, progress)?,
            }
        }
        Ok(self.p.client.is_closed().then_some(()))
    }

    /// Sends what the client queued last (its End) and closes the transport.
    async fn close(&mut self) -> Result<(), PublishError> {
        if let Some((mut tx, _)) = self.conn.take() {
            while let Some(m) = self.p.next_message()? {
                let _ = tx.feed(m).await;
            }
            let _ = tx.close().await;
        }
        Ok(())
    }

    /// Sends everything the client has to send.
    async fn transmit(&mut self) -> Result<(), PublishError> {
        let Some((tx, _)) = &mut self.conn else {
            return Ok(());
        };
        let mut fed = false;
        let mut failed = None;
        while let Some(m) = self.p.next_message()? {
            fed = true;
            if let Err(e) = tx.feed(m).await {
                failed = Some(e.to_string());
                break;
            }
        }
        if fed && failed.is_none() {
            failed = tx.flush().await.err().map(|e| e.to_string());
        }
        if let Some(e) = failed {
            let now = self.now();
            self.p.client.connection_lost(now, e);
        }
        Ok(())
    }
}
