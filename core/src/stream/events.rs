//! Event chunks: notes, walls, heights and pauses, field by field in BSOR's own record
//! layout, each field predicted from the same field of the previous record of its kind and
//! coded with the residual code of the frames (`bits.rs`). The models live for a keyframe group, so a
//! live chunk of one or two notes costs little more than their information.
//!
//! (zstd over the byte-transposed records was the first design: it cost 8.5% of BSOR on the
//! corpus at the live settings, because every 100 ms flush starts a new zstd block.)
//!
//! Layout: `proto-spec/format.md`, section "Event chunks".

use crate::bsor::{self, Height, NoteEvent, Pause, Wall};

use super::bits::{
    largest_of, ordered, unit_rest, unordered, unzigzag, zigzag, BitReader, BitWriter, LengthModel,
};
use super::chunk::put_varint;
use super::error::{ChunkError, Field, Section};
use super::range::{Prob, RangeDecoder, RangeEncoder, ResidualModel};
use super::reader::{Reader, Short};

use crate::bsor::{
    CUT_SIZE as CUT, HEIGHT_SIZE as HEIGHT, NOTE_HEAD_SIZE as NOTE_HEAD, PAUSE_SIZE as PAUSE,
    WALL_SIZE as WALL,
};

/// The most records of one kind in one event chunk: a forged chunk cannot make a reader
/// allocate more than about 4 × 65536 records (23 MB), and an encoder splits larger batches.
pub(crate) const MAX_RECORDS: u32 = 1 << 16;

/// Consecutive records of one kind (note, wall, height or pause events) and where the first
/// stands in its section of the replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Records<T> {
    /// Index of the first record in its section.
    pub first: u32,
    /// The records, in section order.
    pub records: Vec<T>,
}

impl<T> Default for Records<T> {
    fn default() -> Self {
        Records {
            first: 0,
            records: Vec::new(),
        }
    }
}

impl<T> Records<T> {
    /// `records`, the first of which is record `first` of its section.
    pub fn new(first: u32, records: Vec<T>) -> Self {
        Records { first, records }
    }
}

/// The events of one chunk (BSOR's note, wall, height and pause records), each kind with
/// the index of its first record in its section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventBatch {
    /// Note events.
    pub notes: Records<NoteEvent>,
    /// Walls.
    pub walls: Records<Wall>,
    /// Height changes.
    pub heights: Records<Height>,
    /// Pauses.
    pub pauses: Records<Pause>,
}

