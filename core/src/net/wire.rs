//! The live protocol's framing and messages (`proto-spec/wire.md`): one length-delimited frame
//! format for TCP and WebSocket.
//!
//! Sans-IO: [`Message::encode`] and [`Message::decode`] work on byte buffers, and
//! [`WireCodec::decode_from`] cuts whole frames out of a byte stream. The relay's crate
//! (`bsor-stream-relay`) puts the same codec under `tokio_util`'s `Decoder`/`Encoder`, so the
//! same bytes go to a TCP stream through `Framed` and into WebSocket binary messages.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::stream::{ChunkHeader, ChunkType};

/// The protocol version this crate speaks.
pub const VERSION: u16 = 1;
/// The relay's default limit on a frame's length.
pub const DEFAULT_MAX_FRAME: u32 = 8 << 20;
/// The longest token a `Publish` may carry, in bytes.
pub const MAX_TOKEN: usize = 256;

/// Who is speaking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The relay (in its answer to a client's `Hello`).
    Relay,
    /// A recorder sending a stream.
    Publisher,
    /// A spectator.
    Viewer,
}

/// Why a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// The song ended: the stream is whole.
    Finished,
    /// The publisher went away and did not come back in time.
    PublisherGone,
}

/// What a viewer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ViewMode {
    /// The live edge: a viewer that falls behind skips to the next keyframe group.
    Live,
    /// Every chunk, from the archive or a bounded backlog, or an error.
    Complete,
}

/// The error codes of `Error` messages (`wire.md` §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A frame's length is over the receiver's limit.
    FrameTooLarge,
    /// A frame whose body does not parse.
    Malformed,
    /// A type this version does not define.
    UnknownMessage,
    /// A message out of order.
    UnexpectedMessage,
    /// No version in common.
    UnsupportedVersion,
    /// A missing or wrong token.
    Unauthorized,
    /// A session name that breaks its rule.
    BadSessionName,
    /// The session already has a publisher.
    SessionBusy,
    /// The session did not start in time.
    NoSuchSession,
    /// The handshake or the connection stayed idle too long.
    Timeout,
    /// Too many messages or bytes too fast.
    Flood,
    /// A chunk with a bad header, length or CRC.
    MalformedChunk,
    /// A complete-mode viewer fell further behind than the relay keeps.
    BacklogExceeded,
    /// The relay failed.
    Internal,
    /// A memory or connection budget of the connection, its address, its session or the
    /// relay as a whole would be exceeded.
    OverBudget,
    /// A publisher's stream header does not parse as a stream header of a supported version.
    BadStreamHeader,
    /// A finished session of that name is on disk and this publisher is not resuming it.
    SessionExists,
    /// A code this version does not define (kept as received).
    Other(u16),
}

impl ErrorCode {
    /// The code on the wire.
    pub fn code(self) -> u16 {
        match self {
            ErrorCode::FrameTooLarge => 1,
            ErrorCode::Malformed => 2,
            ErrorCode::UnknownMessage => 3,
            ErrorCode::UnexpectedMessage => 4,
            ErrorCode::UnsupportedVersion => 5,
            ErrorCode::Unauthorized => 6,
            ErrorCode::BadSessionName => 7,
            ErrorCode::SessionBusy => 8,
            ErrorCode::NoSuchSession => 9,
            ErrorCode::Timeout => 10,
            ErrorCode::Flood => 11,
            ErrorCode::MalformedChunk => 12,
            ErrorCode::BacklogExceeded => 13,
            ErrorCode::Internal => 14,
            ErrorCode::OverBudget => 15,
            ErrorCode::BadStreamHeader => 16,
            ErrorCode::SessionExists => 17,
            ErrorCode::Other(c) => c,
        }
    }

    /// The code of a number on the wire.
    pub fn from_code(c: u16) -> Self {
        match c {
            1 => ErrorCode::FrameTooLarge,
            2 => ErrorCode::Malformed,
            3 => ErrorCode::UnknownMessage,
            4 => ErrorCode::UnexpectedMessage,
            5 => ErrorCode::UnsupportedVersion,
            6 => ErrorCode::Unauthorized,
            7 => ErrorCode::BadSessionName,
            8 => ErrorCode::SessionBusy,
            9 => ErrorCode::NoSuchSession,
            10 => ErrorCode::Timeout,
            11 => ErrorCode::Flood,
            12 => ErrorCode::MalformedChunk,
            13 => ErrorCode::BacklogExceeded,
            14 => ErrorCode::Internal,
            15 => ErrorCode::OverBudget,
            16 => ErrorCode::BadStreamHeader,
            17 => ErrorCode::SessionExists,
            c => ErrorCode::Other(c),
        }
    }
}

