//! The frame codec: prediction from the decoded previous frames, an inclusion mask, and
//! residuals: in the lossless profile coded by bit length (adaptive centre) plus raw low
//! bits (`bits.rs`), in the lossy profiles through the range coder (`range.rs`).
//!
//! Exact layout and arithmetic: `proto-spec/format.md`, section "Frame coding". The encoder
//! and the decoder run the same predictor over the same decoded history, so errors never
//! drift, and every float operation is a single IEEE 754 operation (no fused multiply-add,
//! no library functions but `sqrt`), so every platform computes the same bits.

use crate::bsor::{Frame, Pose, Quat, Vec3};

use super::accuracy::{position_within, rotation_limit, rotation_within};
use super::bits::{
    largest_of, ordered, unit_rest, unordered, unzigzag, zigzag, BitReader, BitWriter, LengthModel,
};
use super::header::Quantization;
use super::range::{Prob, RangeDecoder, RangeEncoder, ResidualModel};

/// How far along a hand's axis the point lies whose motion the rotation of the hand
/// explains (format.md 10.4): 0.15 m, in metres.
const SABER_OFFSET: f64 = 0.15;

/// The third column of the rotation matrix of `q` (the direction its local z axis points
/// to), in `f64` from the four `f32` components, as format.md 10.4 writes it: no fused
/// multiply-add, the same bits on every platform.
fn saber_axis(q: &Quat) -> [f64; 3] {
    let (x, y, z, w) = (
        f64::from(q.x),
        f64::from(q.y),
        f64::from(q.z),
        f64::from(q.w),
    );
    [
        2.0 * (x * z + y * w),
        2.0 * (y * z - x * w),
        1.0 - 2.0 * (x * x + y * y),
    ]
}

/// An escaped position or rotation (format.md 10.3): its floats as 32 direct bits each.
fn escape_enc(rc: &mut RangeEncoder, floats: &[f32]) {
    for v in floats {
        rc.direct(v.to_bits(), 32);
    }
}

/// The lossy flags, by their probability in [`LossyModels::flags`].
const FLAG_POSITION_ESCAPE: usize = 0;
const FLAG_ROTATION_ESCAPE: usize = 1;
const FLAG_INDEX_CHANGED: usize = 2;

/// Values per frame: time, fps, then per device position x y z and rotation x y z w.
const COLUMNS: usize = 23;
/// Parts of the inclusion mask: time, fps, then per device position and rotation.
const PARTS: usize = 8;

/// Linear extrapolation `2·a − b` in `f32`, the same bits everywhere: when the arithmetic
/// gives NaN (whose bits differ between platforms: x86 and ARM make different default
/// NaNs), the prediction is `a` itself.
fn extrapolate(a: f32, b: f32) -> f32 {
    let p = 2.0 * a - b;
    if p.is_nan() {
        a
    } else {
        p
    }
}

/// The adaptive models of one keyframe group.
#[derive(Clone, Debug)]
struct Models {
    /// Residual lengths, per column (lossless profile).
    length: [LengthModel; COLUMNS],
    /// The lossy profiles' models (format.md 10.6).
    lossy: LossyModels,
}

/// The adaptive probabilities of the lossy coding (format.md 10.6).
#[derive(Clone, Debug)]
struct LossyModels {
    /// Mask bit `k` of the six device parts, by the previous frame's bit `k`: `2k + prev`.
    mask: [Prob; 12],
    special: Prob,
    /// Whether a time's residual has bits below the group's grid (format.md 10.7).
    time_rest: Prob,
    /// Position escape, rotation escape, largest component changed.
    flags: [Prob; 3],
    /// Per column (0 time, 1 fps, then the device columns as in the lossless coding).
    residual: [ResidualModel; COLUMNS],
}

impl LossyModels {
    const NEW: LossyModels = LossyModels {
        mask: [Prob::NEW; 12],
        special: Prob::NEW,
        time_rest: Prob::NEW,
        flags: [Prob::NEW; 3],
        residual: [ResidualModel::NEW; COLUMNS],
    };
}

impl Models {
    /// Models whose centres start near the lengths of the columns' residuals (format.md
    /// 9.5): the time 8 bits, fps 2, poses 18 (lossless) or 5 (lossy); the lossy trees
    /// (10.6) centred on the time's 1 (it is counted in ticks of its grid, 10.7), the fps'
    /// 2 and the profile's prior centre. In 1-second groups this saves what the first
    /// residuals would spend moving a centre of 12 there.
    fn new(quant: Quantization) -> Self {
        let pose = match quant {
            Quantization::Lossless => 18,
            Quantization::Lossy { .. } => 5,
        };
        Models {
            lossy: match quant {
                Quantization::Lossless => LossyModels::NEW,
                Quantization::Lossy { prior_centre, .. } => {
                    // Three starting models, copied into the columns (format.md 10.6).
                    let (time, fps, pose) = (
                        ResidualModel::with_prior(1),
                        ResidualModel::with_prior(2),
                        ResidualModel::with_prior(prior_centre),
                    );
                    LossyModels {
                        residual: std::array::from_fn(|col| match col {
                            0 => time,
                            1 => fps,
                            _ => pose,
                        }),
                        ..LossyModels::NEW
                    }
                }
            },
            length: std::array::from_fn(|col| {
                LengthModel::starting_at(match col {
                    0 => 8,
                    1 => 2,
                    _ => pose,
                })
            }),
        }
    }
}

/// A quantized rotation: the index of the dropped (largest) component and the other three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SmallestThree {
    index: u8,
    v: [i32; 3],
}

/// The per-frame coding plan of the lossless columns (see [`FrameCodec::plan`]).
struct Plan {
    plain: [u32; COLUMNS],
    order: [u8; COLUMNS],
    ends: [u8; PARTS],
    /// Per device: first rotation column, derived component, its sign.
    derive: [(usize, usize, bool); 3],
}

/// What the predictor remembers of a lossy device part.
#[derive(Clone, Copy, Debug)]
struct LossyPart<T: Copy> {
    h1: Option<T>,
    h2: Option<T>,
}

impl<T: Copy> Default for LossyPart<T> {
    fn default() -> Self {
        LossyPart { h1: None, h2: None }
    }
}

impl<T: Copy> LossyPart<T> {
    fn push(&mut self, v: Option<T>) {
        self.h2 = if v.is_some() { self.h1 } else { None };
        self.h1 = v;
    }
}

