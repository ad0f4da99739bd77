//! The frame codec: prediction from the decoded previous frames, an inclusion mask, and
//! residuals: in the lossless profile coded by bit length (adaptive centre) plus raw low
//! bits (`bits.rs`), in the lossy profiles through the range coder (`range.rs`).
//!
//! Exact layout and arithmetic: `proto-spec/format.md`, section "Frame coding". The encoder
//! and the decoder run the same predictor over the same decoded history, so errors never
//! drift, and every float operation is a single IEEE 754 operation (no fused multiply-add,
//! no library functions but `sqrt`), so every platform computes the same bits.
//!
//! `predict.rs` holds the predictors both codings share, `lossless.rs` and `lossy.rs` the
//! two codings and their state.

mod lossless;
mod lossy;
mod predict;

use crate::bsor::{Frame, Pose, Quat, Vec3};

use super::bits::{BitReader, BitWriter};
use super::header::Quantization;
use super::range::{RangeDecoder, RangeEncoder};

use lossless::Lossless;
use lossy::{Lossy, Steps};

/// Values per frame: time, fps, then per device position x y z and rotation x y z w.
const COLUMNS: usize = 23;
// A frame's columns are the words of its BSOR frame record, in order.
const _: () = assert!(4 * COLUMNS == crate::bsor::FRAME_SIZE);
/// Parts of the inclusion mask: time, fps, then per device position and rotation.
const PARTS: usize = 8;

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

/// The codec state of one keyframe group (encoder and decoder alike), by profile.
// One per encoder or decoder, made once a stream and reset in place: boxing the larger
// variant would save nothing and add an indirection to every frame.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum FrameCodec {
    /// Every bit of every float kept (format.md 9).
    Lossless(Lossless),
    /// Quantized poses through the range coder (format.md 10).
    Lossy(Lossy),
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

impl FrameCodec {
    pub(crate) fn new(quant: Quantization) -> Self {
        match quant {
            Quantization::Lossless => FrameCodec::Lossless(Lossless::new()),
            Quantization::Lossy {
                position_step,
                rotation_steps,
                bounds,
                prior_centre,
            } => FrameCodec::Lossy(Lossy::new(
                Steps::new(position_step, rotation_steps, bounds),
                prior_centre,
            )),
        }
    }

    /// Forgets everything a decoder knows: the next frame is a keyframe. (The lossy
    /// encoder keeps what the times it coded in the group tell about the next group's time
    /// grid.)
    pub(crate) fn reset(&mut self) {
        match self {
            FrameCodec::Lossless(c) => *c = Lossless::new(),
            FrameCodec::Lossy(c) => c.reset(),
        }
    }

    /// Codes `frame` and returns the frame the decoder will reconstruct (the same one, in
    /// the lossless profile). `out` must be [`FrameOut::new`] of this codec's
    /// quantization; if it is not, it is replaced by one that is.
    pub(crate) fn encode(&mut self, frame: &Frame, out: &mut FrameOut) -> Frame {
        let actual = columns(frame);
        match (self, &mut *out) {
            (FrameCodec::Lossless(c), FrameOut::Bits(raw)) => c.encode(&actual, raw),
            (FrameCodec::Lossy(c), FrameOut::Range(rc)) => c.encode(&actual, rc),
            (FrameCodec::Lossless(c), out) => {
                let mut raw = BitWriter::default();
                let f = c.encode(&actual, &mut raw);
                *out = FrameOut::Bits(raw);
                f
            }
            (FrameCodec::Lossy(c), out) => {
                let mut rc = RangeEncoder::default();
                let f = c.encode(&actual, &mut rc);
                *out = FrameOut::Range(rc);
                f
            }
        }
    }

    /// Decodes the `count` frames of a chunk's payload as BSOR frame records (92 bytes
    /// each), appended to `out`. A lossless frame's columns are its record's words, so its
    /// record is written from them directly.
    pub(crate) fn decode_chunk_records(&mut self, payload: &[u8], count: u32, out: &mut Vec<u8>) {
        match self {
            FrameCodec::Lossless(c) => {
                let mut raw = BitReader::new(payload);
                for _ in 0..count {
                    let columns = c.decode_columns(&mut raw);
                    let mut record = [0u8; crate::bsor::FRAME_SIZE];
                    for (bytes, column) in record.chunks_exact_mut(4).zip(columns) {
                        bytes.copy_from_slice(&column.to_le_bytes());
                    }
                    out.extend_from_slice(&record);
                }
            }
            FrameCodec::Lossy(_) => {
                self.decode_chunk(payload, count, |f| {
                    out.extend_from_slice(&crate::bsor::encode_frame(&f));
                });
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
        match self {
            FrameCodec::Lossless(c) => {
                let mut raw = BitReader::new(payload);
                for _ in 0..count {
                    frame(c.decode(&mut raw));
                }
            }
            FrameCodec::Lossy(c) => {
                let mut rc = RangeDecoder::new(payload);
                for _ in 0..count {
                    frame(c.decode(&mut rc));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::predict::SABER_OFFSET;
    use super::*;
    use crate::bsor::{Pose, Quat, Vec3};
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
}