impl EventBatch {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.notes.records.len()
            + self.walls.records.len()
            + self.heights.records.len()
            + self.pauses.records.len()
    }

    /// True without records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earliest and latest event time (NaN times ignored; 0 if none).
    pub(crate) fn span(&self) -> (f32, f32) {
        let times = self
            .notes
            .records
            .iter()
            .map(|n| n.event_time)
            .chain(self.walls.records.iter().map(|w| w.time))
            .chain(self.heights.records.iter().map(|h| h.time))
            .chain(self.pauses.records.iter().map(|p| p.time))
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

/// How a 32-bit word of a record is predicted and its residual formed.
#[derive(Clone, Copy, PartialEq)]
enum Word {
    /// An integer: the difference from the previous record's word.
    Int,
    /// A float: the difference, in ordered-float integers, from the previous record's word.
    Float,
    /// The first of the three components of a unit vector (the two after it are part of
    /// it): the component whose previous value was largest is coded last, as its sign bit
    /// and its magnitude against `sqrt(1 − the others²)`; the other two as floats.
    Unit,
    /// A note's `timeDeviation`: predicted as its `spawnTime − eventTime` (the note head,
    /// coded just before), which it equals in every cut of the corpus.
    TimeDeviation,
    /// A cut's `cutAngle`: predicted from the same cut's `cutDirDeviation` (the cut word at
    /// this index, coded before it) as `cutDirDeviation − 90`, or `cutDirDeviation + 270`
    /// where that is below −180, which it equals in 95% of the corpus' cuts.
    CutAngle(usize),
    /// A spawn time: predicted as this record's time minus the previous record's gap
    /// between time and spawn time (word 1 of a note, word 2 of a wall, is the time).
    Spawn(usize),
    /// A height change's time: height changes come in runs, one per frame, so the time is
    /// predicted as the previous one plus the step between the two before it.
    Stepped,
}

use Word::{Float as F, Int as I, Unit as U};

const NOTE_HEAD_WORDS: [Word; 4] = [I, F, Word::Spawn(1), I];
const CUT_WORDS: [Word; 17] = [
    F,
    U,
    U,
    U,
    I,
    Word::TimeDeviation,
    F,
    F,
    F,
    F,
    U,
    U,
    U,
    F,
    Word::CutAngle(6),
    F,
    F,
];
const WALL_WORDS: [Word; 4] = [I, F, F, Word::Spawn(2)];
const HEIGHT_WORDS: [Word; 2] = [F, Word::Stepped];
const PAUSE_WORDS: [Word; 3] = [I, I, F];

// Columns: note head 0..4, cut bools 4..8, cut words 8..25, wall 25..29, height 29..31,
// pause 31..34.
const COL_NOTE: usize = 0;
const COL_BOOLS: usize = 4;
const COL_CUT: usize = 8;
const COL_WALL: usize = 25;
const COL_HEIGHT: usize = 29;
const COL_PAUSE: usize = 31;
const COLUMNS: usize = 34;
/// Columns of integers and bytes (the rest are floats).
const INT_COLUMNS: [usize; 10] = [0, 3, 4, 5, 6, 7, 12, 25, 31, 32];
/// The `prev` values a group starts with: typical values of a cut (format.md 11.4).
const START_PREV: [u32; COLUMNS] = {
    let mut p = [0u32; COLUMNS];
    p[4] = 1; // speedOK
    p[5] = 1; // directionOK
    p[6] = 1; // saberTypeOK
    p[8] = 32f32.to_bits(); // saberSpeed
    p[16] = 1.25f32.to_bits(); // cutPoint y
    p[17] = 1.25f32.to_bits(); // cutPoint z
    p[21] = 0.125f32.to_bits(); // cutDistanceToCenter
    p[23] = 1.375f32.to_bits(); // beforeCutRating
    p[24] = 1.375f32.to_bits(); // afterCutRating
    p[29] = 1.6875f32.to_bits(); // height
    p
};
/// Columns whose prediction is nearly always exact (time deviation, cut angle).
const EXACT_COLUMNS: [usize; 2] = [13, 22];

/// One side of the coder: the same record walk encodes or decodes, with the bit code
/// (lossless profile) or the range coder (lossy profiles, format.md 11.3).
enum Coder<'a, 'b> {
    Enc(&'a mut BitWriter),
    Dec(&'a mut BitReader<'b>),
    RangeEnc(&'a mut RangeEncoder),
    RangeDec(&'a mut RangeDecoder<'b>),
}

/// A prediction computed in `f32`: its bits, or `fallback` when it is NaN (the bits of a NaN
/// made by arithmetic differ between platforms: x86 and ARM make different default NaNs).
fn computed(p: f32, fallback: u32) -> u32 {
    if p.is_nan() {
        fallback
    } else {
        p.to_bits()
    }
}

/// The centre a column's length model starts at (format.md 11.4): its residuals' usual
/// length.
fn start_centre(col: usize) -> u32 {
    if EXACT_COLUMNS.contains(&col) {
        0
    } else if INT_COLUMNS.contains(&col) {
        2
    } else {
        20
    }
}

/// The range coder's models of an event chunk (lossy profiles, format.md 11.1 and 11.3).
#[derive(Clone, Debug)]
struct RangeModels {
    /// Per event column.
    residual: [ResidualModel; COLUMNS],
    /// Per kind: whether a chunk has records of the kind, their count less one, and their
    /// first index against the one expected.
    kinds: [Prob; 4],
    count: [ResidualModel; 4],
    first: [ResidualModel; 4],
}

/// The models and the previous record of every kind, for one keyframe group.
#[derive(Clone, Debug)]
pub(crate) struct EventCodec {
    models: Box<[LengthModel; COLUMNS]>,
    /// Whether the chunks are range coded (the lossy profiles).
    ranged: bool,
    /// The range coder's models, made when the group's first range-coded chunk comes (the
    /// lossless profile never needs them).
    range: Option<Box<RangeModels>>,
    prev: [u32; COLUMNS],
    /// Per kind: the index after the last record of the group's previous event chunks (0
    /// at the start of a group): what a chunk's first index is coded against.
    next: [u32; 4],
    /// The [`Word::Stepped`] column's last two values in the group, the latest first.
    stepped: [Option<u32>; 2],
}

impl Default for EventCodec {
    /// The lossless profile's event codec.
    fn default() -> Self {
        EventCodec {
            models: Box::new(std::array::from_fn(|col| {
                LengthModel::starting_at(start_centre(col) as i32)
            })),
            ranged: false,
            range: None,
            prev: START_PREV,
            next: [0; 4],
            stepped: [None; 2],
        }
    }
}

impl EventCodec {
    /// The event codec of a stream: range coded in the lossy profiles.
    pub(crate) fn new(ranged: bool) -> Self {
        EventCodec {
            ranged,
            ..EventCodec::default()
        }
    }

    /// A new keyframe group.
    pub(crate) fn reset(&mut self) {
        *self = EventCodec::new(self.ranged);
    }

    fn range_models(&mut self) -> &mut RangeModels {
        self.range.get_or_insert_with(|| {
            // The three starting models (centres 0, 2, 20), copied into the columns.
            let start = [0, 2, 20].map(ResidualModel::with_prior);
            Box::new(RangeModels {
                residual: std::array::from_fn(|col| match start_centre(col) {
                    0 => start[0],
                    2 => start[1],
                    _ => start[2],
                }),
                kinds: [Prob::NEW; 4],
                count: [start[0]; 4],
                first: [start[0]; 4],
            })
        })
    }

    fn residual_model(&mut self, col: usize) -> &mut ResidualModel {
        &mut self.range_models().residual[col % COLUMNS]
    }

    /// Codes (or decodes) one value of column `col` against `pred`; returns the value.
    fn code(&mut self, c: &mut Coder, col: usize, int: bool, pred: u32, v: u32) -> u32 {
        match c {
            Coder::Enc(raw) => {
                let z = if int {
                    zigzag((v as i32).wrapping_sub(pred as i32))
                } else {
                    zigzag(ordered(v).wrapping_sub(ordered(pred)) as i32)
                };
                self.models[col].encode(raw, z);
                v
            }
            Coder::Dec(raw) => {
                let z = self.models[col].decode(raw);
                if int {
                    (pred as i32).wrapping_add(unzigzag(z)) as u32
                } else {
                    unordered(ordered(pred).wrapping_add(unzigzag(z) as u32))
                }
            }
            Coder::RangeEnc(rc) => {
                let r = if int {
                    (v as i32).wrapping_sub(pred as i32)
                } else {
                    ordered(v).wrapping_sub(ordered(pred)) as i32
                };
                self.residual_model(col).encode(rc, r);
                v
            }
            Coder::RangeDec(rc) => {
                let r = self.residual_model(col).decode(rc);
                if int {
                    (pred as i32).wrapping_add(r) as u32
                } else {
                    unordered(ordered(pred).wrapping_add(r as u32))
                }
            }
        }
    }

    /// Codes the words of one record (its bytes when encoding, nothing when decoding) and
    /// writes its bytes into `out` (as many as the record has words × 4).
    fn record(&mut self, c: &mut Coder, kinds: &[Word], base: usize, bytes: &[u8], out: &mut [u8]) {
        let mut cur = [0u32; 17];
        let input = |i: usize| {
            bytes
                .get(4 * i..)
                .and_then(|w| w.first_chunk::<4>())
                .map_or(0, |w| u32::from_le_bytes(*w))
        };
        let mut i = 0;
        while i < kinds.len() {
            let col = base + i;
            let (int, pred) = match kinds[i] {
                Word::Int => (true, self.prev[col]),
                Word::Float => (false, self.prev[col]),
                Word::Unit => {
                    self.unit(c, col, &mut cur[i..i + 3], |k| input(i + k));
                    i += 3;
                    continue;
                }
                Word::TimeDeviation => {
                    let p = f32::from_bits(self.prev[COL_NOTE + 2])
                        - f32::from_bits(self.prev[COL_NOTE + 1]);
                    (false, computed(p, self.prev[col]))
                }
                Word::CutAngle(d) => {
                    let deviation = f32::from_bits(cur[d]);
                    let mut p = deviation - 90.0;
                    if p < -180.0 {
                        p = deviation + 270.0;
                    }
                    (false, computed(p, self.prev[col]))
                }
                Word::Spawn(t) => {
                    let gap = f32::from_bits(self.prev[base + t]) - f32::from_bits(self.prev[col]);
                    let p = f32::from_bits(cur[t]) - gap;
                    (false, computed(p, self.prev[col]))
                }
                Word::Stepped => {
                    let p = match self.stepped {
                        [Some(a), Some(b)] => {
                            let (a, b) = (f32::from_bits(a), f32::from_bits(b));
                            a + (a - b)
                        }
                        _ => f32::NAN,
                    };
                    (false, computed(p, self.prev[col]))
                }
            };
            cur[i] = self.code(c, col, int, pred, input(i));
            if kinds[i] == Word::Stepped {
                self.stepped = [Some(cur[i]), self.stepped[0]];
            }
            i += 1;
        }
        self.prev[base..base + kinds.len()].copy_from_slice(&cur[..kinds.len()]);
        for (slot, w) in out.chunks_exact_mut(4).zip(&cur[..kinds.len()]) {
            slot.copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Codes a unit vector at columns `col..col + 3` (format.md 11.3): the two components
    /// other than the previous record's largest as floats, then the largest's sign bit and
    /// its magnitude against the one the other two leave to a unit vector.
    fn unit(&mut self, c: &mut Coder, col: usize, cur: &mut [u32], input: impl Fn(usize) -> u32) {
        let skip = largest_of(&self.prev[col..col + 3]);
        for k in (0..3).filter(|&k| k != skip) {
            cur[k] = self.code(c, col + k, false, self.prev[col + k], input(k));
        }
        let rest = unit_rest(cur, skip).to_bits();
        let sign = match c {
            Coder::Enc(raw) => {
                let sign = input(skip) >> 31;
                raw.put(sign, 1);
                sign
            }
            Coder::Dec(raw) => raw.get(1),
            Coder::RangeEnc(rc) => {
                let sign = input(skip) >> 31;
                rc.direct(sign, 1);
                sign
            }
            Coder::RangeDec(rc) => rc.direct(1),
        };
        let magnitude = self.code(c, col + skip, false, rest, input(skip) & 0x7fff_ffff);
        // A decoded magnitude with bit 31 set (forged input) keeps it: the sign is ORed in.
        cur[skip] = magnitude | (sign << 31);
    }

    fn bools(&mut self, c: &mut Coder, bytes: &[u8]) -> [u8; 4] {
        let mut out = [0u8; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            let col = COL_BOOLS + i;
            let v = u32::from(bytes.get(i).copied().unwrap_or(0));
            // A byte: the residual of a byte is a byte, whatever the stream says.
            *slot = self.code(c, col, true, self.prev[col], v) as u8;
            self.prev[col] = u32::from(*slot);
        }
        out
    }

    fn encode_into(&mut self, b: &EventBatch, mut c: Coder) {
        let mut scratch = [0u8; NOTE_HEAD + CUT];
        let mut rec = Vec::with_capacity(NOTE_HEAD + CUT);
        for n in &b.notes.records {
            rec.clear();
            bsor::encode_note(n, &mut rec);
            self.record(
                &mut c,
                &NOTE_HEAD_WORDS,
                COL_NOTE,
                &rec[..NOTE_HEAD],
                &mut scratch,
            );
            if rec.len() == NOTE_HEAD + CUT {
                self.bools(&mut c, &rec[NOTE_HEAD..NOTE_HEAD + 4]);
                self.record(
                    &mut c,
                    &CUT_WORDS,
                    COL_CUT,
                    &rec[NOTE_HEAD + 4..],
                    &mut scratch,
                );
            }
        }
        for w in &b.walls.records {
            let rec = bsor::encode_wall(w);
            self.record(&mut c, &WALL_WORDS, COL_WALL, &rec, &mut scratch);
        }
        for h in &b.heights.records {
            let rec = bsor::encode_height(h);
            self.record(&mut c, &HEIGHT_WORDS, COL_HEIGHT, &rec, &mut scratch);
        }
        for p in &b.pauses.records {
            let rec = bsor::encode_pause(p);
            self.record(&mut c, &PAUSE_WORDS, COL_PAUSE, &rec, &mut scratch);
        }
    }

    fn decode_from(
        &mut self,
        counts: [usize; 4],
        mut c: Coder,
        batch: &mut EventBatch,
    ) -> Result<(), ChunkError> {
        batch.notes.records.reserve(counts[0]);
        for at in 0..counts[0] {
            let mut rec = [0u8; NOTE_HEAD + CUT];
            self.record(
                &mut c,
                &NOTE_HEAD_WORDS,
                COL_NOTE,
                &[],
                &mut rec[..NOTE_HEAD],
            );
            let kind = i32::from_le_bytes([rec[12], rec[13], rec[14], rec[15]]);
            let len = if matches!(kind, 0 | 1) {
                let bools = self.bools(&mut c, &[]);
                rec[NOTE_HEAD..NOTE_HEAD + 4].copy_from_slice(&bools);
                self.record(&mut c, &CUT_WORDS, COL_CUT, &[], &mut rec[NOTE_HEAD + 4..]);
                NOTE_HEAD + CUT
            } else {
                NOTE_HEAD
            };
            let (note, _) =
                bsor::decode_note(&rec[..len]).ok_or(ChunkError::MalformedNote { at })?;
            batch.notes.records.push(note);
        }
        batch.walls.records.reserve(counts[1]);
        for _ in 0..counts[1] {
            let mut rec = [0u8; WALL];
            self.record(&mut c, &WALL_WORDS, COL_WALL, &[], &mut rec);
            batch.walls.records.push(bsor::decode_wall(&rec));
        }
        batch.heights.records.reserve(counts[2]);
        for _ in 0..counts[2] {
            let mut rec = [0u8; HEIGHT];
            self.record(&mut c, &HEIGHT_WORDS, COL_HEIGHT, &[], &mut rec);
            batch.heights.records.push(bsor::decode_height(&rec));
        }
        batch.pauses.records.reserve(counts[3]);
        for _ in 0..counts[3] {
            let mut rec = [0u8; PAUSE];
            self.record(&mut c, &PAUSE_WORDS, COL_PAUSE, &[], &mut rec);
            batch.pauses.records.push(bsor::decode_pause(&rec));
        }
        Ok(())
    }

    /// The payload of an event chunk holding `batch`.
    pub(crate) fn encode(&mut self, batch: &EventBatch) -> Vec<u8> {
        let mut payload = Vec::new();
        let kinds = [
            (batch.notes.first, batch.notes.records.len()),
            (batch.walls.first, batch.walls.records.len()),
            (batch.heights.first, batch.heights.records.len()),
            (batch.pauses.first, batch.pauses.records.len()),
        ];
        if self.ranged {
            let mut rc = RangeEncoder::default();
            for (k, (first, n)) in kinds.into_iter().enumerate() {
                let delta = (n > 0).then(|| self.delta(k, first, n));
                let m = self.range_models();
                rc.bit(&mut m.kinds[k], n > 0);
                if let Some(delta) = delta {
                    // At most MAX_RECORDS (the encoder splits larger batches).
                    m.count[k].encode(&mut rc, n as i32 - 1);
                    m.first[k].encode(&mut rc, delta);
                }
            }
            self.encode_into(batch, Coder::RangeEnc(&mut rc));
            return rc.finish();
        }
        // Which kinds are there, then for each: its count and its first index against the
        // one expected after the group's previous chunks.
        let present = kinds
            .iter()
            .enumerate()
            .filter(|(_, &(_, n))| n > 0)
            .fold(0u8, |bits, (k, _)| bits | 1 << k);
        payload.push(present);
        for (k, (first, n)) in kinds.into_iter().enumerate() {
            if n > 0 {
                put_varint(&mut payload, n as u64);
                let delta = self.delta(k, first, n);
                put_varint(&mut payload, u64::from(zigzag(delta)));
            }
        }
        let mut raw = BitWriter::default();
        self.encode_into(batch, Coder::Enc(&mut raw));
        payload.extend_from_slice(&raw.finish());
        payload
    }

    /// Decodes an event chunk's payload.
    pub(crate) fn decode(&mut self, payload: &[u8]) -> Result<EventBatch, ChunkError> {
        let mut kinds = [(0u32, 0usize); 4];
        if self.ranged {
            let mut rc = RangeDecoder::new(payload);
            for (k, slot) in kinds.iter_mut().enumerate() {
                let m = self.range_models();
                if !rc.bit(&mut m.kinds[k]) {
                    continue;
                }
                let n = m.count[k].decode(&mut rc);
                if !(0..MAX_RECORDS as i32).contains(&n) {
                    return Err(ChunkError::EventCountOutOfRange { count_less_one: n });
                }
                let delta = m.first[k].decode(&mut rc);
                *slot = self.place(k, delta, n as u32 + 1);
            }
            return self.records(kinds, Coder::RangeDec(&mut rc));
        }
        let mut r = Reader::new(payload);
        let section = Section::Events;
        let bad = |s| match s {
            Short::More => ChunkError::EndsEarly { section },
            Short::Bad(error) => ChunkError::Field { section, error },
        };
        let present = r.u8().map_err(bad)?;
        if present > 0x0f {
            return Err(ChunkError::UnknownEventKinds(present));
        }
        for (k, slot) in kinds.iter_mut().enumerate() {
            if present & (1 << k) == 0 {
                continue;
            }
            let n = r.varint_u32(Field::EventCount).map_err(bad)?;
            if n > MAX_RECORDS {
                return Err(ChunkError::TooManyEvents { count: n });
            }
            let delta = r.varint_u32(Field::FirstEventIndex).map_err(bad)?;
            *slot = self.place(k, unzigzag(delta), n);
        }
        let mut raw = BitReader::new(&payload[r.pos..]);
        self.records(kinds, Coder::Dec(&mut raw))
    }

    /// The first index of a chunk's `n` records of kind `k` against the one expected
    /// (format.md 11.1); the next one expected follows them. [`Self::place`] undoes it.
    fn delta(&mut self, k: usize, first: u32, n: usize) -> i32 {
        let delta = first.wrapping_sub(self.next[k]) as i32;
        self.next[k] = first.wrapping_add(n as u32);
        delta
    }

    /// The first index and count of a chunk's `n` records of kind `k` whose first index is
    /// `delta` from the one expected (format.md 11.1); the next one expected follows them.
    fn place(&mut self, k: usize, delta: i32, n: u32) -> (u32, usize) {
        let first = self.next[k].wrapping_add(delta as u32);
        self.next[k] = first.wrapping_add(n);
        (first, n as usize)
    }

    /// Decodes the records of a chunk whose first index and count of every kind are `kinds`.
    fn records(&mut self, kinds: [(u32, usize); 4], c: Coder) -> Result<EventBatch, ChunkError> {
        let mut batch = EventBatch {
            notes: Records {
                first: kinds[0].0,
                records: Vec::new(),
            },
            walls: Records {
                first: kinds[1].0,
                records: Vec::new(),
            },
            heights: Records {
                first: kinds[2].0,
                records: Vec::new(),
            },
            pauses: Records {
                first: kinds[3].0,
                records: Vec::new(),
            },
        };
        self.decode_from(kinds.map(|(_, n)| n), c, &mut batch)?;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bsor::NoteOutcome;
    use crate::synth;

    /// The synthetic replay's notes, with every cut's `cutAngle` set by `angle` from its
    /// `cutDirDeviation`, and its deviation set by `deviation` from its index.
    fn notes(
        deviation: impl Fn(usize) -> f32,
        angle: impl Fn(f32, usize) -> f32,
    ) -> Vec<NoteEvent> {
        let mut r = synth::replay(synth::Settings {
            seed: 21,
            seconds: 20.0,
            fps: 30,
        });
        for (i, n) in r.notes.iter_mut().enumerate() {
            if let NoteOutcome::Good(c) | NoteOutcome::Bad(c) = &mut n.outcome {
                c.cut_dir_deviation = deviation(i);
                c.cut_angle = angle(c.cut_dir_deviation, i);
            }
        }
        r.notes
    }

    fn bytes(notes: &[NoteEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        for n in notes {
            bsor::encode_note(n, &mut out);
        }
        out
    }

    /// Encodes the notes in one chunk, decodes them, checks they are bit-exact and returns
    /// the payload's length.
    fn round_trip(notes: Vec<NoteEvent>) -> usize {
        let batch = EventBatch {
            notes: Records {
                first: 0,
                records: notes,
            },
            ..EventBatch::default()
        };
        let payload = EventCodec::default().encode(&batch);
        let back = EventCodec::default().decode(&payload).unwrap();
        assert_eq!(bytes(&back.notes.records), bytes(&batch.notes.records));
        // The lossy profiles' range-coded events carry the same records.
        let ranged = EventCodec::new(true).encode(&batch);
        let back = EventCodec::new(true).decode(&ranged).unwrap();
        assert_eq!(bytes(&back.notes.records), bytes(&batch.notes.records));
        payload.len()
    }

    #[test]
    fn range_coded_events_round_trip_in_chunks_and_are_smaller() {
        // The synthetic notes, walls, heights and pauses of a song, cut into chunks of a
        // few records: each codec (bit code, range coder) decodes its own chunks in order.
        let r = synth::replay(synth::Settings {
            seed: 5,
            seconds: 30.0,
            fps: 30,
        });
        let mut sizes = [0usize; 2];
        for (ranged, size) in [false, true].into_iter().zip(&mut sizes) {
            let (mut enc, mut dec) = (EventCodec::new(ranged), EventCodec::new(ranged));
            for (i, n) in r.notes.chunks(3).enumerate() {
                let batch = EventBatch {
                    notes: Records {
                        first: 3 * i as u32,
                        records: n.to_vec(),
                    },
                    walls: Records {
                        first: 0,
                        records: if i == 0 { r.walls.clone() } else { Vec::new() },
                    },
                    heights: Records::new(
                        0,
                        if i == 0 {
                            r.heights.clone()
                        } else {
                            Vec::new()
                        },
                    ),
                    pauses: Records {
                        first: 0,
                        records: if i == 0 { r.pauses.clone() } else { Vec::new() },
                    },
                };
                let payload = enc.encode(&batch);
                *size += payload.len();
                let back = dec.decode(&payload).unwrap();
                assert_eq!(
                    bytes(&back.notes.records),
                    bytes(&batch.notes.records),
                    "chunk {i}"
                );
                assert_eq!(
                    back.notes.first, batch.notes.first,
                    "chunk {i}: first index"
                );
                assert_eq!(back.walls, batch.walls);
                assert_eq!(back.heights, batch.heights);
                assert_eq!(back.pauses, batch.pauses);
            }
        }
        assert!(
            sizes[1] < sizes[0],
            "range coded {} vs bits {}",
            sizes[1],
            sizes[0]
        );
        // Garbage decodes to something or to an error, never a panic.
        for junk in [&[0x01, 0x05, 0x00, 0xff, 0xff, 0xff][..], &[0x0f; 40][..]] {
            let _ = EventCodec::new(true).decode(junk);
        }
    }

    #[test]
    fn a_range_coded_count_out_of_range_is_an_error() {
        // Forged lossy chunks: a count of notes above 65536, or below 1, coded the way the
        // encoder codes counts, is refused before anything is allocated for it.
        for count_less_one in [65_536, 1 << 30, -1, i32::MIN] {
            let mut forger = EventCodec::new(true);
            let mut rc = RangeEncoder::default();
            let m = forger.range_models();
            rc.bit(&mut m.kinds[0], true);
            m.count[0].encode(&mut rc, count_less_one);
            m.first[0].encode(&mut rc, 0);
            let payload = rc.finish();
            let err = EventCodec::new(true).decode(&payload).err();
            assert!(
                matches!(err, Some(ChunkError::EventCountOutOfRange { .. })),
                "{count_less_one}: {err:?}"
            );
        }
        // The largest count there may be is read (and its records decoded from nothing).
        let mut forger = EventCodec::new(true);
        let mut rc = RangeEncoder::default();
        let m = forger.range_models();
        for k in 0..4 {
            rc.bit(&mut m.kinds[k], k == 3);
        }
        m.count[3].encode(&mut rc, 65_535);
        m.first[3].encode(&mut rc, 7);
        let batch = EventCodec::new(true).decode(&rc.finish()).unwrap();
        assert_eq!(
            (batch.pauses.first, batch.pauses.records.len()),
            (7, 65_536)
        );
    }

    #[test]
    fn a_cut_angle_is_predicted_from_its_deviation_with_the_wrap() {
        let cuts = notes(|_| 0.0, |_, _| 0.0)
            .iter()
            .filter(|n| matches!(n.outcome, NoteOutcome::Good(_) | NoteOutcome::Bad(_)))
            .count();
        assert!(cuts > 20, "{cuts} cuts");
        // Deviations on both sides of −90, so that both rules are used.
        let deviation = |i: usize| (i as f32 * 37.77).sin() * 179.0;
        let predicted = round_trip(notes(deviation, |d, _| {
            if d - 90.0 < -180.0 {
                d + 270.0
            } else {
                d - 90.0
            }
        }));
        // The same angles, wrapped the other way: each costs about a full float residual.
        let unwrapped = round_trip(notes(deviation, |d, _| {
            if d - 90.0 < -180.0 {
                d - 90.0
            } else {
                d + 270.0
            }
        }));
        let off = round_trip(notes(deviation, |d, i| d - 90.0 + (i as f32 * 0.731).cos()));
        assert!(
            predicted + 2 * cuts < unwrapped && predicted + 2 * cuts < off,
            "{predicted} {unwrapped} {off} for {cuts} cuts"
        );
    }

    #[test]
    fn a_cut_angle_after_a_non_finite_deviation_round_trips() {
        let special = [
            f32::NAN,
            f32::from_bits(0xffc0_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for &d in &special {
            round_trip(notes(|_| d, |_, i| (i as f32).sin() * 100.0));
            round_trip(notes(|_| d, |d, _| d - 90.0));
            round_trip(notes(|i| special[i % 4], |_, i| special[(i + 1) % 4]));
        }
    }

    #[test]
    fn a_groups_first_typical_cut_is_coded_against_typical_values() {
        let cut = notes(|_| 3.0, |d, _| d - 90.0)
            .into_iter()
            .find(|n| matches!(n.outcome, NoteOutcome::Good(_)))
            .unwrap();
        let batch = EventBatch {
            notes: Records {
                first: 0,
                records: vec![cut],
            },
            ..EventBatch::default()
        };
        let typical = EventCodec::default().encode(&batch);
        let mut zeros = EventCodec {
            prev: [0; COLUMNS],
            ..EventCodec::default()
        };
        let from_zeros = zeros.encode(&batch);
        assert!(
            typical.len() + 6 < from_zeros.len(),
            "{} bytes from the typical values, {} from zeros",
            typical.len(),
            from_zeros.len()
        );
        let back = EventCodec::default().decode(&typical).unwrap();
        assert_eq!(bytes(&back.notes.records), bytes(&batch.notes.records));
    }

    #[test]
    fn a_run_of_height_changes_is_predicted_step_by_step() {
        // One height change a frame (as an auto-height recording makes them): a regular run
        // costs a fraction of what its steps would cost coded against the previous time
        // alone (about 15 bits each at 30 s); odd times round-trip.
        let mut heights: Vec<Height> = (0..200)
            .map(|i| Height {
                height: 1.6,
                time: 30.0 + i as f32 / 90.0,
            })
            .collect();
        let regular = EventBatch {
            heights: Records {
                first: 0,
                records: heights.clone(),
            },
            ..EventBatch::default()
        };
        let bytes_regular = EventCodec::default().encode(&regular).len();
        assert!(bytes_regular < 200, "{bytes_regular} bytes for 200 heights");
        heights.extend(
            [f32::NAN, f32::INFINITY, -0.0, 1e30, f32::NAN]
                .map(|time| Height { height: 1.0, time }),
        );
        let odd = EventBatch {
            heights: Records {
                first: 7,
                records: heights,
            },
            ..EventBatch::default()
        };
        let payload = EventCodec::default().encode(&odd);
        let back = EventCodec::default().decode(&payload).unwrap();
        let bits = |b: &EventBatch| -> Vec<(u32, u32)> {
            b.heights
                .records
                .iter()
                .map(|h| (h.height.to_bits(), h.time.to_bits()))
                .collect()
        };
        assert_eq!(bits(&back), bits(&odd));
        assert_eq!(back.heights.first, 7);
    }
}
