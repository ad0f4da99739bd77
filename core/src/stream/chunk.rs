//! Chunk framing: the stream header, chunk headers with their CRCs, and the footer.
//!
//! Byte layouts: `proto-spec/format.md`, sections "Stream header", "Chunks" and "Footer".

use super::error::{ChunkHeaderError, Field};
use super::header::StreamHeader;
use super::reader::{Reader, Short};

/// The first four bytes of every `.bsors` file: `BSRS`.
pub const STREAM_MAGIC: [u8; 4] = *b"BSRS";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// The byte that starts every chunk (the sync marker). One byte, so that it costs little in
/// every header; a reader trusts a candidate only once its header CRC holds.
pub const SYNC: u8 = 0xB5;
/// The last four bytes of a finished file.
pub const FOOTER_MAGIC: [u8; 4] = *b"BSRE";
/// Bytes of the footer.
pub const FOOTER_SIZE: usize = 16;
/// The largest chunk payload a reader accepts (a larger length is damage).
pub const MAX_PAYLOAD: u32 = 64 << 20;
/// The most frames an encoder puts in one chunk, and a reader accepts.
pub const MAX_CHUNK_FRAMES: u32 = 4096;

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkType {
    /// Frames, the first of them a keyframe: starts a keyframe group.
    Keyframes,
    /// Frames continuing the current group.
    Frames,
    /// Note, wall, height and pause events (their own compression context per group).
    Events,
    /// What only the end of the song knows: final info, counts, optional sections.
    Trailer,
    /// Offsets and times of the keyframe and event chunks.
    Index,
    /// A type this reader does not know (skipped unless critical).
    Unknown(u8),
}

impl ChunkType {
    /// The type byte.
    pub fn byte(self) -> u8 {
        match self {
            ChunkType::Keyframes => 1,
            ChunkType::Frames => 2,
            ChunkType::Events => 3,
            ChunkType::Trailer => 4,
            ChunkType::Index => 5,
            ChunkType::Unknown(b) => b,
        }
    }

    /// The type of a type byte.
    pub fn from_byte(b: u8) -> Self {
        match b {
            1 => ChunkType::Keyframes,
            2 => ChunkType::Frames,
            3 => ChunkType::Events,
            4 => ChunkType::Trailer,
            5 => ChunkType::Index,
            b => ChunkType::Unknown(b),
        }
    }

    /// Unknown types with the high bit set cannot be skipped: a reader must stop.
    pub fn is_critical(self) -> bool {
        matches!(self, ChunkType::Unknown(b) if b & 0x80 != 0)
    }
}

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A chunk header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkHeader {
    /// What the chunk holds.
    pub kind: ChunkType,
    /// Sequence number: 0 for the first chunk, then +1 per chunk.
    pub seq: u32,
    /// Index of the first frame (frame chunks) or 0.
    pub first: u32,
    /// Frames (frame chunks) or records (events) in the chunk.
    pub count: u32,
    /// Song time of the first frame, or of the earliest event.
    pub t0: f32,
    /// Payload bytes.
    pub len: u32,
    /// CRC32 of the payload.
    pub payload_crc: u32,
}

impl ChunkHeader {
    /// A header; its length and payload CRC are filled in by [`write_to`](Self::write_to).
    pub fn new(kind: ChunkType, seq: u32, first: u32, count: u32, t0: f32) -> Self {
        ChunkHeader {
            kind,
            seq,
            first,
            count,
            t0,
            len: 0,
            payload_crc: 0,
        }
    }

    /// The chunk header at the start of `buf`, with its length, if one is there whole and
    /// its CRC holds (the payload is not checked).
    pub fn parse_at(buf: &[u8]) -> Option<(ChunkHeader, usize)> {
        Self::parse(buf).ok()
    }

    /// Appends this header, completed for `payload` (its length and CRC), and the payload:
    /// a whole chunk.
    pub fn write_to(mut self, payload: &[u8], out: &mut Vec<u8>) {
        self.len = payload.len() as u32;
        self.payload_crc = crc32fast::hash(payload);
        let start = out.len();
        out.push(SYNC);
        out.push(self.kind.byte());
        put_varint(out, u64::from(self.seq));
        put_varint(out, u64::from(self.first));
        put_varint(out, u64::from(self.count));
        out.extend_from_slice(&self.t0.to_le_bytes());
        put_varint(out, u64::from(self.len));
        out.extend_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(payload);
    }

