//! The publishing side of the protocol, for a recorder that streams while the song plays.
//!
//! The protocol logic is [`crate::net::client::Client`] (sans-IO); this module holds what
//! its publishing shells share — where to publish ([`Target`]), what the owner feeds them
//! ([`Input`]) and hears back ([`Progress`]), and the spill file beyond the outbox's memory
//! bound — and the shells themselves: [`thread`], one plain thread over `std::net` TCP (the
//! recorder's live sink: no async runtime in a game). The async shell over TCP or WebSocket
//! with tokio (the command-line tool's) is the relay crate's (`bsor-stream-relay`).

pub mod thread;

use std::time::Duration;

use bytes::Bytes;

use super::client::{Client, ClientConfig, ClientError, ClientEvent, Publication};
pub use super::spool::Spill;
use super::spool::Spool;
use crate::stream::ChunkHeader;

/// Where and as whom to publish.
#[derive(Clone, Debug)]
pub struct Target {
    /// The relay's address (`HOST:PORT`).
    pub addr: String,
    /// Connect over WebSocket (`ws://ADDR/`) instead of plain TCP.
    pub websocket: bool,
    /// Connect over TLS (`wss://` with `websocket`), trusting only the certificates in this
    /// PEM file; read when publishing starts.
    pub ca_file: Option<std::path::PathBuf>,
    /// Session name.
    pub session: String,
    /// Publishing token.
    pub token: String,
    /// Proves to the relay that a reconnection is the same publisher: see [`new_key`].
    pub key: [u8; 16],
    /// Bound of the outbox in memory, in bytes.
    pub buffer_bytes: usize,
    /// Beyond it, spill to a file (else the publisher fails with an overflow).
    pub spill: Option<Spill>,
    /// The first wait between reconnection attempts; it doubles after each failed attempt,
    /// up to 5 s.
    pub retry_every: Duration,
    /// Give up after this many failed connections in a row, once `retry_for` has passed
    /// too.
    pub max_retries: u32,
    /// Keep trying at least this long after the relay went away (a relay restart), however
    /// many attempts fail meanwhile (zero: `max_retries` alone decides).
    pub retry_for: Duration,
    /// After the last chunk, wait this long for the relay's acknowledgements.
    pub finish_timeout: Duration,
}

/// What the publisher tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Connected (again) and resumed at this sequence number.
    Connected(u32),
    /// The connection was lost; reconnecting.
    Lost(String),
    /// The relay acknowledged chunks: how many so far in all.
    Acked(u64),
    /// The memory bound is reached: chunks go to the spill file until the relay catches up.
    Spilling,
}

/// A fresh publisher key, from the operating system's random number generator: the key is
/// what lets a publisher resume its session, across relay restarts too (`wire.md` §4.1),
/// so it must not be guessable. Fails when the system has no randomness to give.
pub fn new_key() -> std::io::Result<[u8; 16]> {
    let mut key = [0u8; 16];
    getrandom::getrandom(&mut key).map_err(|e| match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::other(e.to_string()),
    })?;
    Ok(key)
}

/// What the owner feeds the publisher.
#[derive(Debug)]
pub enum Input {
    /// A whole chunk.
    Chunk(Bytes),
    /// The stream is complete: send `End` once everything is acknowledged.
    Finished,
}

/// Why publishing stopped before the end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The protocol session failed: a refusal, a relay that stayed away, an overflow.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The spill file failed.
    #[error("spill file: {0}")]
    Spill(std::io::Error),
    /// TLS could not be set up (the CA file, or the relay's address).
    #[cfg(feature = "tls")]
    #[error("TLS: {0}")]
    Tls(#[from] super::tls::TlsError),
    /// TLS was asked for in a build without the `tls` feature.
    #[error("TLS was asked for, but this build has no TLS")]
    NoTls,
    /// The publisher's thread panicked.
    #[error("the publisher thread panicked")]
    Panicked,
}

