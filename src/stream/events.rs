//! Event chunks: notes, walls, heights and pauses in BSOR's own record layout, transposed
//! byte-wise by field (all first bytes, then all second bytes, ...) and compressed with one
//! zstd stream per keyframe group, flushed at every chunk.
//!
//! Layout: `proto-spec/format.md`, section "Event chunks".

use std::io;

use zstd::stream::raw::{Decoder, Encoder, InBuffer, Operation, OutBuffer};

use crate::bsor::{self, Height, NoteEvent, Pause, Wall};

use super::chunk::{put_varint, Reader, Short};

use crate::bsor::{
    CUT_SIZE as CUT, HEIGHT_SIZE as HEIGHT, NOTE_HEAD_SIZE as NOTE_HEAD, PAUSE_SIZE as PAUSE,
    WALL_SIZE as WALL,
};

/// The most records of one kind in one event chunk.
pub(crate) const MAX_RECORDS: u32 = 1 << 20;

/// Events of one chunk, with the index of the first of each kind in its section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventBatch {
    /// Notes and the index of the first.
    pub notes: (u32, Vec<NoteEvent>),
    /// Walls and the index of the first.
    pub walls: (u32, Vec<Wall>),
    /// Heights and the index of the first.
    pub heights: (u32, Vec<Height>),
    /// Pauses and the index of the first.
    pub pauses: (u32, Vec<Pause>),
}

impl EventBatch {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.notes.1.len() + self.walls.1.len() + self.heights.1.len() + self.pauses.1.len()
    }

    /// True without records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earliest and latest event time (NaN times ignored; 0 if none).
    pub(crate) fn span(&self) -> (f32, f32) {
        let times = self
            .notes
            .1
            .iter()
            .map(|n| n.event_time)
            .chain(self.walls.1.iter().map(|w| w.time))
            .chain(self.heights.1.iter().map(|h| h.time))
            .chain(self.pauses.1.iter().map(|p| p.time))
            .filter(|t| !t.is_nan());
        let mut span: Option<(f32, f32)> = None;
        for t in times {
            span = Some(match span {
                None => (t, t),
                Some((a, b)) => (a.min(t), b.max(t)),
            });
        }
        span.unwrap_or((0.0, 0.0))
    }
}

/// Appends `records` (each `size` bytes, concatenated in `flat`) transposed: byte 0 of every
/// record, then byte 1 of every record, and so on.
fn transpose(flat: &[u8], size: usize, out: &mut Vec<u8>) {
    let n = flat.len() / size;
    for j in 0..size {
        out.extend((0..n).map(|i| flat[i * size + j]));
    }
}

fn untranspose(t: &[u8], size: usize) -> Vec<u8> {
    let n = t.len() / size;
    let mut flat = vec![0u8; n * size];
    for j in 0..size {
        for i in 0..n {
            flat[i * size + j] = t[j * n + i];
        }
    }
    flat
}

fn raw_bytes(b: &EventBatch) -> Vec<u8> {
    let mut heads = Vec::with_capacity(b.notes.1.len() * NOTE_HEAD);
    let mut cuts = Vec::new();
    for n in &b.notes.1 {
        let mut rec = Vec::with_capacity(NOTE_HEAD + CUT);
        bsor::encode_note(n, &mut rec);
        heads.extend_from_slice(&rec[..NOTE_HEAD]);
        cuts.extend_from_slice(&rec[NOTE_HEAD..]);
    }
    let mut out = Vec::new();
    transpose(&heads, NOTE_HEAD, &mut out);
    transpose(&cuts, CUT, &mut out);
    let walls: Vec<u8> = b.walls.1.iter().flat_map(bsor::encode_wall).collect();
    transpose(&walls, WALL, &mut out);
    let heights: Vec<u8> = b.heights.1.iter().flat_map(bsor::encode_height).collect();
    transpose(&heights, HEIGHT, &mut out);
    let pauses: Vec<u8> = b.pauses.1.iter().flat_map(bsor::encode_pause).collect();
    transpose(&pauses, PAUSE, &mut out);
    out
}

/// The encoder's side of one group's event context.
pub(crate) struct EventsEncoder {
    level: i32,
    zstd: Option<Encoder<'static>>,
    /// The context must start a new zstd frame before its next use.
    stale: bool,
}

impl std::fmt::Debug for EventsEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsEncoder")
            .field("level", &self.level)
            .finish()
    }
}

impl EventsEncoder {
    pub(crate) fn new(level: i32) -> Self {
        EventsEncoder {
            level,
            zstd: None,
            stale: false,
        }
    }

    /// A new keyframe group: a new compression context (the allocation is reused).
    pub(crate) fn reset(&mut self) {
        self.stale = true;
    }

    /// The payload of an event chunk holding `batch`.
    pub(crate) fn encode(&mut self, batch: &EventBatch) -> io::Result<Vec<u8>> {
        let mut payload = Vec::new();
        let kinds = [
            (batch.notes.0, batch.notes.1.len()),
            (batch.walls.0, batch.walls.1.len()),
            (batch.heights.0, batch.heights.1.len()),
            (batch.pauses.0, batch.pauses.1.len()),
        ];
        for (first, n) in kinds {
            put_varint(&mut payload, n as u64);
            if n > 0 {
                put_varint(&mut payload, u64::from(first));
            }
        }
        let raw = raw_bytes(batch);
        let enc = match &mut self.zstd {
            Some(e) => {
                if self.stale {
                    e.reinit()?;
                }
                e
            }
            None => self.zstd.insert(Encoder::new(self.level)?),
        };
        self.stale = false;
        let mut out = vec![0u8; zstd::zstd_safe::compress_bound(raw.len()) + 64];
        let mut written = 0;
        let mut input = InBuffer::around(&raw);
        while input.pos() < raw.len() {
            let mut o = OutBuffer::around(&mut out[written..]);
            enc.run(&mut input, &mut o)?;
            written += o.pos();
            if written == out.len() {
                out.resize(out.len() * 2, 0);
            }
        }
        loop {
            let mut o = OutBuffer::around(&mut out[written..]);
            let left = enc.flush(&mut o)?;
            written += o.pos();
            if left == 0 {
                break;
            }
            out.resize(out.len() + left + 64, 0);
        }
        payload.extend_from_slice(&out[..written]);
        Ok(payload)
    }
}