/// Where the frames of one chunk are coded: the bit stream of section 7 (lossless) or the
/// range coder of section 10.6 (lossy).
#[derive(Debug)]
pub(crate) enum FrameOut {
    Bits(BitWriter),
    Range(RangeEncoder),
}

impl FrameOut {
    pub(crate) fn new(quant: Quantization) -> Self {
        match quant {
            Quantization::Lossless => FrameOut::Bits(BitWriter::default()),
            Quantization::Lossy { .. } => FrameOut::Range(RangeEncoder::default()),
        }
    }

    /// The chunk's payload; the writer is ready for the next chunk.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        match self {
            FrameOut::Bits(raw) => raw.finish(),
            FrameOut::Range(rc) => rc.finish(),
        }
    }
}

/// The codec state of one keyframe group (encoder and decoder alike).
#[derive(Clone, Debug)]
pub(crate) struct FrameCodec {
    quant: Quantization,
    models: Box<Models>,
    /// The previous two decoded frames, as column bits.
    h1: Option<[u32; COLUMNS]>,
    h2: Option<[u32; COLUMNS]>,
    prev_mask: u8,
    /// [`rotation_limit`] of the profile's rotation bound (the encoder's check).
    rotation_limit: f64,
    pos: [LossyPart<[i32; 3]>; 3],
    rot: [LossyPart<SmallestThree>; 3],
    /// Per device, the saber axis ([`saber_axis`]) of the last two decoded rotations.
    axis: [LossyPart<[f64; 3]>; 3],
    /// The group's time grid `k` (lossy profiles, format.md 10.7): the times are taken to
    /// be multiples of `2^-k` seconds (0: no grid).
    grid: u32,
    /// The encoder's view of the times (lossy profiles): the least [`low_exponent`] of the
    /// times coded in the current group and in the previous one (kept across
    /// [`FrameCodec::reset`]; the previous group's picks the next group's `grid`).
    times_low: i32,
    prev_times_low: i32,
    /// The fps of the group's last 8 frames (lossy profiles, format.md 10.7), frame `k` of
    /// the group at `k mod 8`, and the number of frames coded in the group.
    fps: [i32; 8],
    frames: u32,
}

fn columns(f: &Frame) -> [u32; COLUMNS] {
    let mut c = [0u32; COLUMNS];
    c[0] = f.time.to_bits();
    c[1] = f.fps as u32;
    for (d, p) in [&f.head, &f.left_hand, &f.right_hand]
        .into_iter()
        .enumerate()
    {
        let b = 2 + d * 7;
        c[b] = p.position.x.to_bits();
        c[b + 1] = p.position.y.to_bits();
        c[b + 2] = p.position.z.to_bits();
        c[b + 3] = p.rotation.x.to_bits();
        c[b + 4] = p.rotation.y.to_bits();
        c[b + 5] = p.rotation.z.to_bits();
        c[b + 6] = p.rotation.w.to_bits();
    }
    c
}

fn frame_from(c: &[u32; COLUMNS]) -> Frame {
    let f = |i: usize| f32::from_bits(c[i]);
    let pose = |b: usize| Pose {
        position: Vec3 {
            x: f(b),
            y: f(b + 1),
            z: f(b + 2),
        },
        rotation: Quat {
            x: f(b + 3),
            y: f(b + 4),
            z: f(b + 5),
            w: f(b + 6),
        },
    };
    Frame {
        time: f(0),
        fps: c[1] as i32,
        head: pose(2),
        left_hand: pose(9),
        right_hand: pose(16),
    }
}

/// The 26 neighbours of a point of the smallest-three grid, in the order the encoder tries
/// them (format.md 10.1): offsets in −1..=1, the first component slowest, without (0, 0, 0).
const NEIGHBOURS: [[i32; 3]; 26] = {
    let mut n = [[0i32; 3]; 26];
    let mut k = 0;
    let mut i = 0;
    while i < 27 {
        if i != 13 {
            n[k] = [i / 9 - 1, (i / 3) % 3 - 1, i % 3 - 1];
            k += 1;
        }
        i += 1;
    }
    n
};