impl Target {
    /// The client session for this target and stream header.
    pub fn client(&self, header: Bytes, now: u64) -> Client {
        let config = ClientConfig {
            agent: concat!("bsor-stream recorder ", env!("CARGO_PKG_VERSION")).into(),
            retry_every_ms: millis(self.retry_every),
            max_retries: self.max_retries,
            retry_for_ms: millis(self.retry_for),
            finish_timeout_ms: millis(self.finish_timeout),
            ..ClientConfig::default()
        };
        let publication = Publication {
            session: self.session.clone(),
            token: self.token.clone(),
            key: self.key,
            header,
            buffer_bytes: self.buffer_bytes,
        };
        Client::publisher(config, publication, now)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The client and its spill file: the chunks the owner hands over go to the client's
/// outbox, or beyond its bound to the spill file, and spilled chunks are read back to send.
pub struct Pending {
    /// The protocol's client (sans-IO), which the shell drives.
    pub client: Client,
    spool: Option<Spool>,
}

impl Pending {
    /// The client for `target`, announcing `header`, and its spill file if it has one.
    pub fn new(target: &Target, header: Bytes, now: u64) -> Self {
        Pending {
            client: target.client(header, now),
            spool: target.spill.as_ref().map(|s| Spool::new(s, target.key)),
        }
    }

    /// Takes a chunk; true when it went to the spill file.
    pub fn take(&mut self, c: Bytes) -> Result<bool, PublishError> {
        // Once chunks spill, later ones follow them to disk until the file is empty, so
        // that memory goes to the chunks that will go out first.
        let overflow = if self.client.spilled() > 0 {
            None
        } else {
            match self.client.push_chunk(c.clone()) {
                Ok(()) => return Ok(false),
                Err(e @ ClientError::Overflow(_)) => Some(e),
                Err(e) => return Err(e.into()),
            }
        };
        let (Some(spool), Some((h, _))) = (&mut self.spool, ChunkHeader::parse_at(&c)) else {
            return Err(overflow.unwrap_or(ClientError::NotAChunk(c.len())).into());
        };
        let at = spool.write(&c).map_err(PublishError::Spill)?;
        self.client.push_spilled(h.seq, at, c.len());
        Ok(true)
    }

    /// The next message to send, with spilled chunks read back.
    pub fn next_message(&mut self) -> Result<Option<super::wire::Message>, PublishError> {
        use super::client::Outgoing;
        use super::wire::Message;
        match self.client.poll_transmit() {
            None => Ok(None),
            Some(Outgoing::Message(m)) => Ok(Some(m)),
            Some(Outgoing::Spilled { at, len }) => {
                let spool = self.spool.as_mut().ok_or_else(|| {
                    PublishError::Spill(std::io::Error::other("a spilled chunk without a file"))
                })?;
                let chunk = spool.read(at, len).map_err(PublishError::Spill)?;
                Ok(Some(Message::Chunk(chunk)))
            }
        }
    }

    /// Reports to the owner an event both shells treat alike (connected, lost, acked) and
    /// turns `Failed` into the error that ends publishing; the transport events (`Connect`,
    /// `Disconnect`) and `End` are each shell's own.
    pub fn report(
        &mut self,
        event: ClientEvent,
        progress: &mut impl FnMut(Progress),
    ) -> Result<(), PublishError> {
        match event {
            ClientEvent::Established { next_seq } => progress(Progress::Connected(next_seq)),
            ClientEvent::Lost(e) => progress(Progress::Lost(e.to_string())),
            ClientEvent::Acked(n) => {
                self.acked();
                progress(Progress::Acked(n));
            }
            ClientEvent::Failed(e) => return Err(e.into()),
            _ => {}
        }
        Ok(())
    }

    /// After an acknowledgement: an empty spill file starts over.
    fn acked(&mut self) {
        if self.client.spilled() == 0 {
            if let Some(s) = &mut self.spool {
                s.reset();
            }
        }
    }
}
