//! A `.butter`-style baseline: frames coded the way Echo VR's `.butter` replay format
//! describes it, so that the report can set the project's profiles beside a known design.
//!
//! Written by hand because no crate implements `.butter` (the format is described, not
//! published as a library), and because the baseline must decode too: its error is measured
//! like the profiles' error. It is a benchmark comparator, not part of the stream format.
//!
//! Layout (all little-endian):
//! - header: magic `BTRS`, version `1`, frame count (`u32`), chunk count (`u32`);
//! - chunks, one per keyframe: frame count (`u32`), compressed length (`u32`), then the
//!   zstd-compressed payload: one **keyframe** (time `f32` bits, fps `i32`, then for head,
//!   left and right hand the position as three `f16` and the rotation as smallest-three in a
//!   `u32`) and up to `N − 1` **delta frames**: an inclusion bitmask byte (bit 0 the fps
//!   changed, bit `1 + 2d` device `d`'s position changed, bit `2 + 2d` its rotation), the
//!   time's bits XOR the previous time's, the fps if included, each included position as
//!   three wrapping `u16` differences of the `f16` bits, each included rotation as its
//!   packed `u32` XOR the previous one. "Changed" compares quantized values, so deltas do
//!   not accumulate error;
//! - events: compressed length (`u32`) and the zstd-compressed BSOR bytes of the replay
//!   without its frames (the events stay exact, as in the stream format).
//!
//! **Error bound** (half precision): a position coordinate `v` comes back within
//! `2⁻¹¹·|v|` (half an `f16` ulp) when `|v| ≥ 2⁻¹⁴`, within `2⁻²⁵` m below that, so a
//! position is within `2⁻¹¹·‖p‖ + √3·2⁻²⁵` m (1.46 mm at 3 m); coordinates beyond
//! ±65504 m become infinite. A rotation's three smallest components lie in `±1/√2` on 1024
//! levels (step `√2/1023`, so each is within `h = √2/2046`), and the largest, rebuilt as
//! `√(1 − Σc²)`, is at least `1/2`, which stretches the error at most twice: the rotation
//! angle is within `4·√3·h` rad = 0.2743°, stated as [`ROTATION_BOUND_DEG`] with room for
//! `f32` rounding. Stored values that are not rotations (placeholders, zeros) come back
//! as some rotation: the accuracy measures skip them, as for the profiles.

use bsor_stream::bsor::{self, Frame, Pose, Quat, Replay, Vec3};
use half::f16;

/// The rotation bound in degrees (see the module doc).
pub const ROTATION_BOUND_DEG: f64 = 0.28;

/// The position bound in millimetres for a position `p` (see the module doc).
#[cfg(test)]
pub fn position_bound_mm(p: &Vec3) -> f64 {
    let n = [p.x, p.y, p.z]
        .map(f64::from)
        .iter()
        .map(|v| v * v)
        .sum::<f64>()
        .sqrt();
    (n * 2f64.powi(-11) + 3f64.sqrt() * 2f64.powi(-25)) * 1000.0
}

const MAGIC: [u8; 4] = *b"BTRS";
const KEYFRAME_BYTES: usize = 8 + 3 * 10;
/// Most frames a chunk may claim when decoding (bounds what a chunk allocates).
const MAX_CHUNK_FRAMES: u32 = 1 << 20;
/// Most bytes the events may decompress to.
const MAX_EVENT_BYTES: usize = 256 << 20;
/// zstd level of chunks and events (Echo VR's tools compress with zstd's default, 3).
const ZSTD_LEVEL: i32 = 3;

/// A frame as the baseline stores it: times exact, poses quantized.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Quantized {
    time: u32,
    fps: i32,
    pos: [[u16; 3]; 3],
    rot: [u32; 3],
}

fn poses(f: &Frame) -> [&Pose; 3] {
    [&f.head, &f.left_hand, &f.right_hand]
}

