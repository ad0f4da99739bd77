//! Chunk framing: the stream header, chunk headers with their CRCs, and the footer.
//!
//! Byte layouts: `proto-spec/format.md`, sections "Stream header", "Chunks" and "Footer".

use crate::bsor::{self, Info};

use super::header::{Profile, Quantization};

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

/// Why a read from a byte slice stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Short {
    /// More bytes are needed.
    More,
    /// The bytes cannot be what was expected.
    Bad(&'static str),
}

/// A cursor over a byte slice for the stream's own structures.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let s = self
            .buf
            .get(self.pos..)
            .and_then(|r| r.get(..n))
            .ok_or(Short::More)?;
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Short> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn f32(&mut self) -> Result<f32, Short> {
        Ok(f32::from_bits(self.u32()?))
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in a `u64`.
    pub(crate) fn varint(&mut self) -> Result<u64, Short> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                return Err(Short::Bad("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Short::Bad("varint longer than 10 bytes"))
    }

    pub(crate) fn varint_u32(&mut self, what: &'static str) -> Result<u32, Short> {
        u32::try_from(self.varint()?).map_err(|_| Short::Bad(what))
    }
}

/// How often keyframes and flushes come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The frame coding profile.
    pub profile: Profile,
    /// A keyframe at least every this many seconds of song time.
    pub keyframe_seconds: f32,
    /// And at least every this many frames (0: by time only).
    pub keyframe_frames: u32,
    /// Emit a chunk every this many seconds of song time within a group (0: only at
    /// keyframes).
    pub flush_seconds: f32,
    /// zstd level of the event, trailer and index chunks (19 measured 0.2% of BSOR smaller
    /// than 3 on the corpus, at a hundred times the encoding time).
    pub zstd_level: i32,
}

impl Settings {
    /// What a live spectator needs: a keyframe about every second, a chunk every 100 ms.
    pub fn live(profile: Profile) -> Self {
        Settings {
            profile,
            keyframe_seconds: 1.0,
            keyframe_frames: 0,
            flush_seconds: 0.1,
            zstd_level: 3,
        }
    }

    /// What a leaderboard stores: a keyframe about every 10 s, no flushes in between.
    pub fn archive(profile: Profile) -> Self {
        Settings {
            profile,
            keyframe_seconds: 10.0,
            keyframe_frames: 0,
            flush_seconds: 0.0,
            zstd_level: 3,
        }
    }
}

/// The stream header: what a decoder needs before the first chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamHeader {
    /// Profile and intervals.
    pub settings: Settings,
    /// The info block as known when the song started.
    pub info: Info,
}

impl StreamHeader {
    pub(crate) fn quantization(&self) -> Quantization {
        self.settings.profile.quantization()
    }

    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&STREAM_MAGIC);
        out.push(FORMAT_VERSION);
        let s = &self.settings;
        let (profile, step, steps) = match (s.profile, s.profile.quantization()) {
            (
                p,
                Quantization::Lossy {
                    position_step,
                    rotation_steps,
                    ..
                },
            ) => (
                if p == Profile::Fine { 1 } else { 2 },
                position_step,
                rotation_steps,
            ),
            (_, Quantization::Lossless) => (0, 0.0, 0),
        };
        out.push(profile);
        out.extend_from_slice(&step.to_le_bytes());
        put_varint(&mut out, u64::from(steps));
        out.extend_from_slice(&s.keyframe_seconds.to_le_bytes());
        put_varint(&mut out, u64::from(s.keyframe_frames));
        out.extend_from_slice(&s.flush_seconds.to_le_bytes());
        let mut info = Vec::new();
        bsor::encode_info(&self.info, &mut info);
        put_varint(&mut out, info.len() as u64);
        out.extend_from_slice(&info);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses a header from the start of `buf`: `Ok(None)` if `buf` is too short yet.
    pub fn parse_prefix(buf: &[u8]) -> Result<Option<StreamHeader>, &'static str> {
        match Self::parse(buf) {
            Ok((h, _)) => Ok(Some(h)),
            Err(Short::More) => Ok(None),
            Err(Short::Bad(m)) => Err(m),
        }
    }

    /// Like [`parse_prefix`](Self::parse_prefix), with the header's length in bytes.
    pub fn parse_prefix_len(buf: &[u8]) -> Result<Option<(StreamHeader, usize)>, &'static str> {
        match Self::parse(buf) {
            Ok(h) => Ok(Some(h)),
            Err(Short::More) => Ok(None),
            Err(Short::Bad(m)) => Err(m),
        }
    }

    /// Parses a header from the start of `buf`: the header and its length.
    pub(crate) fn parse(buf: &[u8]) -> Result<(StreamHeader, usize), Short> {
        let mut r = Reader::new(buf);
        if r.bytes(4)? != STREAM_MAGIC {
            return Err(Short::Bad("not a BSOR stream (bad magic)"));
        }
        if r.u8()? != FORMAT_VERSION {
            return Err(Short::Bad("unsupported stream format version"));
        }
        let profile = match r.u8()? {
            0 => Profile::Lossless,
            1 => Profile::Fine,
            2 => Profile::Compact,
            _ => return Err(Short::Bad("unknown profile")),
        };
        let step = r.f32()?;
        let steps = r.varint_u32("rotation steps")?;
        let keyframe_seconds = r.f32()?;
        let keyframe_frames = r.varint_u32("keyframe frame interval")?;
        let flush_seconds = r.f32()?;
        let info_len = r.varint()?;
        if info_len > 64 << 20 {
            return Err(Short::Bad("info block length over 64 MiB"));
        }
        let info_bytes = r.bytes(info_len as usize)?;
        let end = r.pos;
        let crc = r.u32()?;
        if crc != crc32fast::hash(&buf[..end]) {
            return Err(Short::Bad("stream header CRC mismatch"));
        }
        if let Quantization::Lossy {
            position_step,
            rotation_steps,
            ..
        } = profile.quantization()
        {
            if step != position_step || steps != rotation_steps {
                return Err(Short::Bad("quantization does not match the profile"));
            }
        }
        let info = parse_info(info_bytes).ok_or(Short::Bad("malformed info block"))?;
        Ok((
            StreamHeader {
                settings: Settings {
                    profile,
                    keyframe_seconds,
                    keyframe_frames,
                    flush_seconds,
                    zstd_level: 0,
                },
                info,
            },
            r.pos,
        ))
    }
}

/// Parses a bare BSOR info block (as `bsor::encode_info` writes it).
pub(crate) fn parse_info(bytes: &[u8]) -> Option<Info> {
    bsor::parse_info(bytes, &bsor::Limits::default()).ok()
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
    pub(crate) fn parse(buf: &[u8]) -> Result<(ChunkHeader, usize), Short> {
        let mut r = Reader::new(buf);
        if r.u8()? != SYNC {
            return Err(Short::Bad("no sync marker"));
        }
        let kind = ChunkType::from_byte(r.u8()?);
        let seq = r.varint_u32("sequence number")?;
        let first = r.varint_u32("first index")?;
        let count = r.varint_u32("count")?;
        let t0 = r.f32()?;
        let len = r.varint_u32("payload length")?;
        let payload_crc = r.u32()?;
        let end = r.pos;
        let crc = r.u32()?;
        if crc != crc32fast::hash(&buf[..end]) {
            return Err(Short::Bad("chunk header CRC mismatch"));
        }
        if len > MAX_PAYLOAD {
            return Err(Short::Bad("chunk payload over 64 MiB"));
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
