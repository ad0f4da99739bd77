//! The live sink: publishes the stream to a relay over TCP from a thread of its own
//! ([`crate::net::publisher::thread`]: plain `std::net`, no async runtime; the game thread
//! never sees it). The encoder's bytes are split into the stream header and whole chunks
//! here and handed to the publisher's outbox, which is bounded in bytes
//! ([`LiveConfig::buffer_bytes`]) and beyond that spills to a file when
//! [`LiveConfig::spill_dir`] is set: a relay away for longer than both bounds fails this
//! sink, not the others.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::net::publisher::thread::Publisher;
use crate::net::publisher::{self, Progress, Target};
use crate::stream::{split_stream, ChunkHeader};

use super::{LogLevel, Shared, SinkKind, SinkState};

/// Where to publish live.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The relay's TCP address (`host:port`).
    pub addr: String,
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
    /// Publish over TLS, trusting only the certificates in this PEM file (default: none,
    /// plain TCP). A headset has no system store: the mod ships the relay's CA.
    pub ca_file: Option<std::path::PathBuf>,
    /// Bound of the spill file in bytes (default 256 MiB).
    pub spill_bytes: u64,
    /// The first wait between reconnection attempts (default 500 ms); it doubles after each
    /// failed attempt, up to 5 s.
    pub retry_every: Duration,
    /// Failed connections in a row before the sink gives up (default 120), once
    /// `retry_for` has passed too. Each attempt takes at most the handshake timeout (10 s)
    /// and usually far less (a refused connection fails at once).
    pub max_retries: u32,
    /// How long the sink keeps trying after the relay went away, however many attempts
    /// fail (default 60 s: a relay restarted resumes the session, `wire.md` §4.1).
    pub retry_for: Duration,
    /// After finish, how long the sink waits for the relay to acknowledge the last chunk,
    /// connected or not, before it gives up (default 10 s).
    pub finish_timeout: Duration,
}

impl LiveConfig {
    /// Defaults for the relay at `addr`.
    pub fn new(addr: &str, session: &str, token: &str) -> Self {
        LiveConfig {
            addr: addr.into(),
            session: session.into(),
            token: token.into(),
            buffer_bytes: 8 << 20,
            spill_dir: None,
            ca_file: None,
            spill_bytes: 256 << 20,
            retry_every: Duration::from_millis(500),
            max_retries: 120,
            retry_for: Duration::from_secs(60),
            finish_timeout: Duration::from_secs(10),
        }
    }
}

pub(super) struct LiveSink {
    config: LiveConfig,
    shared: Arc<Shared>,
    /// Bytes not yet split into the header or whole chunks.
    pending: Vec<u8>,
    publisher: Option<Publisher>,
    /// The header was seen (and the publisher started, or failed to start).
    started: bool,
}

impl LiveSink {
    pub(super) fn start(config: LiveConfig, shared: Arc<Shared>) -> Self {
        LiveSink {
            config,
            shared,
            pending: Vec::new(),
            publisher: None,
            started: false,
        }
    }

    /// New stream bytes. The first bytes are the stream header: the publisher starts once
    /// it is whole.
    pub(super) fn send(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        if !self.started {
            let Some((_, header_len, _)) = split_stream(&self.pending) else {
                return;
            };
            let header = Bytes::copy_from_slice(&self.pending[..header_len]);
            self.pending.drain(..header_len);
            self.started = true;
            self.spawn(header);
        }
        let mut at = 0;
        while let Some((h, hlen)) = self.pending.get(at..).and_then(ChunkHeader::parse_at) {
            let end = at + hlen + h.len as usize;
            if end > self.pending.len() {
                break;
            }
            if let Some(p) = &self.publisher {
                p.send(Bytes::copy_from_slice(&self.pending[at..end]));
            }
            at = end;
        }
        self.pending.drain(..at);
    }

    fn spawn(&mut self, header: Bytes) {
        let key = match publisher::new_key() {
            Ok(key) => key,
            Err(e) => {
                return self
                    .shared
                    .fail(SinkKind::Live, format!("live: no publisher key: {e}"));
            }
        };
        let target = Target {
            addr: self.config.addr.clone(),
            websocket: false,
            ca_file: self.config.ca_file.clone(),
            session: self.config.session.clone(),
            token: self.config.token.clone(),
            key,
            buffer_bytes: self.config.buffer_bytes,
            spill: self.config.spill_dir.clone().map(|dir| publisher::Spill {
                dir,
                limit: self.config.spill_bytes,
            }),
            retry_every: self.config.retry_every,
            max_retries: self.config.max_retries,
            retry_for: self.config.retry_for,
            finish_timeout: self.config.finish_timeout,
        };
        let shared = Arc::clone(&self.shared);
        let addr = target.addr.clone();
        let progress = move |p: Progress| match p {
            Progress::Connected(next) => {
                let (from, to) = (SinkState::Connecting, SinkState::Running);
                shared.move_sink(SinkKind::Live, from, to);
                shared.log(
                    LogLevel::Info,
                    &format!("live: connected to {addr}, resuming at chunk {next}"),
                );
            }
            Progress::Lost(e) => {
                let (from, to) = (SinkState::Running, SinkState::Connecting);
                shared.move_sink(SinkKind::Live, from, to);
                shared.log(LogLevel::Warn, &format!("live: {e}; reconnecting"));
            }
            Progress::Acked(n) => shared.live_acked.store(n, Ordering::Relaxed),
            Progress::Spilling => shared.log(
                LogLevel::Warn,
                "live: the relay is behind by more than the memory bound; spilling to disk",
            ),
        };
        match Publisher::spawn("bsor-recorder-live", target, header, progress) {
            Ok(p) => self.publisher = Some(p),
            Err(e) => self
                .shared
                .fail(SinkKind::Live, format!("starting the live thread: {e}")),
        }
    }

    /// The live thread ended before finish (it gave up reconnecting, say): the sink
    /// fails, with the reason.
    pub(super) fn check(&mut self) {
        if !self.publisher.as_ref().is_some_and(Publisher::is_finished) {
            return;
        }
        if let Some(p) = self.publisher.take() {
            let e = p
                .join()
                .err()
                .map_or("ended early".into(), |e| e.to_string());
            self.shared.fail(SinkKind::Live, format!("live: {e}"));
        }
    }

    /// Ends publishing: with `End` after the last acknowledgement when `complete`, else by
    /// closing (the relay then ends the session after its publisher timeout). Waits for
    /// the live thread, which gives up after its finish timeout, unless the recorder is
    /// dropped meanwhile: the thread is then left to end on its own.
    pub(super) fn finish(mut self, complete: bool) {
        let Some(p) = self.publisher.take() else {
            return;
        };
        p.end(complete);
        while !p.is_finished() {
            if self.shared.stop.load(Ordering::Acquire) {
                // Dropped (the thread ends within its budget, and no longer logs).
                return;
            }
            std::thread::park_timeout(Duration::from_millis(5));
        }
        match p.join() {
            Ok(()) => {
                let state = self.shared.sink(SinkKind::Live);
                if complete && matches!(state, SinkState::Running | SinkState::Connecting) {
                    self.shared.set_sink(SinkKind::Live, SinkState::Done);
                }
            }
            Err(e) => self.shared.fail(SinkKind::Live, format!("live: {e}")),
        }
    }
}