/// `f64::round` (half away from zero) without a call into the maths library (which it is on
/// x86-64 without SSE4.1): the same value for every input.
#[inline]
fn round(x: f64) -> f64 {
    if x.is_nan() || x.abs() >= 4_503_599_627_370_496.0 {
        return x; // 2^52 and beyond are integers already; NaN stays NaN
    }
    let t = (x as i64 as f64).copysign(x); // truncated, exactly
    let f = x - t; // exact
    if f >= 0.5 {
        t + 1.0
    } else if f <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

/// The prediction of the time column once this frame's fps is known (format.md 9.3): the
/// previous frame's time plus `1 / fps`, in `f64` rounded to `f32`, when there is a previous
/// frame, the fps is positive and the sum is finite; else the plain prediction. (A frame's
/// fps is, in most recorded frames, the rate of the time step that led to it.)
fn time_prediction(h1: Option<&[u32; COLUMNS]>, fps: u32, plain: u32) -> u32 {
    let fps = fps as i32;
    if let Some(h1) = h1 {
        if fps > 0 {
            let t = (f64::from(f32::from_bits(h1[0])) + 1.0 / f64::from(fps)) as f32;
            if t.is_finite() {
                return t.to_bits();
            }
        }
    }
    plain
}

/// The ordered bits (format.md 9.2) of the time prediction `pred`, rounded to the nearest
/// multiple of `2^shift` (half way: up), the base of a lossy time residual (format.md 10.7).
fn grid_base(pred: u32, shift: u32) -> u32 {
    let step = 1u32 << shift;
    ordered(pred).wrapping_add(step >> 1) & !(step - 1)
}

/// How many low bits of a time near the prediction `pred` (bits of an `f32`) a grid of
/// `2^-grid` seconds leaves zero (format.md 10.7): `-grid` less the exponent of `pred`'s
/// unit in the last place, from 0 to 16; 0 without a grid or when `pred` is negative, zero,
/// subnormal, infinite or NaN.
fn time_shift(grid: u32, pred: u32) -> u32 {
    let e = (pred >> 23) & 0xff;
    if grid == 0 || pred >> 31 == 1 || e == 0 || e == 255 {
        return 0;
    }
    // The unit in the last place of pred is 2^(e - 150).
    (150 - e as i32 - grid as i32).clamp(0, 16) as u32
}

/// The exponent of the lowest set bit of a positive, finite, non-zero `f32` (its bits):
/// the value is an odd multiple of `2^exponent`. `None` for any other value.
fn low_exponent(bits: u32) -> Option<i32> {
    let e = ((bits >> 23) & 0xff) as i32;
    let m = bits & 0x7f_ffff;
    match (bits >> 31, e) {
        (1, _) | (_, 255) => None,
        (_, 0) if m == 0 => None,
        (_, 0) => Some(-149 + m.trailing_zeros() as i32),
        _ => Some(e - 150 + (m | 0x80_0000).trailing_zeros() as i32),
    }
}

/// The component of the previous rotation with the largest magnitude (3 when there is no
/// previous rotation; see [`largest_of`]).
fn largest(prev: Option<&[u32]>) -> usize {
    prev.map_or(3, largest_of)
}

/// `±sqrt(max(0, 1 − Σ others²))`, summed in index order, with the sign of the previous
/// frame's component.
fn derived(q: &[u32; 4], skip: usize, negative: bool) -> u32 {
    let r = unit_rest(q, skip);
    if negative {
        (-r).to_bits()
    } else {
        r.to_bits()
    }
}

impl FrameCodec {
    pub(crate) fn new(quant: Quantization) -> Self {
        FrameCodec {
            quant,
            models: Box::new(Models::new(quant)),
            h1: None,
            h2: None,
            prev_mask: 0,
            rotation_limit: match quant {
                Quantization::Lossy { bounds, .. } => rotation_limit(bounds.1),
                Quantization::Lossless => 0.0,
            },
            pos: [LossyPart::default(); 3],
            rot: [LossyPart::default(); 3],
            axis: [LossyPart::default(); 3],
            grid: 0,
            times_low: i32::MAX,
            prev_times_low: i32::MAX,
            fps: [0; 8],
            frames: 0,
        }
    }

    /// Forgets everything a decoder knows: the next frame is a keyframe. (The encoder
    /// keeps what the times it coded in the group tell about the next group's time grid.)
    pub(crate) fn reset(&mut self) {
        let low = self.times_low;
        *self = FrameCodec::new(self.quant);
        self.prev_times_low = low;
    }

    /// The lossy profiles' fps prediction (format.md 10.7): the mean of the fps of the
    /// group's last 8 frames (or of all its frames, if fewer), rounded to the nearest
    /// integer (half way: up); 0 at the group's first frame.
    fn fps_prediction(&self) -> i32 {
        let n = self.frames.min(8) as i64;
        if n == 0 {
            return 0;
        }
        let sum: i64 = self.fps[..n as usize].iter().map(|&v| i64::from(v)).sum();
        // Within i32: a mean of i32 values.
        (2 * sum + n).div_euclid(2 * n) as i32
    }

    fn push_fps(&mut self, fps: i32) {
        self.fps[(self.frames % 8) as usize] = fps;
        self.frames = self.frames.saturating_add(1);
    }

    /// The time grid the encoder picks for a group (format.md 10.7): the finest power of
    /// two of which every positive time of the previous group is a multiple, if it is
    /// `2^-1` to `2^-31` seconds; else (no previous group, no positive time, coarser or
    /// finer) 0, no grid.
    fn pick_grid(&self) -> u32 {
        match self.prev_times_low {
            e @ -31..=-1 => e.unsigned_abs(),
            _ => 0,
        }
    }

    #[inline]
    fn residual_enc(&mut self, raw: &mut BitWriter, col: usize, z: u32) {
        self.models.length[col].encode(raw, z);
    }

    /// The inclusion mask of the six device parts (mask bits 2 to 7): one bit "same as the
    /// previous frame's", or a zero bit and the six bits. Time and fps (bits 0 and 1) are
    /// always coded: their bits are always set.
    fn mask_enc(&mut self, raw: &mut BitWriter, mask: u8) {
        let parts = mask >> 2;
        if parts == self.prev_mask {
            raw.put(1, 1);
        } else {
            raw.put(0, 1);
            raw.put(u32::from(parts), 6);
        }
        self.prev_mask = parts;
    }

    fn mask_dec(&mut self, raw: &mut BitReader) -> u8 {
        let parts = if raw.get(1) == 1 {
            self.prev_mask
        } else {
            raw.get(6) as u8
        };
        self.prev_mask = parts;
        (parts << 2) | 3
    }

    /// The lossy mask of the six device parts: each bit an adaptive bit whose context is
    /// the same bit of the previous frame's mask. Time and fps (bits 0 and 1) are always
    /// coded: their bits are always set.
    fn lossy_mask_enc(&mut self, rc: &mut RangeEncoder, mask: u8) {
        let parts = mask >> 2;
        for k in 0..6 {
            let prev = usize::from((self.prev_mask >> k) & 1);
            rc.bit(
                &mut self.models.lossy.mask[2 * k + prev],
                (parts >> k) & 1 == 1,
            );
        }
        self.prev_mask = parts;
    }

    fn lossy_mask_dec(&mut self, rc: &mut RangeDecoder) -> u8 {
        let mut parts = 0u8;
        for k in 0..6 {
            let prev = usize::from((self.prev_mask >> k) & 1);
            parts |= u8::from(rc.bit(&mut self.models.lossy.mask[2 * k + prev])) << k;
        }
        self.prev_mask = parts;
        (parts << 2) | 3
    }

    /// A lossy part's flag (`FLAG_*`): an adaptive bit, present only in frames whose
    /// "special" bit is set (most frames have no flag set at all).
    fn lossy_flag_enc(&mut self, rc: &mut RangeEncoder, special: bool, flag: usize, bit: bool) {
        if special {
            rc.bit(&mut self.models.lossy.flags[flag], bit);
        }
    }

    fn lossy_flag_dec(&mut self, rc: &mut RangeDecoder, special: bool, flag: usize) -> bool {
        special && rc.bit(&mut self.models.lossy.flags[flag])
    }

    /// Codes `frame` and returns the frame the decoder will reconstruct (the same one, in
    /// the lossless profile). `out` must be [`FrameOut::new`] of this codec's
    /// quantization; if it is not, it is replaced by one that is.
    pub(crate) fn encode(&mut self, frame: &Frame, out: &mut FrameOut) -> Frame {
        let actual = columns(frame);
        match (self.quant, &mut *out) {
            (Quantization::Lossless, FrameOut::Bits(raw)) => self.encode_lossless(&actual, raw),
            (Quantization::Lossy { .. }, FrameOut::Range(rc)) => self.encode_lossy(&actual, rc),
            _ => {
                *out = FrameOut::new(self.quant);
                self.encode(frame, out)
            }
        }
    }

    /// Decodes the `count` frames of a chunk's payload, handing each to `frame`.
    pub(crate) fn decode_chunk(
        &mut self,
        payload: &[u8],
        count: u32,
        mut frame: impl FnMut(Frame),
    ) {
        match self.quant {
            Quantization::Lossless => {
                let mut raw = BitReader::new(payload);
                for _ in 0..count {
                    frame(self.decode_lossless(&mut raw));
                }
            }
            Quantization::Lossy { .. } => {
                let mut rc = RangeDecoder::new(payload);
                for _ in 0..count {
                    frame(self.decode_lossy(&mut rc));
                }
            }
        }
    }

    /// The prediction of every column from the history alone: nothing (zeros), the previous
    /// frame, or linear extrapolation (fps: always the previous value).
    fn plain_predictions(&self) -> [u32; COLUMNS] {
        let mut plain = [0u32; COLUMNS];
        match (&self.h1, &self.h2) {
            (None, _) => {}
            (Some(a), None) => plain = *a,
            (Some(a), Some(b)) => {
                for i in 0..COLUMNS {
                    plain[i] = extrapolate(f32::from_bits(a[i]), f32::from_bits(b[i])).to_bits();
                }
                plain[1] = a[1];
            }
        }
        plain
    }

    /// The time prediction of the lossy profiles (format.md 10.7), given this frame's fps:
    /// [`time_prediction`] with column 0 of [`Self::plain_predictions`], computed alone
    /// (the lossy coding needs no other plain prediction).
    fn lossy_time_prediction(&self, fps: u32) -> u32 {
        let plain = match (&self.h1, &self.h2) {
            (None, _) => 0,
            (Some(a), None) => a[0],
            (Some(a), Some(b)) => extrapolate(f32::from_bits(a[0]), f32::from_bits(b[0])).to_bits(),
        };
        time_prediction(self.h1.as_ref(), fps, plain)
    }

    /// What the next frame's coding needs from the history: the plain prediction of every
    /// column, the order in which the columns are coded (each device's derived rotation
    /// component last), where each part ends in that order, and for each device which
    /// rotation component is derived and with which sign.
    fn plan(&self) -> Plan {
        let plain = self.plain_predictions();
        let mut order = [0u8; COLUMNS];
        let mut ends = [0u8; PARTS];
        let mut derive = [(0usize, 0usize, false); 3];
        // fps before time: the time is predicted from the fps.
        order[0] = 1;
        order[1] = 0;
        ends[0] = 1;
        ends[1] = 2;
        let mut n = 2;
        for d in 0..3 {
            let b = 2 + d * 7;
            for k in 0..3 {
                order[n] = (b + k) as u8;
                n += 1;
            }
            ends[2 + 2 * d] = n as u8;
            let q0 = b + 3;
            let prev = self.h1.as_ref().map(|h| &h[q0..q0 + 4]);
            let skip = largest(prev);
            for k in (0..4).filter(|&k| k != skip) {
                order[n] = (q0 + k) as u8;
                n += 1;
            }
            order[n] = (q0 + skip) as u8;
            n += 1;
            ends[3 + 2 * d] = n as u8;
            let negative = prev.is_some_and(|q| q[skip] >> 31 == 1);
            derive[d] = (q0, skip, negative);
        }
        Plan {
            plain,
            order,
            ends,
            derive,
        }
    }

    /// The prediction of column `c`, given the columns decoded so far in this frame.
    #[inline]
    fn predict(&self, plan: &Plan, c: usize, actual: &[u32; COLUMNS]) -> u32 {
        if c == 0 {
            return time_prediction(self.h1.as_ref(), actual[1], plan.plain[0]);
        }
        if c >= 5 {
            let d = (c - 2) / 7;
            let (q0, skip, negative) = plan.derive[d];
            if c == q0 + skip {
                let q = [actual[q0], actual[q0 + 1], actual[q0 + 2], actual[q0 + 3]];
                return derived(&q, skip, negative);
            }
        }
        plan.plain[c]
    }

    fn residual_of(&self, plan: &Plan, c: usize, actual: &[u32; COLUMNS]) -> u32 {
        let pred = self.predict(plan, c, actual);
        if c == 1 {
            zigzag((actual[1] as i32).wrapping_sub(pred as i32))
        } else {
            zigzag(ordered(actual[c]).wrapping_sub(ordered(pred)) as i32)
        }
    }

    fn encode_lossless(&mut self, actual: &[u32; COLUMNS], raw: &mut BitWriter) -> Frame {
        let plan = self.plan();
        let mut residuals = [0u32; COLUMNS];
        let mut mask = 0u8;
        let mut start = 0;
        for (part, &end) in plan.ends.iter().enumerate() {
            for &c in &plan.order[start..usize::from(end)] {
                let c = usize::from(c);
                residuals[c] = self.residual_of(&plan, c, actual);
                if residuals[c] != 0 {
                    mask |= 1 << part;
                }
            }
            start = usize::from(end);
        }
        // Time and fps are always coded.
        mask |= 3;
        self.mask_enc(raw, mask);
        let mut start = 0;
        for (part, &end) in plan.ends.iter().enumerate() {
            if mask & (1 << part) != 0 {
                for &c in &plan.order[start..usize::from(end)] {
                    let c = usize::from(c);
                    self.residual_enc(raw, c, residuals[c]);
                }
            }
            start = usize::from(end);
        }
        self.h2 = self.h1;
        self.h1 = Some(*actual);
        frame_from(actual)
    }

    /// Decodes a lossless frame: the same walk as [`plan`](Self::plan) and
    /// [`encode_lossless`](Self::encode_lossless), written out part by part.
    fn decode_lossless(&mut self, raw: &mut BitReader) -> Frame {
        #[inline(always)]
        fn add(pred: u32, z: u32) -> u32 {
            unordered(ordered(pred).wrapping_add(unzigzag(z) as u32))
        }
        let mask = self.mask_dec(raw);
        let mut actual = self.plain_predictions();
        let models = &mut self.models.length;
        actual[1] = (actual[1] as i32).wrapping_add(unzigzag(models[1].decode(raw))) as u32;
        let time = time_prediction(self.h1.as_ref(), actual[1], actual[0]);
        actual[0] = add(time, models[0].decode(raw));
        for d in 0..3 {
            let b = 2 + 7 * d;
            if mask & (4 << (2 * d)) != 0 {
                for c in b..b + 3 {
                    actual[c] = add(actual[c], models[c].decode(raw));
                }
            }
            let q0 = b + 3;
            let prev = self.h1.as_ref().map(|h| &h[q0..q0 + 4]);
            let skip = largest(prev);
            let negative = prev.is_some_and(|q| q[skip] >> 31 == 1);
            let included = mask & (8 << (2 * d)) != 0;
            if included {
                for c in (q0..q0 + 4).filter(|&c| c != q0 + skip) {
                    actual[c] = add(actual[c], models[c].decode(raw));
                }
            }
            let q = [actual[q0], actual[q0 + 1], actual[q0 + 2], actual[q0 + 3]];
            let pred = derived(&q, skip, negative);
            actual[q0 + skip] = if included {
                add(pred, models[q0 + skip].decode(raw))
            } else {
                pred
            };
        }
        self.h2 = self.h1;
        self.h1 = Some(actual);
        frame_from(&actual)
    }

    fn lossy_params(&self) -> (f64, f64, i32) {
        match self.quant {
            Quantization::Lossy {
                position_step,
                rotation_steps,
                ..
            } => {
                let m = rotation_steps.clamp(1, 1 << 23) as i32;
                (
                    f64::from(position_step),
                    std::f64::consts::SQRT_2 * f64::from(m),
                    m,
                )
            }
            Quantization::Lossless => (1.0, 1.0, 1),
        }
    }

    /// The position prediction of device `d`, whose rotation in this frame decodes to
    /// `rotation` (format.md 10.4): linear extrapolation, and for a hand the motion that
    /// the change of its rotation gives a point `SABER_OFFSET` along its axis.
    fn predict_pos(&self, d: usize, rotation: &Quat) -> [i64; 3] {
        let part = &self.pos[d];
        match (part.h1, part.h2) {
            (Some(a), Some(b)) => {
                let linear = [0, 1, 2].map(|i| 2 * i64::from(a[i]) - i64::from(b[i]));
                let axis = &self.axis[d];
                match (d, axis.h1, axis.h2) {
                    (1 | 2, Some(a1), Some(a2)) => {
                        let (step, _, _) = self.lossy_params();
                        let k = SABER_OFFSET / step;
                        let a0 = saber_axis(rotation);
                        [0, 1, 2].map(|i| {
                            let c = round(k * ((a0[i] - 2.0 * a1[i]) + a2[i]));
                            linear[i]
                                + if c.abs() <= 1_073_741_824.0 {
                                    c as i64
                                } else {
                                    0
                                }
                        })
                    }
                    _ => linear,
                }
            }
            (Some(a), None) => a.map(i64::from),
            _ => [0; 3],
        }
    }

    fn predict_rot(&self, d: usize) -> SmallestThree {
        let part = &self.rot[d];
        match (part.h1, part.h2) {
            (Some(a), Some(b)) if a.index == b.index => SmallestThree {
                index: a.index,
                // Coded components stay within ±M < 2^23, where this cannot overflow; a
                // forged stream can leave a part uncoded frame after frame and let the
                // prediction grow, so the arithmetic wraps rather than panics.
                v: [0, 1, 2].map(|i| a.v[i].wrapping_mul(2).wrapping_sub(b.v[i])),
            },
            (Some(a), _) => a,
            _ => SmallestThree {
                index: 3,
                v: [0; 3],
            },
        }
    }

    fn dequantize_pos(&self, q: [i32; 3]) -> Vec3 {
        let (step, _, _) = self.lossy_params();
        let f = |v: i32| (f64::from(v) * step) as f32;
        Vec3 {
            x: f(q[0]),
            y: f(q[1]),
            z: f(q[2]),
        }
    }

    fn dequantize_rot(&self, r: SmallestThree) -> Quat {
        let c = self.rotation_f64(r);
        Quat {
            x: c[0] as f32,
            y: c[1] as f32,
            z: c[2] as f32,
            w: c[3] as f32,
        }
    }

    /// The base of a rotation whose largest component changed from the prediction's to
    /// `index` (format.md 10.5): the predicted rotation (in `f64`, before its rounding to
    /// `f32`) without its component `index`, quantized again.
    fn rebase(&self, pred: SmallestThree, index: u8) -> [i32; 3] {
        let (_, scale, m) = self.lossy_params();
        let mut c = self.rotation_f64(pred);
        let k = usize::from(index & 3);
        if c[k] < 0.0 {
            c = c.map(|v| -v);
        }
        let mut base = [0i32; 3];
        for (slot, &ci) in base.iter_mut().zip(
            c.iter()
                .enumerate()
                .filter(|&(i, _)| i != k)
                .map(|(_, c)| c),
        ) {
            *slot = (round(ci * scale) as i32).clamp(-m, m);
        }
        base
    }

    /// A quantized rotation's components in `f64` (10.2).
    fn rotation_f64(&self, r: SmallestThree) -> [f64; 4] {
        let (_, scale, _) = self.lossy_params();
        let mut c = [0f64; 4];
        let mut s = 1.0f64;
        let mut j = 0;
        for (i, slot) in c.iter_mut().enumerate() {
            if i != usize::from(r.index) {
                let v = f64::from(r.v[j]) / scale;
                *slot = v;
                s -= v * v;
                j += 1;
            }
        }
        c[usize::from(r.index & 3)] = s.max(0.0).sqrt();
        c
    }

    /// The quantized position and what it decodes to; `None` (escape) for one that cannot
    /// be quantized within the bound.
    fn quantize_pos(&self, p: &Vec3) -> Option<([i32; 3], Vec3)> {
        let (step, _, _) = self.lossy_params();
        let mut q = [0i32; 3];
        for (slot, v) in q.iter_mut().zip([p.x, p.y, p.z]) {
            let r = round(f64::from(v) / step);
            if !r.is_finite() || r.abs() > f64::from(1 << 30) {
                return None;
            }
            *slot = r as i32;
        }
        // The steps keep every position within the bound; f32 rounding of far-off
        // coordinates could not be: such a position is sent verbatim.
        let decoded = self.dequantize_pos(q);
        position_within(p, &decoded, self.bounds().0).then_some((q, decoded))
    }

    fn bounds(&self) -> (f64, f64) {
        match self.quant {
            Quantization::Lossy { bounds, .. } => bounds,
            Quantization::Lossless => (0.0, 0.0),
        }
    }

    /// Smallest three of a unit quaternion; `None` (escape) for non-finite components or a
    /// squared norm more than 1e-3 away from 1 (placeholders such as (-1,-1,-1,-1) or zeros).
    /// With what it decodes to.
    fn quantize_rot(&self, q: &Quat, prefer: u8) -> Option<(SmallestThree, Quat)> {
        let mut c = [q.x, q.y, q.z, q.w].map(f64::from);
        let n2: f64 = c.iter().map(|v| v * v).sum();
        if !n2.is_finite() || (n2 - 1.0).abs() > 1e-3 {
            return None;
        }
        let n = n2.sqrt();
        let mut index = 0;
        for i in 0..4 {
            c[i] /= n;
            if c[i].abs() > c[index].abs() {
                index = i;
            }
        }
        // The predicted component is dropped as long as the others stay in range and the
        // rotation within the bound: a change of index costs flags and residuals coded
        // against 0.
        let prefer = usize::from(prefer & 3);
        if prefer != index {
            if let Some(r) = self.smallest_three(q, c, prefer) {
                return Some(r);
            }
        }
        self.smallest_three(q, c, index)
    }

    /// `c` (normalized) without its component `index`, quantized, if no component is out
    /// of range and the rotation is within the bound.
    fn smallest_three(
        &self,
        q: &Quat,
        mut c: [f64; 4],
        index: usize,
    ) -> Option<(SmallestThree, Quat)> {
        let (_, scale, m) = self.lossy_params();
        if c[index] < 0.0 {
            c = c.map(|v| -v);
        }
        let mut v = [0i32; 3];
        let mut j = 0;
        for (i, &ci) in c.iter().enumerate() {
            if i != index {
                let x = round(ci * scale);
                if x.abs() > f64::from(m) {
                    return None;
                }
                v[j] = x as i32;
                j += 1;
            }
        }
        let within = |v: [i32; 3]| {
            let r = SmallestThree {
                index: index as u8,
                v,
            };
            if v.iter().any(|x| x.abs() > m) {
                return None;
            }
            let decoded = self.dequantize_rot(r);
            rotation_within(q, &decoded, self.rotation_limit).then_some((r, decoded))
        };
        // The rounded values are within the bound for almost every rotation; where they
        // are not (the dropped component's error adds up the others'), a neighbour on the
        // grid often is.
        within(v).or_else(|| {
            NEIGHBOURS
                .iter()
                .find_map(|d| within([v[0] + d[0], v[1] + d[1], v[2] + d[2]]))
        })
    }

    fn encode_lossy(&mut self, actual: &[u32; COLUMNS], rc: &mut RangeEncoder) -> Frame {
        let frame = frame_from(actual);
        let poses = [frame.head, frame.left_hand, frame.right_hand];
        // Decide every part first: the mask comes before the parts.
        let mut mask = 0u8;
        let fps_residual = (actual[1] as i32).wrapping_sub(self.fps_prediction());
        // Per device: the predictions (the history they come from changes only once the
        // device is coded), the position residuals, the quantized rotation.
        let rot_pred = [0, 1, 2].map(|d| self.predict_rot(d));
        let mut pos_pred = [[0i64; 3]; 3];
        let mut pos_code: [Option<[i32; 3]>; 3] = [None; 3];
        let mut rot_code: [Option<SmallestThree>; 3] = [None; 3];
        // What the decoder will make of the quantized values (computed for the bound checks).
        let mut pos_dec: [Option<Vec3>; 3] = [None; 3];
        let mut rot_dec: [Option<Quat>; 3] = [None; 3];
        for (d, pose) in poses.iter().enumerate() {
            let quantized = self.quantize_rot(&pose.rotation, rot_pred[d].index);
            rot_dec[d] = quantized.map(|(_, q)| q);
            rot_code[d] = quantized.map(|(r, _)| r);
            if rot_code[d] != Some(rot_pred[d]) {
                mask |= 1 << (3 + 2 * d);
            }
            // The rotation the decoder will have (the quantized one, or the escaped floats).
            let pred = self.predict_pos(d, rot_dec[d].as_ref().unwrap_or(&pose.rotation));
            pos_pred[d] = pred;
            let quantized = self.quantize_pos(&pose.position);
            pos_dec[d] = quantized.map(|(_, v)| v);
            pos_code[d] = quantized.and_then(|(q, _)| {
                let mut r = [0i32; 3];
                for i in 0..3 {
                    r[i] = i32::try_from(i64::from(q[i]) - pred[i]).ok()?;
                }
                Some(r)
            });
            if pos_code[d] != Some([0; 3]) {
                mask |= 1 << (2 + 2 * d);
            }
        }
        // One bit: does any included part escape or change its largest component?
        let special = (0..3).any(|d| {
            (mask & (1 << (2 + 2 * d)) != 0 && pos_code[d].is_none())
                || (mask & (1 << (3 + 2 * d)) != 0
                    && rot_code[d].is_none_or(|r| r.index != rot_pred[d].index))
        });
        // Time and fps are always coded.
        mask |= 3;
        self.lossy_mask_enc(rc, mask);
        rc.bit(&mut self.models.lossy.special, special);
        if self.h1.is_none() {
            self.grid = self.pick_grid();
            rc.direct(self.grid, 5);
        }
        // fps, then the time predicted from it, on the group's grid.
        self.models.lossy.residual[1].encode(rc, fps_residual);
        self.push_fps(actual[1] as i32);
        let pred = self.lossy_time_prediction(actual[1]);
        let shift = time_shift(self.grid, pred);
        let r = ordered(actual[0]).wrapping_sub(grid_base(pred, shift)) as i32;
        self.models.lossy.residual[0].encode(rc, r >> shift);
        if shift > 0 {
            let rest = (r as u32) & ((1 << shift) - 1);
            rc.bit(&mut self.models.lossy.time_rest, rest != 0);
            if rest != 0 {
                rc.direct(rest, shift);
            }
        }
        if let Some(e) = low_exponent(actual[0]) {
            self.times_low = self.times_low.min(e);
        }
        let mut out = frame;
        out.time = f32::from_bits(actual[0]);
        out.fps = actual[1] as i32;
        let mut decoded = [Pose::default(); 3];
        for (d, pose) in poses.iter().enumerate() {
            let col = 2 + 7 * d;
            let pred = rot_pred[d];
            let rot_bit = mask & (1 << (3 + 2 * d)) != 0;
            let r = match (rot_bit, rot_code[d]) {
                (false, _) => Some(pred),
                (true, Some(r)) => {
                    self.lossy_flag_enc(rc, special, FLAG_ROTATION_ESCAPE, false);
                    let changed = r.index != pred.index;
                    self.lossy_flag_enc(rc, special, FLAG_INDEX_CHANGED, changed);
                    let base = if changed {
                        self.rebase(pred, r.index)
                    } else {
                        pred.v
                    };
                    if changed {
                        rc.direct(u32::from(r.index), 2);
                    }
                    for (i, (v, b)) in r.v.iter().zip(base).enumerate() {
                        self.models.lossy.residual[col + 3 + i].encode(rc, v.wrapping_sub(b));
                    }
                    Some(r)
                }
                (true, None) => {
                    self.lossy_flag_enc(rc, special, FLAG_ROTATION_ESCAPE, true);
                    let q = pose.rotation;
                    escape_enc(rc, &[q.x, q.y, q.z, q.w]);
                    None
                }
            };
            decoded[d].rotation = match (r, rot_dec[d]) {
                (Some(_), Some(q)) => q, // r is the quantized rotation (or equals it)
                (Some(r), None) => self.dequantize_rot(r),
                (None, _) => pose.rotation,
            };
            self.rot[d].push(r);

            let pred = pos_pred[d];
            let pos_bit = mask & (1 << (2 + 2 * d)) != 0;
            let q = match (pos_bit, pos_code[d]) {
                (false, _) => Some(pred.map(|v| v as i32)),
                (true, Some(r)) => {
                    self.lossy_flag_enc(rc, special, FLAG_POSITION_ESCAPE, false);
                    for (i, &ri) in r.iter().enumerate() {
                        self.models.lossy.residual[col + i].encode(rc, ri);
                    }
                    Some([0, 1, 2].map(|i| (pred[i] + i64::from(r[i])) as i32))
                }
                (true, None) => {
                    self.lossy_flag_enc(rc, special, FLAG_POSITION_ESCAPE, true);
                    let p = pose.position;
                    escape_enc(rc, &[p.x, p.y, p.z]);
                    None
                }
            };
            decoded[d].position = match (q, pos_dec[d]) {
                (Some(_), Some(v)) => v, // q is the quantized position (or equals it)
                (Some(q), None) => self.dequantize_pos(q),
                (None, _) => pose.position,
            };
            self.pos[d].push(q);
            self.axis[d].push(Some(saber_axis(&decoded[d].rotation)));
        }
        self.h2 = self.h1;
        self.h1 = Some(*actual);
        out.head = decoded[0];
        out.left_hand = decoded[1];
        out.right_hand = decoded[2];
        out
    }

    fn decode_lossy(&mut self, rc: &mut RangeDecoder) -> Frame {
        let mask = self.lossy_mask_dec(rc);
        let special = rc.bit(&mut self.models.lossy.special);
        if self.h1.is_none() {
            self.grid = rc.direct(5);
        }
        let mut actual = [0u32; COLUMNS];
        let r = self.models.lossy.residual[1].decode(rc);
        actual[1] = self.fps_prediction().wrapping_add(r) as u32;
        self.push_fps(actual[1] as i32);
        let time = self.lossy_time_prediction(actual[1]);
        let shift = time_shift(self.grid, time);
        let q = self.models.lossy.residual[0].decode(rc) as u32;
        let rest = if shift > 0 && rc.bit(&mut self.models.lossy.time_rest) {
            rc.direct(shift)
        } else {
            0
        };
        let r = q.wrapping_shl(shift) | rest;
        actual[0] = unordered(grid_base(time, shift).wrapping_add(r));
        let mut decoded = [Pose::default(); 3];
        for (d, out) in decoded.iter_mut().enumerate() {
            let col = 2 + 7 * d;
            let pred = self.predict_rot(d);
            let r = if mask & (1 << (3 + 2 * d)) == 0 {
                Some(pred)
            } else if self.lossy_flag_dec(rc, special, FLAG_ROTATION_ESCAPE) {
                None
            } else {
                let changed = self.lossy_flag_dec(rc, special, FLAG_INDEX_CHANGED);
                let (index, base) = if changed {
                    let index = rc.direct(2) as u8;
                    (index, self.rebase(pred, index))
                } else {
                    (pred.index, pred.v)
                };
                let (_, _, m) = self.lossy_params();
                let mut v = [0i32; 3];
                for (i, slot) in v.iter_mut().enumerate() {
                    let r = self.models.lossy.residual[col + 3 + i].decode(rc);
                    // A valid stream stays within ±M; clamping keeps forged input bounded.
                    *slot = base[i].wrapping_add(r).clamp(-m, m);
                }
                Some(SmallestThree { index, v })
            };
            out.rotation = match r {
                Some(r) => self.dequantize_rot(r),
                None => Quat {
                    x: f32::from_bits(rc.direct(32)),
                    y: f32::from_bits(rc.direct(32)),
                    z: f32::from_bits(rc.direct(32)),
                    w: f32::from_bits(rc.direct(32)),
                },
            };
            self.rot[d].push(r);

            let pred = self.predict_pos(d, &out.rotation);
            let q = if mask & (1 << (2 + 2 * d)) == 0 {
                Some(pred.map(|v| v as i32))
            } else if self.lossy_flag_dec(rc, special, FLAG_POSITION_ESCAPE) {
                None
            } else {
                let mut q = [0i32; 3];
                for (i, slot) in q.iter_mut().enumerate() {
                    let r = self.models.lossy.residual[col + i].decode(rc);
                    *slot = pred[i].wrapping_add(i64::from(r)) as i32;
                }
                Some(q)
            };
            out.position = match q {
                Some(q) => self.dequantize_pos(q),
                None => Vec3 {
                    x: f32::from_bits(rc.direct(32)),
                    y: f32::from_bits(rc.direct(32)),
                    z: f32::from_bits(rc.direct(32)),
                },
            };
            self.pos[d].push(q);
            self.axis[d].push(Some(saber_axis(&out.rotation)));
        }
        self.h2 = self.h1;
        self.h1 = Some(actual);
        Frame {
            time: f32::from_bits(actual[0]),
            fps: actual[1] as i32,
            head: decoded[0],
            left_hand: decoded[1],
            right_hand: decoded[2],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Profile;

    /// A second of a hand swinging about a point `arm` behind it (in its own frame) with an
    /// uneven angular speed, the other devices still; coded in the compact profile.
    fn swing_bytes(arm: [f64; 3]) -> (usize, f64) {
        let quant = Profile::Compact.quantization();
        let mut codec = FrameCodec::new(quant);
        let mut out = FrameOut::new(quant);
        let mut worst = 0.0f64;
        for i in 0..90 {
            let t = f64::from(i) / 90.0;
            let angle = 1.5 * (4.0 * std::f64::consts::PI * t).sin(); // about y, 2 swings a second
            let (s, c) = ((angle / 2.0).sin(), (angle / 2.0).cos());
            let rotation = Quat {
                x: 0.0,
                y: s as f32,
                z: 0.0,
                w: c as f32,
            };
            // The rotated arm: about y, (x, z) turn by the angle.
            let (sa, ca) = angle.sin_cos();
            let pivot = [0.3, 1.1, 0.2];
            let position = Vec3 {
                x: (pivot[0] + ca * arm[0] + sa * arm[2]) as f32,
                y: (pivot[1] + arm[1]) as f32,
                z: (pivot[2] - sa * arm[0] + ca * arm[2]) as f32,
            };
            let still = Pose {
                position: Vec3::default(),
                rotation: Quat {
                    w: 1.0,
                    ..Quat::default()
                },
            };
            let frame = Frame {
                time: t as f32,
                fps: 90,
                head: still,
                left_hand: still,
                right_hand: Pose { position, rotation },
            };
            let decoded = codec.encode(&frame, &mut out);
            let d = decoded.right_hand.position;
            let e = ((d.x - position.x).powi(2)
                + (d.y - position.y).powi(2)
                + (d.z - position.z).powi(2))
            .sqrt();
            worst = worst.max(f64::from(e));
        }
        (out.finish().len(), worst)
    }

    #[test]
    fn a_hand_turning_about_the_saber_offset_is_predicted() {
        // The predictor knows the point 0.15 m behind the controller along its z axis: a
        // swing about it costs little; the same swing about a point as far away sideways
        // costs the position residuals the rotation does not explain.
        let (along_z, err_z) = swing_bytes([0.0, 0.0, SABER_OFFSET]);
        let (sideways, err_x) = swing_bytes([SABER_OFFSET, 0.0, 0.0]);
        assert!(err_z <= 1.0e-3 && err_x <= 1.0e-3, "{err_z} {err_x}");
        assert!(
            (along_z as f64) < 0.8 * sideways as f64,
            "{along_z} bytes along z, {sideways} sideways"
        );
    }

    /// Codes `times` (with fps from `fps`) in 30-frame groups of the compact profile, the
    /// poses still; decodes them and checks every time and fps bit for bit. Returns the bytes.
    fn clock_bytes(times: &[f32], fps: impl Fn(usize) -> i32) -> usize {
        let quant = Profile::Compact.quantization();
        let (mut enc, mut dec) = (FrameCodec::new(quant), FrameCodec::new(quant));
        let mut total = 0;
        for (g, group) in times.chunks(30).enumerate() {
            enc.reset();
            dec.reset();
            let mut out = FrameOut::new(quant);
            let frames: Vec<Frame> = group
                .iter()
                .enumerate()
                .map(|(i, &time)| {
                    let still = Pose {
                        position: Vec3::default(),
                        rotation: Quat {
                            w: 1.0,
                            ..Quat::default()
                        },
                    };
                    Frame {
                        time,
                        fps: fps(30 * g + i),
                        head: still,
                        left_hand: still,
                        right_hand: still,
                    }
                })
                .collect();
            for f in &frames {
                enc.encode(f, &mut out);
            }
            let payload = out.finish();
            total += payload.len();
            let mut got = Vec::new();
            dec.decode_chunk(&payload, frames.len() as u32, |f| got.push(f));
            for (f, d) in frames.iter().zip(&got) {
                assert_eq!(
                    (f.time.to_bits(), f.fps),
                    (d.time.to_bits(), d.fps),
                    "group {g}"
                );
            }
        }
        total
    }

    #[test]
    fn times_on_a_clock_grid_cost_their_steps_and_every_time_passes() {
        // A game clock ticking in 2^-14 s: after the first group the encoder codes the
        // times in steps of the grid; the same steps with the low bits set cost more.
        let step = |i: usize| [182, 180, 183, 181][i % 4] as f64;
        let mut t = 62.0f64; // crosses 64 s (one ordered bit less on the grid) on the way
        let mut grid = Vec::new();
        for i in 0..240 {
            grid.push(t as f32); // exact: a multiple of 2^-14 below 2^10
            t += step(i) / 16384.0;
        }
        let jitter: Vec<f32> = grid
            .iter()
            .enumerate()
            .map(|(i, t)| {
                f32::from_bits(t.to_bits() | (i as u32).wrapping_mul(2_654_435_761) >> 29)
            })
            .collect();
        let fps = |i: usize| 90 + [0, 1, -1, 2][i % 4];
        let (on, off) = (clock_bytes(&grid, fps), clock_bytes(&jitter, fps));
        assert!(
            (on as f64) < 0.8 * off as f64,
            "{on} bytes on the grid, {off} off it"
        );
        // Off the grid now and then, a repeated time, time going back, negative zero,
        // negative times, NaN, infinity, absurd fps: every value passes exactly.
        let mut odd = grid.clone();
        odd[40] = f32::from_bits(odd[40].to_bits() + 1);
        odd[50] = odd[49];
        odd[70] = odd[69] - 0.5;
        odd[95] = -0.0;
        odd[96] = -1.0;
        odd[97] = f32::NAN;
        odd[98] = f32::INFINITY;
        odd[130] = f32::from_bits(0x7fc0_1234);
        clock_bytes(&odd, |i| match i % 7 {
            3 => i32::MIN,
            4 => i32::MAX,
            _ => fps(i),
        });
    }

    #[test]
    fn round_is_f64_round() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
        ];
        let mut state = 1u64;
        for _ in 0..100_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = f64::from_bits(state);
            values.push(x);
            values.push((state >> 11) as f64 / 1024.0 - 4e12);
        }
        for x in values {
            if x.is_nan() {
                assert!(round(x).is_nan());
            } else {
                assert_eq!(round(x).to_bits(), x.round().to_bits(), "{x}");
            }
        }
        assert!(round(f64::NAN).is_nan());
    }
}