/// One message of the protocol. Stream headers and chunks are carried as [`Bytes`], so a
/// relay fans a chunk out to every viewer without copying it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message {
    /// Version negotiation and role.
    Hello {
        /// Lowest version the sender speaks.
        min_version: u16,
        /// Highest version the sender speaks.
        max_version: u16,
        /// Who the sender is.
        role: Role,
        /// Free text naming the software (at most 64 bytes).
        agent: String,
    },
    /// A publisher asks to publish a session.
    Publish {
        /// The session's name.
        session: String,
        /// A credential from the relay's token file.
        token: String,
        /// Whether this continues an earlier connection.
        resume: bool,
        /// The publisher's random key for this session.
        publisher_key: [u8; 16],
    },
    /// A viewer asks to watch a session.
    Subscribe {
        /// The session's name.
        session: String,
        /// Live edge or every chunk.
        mode: ViewMode,
        /// How long to wait for a session that has not started, in milliseconds.
        wait_ms: u32,
        /// The sequence number of the first chunk wanted: a viewer that reconnects (to this
        /// relay or another of its cluster) asks for the chunks after those it has (0: as a
        /// new viewer; on the wire only when not 0).
        from: u32,
    },
    /// The stream header (`format.md` §3).
    StreamHeader(Bytes),
    /// One whole chunk (`format.md` §4).
    Chunk(Bytes),
    /// Every chunk up to this sequence number is stored.
    Ack(u32),
    /// The sequence number the relay expects next.
    Resume(u32),
    /// The stream ended.
    End(EndReason),
    /// An error; the sender closes the connection after it.
    Error {
        /// What went wrong.
        code: ErrorCode,
        /// Words for a person.
        message: String,
    },
    /// Are you there?
    Ping(u64),
    /// Yes.
    Pong(u64),
    /// A live viewer was moved past this much to the next keyframe group.
    Skipped {
        /// Chunks skipped.
        chunks: u32,
        /// Bytes skipped.
        bytes: u64,
    },
    /// A witness statement the relay made for a checkpoint it received (`integrity.md`
    /// §12.1); relay to publisher and viewers.
    Witness(Bytes),
}

/// Why bytes are not a message: which rule they break, and where (the message type, the
/// field, the byte offset). Each kind maps to the error code sent to the peer
/// ([`WireError::code`]); new kinds may be added, so match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// A frame's length is over the limit (seen from its 4 length bytes).
    #[error("frame of {length} bytes is over the limit of {limit}")]
    FrameTooLarge {
        /// The frame's length field.
        length: u32,
        /// The limit.
        limit: u32,
    },
    /// A frame whose length field does not fit the bytes it came in.
    #[error("malformed frame: {0}")]
    BadFrame(FrameFault),
    /// A message body that does not parse.
    #[error("malformed {message} message: {field} at byte {offset} of the body: {fault}")]
    Malformed {
        /// The message type's name (`"Hello"`, `"Publish"`, ...).
        message: &'static str,
        /// The field being read (`"end"` for bytes after the last one).
        field: &'static str,
        /// Where the field starts in the message body (after the type byte).
        offset: usize,
        /// What is wrong with it.
        fault: Fault,
    },
    /// A type this version does not define.
    #[error("unknown message type 0x{0:02x}")]
    UnknownMessage(u8),
    /// A session name that breaks `[A-Za-z0-9._-]{1,64}` or is only dots.
    #[error("bad session name in {message}")]
    BadSessionName {
        /// The message type's name.
        message: &'static str,
    },
    /// A chunk with a bad header, length or CRC.
    #[error("malformed chunk: {0}")]
    MalformedChunk(ChunkFault),
    /// A WebSocket message that is not one binary frame.
    #[error("malformed WebSocket message: {0}")]
    WebSocket(WebSocketFault),
    /// The transport failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What is wrong with a frame's length field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameFault {
    /// Fewer than 4 bytes: not even the length field.
    #[error("{len} bytes, shorter than its length field")]
    ShorterThanLength {
        /// The bytes there were.
        len: usize,
    },
    /// Length 0: no type byte.
    #[error("length 0 (no type byte)")]
    Empty,
    /// A WebSocket message holds other than one whole frame.
    #[error("length {length} but {actual} bytes follow it (not one whole frame)")]
    NotOneFrame {
        /// The length field.
        length: u32,
        /// The bytes after it.
        actual: usize,
    },
}

/// What is wrong with a field of a message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// The body ends before the field does.
    #[error("the body ends early")]
    EndsEarly,
    /// A string longer than its field allows.
    #[error("string of {length} bytes over its limit of {limit}")]
    StringTooLong {
        /// The string's length field.
        length: usize,
        /// The field's limit.
        limit: usize,
    },
    /// A string that is not UTF-8.
    #[error("string is not UTF-8")]
    NotUtf8,
    /// An optional field present with the value its absence means (it is left out then).
    #[error("present with 0, which is written by leaving it out")]
    PresentZero,
    /// A one-byte field with a value this version does not define.
    #[error("unknown value {value}")]
    UnknownValue {
        /// The value.
        value: u8,
    },
    /// `min_version` above `max_version`.
    #[error("min_version {min} above max_version {max}")]
    VersionRange {
        /// `min_version`.
        min: u16,
        /// `max_version`.
        max: u16,
    },
    /// Bytes after the last field.
    #[error("{count} bytes after the last field")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

