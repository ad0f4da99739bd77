//! The trailer (what only the end of the song knows) and the index (where the keyframes and
//! the events are). Layouts: `proto-spec/format.md`, sections "Trailer" and "Index".

use crate::bsor::{self, ControllerOffsets, Info, OFFSETS_SIZE};

use super::bits::{ordered, unordered, unzigzag, zigzag};
use super::chunk::{put_varint, ChunkType};
use super::error::{ChunkError, Field, FieldError, Section};
use super::header::parse_info;
use super::reader::{Reader, Short};

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
fn decompress(payload: &[u8]) -> Result<Vec<u8>, ChunkError> {
    use std::io::Read;
    let decoder =
        zstd::stream::read::Decoder::new(payload).map_err(|_| ChunkError::ZstdUnavailable)?;
    let mut out = Vec::new();
    decoder
        .take(MAX_DECOMPRESSED as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| ChunkError::CorruptZstd)?;
    if out.len() > MAX_DECOMPRESSED {
        return Err(ChunkError::DecompressedTooLarge);
    }
    Ok(out)
}

/// A read error in the trailer's or the index's bytes as the error of that section.
fn in_section(section: Section) -> impl Fn(Short<FieldError>) -> ChunkError {
    move |s| match s {
        Short::More => ChunkError::EndsEarly { section },
        Short::Bad(error) => ChunkError::Field { section, error },
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

    pub(crate) fn decode(payload: &[u8]) -> Result<Trailer, ChunkError> {
        let short = in_section(Section::Trailer);
        let raw = decompress(payload)?;
        let mut r = Reader::new(&raw);
        let info_len = r.varint(Field::InfoLength).map_err(&short)? as usize;
        let info =
            parse_info(r.bytes(info_len).map_err(&short)?).ok_or(ChunkError::MalformedInfo)?;
        let mut n = [0u64; 5];
        for v in n.iter_mut() {
            *v = r.varint(Field::RecordCount).map_err(&short)?;
        }
        let flags = r.u8().map_err(&short)?;
        if flags & !3 != 0 {
            return Err(ChunkError::UnknownTrailerFlags(flags));
        }
        let controller_offsets = if flags & 1 != 0 {
            let b = r.bytes(OFFSETS_SIZE).map_err(&short)?;
            let b: &[u8; OFFSETS_SIZE] = b.try_into().map_err(|_| ChunkError::EndsEarly {
                section: Section::Trailer,
            })?;
            Some(bsor::decode_controller_offsets(b))
        } else {
            None
        };
        let user_data = if flags & 2 != 0 {
            let len = r.varint(Field::ByteLength).map_err(&short)? as usize;
            Some(r.bytes(len).map_err(&short)?.to_vec())
        } else {
            None
        };
        let len = r.varint(Field::ByteLength).map_err(&short)? as usize;
        let trailing = r.bytes(len).map_err(&short)?.to_vec();
        if r.pos != raw.len() {
            return Err(ChunkError::TrailingBytes {
                section: Section::Trailer,
            });
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

/// The fewest bytes an entry takes in the index (one per column).
const MIN_ENTRY_BYTES: usize = 6;

/// The index payload (format.md 13): the types, the offsets, then per chunk type the other
/// fields of its entries column by column, each as a small difference from the entry of that
/// type before it, so that zstd sees short, repeating byte patterns.
pub(crate) fn encode_index(entries: &[IndexEntry], level: i32) -> Vec<u8> {
    let mut raw = Vec::new();
    put_varint(&mut raw, entries.len() as u64);
    let kinds: Vec<u8> = entries.iter().map(|e| e.kind.byte()).collect();
    raw.extend_from_slice(&kinds);
    let mut prev = 0u64;
    for e in entries {
        put_varint(&mut raw, e.offset.wrapping_sub(prev));
        prev = e.offset;
    }
    for run in by_type(&kinds).chunk_by(|&a, &b| kinds[a] == kinds[b]) {
        let of_type = || run.iter().map(|&i| &entries[i]);
        let mut last = 0u32;
        for e in of_type() {
            put_varint(
                &mut raw,
                u64::from(zigzag(e.first.wrapping_sub(last) as i32)),
            );
            last = e.first;
        }
        for e in of_type() {
            put_varint(&mut raw, u64::from(e.count));
        }
        let mut last = 0.0f32;
        for e in of_type() {
            put_varint(&mut raw, u64::from(float_delta(e.t0, last)));
            last = e.t0;
        }
        for e in of_type() {
            put_varint(&mut raw, u64::from(float_delta(e.t1, e.t0)));
        }
    }
    zstd::bulk::compress(&raw, level).unwrap_or_default()
}

/// The positions of the entries ordered by type byte, and in stream order within a type.
fn by_type(kinds: &[u8]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..kinds.len()).collect();
    order.sort_by_key(|&i| kinds[i]); // stable
    order
}

/// `zigzag(ordered(v) − ordered(p))`: exact for any two floats.
fn float_delta(v: f32, p: f32) -> u32 {
    zigzag(ordered(v.to_bits()).wrapping_sub(ordered(p.to_bits())) as i32)
}

/// The inverse of [`float_delta`].
fn float_undelta(z: u32, p: f32) -> f32 {
    f32::from_bits(unordered(
        ordered(p.to_bits()).wrapping_add(unzigzag(z) as u32),
    ))
}

/// The entries of an index chunk's payload (`format.md`'s index), in stream order.
pub fn decode_index(payload: &[u8]) -> Result<Vec<IndexEntry>, ChunkError> {
    let short = in_section(Section::Index);
    let raw = decompress(payload)?;
    let mut r = Reader::new(&raw);
    let n = r.varint(Field::RecordCount).map_err(&short)?;
    // Each entry takes at least one byte in each of its six columns: no allocation beyond
    // what the bytes can hold.
    if n > (raw.len() / MIN_ENTRY_BYTES) as u64 {
        return Err(ChunkError::IndexCountExceedsBytes { count: n });
    }
    let kinds = r.bytes(n as usize).map_err(&short)?;
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(kinds.len());
    let mut offset = 0u64;
    for &kind in kinds {
        offset = offset.wrapping_add(r.varint(Field::IndexOffset).map_err(&short)?);
        entries.push(IndexEntry {
            offset,
            kind: ChunkType::from_byte(kind),
            first: 0,
            count: 0,
            t0: 0.0,
            t1: 0.0,
        });
    }
    for run in by_type(kinds).chunk_by(|&a, &b| kinds[a] == kinds[b]) {
        let mut last = 0u32;
        for &i in run {
            let z = r.varint_u32(Field::IndexFirst).map_err(&short)?;
            last = last.wrapping_add(unzigzag(z) as u32);
            entries[i].first = last;
        }
        for &i in run {
            entries[i].count = r.varint_u32(Field::IndexCount).map_err(&short)?;
        }
        let mut last = 0.0f32;
        for &i in run {
            last = float_undelta(r.varint_u32(Field::IndexT0).map_err(&short)?, last);
            entries[i].t0 = last;
        }
        for &i in run {
            let z = r.varint_u32(Field::IndexT1).map_err(&short)?;
            entries[i].t1 = float_undelta(z, entries[i].t0);
        }
    }
    if r.pos != raw.len() {
        return Err(ChunkError::TrailingBytes {
            section: Section::Index,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, kind: u8, first: u32, count: u32, t0: f32, t1: f32) -> IndexEntry {
        IndexEntry {
            offset,
            kind: ChunkType::from_byte(kind),
            first,
            count,
            t0,
            t1,
        }
    }

    fn bits(e: &[IndexEntry]) -> Vec<(u64, u8, u32, u32, u32, u32)> {
        e.iter()
            .map(|e| {
                let (o, k, f, c) = (e.offset, e.kind.byte(), e.first, e.count);
                (o, k, f, c, e.t0.to_bits(), e.t1.to_bits())
            })
            .collect()
    }

    #[test]
    fn index_entries_of_any_values_round_trip_bit_exactly() {
        let odd = [
            f32::NAN,
            f32::from_bits(0xffc0_1234),
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(1),
            -3.0e38,
        ];
        let mut entries = Vec::new();
        for i in 0..200u32 {
            let t = i as f32 * 0.1;
            let kind = [1, 3, 3, 200, 4, 0, 255][i as usize % 7];
            let t1 = if i % 5 == 0 {
                odd[i as usize % 7]
            } else {
                t + 0.05
            };
            let first = if i % 11 == 0 { u32::MAX - i } else { i * 90 };
            entries.push(entry(
                u64::from(i) * 1000 + u64::from(i % 3),
                kind,
                first,
                i % 13,
                if i % 9 == 0 { odd[i as usize % 7] } else { t },
                t1,
            ));
        }
        // Offsets need not increase (wrapping differences).
        entries[7].offset = u64::MAX;
        entries[8].offset = 3;
        let back = decode_index(&encode_index(&entries, 3)).unwrap();
        assert_eq!(bits(&back), bits(&entries));
        assert!(decode_index(&encode_index(&[], 3)).unwrap().is_empty());
    }

    #[test]
    fn a_live_index_costs_a_few_bytes_an_entry() {
        // A keyframe a second and an event chunk every 100 ms, as the live settings write.
        let mut entries = Vec::new();
        let mut offset = 300u64;
        for i in 0..1000u32 {
            let t = 1.0 + i as f32 * 0.1037;
            if i % 10 == 0 {
                entries.push(entry(offset, 1, i * 9, 9, t, t + 0.1));
                offset += 700 + u64::from(i % 7) * 13;
            }
            entries.push(entry(offset, 3, 0, 1 + i % 3, t + 0.02, t + 0.07));
            offset += 150 + u64::from(i % 5) * 11;
        }
        let payload = encode_index(&entries, 3);
        assert!(
            payload.len() < 4 * entries.len(),
            "{} bytes for {} entries",
            payload.len(),
            entries.len()
        );
    }

    fn compressed(raw: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(raw, 3).unwrap()
    }

    #[test]
    fn a_forged_index_is_refused_with_a_reason() {
        // A count the bytes cannot hold.
        let mut raw = Vec::new();
        put_varint(&mut raw, 1 << 40);
        raw.extend_from_slice(&[0; 64]);
        assert_eq!(
            decode_index(&compressed(&raw)),
            Err(ChunkError::IndexCountExceedsBytes { count: 1 << 40 })
        );
        // One entry whose last column is cut short.
        let whole =
            zstd::bulk::decompress(&encode_index(&[entry(9, 1, 2, 3, 4.0, 5.0)], 3), 1 << 10)
                .unwrap();
        assert!(decode_index(&compressed(&whole)).is_ok());
        let mut padded = whole.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(
            decode_index(&compressed(&padded)),
            Err(ChunkError::TrailingBytes {
                section: Section::Index
            })
        );
        let mut cut = whole.clone();
        cut.pop();
        cut.extend_from_slice(&[0x80; 6]);
        let err = decode_index(&compressed(&cut)).unwrap_err();
        assert_eq!(
            err,
            ChunkError::EndsEarly {
                section: Section::Index
            }
        );
        assert_eq!(err.to_string(), "ends early");
        assert_eq!(decode_index(b"not zstd"), Err(ChunkError::CorruptZstd));
    }
}