/// The decoder's side of one group's event context.
pub(crate) struct EventsDecoder {
    zstd: Option<Decoder<'static>>,
    stale: bool,
}

impl std::fmt::Debug for EventsDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsDecoder").finish()
    }
}

impl EventsDecoder {
    pub(crate) fn new() -> Self {
        EventsDecoder {
            zstd: None,
            stale: false,
        }
    }

    /// A new keyframe group (the decoder's allocation is reused).
    pub(crate) fn reset(&mut self) {
        self.stale = true;
    }

    /// Decodes an event chunk's payload.
    pub(crate) fn decode(&mut self, payload: &[u8]) -> Result<EventBatch, &'static str> {
        let mut r = Reader::new(payload);
        let bad = |s: Short| match s {
            Short::More => "event chunk ends inside its counts",
            Short::Bad(m) => m,
        };
        let mut kinds = [(0u32, 0u32); 4];
        for k in kinds.iter_mut() {
            let n = r.varint_u32("event count").map_err(bad)?;
            if n > MAX_RECORDS {
                return Err("more than 2^20 events of one kind in a chunk");
            }
            let first = if n > 0 {
                r.varint_u32("first event index").map_err(bad)?
            } else {
                0
            };
            *k = (first, n);
        }
        let [notes, walls, heights, pauses] = kinds.map(|(_, n)| n as usize);
        // The most bytes these records can take: every note with cut info.
        let bound = notes * (NOTE_HEAD + CUT) + walls * WALL + heights * HEIGHT + pauses * PAUSE;
        let raw = self.decompress(&payload[r.pos..], bound)?;
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], &'static str> {
            let s = raw
                .get(at..at + n)
                .ok_or("event chunk holds fewer bytes than its counts")?;
            at += n;
            Ok(s)
        };
        let heads = untranspose(take(notes * NOTE_HEAD)?, NOTE_HEAD);
        let with_cut = heads
            .chunks_exact(NOTE_HEAD)
            .filter(|h| matches!(i32::from_le_bytes([h[12], h[13], h[14], h[15]]), 0 | 1))
            .count();
        let cuts = untranspose(take(with_cut * CUT)?, CUT);
        let walls_b = untranspose(take(walls * WALL)?, WALL);
        let heights_b = untranspose(take(heights * HEIGHT)?, HEIGHT);
        let pauses_b = untranspose(take(pauses * PAUSE)?, PAUSE);
        if at != raw.len() {
            return Err("event chunk holds more bytes than its counts");
        }
        let mut batch = EventBatch {
            notes: (kinds[0].0, Vec::with_capacity(notes)),
            walls: (kinds[1].0, Vec::with_capacity(walls)),
            heights: (kinds[2].0, Vec::with_capacity(heights)),
            pauses: (kinds[3].0, Vec::with_capacity(pauses)),
        };
        let mut record = [0u8; NOTE_HEAD + CUT];
        let mut cut_at = 0;
        for h in heads.chunks_exact(NOTE_HEAD) {
            record[..NOTE_HEAD].copy_from_slice(h);
            let mut len = NOTE_HEAD;
            if matches!(i32::from_le_bytes([h[12], h[13], h[14], h[15]]), 0 | 1) {
                let cut = cuts.get(cut_at..cut_at + CUT).ok_or("cut info missing")?;
                record[NOTE_HEAD..].copy_from_slice(cut);
                cut_at += CUT;
                len += CUT;
            }
            let (note, _) = bsor::decode_note(&record[..len]).ok_or("malformed note")?;
            batch.notes.1.push(note);
        }
        batch.walls.1.extend(
            walls_b
                .chunks_exact(WALL)
                .filter_map(|c| c.try_into().ok())
                .map(bsor::decode_wall),
        );
        batch.heights.1.extend(
            heights_b
                .chunks_exact(HEIGHT)
                .filter_map(|c| c.try_into().ok())
                .map(bsor::decode_height),
        );
        batch.pauses.1.extend(
            pauses_b
                .chunks_exact(PAUSE)
                .filter_map(|c| c.try_into().ok())
                .map(bsor::decode_pause),
        );
        Ok(batch)
    }

    fn decompress(&mut self, input: &[u8], bound: usize) -> Result<Vec<u8>, &'static str> {
        let dec = match &mut self.zstd {
            Some(d) => {
                if self.stale {
                    d.reinit().map_err(|_| "zstd decoder reset failed")?;
                }
                d
            }
            None => self
                .zstd
                .insert(Decoder::new().map_err(|_| "zstd decoder unavailable")?),
        };
        self.stale = false;
        // One byte beyond the bound tells an over-long stream from an exact one.
        let mut out = vec![0u8; bound + 1];
        let mut written = 0;
        let mut inb = InBuffer::around(input);
        loop {
            let mut o = OutBuffer::around(&mut out[written..]);
            dec.run(&mut inb, &mut o)
                .map_err(|_| "corrupt event data")?;
            let w = o.pos();
            written += w;
            if written > bound {
                return Err("event chunk holds more bytes than its counts");
            }
            if inb.pos() == input.len() && w == 0 {
                break;
            }
        }
        out.truncate(written);
        Ok(out)
    }
}
