//! The trailer (what only the end of the song knows) and the index (where the keyframes and
//! the events are). Layouts: `proto-spec/format.md`, sections "Trailer" and "Index".

use crate::bsor::{self, ControllerOffsets, Info, OFFSETS_SIZE};

use super::chunk::{parse_info, put_varint, ChunkType, Reader, Short};

/// Records per section, as the trailer states them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectionCounts {
    /// Frames.
    pub frames: u64,
    /// Note events.
    pub notes: u64,
    /// Wall events.
    pub walls: u64,
    /// Height events.
    pub heights: u64,
    /// Pauses.
    pub pauses: u64,
}

/// The end of a stream: the final info block, the counts, and BSOR's optional tail.
#[derive(Clone, Debug, PartialEq)]
pub struct Trailer {
    /// The info block as it stands at the end (score, failTime...).
    pub info: Info,
    /// How many records the stream carried.
    pub counts: SectionCounts,
    /// BSOR section 6.
    pub controller_offsets: Option<ControllerOffsets>,
    /// BSOR section 7.
    pub user_data: Option<Vec<u8>>,
    /// Bytes after BSOR's last known section.
    pub trailing: Vec<u8>,
}

/// The most bytes a trailer or index may decompress to.
const MAX_DECOMPRESSED: usize = 256 << 20;

/// Decompresses a zstd frame, growing the output as the data really comes (a forged size
/// in the frame header allocates nothing) and stopping at [`MAX_DECOMPRESSED`].
fn decompress(payload: &[u8]) -> Result<Vec<u8>, &'static str> {
    use std::io::Read;
    let decoder = zstd::stream::read::Decoder::new(payload).map_err(|_| "zstd unavailable")?;
    let mut out = Vec::new();
    decoder
        .take(MAX_DECOMPRESSED as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| "corrupt zstd data")?;
    if out.len() > MAX_DECOMPRESSED {
        return Err("decompresses to more than 256 MiB");
    }
    Ok(out)
}

fn short(s: Short) -> &'static str {
    match s {
        Short::More => "ends early",
        Short::Bad(m) => m,
    }
}

impl Trailer {
    pub(crate) fn encode(&self, level: i32) -> Vec<u8> {
        let mut raw = Vec::new();
        let mut info = Vec::new();
        bsor::encode_info(&self.info, &mut info);
        put_varint(&mut raw, info.len() as u64);
        raw.extend_from_slice(&info);
        let c = &self.counts;
        for n in [c.frames, c.notes, c.walls, c.heights, c.pauses] {
            put_varint(&mut raw, n);
        }
        let flags =
            u8::from(self.controller_offsets.is_some()) | (u8::from(self.user_data.is_some()) << 1);
        raw.push(flags);
        if let Some(o) = &self.controller_offsets {
            raw.extend_from_slice(&bsor::encode_controller_offsets(o));
        }
        if let Some(d) = &self.user_data {
            put_varint(&mut raw, d.len() as u64);
            raw.extend_from_slice(d);
        }
        put_varint(&mut raw, self.trailing.len() as u64);
        raw.extend_from_slice(&self.trailing);
        zstd::bulk::compress(&raw, level).unwrap_or_default()
    }

    pub(crate) fn decode(payload: &[u8]) -> Result<Trailer, &'static str> {
        let raw = decompress(payload)?;
        let mut r = Reader::new(&raw);
        let info_len = r.varint().map_err(short)? as usize;
        let info = parse_info(r.bytes(info_len).map_err(short)?).ok_or("malformed info block")?;
        let mut n = [0u64; 5];
        for v in n.iter_mut() {
            *v = r.varint().map_err(short)?;
        }
        let flags = r.u8().map_err(short)?;
        if flags & !3 != 0 {
            return Err("unknown trailer flags");
        }
        let controller_offsets = if flags & 1 != 0 {
            let b = r.bytes(OFFSETS_SIZE).map_err(short)?;
            let b: &[u8; OFFSETS_SIZE] = b.try_into().map_err(|_| "offsets")?;
            Some(bsor::decode_controller_offsets(b))
        } else {
            None
        };
        let user_data = if flags & 2 != 0 {
            let len = r.varint().map_err(short)? as usize;
            Some(r.bytes(len).map_err(short)?.to_vec())
        } else {
            None
        };
        let len = r.varint().map_err(short)? as usize;
        let trailing = r.bytes(len).map_err(short)?.to_vec();
        if r.pos != raw.len() {
            return Err("bytes after the trailer");
        }
        Ok(Trailer {
            info,
            counts: SectionCounts {
                frames: n[0],
                notes: n[1],
                walls: n[2],
                heights: n[3],
                pauses: n[4],
            },
            controller_offsets,
            user_data,
            trailing,
        })
    }
}

/// One entry of the index: a keyframe, event or trailer chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexEntry {
    /// Byte offset of the chunk's sync marker from the start of the file.
    pub offset: u64,
    /// The chunk's type.
    pub kind: ChunkType,
    /// The chunk header's first index.
    pub first: u32,
    /// The chunk header's count.
    pub count: u32,
    /// The chunk header's first time.
    pub t0: f32,
    /// The chunk header's last time.
    pub t1: f32,
}

pub(crate) fn encode_index(entries: &[IndexEntry], level: i32) -> Vec<u8> {
    let mut raw = Vec::new();
    put_varint(&mut raw, entries.len() as u64);
    let mut prev = 0u64;
    for e in entries {
        put_varint(&mut raw, e.offset.wrapping_sub(prev));
        prev = e.offset;
        raw.push(e.kind.byte());
        put_varint(&mut raw, u64::from(e.first));
        put_varint(&mut raw, u64::from(e.count));
        raw.extend_from_slice(&e.t0.to_le_bytes());
        raw.extend_from_slice(&e.t1.to_le_bytes());
    }
    zstd::bulk::compress(&raw, level).unwrap_or_default()
}

pub(crate) fn decode_index(payload: &[u8]) -> Result<Vec<IndexEntry>, &'static str> {
    let raw = decompress(payload)?;
    let mut r = Reader::new(&raw);
    let n = r.varint().map_err(short)?;
    // Each entry takes at least 12 bytes: no allocation beyond what the bytes can hold.
    if n > (raw.len() / 12) as u64 {
        return Err("index count exceeds its bytes");
    }
    let mut entries = Vec::with_capacity(n as usize);
    let mut offset = 0u64;
    for _ in 0..n {
        offset = offset.wrapping_add(r.varint().map_err(short)?);
        let kind = ChunkType::from_byte(r.u8().map_err(short)?);
        let first = r.varint_u32("index first").map_err(short)?;
        let count = r.varint_u32("index count").map_err(short)?;
        let t0 = r.f32().map_err(short)?;
        let t1 = r.f32().map_err(short)?;
        entries.push(IndexEntry {
            offset,
            kind,
            first,
            count,
            t0,
            t1,
        });
    }
    Ok(entries)
}