    /// Parses a chunk header at the start of `buf` (which must start with the sync
    /// marker): the header and its length. The payload is not checked here.
    pub(crate) fn parse(buf: &[u8]) -> Result<(ChunkHeader, usize), Short<ChunkHeaderError>> {
        let mut r = Reader::new(buf);
        if r.u8()? != SYNC {
            return Err(Short::Bad(ChunkHeaderError::NoSync));
        }
        let kind = ChunkType::from_byte(r.u8()?);
        let seq = r.varint_u32(Field::Seq)?;
        let first = r.varint_u32(Field::First)?;
        let count = r.varint_u32(Field::Count)?;
        let t0 = r.f32()?;
        let len = r.varint_u32(Field::PayloadLength)?;
        let payload_crc = r.u32()?;
        let end = r.pos;
        let crc = r.u32()?;
        if crc != crc32fast::hash(&buf[..end]) {
            return Err(Short::Bad(ChunkHeaderError::Crc));
        }
        if len > MAX_PAYLOAD {
            return Err(Short::Bad(ChunkHeaderError::PayloadTooLarge(len)));
        }
        Ok((
            ChunkHeader {
                kind,
                seq,
                first,
                count,
                t0,
                len,
                payload_crc,
            },
            r.pos,
        ))
    }
}

/// A whole chunk inside a stream: where it starts, how long its header and the whole chunk
/// are, and its header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkSpan {
    /// Offset of the chunk's sync marker.
    pub offset: usize,
    /// Bytes of the chunk header.
    pub header_len: usize,
    /// Bytes of the whole chunk (header and payload).
    pub len: usize,
    /// The chunk header.
    pub header: ChunkHeader,
}

impl ChunkSpan {
    /// The chunk's bytes in `stream`.
    pub fn bytes<'a>(&self, stream: &'a [u8]) -> &'a [u8] {
        &stream[self.offset..self.offset + self.len]
    }
}

/// Splits a stream into its header and the whole chunks that follow it, up to the first
/// bytes that are not a whole, valid-headed chunk (the footer, damage or a cut): the header,
/// its length, and the chunks. `None` without a valid stream header.
pub fn split_stream(stream: &[u8]) -> Option<(StreamHeader, usize, Vec<ChunkSpan>)> {
    let (header, header_len) = StreamHeader::parse(stream).ok()?;
    let mut chunks = Vec::new();
    let mut at = header_len;
    while let Some((h, hlen)) = stream.get(at..).and_then(ChunkHeader::parse_at) {
        let len = hlen + h.len as usize;
        if at + len > stream.len() {
            break;
        }
        chunks.push(ChunkSpan {
            offset: at,
            header_len: hlen,
            len,
            header: h,
        });
        at += len;
    }
    Some((header, header_len, chunks))
}

/// The footer of a finished file (`format.md` §14): where the index chunk starts. It is
/// determined by the bytes before it, so a live stream's receiver can add it itself.
pub fn footer(index_offset: u64) -> [u8; FOOTER_SIZE] {
    let mut f = [0u8; FOOTER_SIZE];
    f[..8].copy_from_slice(&index_offset.to_le_bytes());
    let crc = crc32fast::hash(&f[..8]);
    f[8..12].copy_from_slice(&crc.to_le_bytes());
    f[12..].copy_from_slice(&FOOTER_MAGIC);
    f
}

/// The index offset of a footer, if `tail` (the last 16 bytes) is one.
pub fn parse_footer(tail: &[u8]) -> Option<u64> {
    let f: &[u8; FOOTER_SIZE] = tail.try_into().ok()?;
    if f[12..] != FOOTER_MAGIC || f[8..12] != crc32fast::hash(&f[..8]).to_le_bytes() {
        return None;
    }
    Some(u64::from_le_bytes([
        f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
    ]))
}
