//! The relay over TCP: a thin tokio shell around the sans-IO [`Relay`]. Each connection has
//! a reader task (frames in, through [`WireCodec`]) and a writer task (messages out, pulled
//! from the relay when it says the connection has some). The relay itself is behind one
//! mutex and never waits on a socket.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::relay::{ConnId, Relay, RelayEvent};
use super::wire::{Message, WireCodec};

/// Messages a writer takes from the relay at a time.
const BATCH: usize = 64;

/// One connection's writer: woken when the relay has messages for it, or to close.
struct Writer {
    wake: Notify,
    closing: Mutex<bool>,
    /// Tells the connection's reader to stop once the relay asked to close it.
    close: Notify,
}

/// The relay and the writers of its connections.
struct Shared {
    relay: Mutex<Relay>,
    writers: Mutex<HashMap<ConnId, Arc<Writer>>>,
    start: Instant,
    max_frame: u32,
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Runs `f` on the relay, then hands out what it asked for.
    fn with_relay<T>(&self, f: impl FnOnce(&mut Relay, u64) -> T) -> T {
        let now = self.now();
        let (out, events) = {
            let mut relay = self.relay.lock().unwrap_or_else(|p| p.into_inner());
            let out = f(&mut relay, now);
            let mut events = Vec::new();
            while let Some(e) = relay.poll_event() {
                events.push(e);
            }
            (out, events)
        };
        if events.is_empty() {
            // Most calls (a writer taking its messages) have nothing to hand out.
            return out;
        }
        let writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            match e {
                RelayEvent::Ready(c) => {
                    if let Some(w) = writers.get(&c) {
                        w.wake.notify_one();
                    }
                }
                RelayEvent::Close(c) => {
                    if let Some(w) = writers.get(&c) {
                        *w.closing.lock().unwrap_or_else(|p| p.into_inner()) = true;
                        w.wake.notify_one();
                        w.close.notify_one();
                    }
                }
                // The archive is not written yet: events for it are dropped here.
                RelayEvent::ArchiveHeader(..)
                | RelayEvent::ArchiveChunk(..)
                | RelayEvent::SessionEnded(..) => {}
            }
        }
        out
    }
}

/// Serves the relay on `listener` until the task is dropped. `tick` is how often timeouts
/// are checked.
pub async fn serve(listener: TcpListener, relay: Relay, max_frame: u32, tick: Duration) {
    let shared = Arc::new(Shared {
        relay: Mutex::new(relay),
        writers: Mutex::new(HashMap::new()),
        start: Instant::now(),
        max_frame,
    });
    let ticker = shared.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        loop {
            interval.tick().await;
            ticker.with_relay(|r, now| r.tick(now));
        }
    });
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(_) => {
                // Out of file descriptors, say: wait instead of spinning.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move { connection(shared, socket).await });
    }
}

async fn connection(shared: Arc<Shared>, socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let writer = Arc::new(Writer {
        wake: Notify::new(),
        closing: Mutex::new(false),
        close: Notify::new(),
    });
    let conn = {
        let id = shared.with_relay(|r, now| r.connect(now));
        shared
            .writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, writer.clone());
        id
    };
    let out_shared = shared.clone();
    let out_writer = writer.clone();
    let writing = tokio::spawn(async move {
        let mut sink = FramedWrite::new(write, WireCodec::new(out_shared.max_frame));
        loop {
            let batch: Vec<Message> = out_shared.with_relay(|r, _| {
                std::iter::from_fn(|| r.poll_outgoing(conn))
                    .take(BATCH)
                    .collect()
            });
            let more = batch.len() == BATCH;
            for m in batch {
                if sink.feed(m).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
            if more {
                continue;
            }
            let closing = *out_writer.closing.lock().unwrap_or_else(|p| p.into_inner());
            if closing && out_shared.with_relay(|r, _| r.queued(conn)) == 0 {
                return;
            }
            out_writer.wake.notified().await;
        }
    });
    let mut frames = FramedRead::new(read, WireCodec::new(shared.max_frame));
    loop {
        tokio::select! {
            next = frames.next() => match next {
                Some(Ok(m)) => shared.with_relay(|r, now| r.receive(conn, m, now)),
                Some(Err(e)) => {
                    shared.with_relay(|r, _| r.reject(conn, &e));
                    break;
                }
                None => break,
            },
            // A close asked before this wait left a permit: it is not missed.
            _ = writer.close.notified() => break,
        }
    }
    // Let the writer send what waits (an error, say) before the socket goes.
    let _ = tokio::time::timeout(Duration::from_secs(2), writing).await;
    shared.with_relay(|r, now| r.disconnect(conn, now));
    shared
        .writers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&conn);
}