/// What is wrong with a chunk (`format.md`'s chunk header and CRCs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkFault {
    /// No valid chunk header (bad sync, varint or header CRC, or cut short).
    #[error("no valid chunk header")]
    NoHeader,
    /// The header's length does not match the bytes there are.
    #[error("header and payload make {header} bytes, the frame holds {frame}")]
    Length {
        /// Header plus payload length, as the header says.
        header: usize,
        /// The bytes there are.
        frame: usize,
    },
    /// Longer than its type's limit for its count (`format.md` §4.3).
    #[error("a {kind} chunk of {count} records is {length} bytes, over its limit of {limit}")]
    TooLong {
        /// The chunk type's name.
        kind: &'static str,
        /// The header's `count`.
        count: u32,
        /// Header plus payload, as the header says.
        length: usize,
        /// The limit for that type and count.
        limit: usize,
    },
    /// A frame chunk whose `count` is 0 or over 4096.
    #[error("a frame chunk of {count} frames (1 to 4096 allowed)")]
    FrameCount {
        /// The header's `count`.
        count: u32,
    },
    /// The payload's CRC differs from the header's.
    #[error("payload CRC {actual:08x}, header says {expected:08x}")]
    PayloadCrc {
        /// The header's CRC.
        expected: u32,
        /// The payload's.
        actual: u32,
    },
}

/// What is wrong with a WebSocket message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebSocketFault {
    /// A text message (frames travel in binary messages).
    #[error("a text message")]
    Text,
    /// The WebSocket layer refused it (a protocol violation, say).
    #[error("not a valid WebSocket message")]
    Invalid,
}

impl WireError {
    /// The error code to send before closing the connection.
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            WireError::BadFrame(_) | WireError::Malformed { .. } | WireError::WebSocket(_) => {
                ErrorCode::Malformed
            }
            WireError::UnknownMessage(_) => ErrorCode::UnknownMessage,
            WireError::BadSessionName { .. } => ErrorCode::BadSessionName,
            WireError::MalformedChunk(_) => ErrorCode::MalformedChunk,
            WireError::Io(_) => ErrorCode::Internal,
        }
    }
}

/// True for a session name the protocol accepts: `[A-Za-z0-9._-]{1,64}` and not only dots
/// (`.` and `..` name folders, and a name made of dots would make a hidden archive file).
pub fn valid_session_name(s: &str) -> bool {
    valid_session_name_bytes(s.as_bytes())
}

fn valid_session_name_bytes(s: &[u8]) -> bool {
    (1..=64).contains(&s.len())
        && s.iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && s.iter().any(|&b| b != b'.')
}

/// The most frames a frame chunk holds (`format.md` §4.1, the stream module's limit).
const MAX_CHUNK_FRAMES: u32 = 4096;
/// The longest chunk header there is (sync, type, four 5-byte varints, `t0`, two CRCs).
pub const CHUNK_HEADER_MAX: usize = 34;
/// Bytes a frame chunk may take per frame (`format.md` §4.3).
pub const CHUNK_BYTES_PER_FRAME: usize = 256;
/// Bytes an event chunk may take per record (`format.md` §4.3).
pub const CHUNK_BYTES_PER_RECORD: usize = 128;
/// Bytes an index chunk may take per entry (`format.md` §4.3).
pub const CHUNK_BYTES_PER_ENTRY: usize = 32;
/// The limit on a chunk of a type this version does not know.
pub const CHUNK_MAX_OTHER: usize = 1 << 20;
/// The limit on a trailer chunk: it holds the final info (strings of up to 1 MiB each) and
/// the user data (up to 64 MiB, the classic parser's default limit), and cannot be split.
pub const CHUNK_MAX_TRAILER: usize = 96 << 20;
/// Room for a chunk's fixed parts (its header, an event chunk's counts, a zstd frame's
/// header and block headers).
const CHUNK_SLACK: usize = 128;

/// The most bytes (header and payload) a chunk of type `kind` holding `count` frames,
/// records or entries may take (`format.md` §4.3); `None` for a frame chunk whose count is
/// 0 or over 4096.
pub fn chunk_limit(kind: ChunkType, count: u32) -> Option<usize> {
    let count = count as usize;
    match kind {
        ChunkType::Keyframes | ChunkType::Frames => (1..=MAX_CHUNK_FRAMES as usize)
            .contains(&count)
            .then_some(CHUNK_SLACK + count * CHUNK_BYTES_PER_FRAME),
        ChunkType::Events => {
            Some(CHUNK_SLACK.saturating_add(count.saturating_mul(CHUNK_BYTES_PER_RECORD)))
        }
        ChunkType::Index => {
            Some(CHUNK_SLACK.saturating_add(count.saturating_mul(CHUNK_BYTES_PER_ENTRY)))
        }
        ChunkType::Trailer => Some(CHUNK_MAX_TRAILER),
        ChunkType::Unknown(_) => Some(CHUNK_MAX_OTHER),
    }
}

/// The largest chunk [`chunk_limit`] allows with at most `max_records` records in an event
/// chunk: frame chunks of 4096 frames, or event chunks of `max_records`, whichever is larger.
pub fn largest_chunk(max_records: u32) -> usize {
    let frames = chunk_limit(ChunkType::Keyframes, MAX_CHUNK_FRAMES).unwrap_or(0);
    let events = chunk_limit(ChunkType::Events, max_records).unwrap_or(0);
    frames.max(events).max(CHUNK_MAX_OTHER)
}

