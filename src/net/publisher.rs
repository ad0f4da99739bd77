//! The publishing side of the protocol, for a recorder that streams while the song plays.
//!
//! [`Outbox`] is the logic, without I/O: the chunks the relay has not acknowledged yet,
//! bounded in bytes, which chunk goes out next, and what a `Resume` or an `Ack` removes.
//! [`publish`] drives it over TCP or WebSocket with tokio, reconnecting with the publisher key and
//! resuming from the relay's `Resume next_seq`, so that viewers see no gap and no duplicate.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use super::server::{MessageSink, MessageStream};
use super::wire::{EndReason, ErrorCode, Message, Role, DEFAULT_MAX_FRAME};
use crate::stream::ChunkHeader;

/// The outbox would hold more than its bound: the relay has been away too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{held} bytes wait for the relay's acknowledgement; the bound is {limit}")]
pub struct Overflow {
    /// Bytes held, with the chunk that did not fit.
    pub held: usize,
    /// The bound.
    pub limit: usize,
}

/// Where a chunk waiting in the outbox is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// In memory.
    Memory(Bytes),
    /// In the spill file, at this offset, this long.
    Spilled {
        /// Offset in the spill file.
        at: u64,
        /// Length.
        len: usize,
    },
}

impl Held {
    fn memory(&self) -> usize {
        match self {
            Held::Memory(b) => b.len(),
            Held::Spilled { .. } => 0,
        }
    }
}

/// Chunks on their way to the relay: sent or not, kept until acknowledged, in memory up to
/// a bound and beyond it (when the owner has a spill file) as offsets into that file.
#[derive(Debug)]
pub struct Outbox {
    chunks: VecDeque<(u32, Held)>,
    /// How many of `chunks` went out on the current connection.
    sent: usize,
    bytes: usize,
    limit: usize,
    spilled: usize,
    acked: u64,
}

impl Outbox {
    /// An empty outbox that holds at most `limit` bytes of chunks in memory.
    pub fn new(limit: usize) -> Self {
        Outbox {
            chunks: VecDeque::new(),
            sent: 0,
            bytes: 0,
            limit,
            spilled: 0,
            acked: 0,
        }
    }

    /// Adds a whole chunk (header and payload) to send, in memory. Its sequence number is
    /// read from its header; a chunk without a valid header is refused as `None`.
    pub fn push(&mut self, chunk: Bytes) -> Result<Option<()>, Overflow> {
        let Some((h, _)) = ChunkHeader::parse_at(&chunk) else {
            return Ok(None);
        };
        let held = self.bytes + chunk.len();
        if held > self.limit {
            return Err(Overflow {
                held,
                limit: self.limit,
            });
        }
        self.bytes = held;
        self.chunks.push_back((h.seq, Held::Memory(chunk)));
        Ok(Some(()))
    }

    /// Adds a chunk that the owner wrote to its spill file: its sequence number and where.
    pub fn push_spilled(&mut self, seq: u32, at: u64, len: usize) {
        self.spilled += 1;
        self.chunks.push_back((seq, Held::Spilled { at, len }));
    }

    /// The next chunk to send on this connection.
    pub fn next_to_send(&mut self) -> Option<Held> {
        let c = self.chunks.get(self.sent)?.1.clone();
        self.sent += 1;
        Some(c)
    }

    /// The relay stored every chunk up to and including `seq`.
    pub fn ack(&mut self, seq: u32) {
        while let Some(&(s, _)) = self.chunks.front() {
            if s > seq {
                break;
            }
            self.drop_front();
        }
    }

    /// A new connection: the relay expects `next_seq`; what it has is dropped and the rest
    /// goes out again from the start.
    pub fn resume(&mut self, next_seq: u32) {
        self.sent = 0;
        if let Some(seq) = next_seq.checked_sub(1) {
            self.ack(seq);
        }
    }

    fn drop_front(&mut self) {
        if let Some((_, c)) = self.chunks.pop_front() {
            self.bytes -= c.memory();
            if let Held::Spilled { .. } = c {
                self.spilled -= 1;
            }
            self.sent = self.sent.saturating_sub(1);
            self.acked += 1;
        }
    }

