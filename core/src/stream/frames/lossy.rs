//! The lossy coding of frames (format.md 10): positions on a grid, rotations as their
//! smallest three, each predicted from the decoded history and coded through the range
//! coder (`range.rs`); times on the group's clock grid, fps from the mean of the last
//! frames; what cannot be quantized within the profile's bounds sent verbatim (escaped).

use crate::bsor::{Frame, Pose, Quat, Vec3};

use super::super::accuracy::{position_within, rotation_limit, rotation_within};
use super::super::bits::{ordered, unordered};
use super::super::range::{Prob, RangeDecoder, RangeEncoder, ResidualModel};
use super::predict::{round, saber_axis, History, SABER_OFFSET};
use super::{frame_from, COLUMNS};

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
    /// Models whose residual trees (format.md 10.6) start centred on the time's 1 (it is
    /// counted in ticks of its grid, 10.7), the fps' 2 and the profile's prior centre.
    fn new(prior_centre: u32) -> Self {
        // Three starting models, copied into the columns (format.md 10.6).
        let (time, fps, pose) = (
            ResidualModel::with_prior(1),
            ResidualModel::with_prior(2),
            ResidualModel::with_prior(prior_centre),
        );
        LossyModels {
            mask: [Prob::NEW; 12],
            special: Prob::NEW,
            time_rest: Prob::NEW,
            flags: [Prob::NEW; 3],
            residual: std::array::from_fn(|col| match col {
                0 => time,
                1 => fps,
                _ => pose,
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

/// A lossy profile's quantization, as the coding uses it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Steps {
    /// Position step in metres.
    step: f64,
    /// `√2 · M`: a smallest-three component `c` is quantized to `round(c · scale)`.
    scale: f64,
    /// The smallest three are quantized to integers in `−M..=M`.
    m: i32,
    /// The encoder's bounds: position error in millimetres, rotation error in degrees.
    bounds: (f64, f64),
}

impl Steps {
    pub(crate) fn new(position_step: f32, rotation_steps: u32, bounds: (f64, f64)) -> Self {
        let m = rotation_steps.clamp(1, 1 << 23) as i32;
        Steps {
            step: f64::from(position_step),
            scale: std::f64::consts::SQRT_2 * f64::from(m),
            m,
            bounds,
        }
    }
}

/// How the encoder codes one device in a frame, decided before anything of the frame is
/// written (the mask and the "special" bit come first).
struct DeviceCoding {
    /// The rotation predicted from the device's history.
    rot_pred: SmallestThree,
    /// The quantized rotation (`None`: escaped) and what the decoder will make of it.
    rot_code: Option<SmallestThree>,
    rot_dec: Option<Quat>,
    /// The position predicted from the history and this frame's rotation.
    pos_pred: [i64; 3],
    /// The position's residuals against the prediction (`None`: escaped) and what the
    /// decoder will make of the quantized position.
    pos_code: Option<[i32; 3]>,
    pos_dec: Option<Vec3>,
}

impl DeviceCoding {
    /// The rotation is included (it is not the prediction).
    fn rot_included(&self) -> bool {
        self.rot_code != Some(self.rot_pred)
    }

    /// The position is included (it is not the prediction).
    fn pos_included(&self) -> bool {
        self.pos_code != Some([0; 3])
    }

    /// An included part escapes or changes its largest component (format.md 10.6).
    fn special(&self) -> bool {
        (self.pos_included() && self.pos_code.is_none())
            || (self.rot_included() && self.rot_code.is_none_or(|r| r.index != self.rot_pred.index))
    }
}

/// The lossy codec state of one keyframe group (encoder and decoder alike).
#[derive(Clone, Debug)]
pub(crate) struct Lossy {
    steps: Steps,
    prior_centre: u32,
    models: Box<LossyModels>,
    history: History,
    /// The previous frame's mask of the six device parts.
    prev_mask: u8,
    /// [`rotation_limit`] of the profile's rotation bound (the encoder's check).
    rotation_limit: f64,
    pos: [LossyPart<[i32; 3]>; 3],
    rot: [LossyPart<SmallestThree>; 3],
    /// Per device, the saber axis ([`saber_axis`]) of the last two decoded rotations.
    axis: [LossyPart<[f64; 3]>; 3],
    /// The group's time grid `k` (format.md 10.7): the times are taken to be multiples of
    /// `2^-k` seconds (0: no grid).
    grid: u32,
    /// The encoder's view of the times: the least [`low_exponent`] of the times coded in
    /// the current group and in the previous one (kept across [`Lossy::reset`]; the
    /// previous group's picks the next group's `grid`).
    times_low: i32,
    prev_times_low: i32,
    /// The fps of the group's last 8 frames (format.md 10.7), frame `k` of the group at
    /// `k mod 8`, and the number of frames coded in the group.
    fps: [i32; 8],
    frames: u32,
}

impl Lossy {
    pub(crate) fn new(grid: Steps, prior_centre: u32) -> Self {
        Lossy {
            steps: grid,
            prior_centre,
            models: Box::new(LossyModels::new(prior_centre)),
            history: History::default(),
            prev_mask: 0,
            rotation_limit: rotation_limit(grid.bounds.1),
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
        *self = Lossy::new(self.steps, self.prior_centre);
        self.prev_times_low = low;
    }

    /// The fps prediction (format.md 10.7): the mean of the fps of the group's last 8
    /// frames (or of all its frames, if fewer), rounded to the nearest integer (half way:
    /// up); 0 at the group's first frame.
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

    /// The mask of the six device parts: each bit an adaptive bit whose context is the
    /// same bit of the previous frame's mask. Time and fps (bits 0 and 1) are always coded:
    /// their bits are always set.
    fn mask_enc(&mut self, rc: &mut RangeEncoder, mask: u8) {
        let parts = mask >> 2;
        for k in 0..6 {
            let prev = usize::from((self.prev_mask >> k) & 1);
            rc.bit(&mut self.models.mask[2 * k + prev], (parts >> k) & 1 == 1);
        }
        self.prev_mask = parts;
    }

    fn mask_dec(&mut self, rc: &mut RangeDecoder) -> u8 {
        let mut parts = 0u8;
        for k in 0..6 {
            let prev = usize::from((self.prev_mask >> k) & 1);
            parts |= u8::from(rc.bit(&mut self.models.mask[2 * k + prev])) << k;
        }
        self.prev_mask = parts;
        (parts << 2) | 3
    }

    /// A part's flag (`FLAG_*`): an adaptive bit, present only in frames whose "special"
    /// bit is set (most frames have no flag set at all).
    fn flag_enc(&mut self, rc: &mut RangeEncoder, special: bool, flag: usize, bit: bool) {
        if special {
            rc.bit(&mut self.models.flags[flag], bit);
        }
    }

    fn flag_dec(&mut self, rc: &mut RangeDecoder, special: bool, flag: usize) -> bool {
        special && rc.bit(&mut self.models.flags[flag])
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
                        let k = SABER_OFFSET / self.steps.step;
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
        let step = self.steps.step;
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
        let Steps { scale, m, .. } = self.steps;
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
        let scale = self.steps.scale;
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
        let step = self.steps.step;
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
        position_within(p, &decoded, self.steps.bounds.0).then_some((q, decoded))
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
        let Steps { scale, m, .. } = self.steps;
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

    /// Decides how device `d`, at `pose` in this frame, is coded: its predictions (the
    /// history they come from changes only once the device is coded), its quantized
    /// rotation, its position residuals.
    fn decide_device(&self, d: usize, pose: &Pose) -> DeviceCoding {
        let rot_pred = self.predict_rot(d);
        let quantized = self.quantize_rot(&pose.rotation, rot_pred.index);
        let rot_dec = quantized.map(|(_, q)| q);
        let rot_code = quantized.map(|(r, _)| r);
        // The rotation the decoder will have (the quantized one, or the escaped floats).
        let pos_pred = self.predict_pos(d, rot_dec.as_ref().unwrap_or(&pose.rotation));
        let quantized = self.quantize_pos(&pose.position);
        let pos_code = quantized.and_then(|(q, _)| {
            let mut r = [0i32; 3];
            for i in 0..3 {
                r[i] = i32::try_from(i64::from(q[i]) - pos_pred[i]).ok()?;
            }
            Some(r)
        });
        DeviceCoding {
            rot_pred,
            rot_code,
            rot_dec,
            pos_pred,
            pos_code,
            pos_dec: quantized.map(|(_, v)| v),
        }
    }

    /// Codes the fps (`fps_residual` from the prediction before this frame) and then the
    /// time predicted from it, on the group's grid.
    fn code_clock(&mut self, rc: &mut RangeEncoder, actual: &[u32; COLUMNS], fps_residual: i32) {
        self.models.residual[1].encode(rc, fps_residual);
        self.push_fps(actual[1] as i32);
        let pred = self.history.time_prediction(actual[1]);
        let shift = time_shift(self.grid, pred);
        let r = ordered(actual[0]).wrapping_sub(grid_base(pred, shift)) as i32;
        self.models.residual[0].encode(rc, r >> shift);
        if shift > 0 {
            let rest = (r as u32) & ((1 << shift) - 1);
            rc.bit(&mut self.models.time_rest, rest != 0);
            if rest != 0 {
                rc.direct(rest, shift);
            }
        }
        if let Some(e) = low_exponent(actual[0]) {
            self.times_low = self.times_low.min(e);
        }
    }

    /// Codes device `d` as `c` decided, its rotation before its position; returns the
    /// pose the decoder will have.
    fn code_device(
        &mut self,
        rc: &mut RangeEncoder,
        d: usize,
        pose: &Pose,
        c: &DeviceCoding,
        special: bool,
    ) -> Pose {
        let col = 2 + 7 * d;
        let pred = c.rot_pred;
        let r = match (c.rot_included(), c.rot_code) {
            (false, _) => Some(pred),
            (true, Some(r)) => {
                self.flag_enc(rc, special, FLAG_ROTATION_ESCAPE, false);
                let changed = r.index != pred.index;
                self.flag_enc(rc, special, FLAG_INDEX_CHANGED, changed);
                let base = if changed {
                    self.rebase(pred, r.index)
                } else {
                    pred.v
                };
                if changed {
                    rc.direct(u32::from(r.index), 2);
                }
                for (i, (v, b)) in r.v.iter().zip(base).enumerate() {
                    self.models.residual[col + 3 + i].encode(rc, v.wrapping_sub(b));
                }
                Some(r)
            }
            (true, None) => {
                self.flag_enc(rc, special, FLAG_ROTATION_ESCAPE, true);
                let q = pose.rotation;
                escape_enc(rc, &[q.x, q.y, q.z, q.w]);
                None
            }
        };
        let rotation = match (r, c.rot_dec) {
            (Some(_), Some(q)) => q, // r is the quantized rotation (or equals it)
            (Some(r), None) => self.dequantize_rot(r),
            (None, _) => pose.rotation,
        };
        self.rot[d].push(r);

        let pred = c.pos_pred;
        let q = match (c.pos_included(), c.pos_code) {
            (false, _) => Some(pred.map(|v| v as i32)),
            (true, Some(r)) => {
                self.flag_enc(rc, special, FLAG_POSITION_ESCAPE, false);
                for (i, &ri) in r.iter().enumerate() {
                    self.models.residual[col + i].encode(rc, ri);
                }
                Some([0, 1, 2].map(|i| (pred[i] + i64::from(r[i])) as i32))
            }
            (true, None) => {
                self.flag_enc(rc, special, FLAG_POSITION_ESCAPE, true);
                let p = pose.position;
                escape_enc(rc, &[p.x, p.y, p.z]);
                None
            }
        };
        let position = match (q, c.pos_dec) {
            (Some(_), Some(v)) => v, // q is the quantized position (or equals it)
            (Some(q), None) => self.dequantize_pos(q),
            (None, _) => pose.position,
        };
        self.pos[d].push(q);
        self.axis[d].push(Some(saber_axis(&rotation)));
        Pose { position, rotation }
    }

    /// Codes the frame whose columns are `actual`; returns the frame the decoder will
    /// reconstruct.
    pub(crate) fn encode(&mut self, actual: &[u32; COLUMNS], rc: &mut RangeEncoder) -> Frame {
        let frame = frame_from(actual);
        let poses = [frame.head, frame.left_hand, frame.right_hand];
        // Decide every part first: the mask comes before the parts.
        let fps_residual = (actual[1] as i32).wrapping_sub(self.fps_prediction());
        let coding = [0, 1, 2].map(|d| self.decide_device(d, &poses[d]));
        let mut mask = 0u8;
        for (d, c) in coding.iter().enumerate() {
            mask |= u8::from(c.pos_included()) << (2 + 2 * d);
            mask |= u8::from(c.rot_included()) << (3 + 2 * d);
        }
        // One bit: does any included part escape or change its largest component?
        let special = coding.iter().any(DeviceCoding::special);
        // Time and fps are always coded.
        mask |= 3;
        self.mask_enc(rc, mask);
        rc.bit(&mut self.models.special, special);
        if self.history.h1.is_none() {
            self.grid = self.pick_grid();
            rc.direct(self.grid, 5);
        }
        self.code_clock(rc, actual, fps_residual);
        let mut out = frame;
        let mut decoded = [Pose::default(); 3];
        for (d, pose) in poses.iter().enumerate() {
            decoded[d] = self.code_device(rc, d, pose, &coding[d], special);
        }
        self.history.push(*actual);
        out.head = decoded[0];
        out.left_hand = decoded[1];
        out.right_hand = decoded[2];
        out
    }

    /// Decodes the time and fps columns of a frame (into `actual`).
    fn decode_clock(&mut self, rc: &mut RangeDecoder, actual: &mut [u32; COLUMNS]) {
        let r = self.models.residual[1].decode(rc);
        actual[1] = self.fps_prediction().wrapping_add(r) as u32;
        self.push_fps(actual[1] as i32);
        let time = self.history.time_prediction(actual[1]);
        let shift = time_shift(self.grid, time);
        let q = self.models.residual[0].decode(rc) as u32;
        let rest = if shift > 0 && rc.bit(&mut self.models.time_rest) {
            rc.direct(shift)
        } else {
            0
        };
        let r = q.wrapping_shl(shift) | rest;
        actual[0] = unordered(grid_base(time, shift).wrapping_add(r));
    }

    /// Decodes device `d` of a frame whose mask is `mask`: its rotation, then its position.
    fn decode_device(&mut self, rc: &mut RangeDecoder, d: usize, mask: u8, special: bool) -> Pose {
        let col = 2 + 7 * d;
        let pred = self.predict_rot(d);
        let r = if mask & (1 << (3 + 2 * d)) == 0 {
            Some(pred)
        } else if self.flag_dec(rc, special, FLAG_ROTATION_ESCAPE) {
            None
        } else {
            let changed = self.flag_dec(rc, special, FLAG_INDEX_CHANGED);
            let (index, base) = if changed {
                let index = rc.direct(2) as u8;
                (index, self.rebase(pred, index))
            } else {
                (pred.index, pred.v)
            };
            let m = self.steps.m;
            let mut v = [0i32; 3];
            for (i, slot) in v.iter_mut().enumerate() {
                let r = self.models.residual[col + 3 + i].decode(rc);
                // A valid stream stays within ±M; clamping keeps forged input bounded.
                *slot = base[i].wrapping_add(r).clamp(-m, m);
            }
            Some(SmallestThree { index, v })
        };
        let rotation = match r {
            Some(r) => self.dequantize_rot(r),
            None => Quat {
                x: f32::from_bits(rc.direct(32)),
                y: f32::from_bits(rc.direct(32)),
                z: f32::from_bits(rc.direct(32)),
                w: f32::from_bits(rc.direct(32)),
            },
        };
        self.rot[d].push(r);

        let pred = self.predict_pos(d, &rotation);
        let q = if mask & (1 << (2 + 2 * d)) == 0 {
            Some(pred.map(|v| v as i32))
        } else if self.flag_dec(rc, special, FLAG_POSITION_ESCAPE) {
            None
        } else {
            let mut q = [0i32; 3];
            for (i, slot) in q.iter_mut().enumerate() {
                let r = self.models.residual[col + i].decode(rc);
                *slot = pred[i].wrapping_add(i64::from(r)) as i32;
            }
            Some(q)
        };
        let position = match q {
            Some(q) => self.dequantize_pos(q),
            None => Vec3 {
                x: f32::from_bits(rc.direct(32)),
                y: f32::from_bits(rc.direct(32)),
                z: f32::from_bits(rc.direct(32)),
            },
        };
        self.pos[d].push(q);
        self.axis[d].push(Some(saber_axis(&rotation)));
        Pose { position, rotation }
    }

    /// Decodes a frame.
    pub(crate) fn decode(&mut self, rc: &mut RangeDecoder) -> Frame {
        let mask = self.mask_dec(rc);
        let special = rc.bit(&mut self.models.special);
        if self.history.h1.is_none() {
            self.grid = rc.direct(5);
        }
        let mut actual = [0u32; COLUMNS];
        self.decode_clock(rc, &mut actual);
        let head = self.decode_device(rc, 0, mask, special);
        let left_hand = self.decode_device(rc, 1, mask, special);
        let right_hand = self.decode_device(rc, 2, mask, special);
        self.history.push(actual);
        Frame {
            time: f32::from_bits(actual[0]),
            fps: actual[1] as i32,
            head,
            left_hand,
            right_hand,
        }
    }
}