/// Checks a chunk's declared size against its type's limit (`format.md` §4.3), from its
/// header alone: `Ok(None)` while `head` is too short to hold the whole chunk header.
pub fn check_chunk_size(head: &[u8]) -> Result<Option<usize>, WireError> {
    let Some((h, hlen)) = ChunkHeader::parse_at(head) else {
        return if head.len() >= CHUNK_HEADER_MAX {
            Err(WireError::MalformedChunk(ChunkFault::NoHeader))
        } else {
            Ok(None)
        };
    };
    let length = hlen + h.len as usize;
    let limit =
        chunk_limit(h.kind, h.count).ok_or(WireError::MalformedChunk(ChunkFault::FrameCount {
            count: h.count,
        }))?;
    if length > limit {
        return Err(WireError::MalformedChunk(ChunkFault::TooLong {
            kind: chunk_kind_name(h.kind),
            count: h.count,
            length,
            limit,
        }));
    }
    Ok(Some(length))
}

fn chunk_kind_name(kind: ChunkType) -> &'static str {
    match kind {
        ChunkType::Keyframes => "keyframes",
        ChunkType::Frames => "frames",
        ChunkType::Events => "events",
        ChunkType::Trailer => "trailer",
        ChunkType::Index => "index",
        ChunkType::Unknown(_) => "unknown",
    }
}

/// Checks that `chunk` is exactly one whole chunk within its type's size limit
/// ([`chunk_limit`]) whose header and payload CRCs hold.
pub fn check_chunk(chunk: &[u8]) -> Result<(), WireError> {
    check_chunk_size(chunk)?;
    let (h, hlen) =
        ChunkHeader::parse_at(chunk).ok_or(WireError::MalformedChunk(ChunkFault::NoHeader))?;
    let header = hlen + h.len as usize;
    if header != chunk.len() {
        let frame = chunk.len();
        return Err(WireError::MalformedChunk(ChunkFault::Length {
            header,
            frame,
        }));
    }
    let actual = crc32fast::hash(&chunk[hlen..]);
    if actual != h.payload_crc {
        let expected = h.payload_crc;
        return Err(WireError::MalformedChunk(ChunkFault::PayloadCrc {
            expected,
            actual,
        }));
    }
    Ok(())
}

fn put_str(out: &mut BytesMut, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(u16::MAX as usize);
    out.put_u16_le(n as u16);
    out.put_slice(&b[..n]);
}

/// A reader of one message body, whose errors name the message, the field and its offset.
struct Body {
    b: Bytes,
    /// The body's length.
    len: usize,
    name: &'static str,
}

impl Body {
    fn new(b: Bytes, name: &'static str) -> Self {
        Body {
            len: b.len(),
            b,
            name,
        }
    }

    /// The offset of the next byte in the body.
    fn at(&self) -> usize {
        self.len - self.b.remaining()
    }

    fn bad(&self, field: &'static str, offset: usize, fault: Fault) -> WireError {
        WireError::Malformed {
            message: self.name,
            field,
            offset,
            fault,
        }
    }

    fn need(&self, field: &'static str, n: usize) -> Result<(), WireError> {
        if self.b.remaining() < n {
            Err(self.bad(field, self.at(), Fault::EndsEarly))
        } else {
            Ok(())
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        self.need(field, 1)?;
        Ok(self.b.get_u8())
    }

    /// A one-byte field that `pick` turns into a value, or an unknown value.
    fn one_of<T>(
        &mut self,
        field: &'static str,
        pick: impl FnOnce(u8) -> Option<T>,
    ) -> Result<T, WireError> {
        let at = self.at();
        let value = self.u8(field)?;
        pick(value).ok_or_else(|| self.bad(field, at, Fault::UnknownValue { value }))
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        self.need(field, 2)?;
        Ok(self.b.get_u16_le())
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        self.need(field, 4)?;
        Ok(self.b.get_u32_le())
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        self.need(field, 8)?;
        Ok(self.b.get_u64_le())
    }

    fn str(&mut self, field: &'static str, limit: usize) -> Result<String, WireError> {
        let at = self.at();
        let length = usize::from(self.u16(field)?);
        if length > limit {
            return Err(self.bad(field, at, Fault::StringTooLong { length, limit }));
        }
        self.need(field, length)?;
        let s = self.b.split_to(length);
        String::from_utf8(s.to_vec()).map_err(|_| self.bad(field, at, Fault::NotUtf8))
    }

    /// A session name (`[A-Za-z0-9._-]{1,64}`, not only dots). One that breaks the rule,
    /// by its length (up to the `u16` a `str` can have; the frame limit bounds it) or its
    /// bytes, is `BadSessionName`; a body that ends before the name does is `Malformed`.
    fn session(&mut self) -> Result<String, WireError> {
        let length = usize::from(self.u16("session")?);
        self.need("session", length)?;
        let name = self.b.split_to(length);
        if !valid_session_name_bytes(&name) {
            return Err(WireError::BadSessionName { message: self.name });
        }
        // Checked as ASCII just above.
        Ok(name.iter().map(|&b| char::from(b)).collect())
    }

    /// `Subscribe`'s optional `from`: absent is 0; present, it is not 0 (one encoding for
    /// each message).
    fn optional_from(&mut self) -> Result<u32, WireError> {
        if self.b.remaining() == 0 {
            return Ok(0);
        }
        let at = self.at();
        match self.u32("from")? {
            0 => Err(self.bad("from", at, Fault::PresentZero)),
            n => Ok(n),
        }
    }

    fn done(self) -> Result<(), WireError> {
        let count = self.b.remaining();
        if count > 0 {
            Err(self.bad("end", self.at(), Fault::TrailingBytes { count }))
        } else {
            Ok(())
        }
    }
}

impl Message {
    /// The message's type byte.
    pub fn type_byte(&self) -> u8 {
        match self {
            Message::Hello { .. } => 0x01,
            Message::Publish { .. } => 0x02,
            Message::Subscribe { .. } => 0x03,
            Message::StreamHeader(_) => 0x04,
            Message::Chunk(_) => 0x05,
            Message::Ack(_) => 0x06,
            Message::Resume(_) => 0x07,
            Message::End(_) => 0x08,
            Message::Error { .. } => 0x09,
            Message::Ping(_) => 0x0A,
            Message::Pong(_) => 0x0B,
            Message::Skipped { .. } => 0x0C,
            Message::Witness(_) => 0x0D,
        }
    }