/// Smallest-three in 32 bits: the index of the largest component (2 bits), then the other
/// three, sign-flipped so that the largest is positive, on 10 bits each over `±1/√2`.
pub fn pack_rotation(q: &Quat) -> u32 {
    let c = [q.x, q.y, q.z, q.w].map(f64::from);
    let n = c.iter().map(|v| v * v).sum::<f64>().sqrt();
    if !n.is_finite() || n == 0.0 {
        return 3 << 30 | 511 << 20 | 511 << 10 | 511;
    }
    let c = c.map(|v| v / n);
    let mut big = 0;
    for i in 1..4 {
        if c[i].abs() > c[big].abs() {
            big = i;
        }
    }
    let s = if c[big] < 0.0 { -1.0 } else { 1.0 };
    let mut out = (big as u32) << 30;
    let mut shift = 20;
    for (i, v) in c.iter().enumerate() {
        if i == big {
            continue;
        }
        let u = ((v * s * std::f64::consts::SQRT_2 + 1.0) / 2.0 * 1023.0).round();
        out |= (u.clamp(0.0, 1023.0) as u32) << shift;
        shift -= 10;
    }
    out
}

/// The rotation [`pack_rotation`] stored.
pub fn unpack_rotation(p: u32) -> Quat {
    let big = (p >> 30) as usize;
    let mut c = [0f64; 4];
    let mut shift = 20;
    let mut sum = 0.0;
    for (i, v) in c.iter_mut().enumerate() {
        if i == big {
            continue;
        }
        let u = f64::from((p >> shift) & 1023);
        *v = (u / 1023.0 * 2.0 - 1.0) / std::f64::consts::SQRT_2;
        sum += *v * *v;
        shift -= 10;
    }
    c[big] = (1.0 - sum).max(0.0).sqrt();
    Quat {
        x: c[0] as f32,
        y: c[1] as f32,
        z: c[2] as f32,
        w: c[3] as f32,
    }
}

fn quantize(f: &Frame) -> Quantized {
    let mut q = Quantized {
        time: f.time.to_bits(),
        fps: f.fps,
        ..Quantized::default()
    };
    for (d, p) in poses(f).into_iter().enumerate() {
        let v = p.position;
        q.pos[d] = [v.x, v.y, v.z].map(|x| f16::from_f32(x).to_bits());
        q.rot[d] = pack_rotation(&p.rotation);
    }
    q
}

fn dequantize(q: &Quantized) -> Frame {
    let pose = |d: usize| {
        let [x, y, z] = q.pos[d].map(|b| f16::from_bits(b).to_f32());
        Pose {
            position: Vec3 { x, y, z },
            rotation: unpack_rotation(q.rot[d]),
        }
    };
    Frame {
        time: f32::from_bits(q.time),
        fps: q.fps,
        head: pose(0),
        left_hand: pose(1),
        right_hand: pose(2),
    }
}

fn put_keyframe(out: &mut Vec<u8>, q: &Quantized) {
    out.extend_from_slice(&q.time.to_le_bytes());
    out.extend_from_slice(&q.fps.to_le_bytes());
    for d in 0..3 {
        for v in q.pos[d] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&q.rot[d].to_le_bytes());
    }
}

fn put_delta(out: &mut Vec<u8>, q: &Quantized, prev: &Quantized) {
    let mut mask = u8::from(q.fps != prev.fps);
    for d in 0..3 {
        mask |= u8::from(q.pos[d] != prev.pos[d]) << (1 + 2 * d);
        mask |= u8::from(q.rot[d] != prev.rot[d]) << (2 + 2 * d);
    }
    out.push(mask);
    out.extend_from_slice(&(q.time ^ prev.time).to_le_bytes());
    if mask & 1 != 0 {
        out.extend_from_slice(&q.fps.to_le_bytes());
    }
    for d in 0..3 {
        if mask & (1 << (1 + 2 * d)) != 0 {
            for k in 0..3 {
                out.extend_from_slice(&q.pos[d][k].wrapping_sub(prev.pos[d][k]).to_le_bytes());
            }
        }
        if mask & (1 << (2 + 2 * d)) != 0 {
            out.extend_from_slice(&(q.rot[d] ^ prev.rot[d]).to_le_bytes());
        }
    }
}

fn zstd(bytes: &[u8]) -> Result<Vec<u8>, String> {
    zstd::bulk::compress(bytes, ZSTD_LEVEL).map_err(|e| format!("zstd: {e}"))
}

