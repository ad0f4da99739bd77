//! The live sink: publishes the stream to a relay from a thread of its own, which runs a
//! small single-threaded tokio runtime (the game thread never sees one). The encoder's
//! bytes are split into the stream header and whole chunks here, and handed over through
//! an unbounded channel into the publisher's outbox, which is bounded in bytes
//! ([`LiveConfig::buffer_bytes`]) and beyond that spills to a file when
//! [`LiveConfig::spill_dir`] is set: a relay away for longer than both bounds fail this
//! sink, not the others.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::net::publisher::{self, Input, Progress, Target};
use crate::stream::{split_stream, ChunkHeader};

use super::{LogLevel, Shared, SinkKind, SinkState};

/// Where to publish live.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The relay's address (`host:port`).
    pub addr: String,
    /// Over WebSocket (`ws://ADDR/`) instead of plain TCP.
    pub websocket: bool,
    /// Session name (`[A-Za-z0-9._-]{1,64}`).
    pub session: String,
    /// Publishing token.
    pub token: String,
    /// Chunks kept for the relay while it has not acknowledged them, in bytes (default
    /// 8 MiB, several minutes of a live lossless stream).
    pub buffer_bytes: usize,
    /// Beyond `buffer_bytes`, keep chunks in a file in this folder (default: none; the sink
    /// then fails when the bound is reached).
    pub spill_dir: Option<std::path::PathBuf>,
    /// Bound of the spill file in bytes (default 256 MiB).
    pub spill_bytes: u64,
    /// Wait between reconnection attempts (default 500 ms).
    pub retry_every: Duration,
    /// Failed connections in a row before the sink gives up (default 120).
    pub max_retries: u32,
}

impl LiveConfig {
    /// Defaults for the relay at `addr`.
    pub fn new(addr: &str, session: &str, token: &str) -> Self {
        LiveConfig {
            addr: addr.into(),
            websocket: false,
            session: session.into(),
            token: token.into(),
            buffer_bytes: 8 << 20,
            spill_dir: None,
            spill_bytes: 256 << 20,
            retry_every: Duration::from_millis(500),
            max_retries: 120,
        }
    }
}

pub(super) struct LiveSink {
    config: LiveConfig,
    shared: Arc<Shared>,
    /// Bytes not yet split into the header or whole chunks.
    pending: Vec<u8>,
    tx: Option<mpsc::UnboundedSender<Input>>,
    thread: Option<JoinHandle<()>>,
}

impl LiveSink {
    pub(super) fn start(config: LiveConfig, shared: Arc<Shared>) -> Self {
        LiveSink {
            config,
            shared,
            pending: Vec::new(),
            tx: None,
            thread: None,
        }
    }

    /// New stream bytes. The first bytes are the stream header: the publisher starts once
    /// it is whole.
    pub(super) fn send(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        if self.thread.is_none() {
            let Some((_, header_len, _)) = split_stream(&self.pending) else {
                return;
            };
            let header = Bytes::copy_from_slice(&self.pending[..header_len]);
            self.pending.drain(..header_len);
            self.spawn(header);
        }
        let mut at = 0;
        while let Some((h, hlen)) = self.pending.get(at..).and_then(ChunkHeader::parse_at) {
            let end = at + hlen + h.len as usize;
            if end > self.pending.len() {
                break;
            }
            let chunk = Bytes::copy_from_slice(&self.pending[at..end]);
            if let Some(tx) = &self.tx {
                // A closed channel means the publisher ended (and said why).
                let _ = tx.send(Input::Chunk(chunk));
            }
            at = end;
        }
        self.pending.drain(..at);
    }

    fn spawn(&mut self, header: Bytes) {
        let (tx, rx) = mpsc::unbounded_channel();
        let target = Target {
            addr: self.config.addr.clone(),
            websocket: self.config.websocket,
            session: self.config.session.clone(),
            token: self.config.token.clone(),
            key: publisher::new_key(),
            buffer_bytes: self.config.buffer_bytes,
            spill: self.config.spill_dir.clone().map(|dir| publisher::Spill {
                dir,
                limit: self.config.spill_bytes,
            }),
            retry_every: self.config.retry_every,
            max_retries: self.config.max_retries,
            finish_timeout: Duration::from_secs(10),
        };
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("bsor-recorder-live".into())
            .spawn(move || run(target, header, rx, shared));
        match spawned {
            Ok(t) => {
                self.tx = Some(tx);
                self.thread = Some(t);
            }
            Err(e) => self
                .shared
                .fail(SinkKind::Live, format!("starting the live thread: {e}")),
        }
    }

    /// Ends publishing: with `End` after the last acknowledgement when `complete`, else by
    /// closing (the relay then ends the session after its publisher timeout). Waits for
    /// the live thread, which gives up after its finish timeout.
    pub(super) fn finish(mut self, complete: bool) {
        if let Some(tx) = self.tx.take() {
            if complete {
                let _ = tx.send(Input::Finished);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(target: Target, header: Bytes, rx: mpsc::UnboundedReceiver<Input>, shared: Arc<Shared>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return shared.fail(SinkKind::Live, format!("starting the live runtime: {e}"));
        }
    };
    let addr = target.addr.clone();
    let progress = |p: Progress| match p {
        Progress::Connected(next) => shared.log(
            LogLevel::Info,
            &format!("live: connected to {addr}, resuming at chunk {next}"),
        ),
        Progress::Lost(e) => shared.log(LogLevel::Warn, &format!("live: {e}; reconnecting")),
        Progress::Acked(n) => shared.live_acked.store(n, Ordering::Relaxed),
        Progress::Spilling => shared.log(
            LogLevel::Warn,
            "live: the relay is behind by more than the memory bound; spilling to disk",
        ),
    };
    match rt.block_on(publisher::publish(target, header, rx, progress)) {
        Ok(()) => {
            if shared.sink(SinkKind::Live) == SinkState::Running {
                shared.set_sink(SinkKind::Live, SinkState::Done);
            }
        }
        Err(e) => shared.fail(SinkKind::Live, format!("live: {e}")),
    }
}
