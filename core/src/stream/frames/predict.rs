//! The predictors both codings share (format.md 9.3, 10.4): the decoded history of the
//! group, the plain prediction of a column from it, the time from the fps, and the
//! arithmetic that has to give the same bits on every platform.

use crate::bsor::Quat;

use super::super::bits::{largest_of, unit_rest};
use super::COLUMNS;

/// How far along a hand's axis the point lies whose motion the rotation of the hand
/// explains (format.md 10.4): 0.15 m, in metres.
pub(super) const SABER_OFFSET: f64 = 0.15;

/// The third column of the rotation matrix of `q` (the direction its local z axis points
/// to), in `f64` from the four `f32` components, as format.md 10.4 writes it: no fused
/// multiply-add, the same bits on every platform.
pub(super) fn saber_axis(q: &Quat) -> [f64; 3] {
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

/// Linear extrapolation `2·a − b` in `f32`, the same bits everywhere: when the arithmetic
/// gives NaN (whose bits differ between platforms: x86 and ARM make different default
/// NaNs), the prediction is `a` itself.
pub(super) fn extrapolate(a: f32, b: f32) -> f32 {
    let p = 2.0 * a - b;
    if p.is_nan() {
        a
    } else {
        p
    }
}

/// `f64::round` (half away from zero) without a call into the maths library (which it is on
/// x86-64 without SSE4.1): the same value for every input.
#[inline]
pub(super) fn round(x: f64) -> f64 {
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
pub(super) fn time_prediction(h1: Option<&[u32; COLUMNS]>, fps: u32, plain: u32) -> u32 {
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

/// The component of the previous rotation with the largest magnitude (3 when there is no
/// previous rotation; see [`largest_of`]).
pub(super) fn largest(prev: Option<&[u32]>) -> usize {
    prev.map_or(3, largest_of)
}

/// `±sqrt(max(0, 1 − Σ others²))`, summed in index order, with the sign of the previous
/// frame's component.
pub(super) fn derived(q: &[u32; 4], skip: usize, negative: bool) -> u32 {
    let r = unit_rest(q, skip);
    if negative {
        (-r).to_bits()
    } else {
        r.to_bits()
    }
}

/// The previous two decoded frames of the group, as column bits.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct History {
    pub(super) h1: Option<[u32; COLUMNS]>,
    pub(super) h2: Option<[u32; COLUMNS]>,
}

impl History {
    /// The frame just decoded becomes the previous one.
    pub(super) fn push(&mut self, actual: [u32; COLUMNS]) {
        self.h2 = self.h1;
        self.h1 = Some(actual);
    }

    /// The prediction of every column from the history alone: nothing (zeros), the previous
    /// frame, or linear extrapolation (fps: always the previous value).
    pub(super) fn plain_predictions(&self) -> [u32; COLUMNS] {
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

    /// The time prediction given this frame's fps: [`time_prediction`] with column 0 of
    /// [`Self::plain_predictions`], computed alone (the lossy coding needs no other plain
    /// prediction).
    pub(super) fn time_prediction(&self, fps: u32) -> u32 {
        let plain = match (&self.h1, &self.h2) {
            (None, _) => 0,
            (Some(a), None) => a[0],
            (Some(a), Some(b)) => extrapolate(f32::from_bits(a[0]), f32::from_bits(b[0])).to_bits(),
        };
        time_prediction(self.h1.as_ref(), fps, plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