    /// The message type's name, as `wire.md` §2 writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "Hello",
            Message::Publish { .. } => "Publish",
            Message::Subscribe { .. } => "Subscribe",
            Message::StreamHeader(_) => "StreamHeader",
            Message::Chunk(_) => "Chunk",
            Message::Ack(_) => "Ack",
            Message::Resume(_) => "Resume",
            Message::End(_) => "End",
            Message::Error { .. } => "Error",
            Message::Ping(_) => "Ping",
            Message::Pong(_) => "Pong",
            Message::Skipped { .. } => "Skipped",
            Message::Witness(_) => "Witness",
        }
    }

    /// Appends the message as one frame (length, type, body).
    pub fn encode(&self, out: &mut BytesMut) {
        let start = out.len();
        out.put_u32_le(0);
        out.put_u8(self.type_byte());
        match self {
            Message::Hello {
                min_version,
                max_version,
                role,
                agent,
            } => {
                out.put_u16_le(*min_version);
                out.put_u16_le(*max_version);
                out.put_u8(match role {
                    Role::Relay => 0,
                    Role::Publisher => 1,
                    Role::Viewer => 2,
                });
                put_str(out, agent);
            }
            Message::Publish {
                session,
                token,
                resume,
                publisher_key,
            } => {
                put_str(out, session);
                put_str(out, token);
                out.put_u8(u8::from(*resume));
                out.put_slice(publisher_key);
            }
            Message::Subscribe {
                session,
                mode,
                wait_ms,
                from,
            } => {
                put_str(out, session);
                out.put_u8(match mode {
                    ViewMode::Live => 0,
                    ViewMode::Complete => 1,
                });
                out.put_u32_le(*wait_ms);
                if *from > 0 {
                    out.put_u32_le(*from);
                }
            }
            Message::StreamHeader(b) | Message::Chunk(b) | Message::Witness(b) => out.put_slice(b),
            Message::Ack(seq) | Message::Resume(seq) => out.put_u32_le(*seq),
            Message::End(reason) => out.put_u8(match reason {
                EndReason::Finished => 0,
                EndReason::PublisherGone => 1,
            }),
            Message::Error { code, message } => {
                out.put_u16_le(code.code());
                put_str(out, message);
            }
            Message::Ping(n) | Message::Pong(n) => out.put_u64_le(*n),
            Message::Skipped { chunks, bytes } => {
                out.put_u32_le(*chunks);
                out.put_u64_le(*bytes);
            }
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Decodes a frame's type and body (the bytes after the length field).
    pub fn decode(kind: u8, body: Bytes) -> Result<Message, WireError> {
        let name = match kind {
            0x01 => "Hello",
            0x02 => "Publish",
            0x03 => "Subscribe",
            0x04 => "StreamHeader",
            0x05 => "Chunk",
            0x06 => "Ack",
            0x07 => "Resume",
            0x08 => "End",
            0x09 => "Error",
            0x0A => "Ping",
            0x0B => "Pong",
            0x0C => "Skipped",
            0x0D => "Witness",
            k => return Err(WireError::UnknownMessage(k)),
        };
        let mut r = Body::new(body, name);
        let m = match kind {
            0x01 => decode_hello(&mut r)?,
            0x02 => decode_publish(&mut r)?,
            0x03 => Message::Subscribe {
                session: r.session()?,
                mode: r.one_of("mode", |v| match v {
                    0 => Some(ViewMode::Live),
                    1 => Some(ViewMode::Complete),
                    _ => None,
                })?,
                wait_ms: r.u32("wait_ms")?,
                from: r.optional_from()?,
            },
            0x04 => Message::StreamHeader(std::mem::take(&mut r.b)),
            0x05 => {
                let chunk = std::mem::take(&mut r.b);
                check_chunk(&chunk)?;
                Message::Chunk(chunk)
            }
            0x06 => Message::Ack(r.u32("seq")?),
            0x07 => Message::Resume(r.u32("next_seq")?),
            0x08 => Message::End(r.one_of("reason", |v| match v {
                0 => Some(EndReason::Finished),
                1 => Some(EndReason::PublisherGone),
                _ => None,
            })?),
            0x09 => Message::Error {
                code: ErrorCode::from_code(r.u16("code")?),
                message: r.str("message", 1024)?,
            },
            0x0A => Message::Ping(r.u64("nonce")?),
            0x0B => Message::Pong(r.u64("nonce")?),
            0x0D => Message::Witness(std::mem::take(&mut r.b)),
            _ => Message::Skipped {
                chunks: r.u32("chunks")?,
                bytes: r.u64("bytes")?,
            },
        };
        r.done()?;
        Ok(m)
    }
}

fn decode_hello(r: &mut Body) -> Result<Message, WireError> {
    let min_version = r.u16("min_version")?;
    let max_version = r.u16("max_version")?;
    let role = r.one_of("role", |v| match v {
        0 => Some(Role::Relay),
        1 => Some(Role::Publisher),
        2 => Some(Role::Viewer),
        _ => None,
    })?;
    if min_version > max_version {
        let fault = Fault::VersionRange {
            min: min_version,
            max: max_version,
        };
        return Err(r.bad("min_version", 0, fault));
    }
    let agent = r.str("agent", 64)?;
    Ok(Message::Hello {
        min_version,
        max_version,
        role,
        agent,
    })
}

fn decode_publish(r: &mut Body) -> Result<Message, WireError> {
    let session = r.session()?;
    let token = r.str("token", MAX_TOKEN)?;
    let resume = r.one_of("resume", |v| match v {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    })?;
    r.need("publisher_key", 16)?;
    let mut publisher_key = [0u8; 16];
    r.b.copy_to_slice(&mut publisher_key);
    Ok(Message::Publish {
        session,
        token,
        resume,
        publisher_key,
    })
}

/// Decodes a byte string that must hold exactly one whole frame (length included), as a
/// WebSocket binary message does. The body is not copied: a chunk stays a slice of `frame`.
pub fn decode_frame(mut frame: Bytes, max_frame: u32) -> Result<Message, WireError> {
    if frame.len() < 4 {
        let len = frame.len();
        return Err(WireError::BadFrame(FrameFault::ShorterThanLength { len }));
    }
    let length = frame.get_u32_le();
    if length > max_frame {
        return Err(WireError::FrameTooLarge {
            length,
            limit: max_frame,
        });
    }
    if length == 0 {
        return Err(WireError::BadFrame(FrameFault::Empty));
    }
    if length as usize != frame.len() {
        let actual = frame.len();
        return Err(WireError::BadFrame(FrameFault::NotOneFrame {
            length,
            actual,
        }));
    }
    let kind = frame.get_u8();
    Message::decode(kind, frame)
}

/// The framing codec: whole frames out of a byte stream, and messages into one. A frame's
/// length is checked against the limit as soon as its 4 length bytes are in, so an
/// oversized frame is refused before its body is buffered.
#[derive(Clone, Copy, Debug)]
pub struct WireCodec {
    max_frame: u32,
}

impl Default for WireCodec {
    fn default() -> Self {
        WireCodec {
            max_frame: DEFAULT_MAX_FRAME,
        }
    }
}

impl WireCodec {
    /// A codec refusing frames longer than `max_frame` bytes.
    pub fn new(max_frame: u32) -> Self {
        WireCodec { max_frame }
    }

    /// The next whole message at the front of `src` (removed from it), `None` while its
    /// frame is incomplete, or the error that must close the connection. A frame's length is
    /// checked as soon as its 4 bytes are in.
    pub fn decode_from(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        let Some(len) = src.get(..4) else {
            return Ok(None);
        };
        let length = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
        if length > self.max_frame {
            return Err(WireError::FrameTooLarge {
                length,
                limit: self.max_frame,
            });
        }
        if length == 0 {
            return Err(WireError::BadFrame(FrameFault::Empty));
        }
        // A chunk's size is judged from its header as soon as that is in, before the rest
        // of a chunk over its type's limit is buffered.
        if src.get(4) == Some(&0x05) {
            let end = src.len().min(4 + length as usize);
            check_chunk_size(&src[5..end])?;
        }
        let total = 4 + length as usize;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(total).freeze();
        frame.advance(4);
        let kind = frame.get_u8();
        Message::decode(kind, frame).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{ChunkHeader, ChunkType};

    fn chunk() -> Bytes {
        let mut c = Vec::new();
        ChunkHeader::new(ChunkType::Frames, 7, 100, 3, 1.5).write_to(b"payload bytes", &mut c);
        Bytes::from(c)
    }

    fn all() -> Vec<Message> {
        vec![
            Message::Hello {
                min_version: 1,
                max_version: 3,
                role: Role::Publisher,
                agent: "bsor-stream 0.1".into(),
            },
            Message::Publish {
                session: "player-1.song_2".into(),
                token: "s3cret".into(),
                resume: true,
                publisher_key: [7; 16],
            },
            Message::Subscribe {
                session: "x".into(),
                mode: ViewMode::Complete,
                wait_ms: 30_000,
                from: 0,
            },
            Message::Subscribe {
                session: "x".into(),
                mode: ViewMode::Live,
                wait_ms: 0,
                from: 1234,
            },
            Message::StreamHeader(Bytes::from_static(b"BSRS....")),
            Message::Chunk(chunk()),
            Message::Ack(41),
            Message::Resume(42),
            Message::End(EndReason::PublisherGone),
            Message::Error {
                code: ErrorCode::SessionBusy,
                message: "taken".into(),
            },
            Message::Ping(u64::MAX),
            Message::Pong(0),
            Message::Skipped {
                chunks: 12,
                bytes: 3456,
            },
            Message::Witness(Bytes::from_static(&[1; 158])),
        ]
    }

    #[test]
    fn every_message_round_trips_in_any_pieces() {
        let mut wire = BytesMut::new();
        for m in all() {
            m.encode(&mut wire);
        }
        for piece in [1usize, 3, 7, 1000] {
            let mut codec = WireCodec::default();
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for p in wire.chunks(piece) {
                buf.extend_from_slice(p);
                while let Some(m) = codec.decode_from(&mut buf).unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, all(), "pieces of {piece}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_from_its_length_alone() {
        let mut codec = WireCodec::new(1000);
        let mut buf = BytesMut::from(&1001u32.to_le_bytes()[..]);
        assert!(matches!(
            codec.decode_from(&mut buf),
            Err(WireError::FrameTooLarge {
                length: 1001,
                limit: 1000
            })
        ));
    }

    #[test]
    fn malformed_bodies_and_unknown_types_are_errors_with_codes() {
        let frame = |kind: u8, body: &[u8]| {
            let mut b = BytesMut::new();
            b.put_u32_le(1 + body.len() as u32);
            b.put_u8(kind);
            b.put_slice(body);
            WireCodec::default().decode_from(&mut b)
        };
        assert_eq!(
            frame(0x77, &[]).unwrap_err().code(),
            ErrorCode::UnknownMessage
        );
        assert_eq!(
            frame(0x06, &[1, 2]).unwrap_err().code(),
            ErrorCode::Malformed
        );
        assert_eq!(
            frame(0x06, &[1, 2, 3, 4, 5]).unwrap_err().code(),
            ErrorCode::Malformed
        );
        // Session names: [A-Za-z0-9._-]{1,64}.
        let mut sub = BytesMut::new();
        put_str(&mut sub, "bad name!");
        sub.put_u8(0);
        sub.put_u32_le(0);
        assert_eq!(
            frame(0x03, &sub).unwrap_err().code(),
            ErrorCode::BadSessionName
        );
        assert!(valid_session_name("a.B-9_z"));
        assert!(valid_session_name(".hidden-but-named"));
        assert!(valid_session_name(&"x".repeat(64)));
        assert!(!valid_session_name(""));
        assert!(!valid_session_name(&"x".repeat(65)));
        // Too long, only dots, or not UTF-8 at all: BadSessionName on the wire, in
        // Subscribe and Publish alike; a name cut short by the body's end is Malformed.
        let long = "x".repeat(65);
        let names: [&[u8]; 6] = [long.as_bytes(), b".", b"..", b"...", b"\xff", b""];
        for name in names {
            let mut sub = BytesMut::new();
            sub.put_u16_le(name.len() as u16);
            sub.put_slice(name);
            let mut publish = sub.clone();
            sub.put_u8(0);
            sub.put_u32_le(0);
            put_str(&mut publish, "token");
            publish.put_u8(0);
            publish.put_slice(&[0; 16]);
            for (kind, body) in [(0x03, &sub), (0x02, &publish)] {
                let err = frame(kind, body).unwrap_err();
                assert_eq!(err.code(), ErrorCode::BadSessionName, "{name:?}: {err}");
            }
        }
        let mut cut = BytesMut::new();
        cut.put_u16_le(10);
        cut.put_slice(b"abc");
        assert_eq!(frame(0x03, &cut).unwrap_err().code(), ErrorCode::Malformed);
        // A chunk whose payload was changed.
        let mut c = chunk().to_vec();
        let last = c.len() - 1;
        c[last] ^= 1;
        assert_eq!(
            frame(0x05, &c).unwrap_err().code(),
            ErrorCode::MalformedChunk
        );
        // A zero length has no type byte.
        let mut zero = BytesMut::from(&0u32.to_le_bytes()[..]);
        assert!(WireCodec::default().decode_from(&mut zero).is_err());
        // Unknown error codes survive a round trip.
        let m = Message::Error {
            code: ErrorCode::from_code(999),
            message: String::new(),
        };
        let mut b = BytesMut::new();
        m.encode(&mut b);
        assert_eq!(WireCodec::default().decode_from(&mut b).unwrap(), Some(m));
    }

    #[test]
    fn a_chunk_is_carried_without_a_copy() {
        let c = chunk();
        let mut b = BytesMut::new();
        Message::Chunk(c.clone()).encode(&mut b);
        let Some(Message::Chunk(got)) = WireCodec::default().decode_from(&mut b).unwrap() else {
            panic!("not a chunk");
        };
        assert_eq!(got, c);
        // Cloning for many viewers shares the one buffer.
        let views: Vec<Bytes> = (0..1000).map(|_| got.clone()).collect();
        assert!(views.iter().all(|v| v.as_ptr() == got.as_ptr()));
    }

    #[test]
    fn a_websocket_message_holds_exactly_one_frame() {
        for m in all() {
            let mut b = BytesMut::new();
            m.encode(&mut b);
            let frame = b.freeze();
            assert_eq!(decode_frame(frame.clone(), DEFAULT_MAX_FRAME).unwrap(), m);
            // Two frames, a frame cut short, a bare length: each is Malformed.
            let mut two = BytesMut::from(&frame[..]);
            two.extend_from_slice(&frame);
            for bad in [
                two.freeze(),
                frame.slice(..frame.len() - 1),
                frame.slice(..3),
            ] {
                let e = decode_frame(bad, DEFAULT_MAX_FRAME).unwrap_err();
                assert_eq!(e.code(), ErrorCode::Malformed, "{m:?}");
            }
        }
        // The limit is judged from the length field.
        let mut big = BytesMut::new();
        big.put_u32_le(1000);
        big.put_u8(0x05);
        let e = decode_frame(big.freeze(), 100).unwrap_err();
        assert_eq!(e.code(), ErrorCode::FrameTooLarge);
        // A chunk stays a slice of the message.
        let mut b = BytesMut::new();
        Message::Chunk(chunk()).encode(&mut b);
        let frame = b.freeze();
        let Message::Chunk(got) = decode_frame(frame.clone(), DEFAULT_MAX_FRAME).unwrap() else {
            panic!("not a chunk");
        };
        assert_eq!(got.as_ptr(), frame[5..].as_ptr());
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    #[test]
    fn a_bad_field_is_named_with_its_message_and_offset() {
        let mut b = BytesMut::new();
        Message::Publish {
            session: "x".into(),
            token: "t".into(),
            resume: true,
            publisher_key: [0; 16],
        }
        .encode(&mut b);
        // Length (4), type (1), then the body: session (2 + 1), token (2 + 1), resume.
        b[5 + 6] = 2;
        match decode_frame(b.freeze(), DEFAULT_MAX_FRAME) {
            Err(WireError::Malformed {
                message: "Publish",
                field: "resume",
                offset: 6,
                fault: Fault::UnknownValue { value: 2 },
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bytes_after_the_last_field_are_counted() {
        let body = Bytes::from_static(&[1, 0, 0, 0, 0, 0, 0, 0, 9, 9]);
        let e = Message::decode(0x0A, body).unwrap_err();
        assert!(matches!(
            e,
            WireError::Malformed {
                message: "Ping",
                field: "end",
                offset: 8,
                fault: Fault::TrailingBytes { count: 2 },
            }
        ));
        assert_eq!(e.code(), ErrorCode::Malformed);
        assert_eq!(
            e.to_string(),
            "malformed Ping message: end at byte 8 of the body: 2 bytes after the last field"
        );
    }

    #[test]
    fn a_chunk_over_its_types_limit_is_refused_from_its_header() {
        let make = |kind, count, len: usize| {
            let mut c = Vec::new();
            ChunkHeader::new(kind, 0, 0, count, 0.0).write_to(&vec![0u8; len], &mut c);
            c
        };
        // Within the limit: accepted; one byte over: refused as MalformedChunk.
        let limit = chunk_limit(ChunkType::Frames, 10).unwrap();
        let fits = make(ChunkType::Frames, 10, 10 * CHUNK_BYTES_PER_FRAME);
        assert!(fits.len() <= limit);
        assert!(check_chunk(&fits).is_ok());
        let header = make(ChunkType::Frames, 10, 0).len();
        let over = make(ChunkType::Frames, 10, limit - header + 1);
        let e = check_chunk(&over).unwrap_err();
        assert_eq!(e.code(), ErrorCode::MalformedChunk);
        assert!(e.to_string().contains("over its limit"), "{e}");
        // A frame chunk of 0 or 4097 frames has no limit at all.
        for count in [0, 4097] {
            let e = check_chunk(&make(ChunkType::Keyframes, count, 4)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::MalformedChunk);
        }
        // Events, index and trailer chunks have limits of their own.
        assert!(check_chunk(&make(ChunkType::Events, 1, CHUNK_BYTES_PER_RECORD * 2)).is_err());
        assert!(check_chunk(&make(ChunkType::Index, 2, CHUNK_BYTES_PER_ENTRY * 2)).is_ok());
        assert!(check_chunk(&make(ChunkType::Unknown(9), 0, CHUNK_MAX_OTHER + 1)).is_err());
        // A trailer may be larger (user data cannot be split): the frame limit bounds it.
        assert!(check_chunk(&make(ChunkType::Trailer, 0, 2 << 20)).is_ok());
        // The codec refuses a chunk over its limit from the first bytes of its frame: the
        // frame says 8 MB, its chunk header says more than 10 frames allow.
        let mut frame = BytesMut::new();
        frame.put_u32_le(1 + over.len() as u32);
        frame.put_u8(0x05);
        frame.put_slice(&over[..CHUNK_HEADER_MAX]);
        let e = WireCodec::default().decode_from(&mut frame).unwrap_err();
        assert_eq!(e.code(), ErrorCode::MalformedChunk);
    }

    #[test]
    fn the_new_error_codes_round_trip() {
        for (code, n) in [
            (ErrorCode::OverBudget, 15),
            (ErrorCode::BadStreamHeader, 16),
            (ErrorCode::SessionExists, 17),
        ] {
            assert_eq!(code.code(), n);
            assert_eq!(ErrorCode::from_code(n), code);
        }
    }
}