/// How long each part of encoding took, in seconds.
#[derive(Clone, Copy, Default, Debug)]
pub struct EncodeTimes {
    /// Quantizing and building keyframes and deltas.
    pub predict: f64,
    /// zstd.
    pub compress: f64,
}

/// Encodes a replay with a keyframe every `keyframe_frames` frames (at least 1).
pub fn encode(r: &Replay, keyframe_frames: usize) -> Result<(Vec<u8>, EncodeTimes), String> {
    use std::time::Instant;
    let n = keyframe_frames.max(1);
    let mut times = EncodeTimes::default();
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.push(1);
    let frames = u32::try_from(r.frames.len()).map_err(|_| "too many frames".to_string())?;
    out.extend_from_slice(&frames.to_le_bytes());
    let chunks = r.frames.len().div_ceil(n) as u32;
    out.extend_from_slice(&chunks.to_le_bytes());
    let mut payload = Vec::with_capacity(n * KEYFRAME_BYTES);
    for group in r.frames.chunks(n) {
        let t = Instant::now();
        payload.clear();
        let mut prev = quantize(&group[0]);
        put_keyframe(&mut payload, &prev);
        for f in &group[1..] {
            let q = quantize(f);
            put_delta(&mut payload, &q, &prev);
            prev = q;
        }
        times.predict += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let packed = zstd(&payload)?;
        times.compress += t.elapsed().as_secs_f64();
        out.extend_from_slice(&(group.len() as u32).to_le_bytes());
        out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
        out.extend_from_slice(&packed);
    }
    let t = Instant::now();
    let events = bsor::to_vec(&Replay {
        frames: Vec::new(),
        ..r.clone()
    })
    .map_err(|e| format!("events: {e}"))?;
    let packed = zstd(&events)?;
    times.compress += t.elapsed().as_secs_f64();
    out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    out.extend_from_slice(&packed);
    Ok((out, times))
}

/// Reads what [`encode`] wrote.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(format!("{what} at byte {}: past the end", self.pos));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
}

/// Applies one delta frame to `q`.
fn delta(p: &mut Cursor, q: &mut Quantized) -> Result<(), String> {
    let mask = p.take(1, "mask")?[0];
    q.time ^= p.u32("time")?;
    if mask & 1 != 0 {
        q.fps = p.u32("fps")? as i32;
    }
    for d in 0..3 {
        if mask & (1 << (1 + 2 * d)) != 0 {
            for k in 0..3 {
                q.pos[d][k] = q.pos[d][k].wrapping_add(p.u16("position")?);
            }
        }
        if mask & (1 << (2 + 2 * d)) != 0 {
            q.rot[d] ^= p.u32("rotation")?;
        }
    }
    Ok(())
}