    /// Nothing waits for an acknowledgement.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Chunks held in the spill file.
    pub fn spilled(&self) -> usize {
        self.spilled
    }

    /// Chunks acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }
}

/// A spill file for the chunks that do not fit the outbox's memory bound: appended to while
/// chunks spill, read back to send them, emptied once none waits in it.
struct Spool {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    end: u64,
    limit: u64,
}

impl Spool {
    fn new(spill: &Spill, key: [u8; 16]) -> Self {
        let name: String = key.iter().map(|b| format!("{b:02x}")).collect();
        Spool {
            path: spill.dir.join(format!("bsor-live-{name}.spill")),
            file: None,
            end: 0,
            limit: spill.limit,
        }
    }

    fn write(&mut self, chunk: &[u8]) -> std::io::Result<u64> {
        use std::io::{Seek, SeekFrom, Write};
        if self.end + chunk.len() as u64 > self.limit {
            return Err(std::io::Error::other(format!(
                "the spill file would pass its bound of {} bytes",
                self.limit
            )));
        }
        let f = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&self.path)?,
            ),
        };
        let at = self.end;
        f.seek(SeekFrom::Start(at))?;
        f.write_all(chunk)?;
        self.end += chunk.len() as u64;
        Ok(at)
    }

    fn read(&mut self, at: u64, len: usize) -> std::io::Result<Bytes> {
        use std::io::{Read, Seek, SeekFrom};
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no spill file"))?;
        f.seek(SeekFrom::Start(at))?;
        let mut buf = vec![0; len];
        f.read_exact(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// Nothing waits in the file: start it over (and free the disk).
    fn reset(&mut self) {
        if self.end > 0 {
            if let Some(f) = &self.file {
                let _ = f.set_len(0);
            }
            self.end = 0;
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Spilling to disk beyond the outbox's memory bound.
#[derive(Clone, Debug)]
pub struct Spill {
    /// The folder of the spill file.
    pub dir: std::path::PathBuf,
    /// Bound of the spill file, in bytes.
    pub limit: u64,
}

/// Where and as whom to publish.
#[derive(Clone, Debug)]
pub struct Target {
    /// The relay's address (`HOST:PORT`).
    pub addr: String,
    /// Connect over WebSocket (`ws://ADDR/`) instead of plain TCP.
    pub websocket: bool,
    /// Session name.
    pub session: String,
    /// Publishing token.
    pub token: String,
    /// Proves to the relay that a reconnection is the same publisher: see [`new_key`].
    pub key: [u8; 16],
    /// Bound of the outbox in memory, in bytes.
    pub buffer_bytes: usize,
    /// Beyond it, spill to a file (else the publisher fails with [`Overflow`]).
    pub spill: Option<Spill>,
    /// Wait between reconnection attempts.
    pub retry_every: Duration,
    /// Give up after this many failed connections in a row.
    pub max_retries: u32,
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

/// Why publishing stopped before the end.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The relay refused (a wrong token, a busy session...): retrying would not help.
    #[error("the relay refused: {code:?}: {message}")]
    Refused {
        /// The error code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The relay could not be reached again.
    #[error("gave up after {0} failed connections: {1}")]
    Unreachable(u32, String),
    /// The relay stayed away longer than the outbox could hold.
    #[error(transparent)]
    Overflow(#[from] Overflow),
    /// The spill file failed.
    #[error("spill file: {0}")]
    Spill(std::io::Error),
    /// The stream's bytes did not split into chunks.
    #[error("not a chunk: {0} bytes")]
    NotAChunk(usize),
}

/// A fresh publisher key: hashes of the time, the process and `RandomState`'s seed.
pub fn new_key() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut key = [0u8; 16];
    for half in key.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

/// What the owner feeds the publisher.
#[derive(Debug)]
pub enum Input {
    /// A whole chunk.
    Chunk(Bytes),
    /// The stream is complete: send `End` once everything is acknowledged.
    Finished,
}

struct Conn {
    tx: MessageSink,
    rx: MessageStream,
}

enum Drop_ {
    /// Lost the connection: reconnect.
    Lost(String),
    /// Done, or refused.
    Stop(Result<(), PublishError>),
}

/// Publishes `header` and the chunks that come through `input` to the relay, until
/// [`Input::Finished`] (then `End`) or until the input closes (then the connection just
/// closes, and the relay ends the session if the publisher does not come back).
pub async fn publish(
    target: Target,
    header: Bytes,
    mut input: mpsc::UnboundedReceiver<Input>,
    mut progress: impl FnMut(Progress),
) -> Result<(), PublishError> {
    let mut outbox = Pending {
        outbox: Outbox::new(target.buffer_bytes),
        spool: target.spill.as_ref().map(|s| Spool::new(s, target.key)),
    };
    let mut finished = false;
    let mut input_open = true;
    let mut failures = 0u32;
    let mut resume = false;
    loop {
        let step = match connect(&target, resume).await {
            Ok((conn, next)) => {
                failures = 0;
                resume = true;
                outbox.outbox.resume(next);
                progress(Progress::Connected(next));
                session(
                    conn,
                    &header,
                    &mut outbox,
                    &mut input,
                    &mut finished,
                    &mut input_open,
                    &mut progress,
                    target.finish_timeout,
                )
                .await
            }
            Err(Drop_::Stop(r)) => return r,
            Err(Drop_::Lost(e)) => {
                failures += 1;
                if failures > target.max_retries {
                    return Err(PublishError::Unreachable(failures, e));
                }
                Drop_::Lost(e)
            }
        };
        match step {
            Drop_::Stop(r) => return r,
            Drop_::Lost(e) => {
                progress(Progress::Lost(e));
                // Keep taking chunks while away (into the bounded outbox).
                let sleep = tokio::time::sleep(target.retry_every);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        () = &mut sleep => break,
                        m = input.recv(), if input_open => match m {
                            Some(Input::Chunk(c)) => {
                                if outbox.take(c)? && outbox.outbox.spilled() == 1 {
                                    progress(Progress::Spilling);
                                }
                            }
                            Some(Input::Finished) => finished = true,
                            None => input_open = false,
                        },
                    }
                }
            }
        }
    }
}

/// The outbox and its spill file: the driver's side of [`Outbox`], which does the file I/O.
struct Pending {
    outbox: Outbox,
    spool: Option<Spool>,
}

impl Pending {
    /// Takes a chunk; true when it went to the spill file.
    fn take(&mut self, c: Bytes) -> Result<bool, PublishError> {
        let len = c.len();
        // Once chunks spill, later ones follow them to disk until the file is empty, so
        // that memory goes to the chunks that will go out first.
        let spilling = self.outbox.spilled() > 0;
        let overflow = if spilling {
            None
        } else {
            match self.outbox.push(c.clone()) {
                Ok(Some(())) => return Ok(false),
                Ok(None) => return Err(PublishError::NotAChunk(len)),
                Err(o) => Some(o),
            }
        };
        let (Some(spool), Some((h, _))) = (&mut self.spool, ChunkHeader::parse_at(&c)) else {
            return Err(match overflow {
                Some(o) => PublishError::Overflow(o),
                None => PublishError::NotAChunk(len),
            });
        };
        let at = spool.write(&c).map_err(PublishError::Spill)?;
        self.outbox.push_spilled(h.seq, at, len);
        Ok(true)
    }

    fn next_to_send(&mut self) -> Result<Option<Bytes>, PublishError> {
        match self.outbox.next_to_send() {
            None => Ok(None),
            Some(Held::Memory(b)) => Ok(Some(b)),
            Some(Held::Spilled { at, len }) => {
                let spool = self.spool.as_mut().ok_or_else(|| {
                    PublishError::Spill(std::io::Error::other("a spilled chunk without a file"))
                })?;
                spool.read(at, len).map(Some).map_err(PublishError::Spill)
            }
        }
    }

    fn ack(&mut self, seq: u32) {
        self.outbox.ack(seq);
        if self.outbox.spilled() == 0 {
            if let Some(s) = &mut self.spool {
                s.reset();
            }
        }
    }
}

async fn connect(target: &Target, resume: bool) -> Result<(Conn, u32), Drop_> {
    let lost = |e: String| Drop_::Lost(e);
    let connected = if target.websocket {
        super::ws::connect(&target.addr, DEFAULT_MAX_FRAME).await
    } else {
        super::tcp::connect(&target.addr, DEFAULT_MAX_FRAME).await
    };
    let (tx, rx) = connected.map_err(|e| lost(format!("{}: {e}", target.addr)))?;
    let mut c = Conn { tx, rx };
    let hello = Message::Hello {
        min_version: 1,
        max_version: 1,
        role: Role::Publisher,
        agent: concat!("bsor-stream recorder ", env!("CARGO_PKG_VERSION")).into(),
    };
    c.tx.send(hello).await.map_err(|e| lost(e.to_string()))?;
    expect(&mut c, |m| matches!(m, Message::Hello { .. }).then_some(())).await?;
    let publish = Message::Publish {
        session: target.session.clone(),
        token: target.token.clone(),
        resume,
        publisher_key: target.key,
    };
    c.tx.send(publish).await.map_err(|e| lost(e.to_string()))?;
    let next = expect(&mut c, |m| match m {
        Message::Resume(n) => Some(*n),
        _ => None,
    })
    .await?;
    Ok((c, next))
}

/// The next message, if `want` takes it; an `Error` stops (the relay refused).
async fn expect<T>(c: &mut Conn, want: impl Fn(&Message) -> Option<T>) -> Result<T, Drop_> {
    match c.rx.next().await {
        Some(Ok(m)) => match want(&m) {
            Some(v) => Ok(v),
            None => Err(refusal(m)),
        },
        Some(Err(e)) => Err(Drop_::Lost(e.to_string())),
        None => Err(Drop_::Lost("the relay closed the connection".into())),
    }
}

fn refusal(m: Message) -> Drop_ {
    match m {
        Message::Error { code, message } => {
            Drop_::Stop(Err(PublishError::Refused { code, message }))
        }
        m => Drop_::Stop(Err(PublishError::Refused {
            code: ErrorCode::UnexpectedMessage,
            message: format!("unexpected {m:?}"),
        })),
    }
}

#[allow(clippy::too_many_arguments)]
async fn session(
    mut c: Conn,
    header: &Bytes,
    outbox: &mut Pending,
    input: &mut mpsc::UnboundedReceiver<Input>,
    finished: &mut bool,
    input_open: &mut bool,
    progress: &mut impl FnMut(Progress),
    finish_timeout: Duration,
) -> Drop_ {
    let lost = |e: String| Drop_::Lost(e);
    if let Err(e) = c.tx.send(Message::StreamHeader(header.clone())).await {
        return lost(e.to_string());
    }
    // Armed once the stream is finished or abandoned.
    let finish_deadline = tokio::time::sleep(Duration::from_secs(365 * 86400));
    tokio::pin!(finish_deadline);
    let mut deadline_set = false;
    loop {
        loop {
            let chunk = match outbox.next_to_send() {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => return Drop_::Stop(Err(e)),
            };
            if let Err(e) = c.tx.feed(Message::Chunk(chunk)).await {
                return lost(e.to_string());
            }
        }
        if let Err(e) = c.tx.flush().await {
            return lost(e.to_string());
        }
        if (*finished || !*input_open) && !deadline_set {
            deadline_set = true;
            finish_deadline
                .as_mut()
                .reset(tokio::time::Instant::now() + finish_timeout);
        }
        if *finished && outbox.outbox.is_empty() {
            let _ = c.tx.send(Message::End(EndReason::Finished)).await;
            return Drop_::Stop(Ok(()));
        }
        if !*input_open && !*finished {
            // The recorder stopped without finishing: leave the session to the relay.
            return Drop_::Stop(Ok(()));
        }
        tokio::select! {
            m = input.recv(), if *input_open => match m {
                Some(Input::Chunk(chunk)) => {
                    match outbox.take(chunk) {
                        Ok(true) if outbox.outbox.spilled() == 1 => progress(Progress::Spilling),
                        Ok(_) => {}
                        Err(e) => return Drop_::Stop(Err(e)),
                    }
                }
                Some(Input::Finished) => *finished = true,
                None => *input_open = false,
            },
            m = c.rx.next() => match m {
                Some(Ok(Message::Ack(seq))) => {
                    outbox.ack(seq);
                    progress(Progress::Acked(outbox.outbox.acked()));
                }
                Some(Ok(Message::Ping(n))) => {
                    if let Err(e) = c.tx.send(Message::Pong(n)).await {
                        return lost(e.to_string());
                    }
                }
                Some(Ok(Message::Error { code, message })) => {
                    return match code {
                        ErrorCode::Unauthorized | ErrorCode::SessionBusy
                        | ErrorCode::BadSessionName | ErrorCode::UnsupportedVersion => {
                            Drop_::Stop(Err(PublishError::Refused { code, message }))
                        }
                        _ => lost(format!("relay: {code:?}: {message}")),
                    };
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return lost(e.to_string()),
                None => return lost("the relay closed the connection".into()),
            },
            () = &mut finish_deadline, if deadline_set => {
                return Drop_::Stop(Err(PublishError::Unreachable(
                    0,
                    format!("{} chunks still unacknowledged at the end", outbox.outbox.chunks.len()),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ChunkType;

    fn chunk(seq: u32, payload: usize) -> Bytes {
        let mut out = Vec::new();
        ChunkHeader::new(ChunkType::Frames, seq, 0, 1, 0.0).write_to(&vec![7; payload], &mut out);
        Bytes::from(out)
    }

    #[test]
    fn outbox_resends_what_the_relay_lacks_and_forgets_what_it_acked() {
        let mut o = Outbox::new(1 << 20);
        for s in 0..5 {
            o.push(chunk(s, 10)).unwrap().unwrap();
        }
        let sent: Vec<_> = std::iter::from_fn(|| o.next_to_send()).collect();
        assert_eq!(sent.len(), 5);
        assert_eq!(sent[4], Held::Memory(chunk(4, 10)));
        o.ack(1);
        assert_eq!(o.acked(), 2);
        // Reconnected: the relay stored up to 2 (expects 3).
        o.resume(3);
        let again: Vec<_> = std::iter::from_fn(|| o.next_to_send()).collect();
        assert_eq!(
            again,
            vec![Held::Memory(chunk(3, 10)), Held::Memory(chunk(4, 10))]
        );
        o.ack(4);
        assert!(o.is_empty());
        assert_eq!(o.bytes(), 0);
    }

    #[test]
    fn outbox_is_bounded_and_refuses_non_chunks() {
        let one = chunk(0, 100).len();
        let mut o = Outbox::new(one * 2);
        o.push(chunk(0, 100)).unwrap().unwrap();
        o.push(chunk(1, 100)).unwrap().unwrap();
        let e = o.push(chunk(2, 100)).unwrap_err();
        assert_eq!(e.held, one * 3);
        assert_eq!(o.push(Bytes::from_static(b"junk")).unwrap(), None);
        // An ack makes room.
        o.ack(0);
        o.push(chunk(2, 100)).unwrap().unwrap();
    }

    #[test]
    fn spilled_chunks_keep_their_place_and_leave_memory_alone() {
        let one = chunk(0, 100).len();
        let mut o = Outbox::new(one);
        o.push(chunk(0, 100)).unwrap().unwrap();
        o.push_spilled(1, 0, one);
        o.push_spilled(2, one as u64, one);
        assert_eq!((o.bytes(), o.spilled()), (one, 2));
        assert_eq!(o.next_to_send(), Some(Held::Memory(chunk(0, 100))));
        assert_eq!(o.next_to_send(), Some(Held::Spilled { at: 0, len: one }));
        o.resume(2);
        assert_eq!((o.bytes(), o.spilled()), (0, 1));
        assert_eq!(
            o.next_to_send(),
            Some(Held::Spilled {
                at: one as u64,
                len: one
            })
        );
        assert_eq!(o.next_to_send(), None);
    }
}