/// Decodes what [`encode`] wrote: the replay with its quantized frames.
pub fn decode(bytes: &[u8]) -> Result<Replay, String> {
    let mut c = Cursor { buf: bytes, pos: 0 };
    if c.take(4, "magic")? != MAGIC || c.take(1, "version")? != [1] {
        return Err("not a butter-style baseline file".into());
    }
    let frames = c.u32("frame count")?;
    let chunks = c.u32("chunk count")?;
    let mut out = Vec::with_capacity(frames.min(1 << 20) as usize);
    for chunk in 0..chunks {
        let n = c.u32("chunk frame count")?;
        if n == 0 || n > MAX_CHUNK_FRAMES {
            return Err(format!("chunk {chunk}: {n} frames"));
        }
        let len = c.u32("chunk length")? as usize;
        let packed = c.take(len, "chunk")?;
        // A delta frame is at most 1 + 4 + 4 + 3·(6 + 4) bytes.
        let limit = KEYFRAME_BYTES + (n as usize - 1) * 39;
        let payload = zstd::bulk::decompress(packed, limit)
            .map_err(|e| format!("chunk {chunk}: zstd: {e}"))?;
        let mut p = Cursor {
            buf: &payload,
            pos: 0,
        };
        let mut q = Quantized {
            time: p.u32("keyframe time")?,
            fps: p.u32("keyframe fps")? as i32,
            ..Quantized::default()
        };
        for d in 0..3 {
            for k in 0..3 {
                q.pos[d][k] = p.u16("keyframe position")?;
            }
            q.rot[d] = p.u32("keyframe rotation")?;
        }
        out.push(dequantize(&q));
        for i in 1..n {
            delta(&mut p, &mut q).map_err(|e| format!("chunk {chunk} frame {i}: {e}"))?;
            out.push(dequantize(&q));
        }
        if p.pos != payload.len() {
            return Err(format!("chunk {chunk}: bytes left over"));
        }
    }
    if out.len() != frames as usize {
        return Err(format!("{} frames, header says {frames}", out.len()));
    }
    let len = c.u32("events length")? as usize;
    let events = zstd::bulk::decompress(c.take(len, "events")?, MAX_EVENT_BYTES)
        .map_err(|e| format!("events: zstd: {e}"))?;
    let mut r = bsor::parse(&events).map_err(|e| format!("events: {e}"))?;
    r.frames = out;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::super::common;
    use super::*;
    use bsor_stream::stream::accuracy;

    /// Decodes, checks every pose against the stated bounds and the events byte for byte,
    /// and returns the largest errors seen (mm, degrees).
    fn round_trip(r: &Replay, n: usize) -> (f64, f64) {
        let (bytes, _) = encode(r, n).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.frames.len(), r.frames.len());
        let strip = |r: &Replay| {
            bsor::to_vec(&Replay {
                frames: Vec::new(),
                ..r.clone()
            })
            .unwrap()
        };
        assert!(strip(r) == strip(&back), "events exact");
        let (mut max_p, mut max_r) = (0f64, 0f64);
        for (o, d) in r.frames.iter().zip(&back.frames) {
            assert_eq!(o.time.to_bits(), d.time.to_bits());
            assert_eq!(o.fps, d.fps);
            for (po, pd) in poses(o).into_iter().zip(poses(d)) {
                if let Some(e) = accuracy::position_error_mm(&po.position, &pd.position) {
                    let bound = position_bound_mm(&po.position);
                    assert!(e <= bound, "position error {e} mm > {bound} mm");
                    max_p = max_p.max(e);
                }
                if let Some(e) = accuracy::rotation_error_deg(&po.rotation, &pd.rotation) {
                    assert!(e <= ROTATION_BOUND_DEG, "rotation error {e}° > bound");
                    max_r = max_r.max(e);
                }
            }
        }
        (max_p, max_r)
    }

    #[test]
    fn synthetic_replay_round_trips_within_the_half_precision_bound() {
        let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
            seed: 17,
            seconds: 20.0,
            fps: 90,
        });
        for n in [1, 7, 90, 100_000] {
            let (p, q) = round_trip(&r, n);
            // Lossy, and not more than the format promises.
            assert!(p > 0.0 && q > 0.0, "{p} {q}");
        }
    }

    #[test]
    fn corpus_replays_round_trip_within_the_bound() {
        for (name, bytes) in common::corpus_files() {
            let r = bsor::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            round_trip(&r, 90);
        }
    }

    #[test]
    fn the_rotation_bound_holds_over_random_rotations() {
        let mut state = 99u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let mut worst = 0f64;
        for _ in 0..200_000 {
            let c = [next(), next(), next(), next()];
            let n = c.iter().map(|v| v * v).sum::<f64>().sqrt();
            let q = Quat {
                x: (c[0] / n) as f32,
                y: (c[1] / n) as f32,
                z: (c[2] / n) as f32,
                w: (c[3] / n) as f32,
            };
            let e = accuracy::rotation_error_deg(&q, &unpack_rotation(pack_rotation(&q))).unwrap();
            worst = worst.max(e);
        }
        assert!(worst <= ROTATION_BOUND_DEG, "{worst}");
        // The grid is what it says: a random rotation lands well off it sometimes.
        assert!(worst > 0.05, "{worst}");
    }

    #[test]
    fn damaged_input_is_an_error_not_a_panic() {
        let r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
            seed: 3,
            seconds: 2.0,
            fps: 60,
        });
        let (bytes, _) = encode(&r, 30).unwrap();
        for cut in [0, 5, 13, 40, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[9] = 0xff; // chunk count
        assert!(decode(&bad).is_err());
    }
}
