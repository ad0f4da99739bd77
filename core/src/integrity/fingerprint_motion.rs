//! The motion signature and the similarity score (proto-spec/integrity.md §11.2).
//!
//! A signature holds, for each note event, its note ID, its time and the head and hand poses
//! at that time (interpolated from the frames), quantized to 1 mm, 1e-4 of a quaternion
//! component and 0.1 ms. Sampling at the events' own times makes a copy whose whole timeline
//! was shifted sample the same motion; the score then weighs what is left (pose differences
//! and the spread of the notes' time offsets) in units of a player's own noise.

use serde::Serialize;

use crate::bsor::{Frame, Pose, Replay};

/// The version of the signature's form and of the score.
pub const SIGNATURE_VERSION: u8 = 1;
/// Positions are stored in this unit (metres): millimetres.
pub const POSITION_UNIT: f64 = 1e-3;
/// Quaternion components are stored multiplied by this.
pub const ROTATION_SCALE: f64 = 1e4;
/// Times are stored in this unit (seconds): 0.1 ms.
pub const TIME_UNIT: f64 = 1e-4;
/// The position scale of the score: a repeat's noise per coordinate, in millimetres.
pub const SCORE_POSITION_MM: f64 = 10.0;
/// The rotation scale of the score: a repeat's noise per axis, in degrees.
pub const SCORE_ROTATION_DEG: f64 = 1.0;
/// The timing scale of the score: a repeat's timing noise, in seconds.
pub const SCORE_TIME_S: f64 = 0.008;
/// The fewest notes two signatures must have in common (same index, same note ID) for a score.
pub const MIN_MATCHED: usize = 8;
/// Two plays are the same play when their score is at least this.
pub const THRESHOLD: f64 = 0.125;

/// The head, left hand and right hand at a note event: for each, the position in
/// millimetres then the quaternion `x, y, z, w` times 10,000 (unit length, `w` ≥ 0).
pub type Poses = [[i16; 7]; 3];

/// One note event's entry in a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// The note's ID, as recorded.
    pub note_id: i32,
    /// The event time in units of 0.1 ms.
    pub time: i32,
    /// Head, left hand and right hand at the event time.
    pub poses: Poses,
}

/// The motion signature of a play: one [`Sample`] per note event, in the replay's order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MotionSignature {
    /// [`SIGNATURE_VERSION`].
    pub version: u8,
    /// The samples.
    pub samples: Vec<Sample>,
}

impl MotionSignature {
    /// The signature of a replay (integrity.md §11.2.1).
    pub fn of(replay: &Replay) -> MotionSignature {
        let frames = &replay.frames;
        let kept = monotone_frames(frames);
        let samples = replay
            .notes
            .iter()
            .map(|n| Sample {
                note_id: n.note_id,
                time: quantize_i32(f64::from(n.event_time) / TIME_UNIT),
                poses: poses_at(frames, &kept, f64::from(n.event_time)),
            })
            .collect();
        MotionSignature {
            version: SIGNATURE_VERSION,
            samples,
        }
    }

    /// The byte form (§11.2.2): the sample count as a `u32`, then for each sample its note
    /// ID and time as `i32` and its 21 pose values as `i16`, all little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.samples.len() * 50);
        let n = u32::try_from(self.samples.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&n.to_le_bytes());
        for s in &self.samples {
            out.extend_from_slice(&s.note_id.to_le_bytes());
            out.extend_from_slice(&s.time.to_le_bytes());
            for v in s.poses.iter().flatten() {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// A signature from its byte form ([`MotionSignature::to_bytes`]); `None` unless the
    /// bytes are exactly one.
    pub fn from_bytes(bytes: &[u8]) -> Option<MotionSignature> {
        let (n, mut rest) = bytes.split_first_chunk::<4>()?;
        let n = u32::from_le_bytes(*n) as usize;
        if rest.len() != n.checked_mul(50)? {
            return None;
        }
        let mut samples = Vec::with_capacity(n);
        while let Some((s, next)) = rest.split_first_chunk::<50>() {
            let i32_at = |k: usize| i32::from_le_bytes([s[k], s[k + 1], s[k + 2], s[k + 3]]);
            let mut poses = [[0i16; 7]; 3];
            for (k, v) in poses.iter_mut().flatten().enumerate() {
                *v = i16::from_le_bytes([s[8 + 2 * k], s[9 + 2 * k]]);
            }
            samples.push(Sample {
                note_id: i32_at(0),
                time: i32_at(4),
                poses,
            });
            rest = next;
        }
        Some(MotionSignature {
            version: SIGNATURE_VERSION,
            samples,
        })
    }
}

/// How two signatures compare (§11.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Similarity {
    /// In (0, 1]: 1 for identical motion and timing, 0 when the plays cannot be compared.
    pub score: f64,
    /// The median per-note distance `D` the score comes from (`None` when not comparable).
    pub distance: Option<f64>,
    /// Notes compared: same index and same note ID in both.
    pub matched: usize,
    /// The median difference of the event times, B minus A, in seconds.
    pub offset: Option<f64>,
    /// `score >= THRESHOLD`.
    pub same_play: bool,
}

/// Compares two signatures: the score, and whether it reaches [`THRESHOLD`].
pub fn similarity(a: &MotionSignature, b: &MotionSignature) -> Similarity {
    let pairs: Vec<(&Sample, &Sample)> = a
        .samples
        .iter()
        .zip(&b.samples)
        .filter(|(x, y)| x.note_id == y.note_id)
        .collect();
    let most = a.samples.len().max(b.samples.len());
    let matched = pairs.len();
    if matched < MIN_MATCHED || matched * 10 < most * 9 {
        return Similarity {
            score: 0.0,
            distance: None,
            matched,
            offset: None,
            same_play: false,
        };
    }
    let mut deltas: Vec<i64> = pairs
        .iter()
        .map(|(x, y)| i64::from(y.time) - i64::from(x.time))
        .collect();
    deltas.sort_unstable();
    let offset = deltas[(matched - 1) / 2];
    let mut r: Vec<f64> = pairs
        .iter()
        .map(|(x, y)| {
            let e =
                (i64::from(y.time) - i64::from(x.time) - offset) as f64 * TIME_UNIT / SCORE_TIME_S;
            let mut sum = e * e;
            for (p, q) in x.poses.iter().zip(&y.poses) {
                sum += position_term(p, q) + rotation_term(p, q);
            }
            sum
        })
        .collect();
    r.sort_unstable_by(f64::total_cmp);
    let d = r[(matched - 1) / 2];
    let score = 1.0 / (1.0 + d);
    Similarity {
        score,
        distance: Some(d),
        matched,
        offset: Some(offset as f64 * TIME_UNIT),
        same_play: score >= THRESHOLD,
    }
}

/// Squared position difference over the squared position scale.
fn position_term(p: &[i16; 7], q: &[i16; 7]) -> f64 {
    (0..3)
        .map(|i| {
            let d = f64::from(p[i]) - f64::from(q[i]);
            d * d
        })
        .sum::<f64>()
        / (SCORE_POSITION_MM * SCORE_POSITION_MM)
}

/// Squared angle between the two rotations over the squared rotation scale. The angle is
/// `4 atan2(|u - v|, |u + v|)` for the unit quaternions `u`, `v` (`v` negated when
/// `u · v < 0`), which is exact at 0 where `acos` is not.
fn rotation_term(p: &[i16; 7], q: &[i16; 7]) -> f64 {
    let unit = |x: &[i16; 7]| {
        let v = [x[3], x[4], x[5], x[6]].map(f64::from);
        let n = v.iter().map(|c| c * c).sum::<f64>().sqrt();
        if n > 0.0 {
            v.map(|c| c / n)
        } else {
            [0.0, 0.0, 0.0, 1.0]
        }
    };
    let (u, mut v) = (unit(p), unit(q));
    if u.iter().zip(&v).map(|(a, b)| a * b).sum::<f64>() < 0.0 {
        v = v.map(|c| -c);
    }
    let norm = |f: fn(f64, f64) -> f64| {
        u.iter()
            .zip(&v)
            .map(|(a, b)| f(*a, *b).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let angle = 4.0 * norm(|a, b| a - b).atan2(norm(|a, b| a + b));
    let deg = angle.to_degrees() / SCORE_ROTATION_DEG;
    deg * deg
}

/// The indices of the frames that interpolation uses: in order, each frame whose time is
/// finite and greater than that of the last one kept.
fn monotone_frames(frames: &[Frame]) -> Vec<u32> {
    let mut kept = Vec::new();
    let mut last = f32::NEG_INFINITY;
    for (i, f) in frames.iter().enumerate() {
        if f.time.is_finite() && f.time > last {
            last = f.time;
            // A replay's frames fit in u32 within any parser limits; stop rather than wrap.
            let Ok(i) = u32::try_from(i) else { break };
            kept.push(i);
        }
    }
    kept
}

/// The poses at song time `t`, interpolated between the kept frames around it.
fn poses_at(frames: &[Frame], kept: &[u32], t: f64) -> Poses {
    let at = |k: usize| &frames[kept[k] as usize];
    let time = |k: usize| f64::from(at(k).time);
    let (a, b, w) = match kept.len() {
        0 => return [quantize_pose(&Pose::default(), &Pose::default(), 0.0); 3],
        _ if !t.is_finite() || t <= time(0) => (0, 0, 0.0),
        n if t >= time(n - 1) => (n - 1, n - 1, 0.0),
        _ => {
            // The last kept frame at or before t; t < the last time, so b exists.
            let a = kept.partition_point(|&i| f64::from(frames[i as usize].time) <= t) - 1;
            let b = a + 1;
            (a, b, (t - time(a)) / (time(b) - time(a)))
        }
    };
    let (fa, fb) = (at(a), at(b));
    [
        quantize_pose(&fa.head, &fb.head, w),
        quantize_pose(&fa.left_hand, &fb.left_hand, w),
        quantize_pose(&fa.right_hand, &fb.right_hand, w),
    ]
}

/// `a + w (b - a)` for positions and a normalized linear interpolation for rotations,
/// quantized.
fn quantize_pose(a: &Pose, b: &Pose, w: f64) -> [i16; 7] {
    let lerp = |x: f32, y: f32| {
        let (x, y) = (f64::from(x), f64::from(y));
        x + w * (y - x)
    };
    let pa = [a.position.x, a.position.y, a.position.z];
    let pb = [b.position.x, b.position.y, b.position.z];
    let qa = [a.rotation.x, a.rotation.y, a.rotation.z, a.rotation.w].map(f64::from);
    let mut qb = [b.rotation.x, b.rotation.y, b.rotation.z, b.rotation.w].map(f64::from);
    if qa.iter().zip(&qb).map(|(x, y)| x * y).sum::<f64>() < 0.0 {
        qb = qb.map(|c| -c);
    }
    let mut q = [0.0f64; 4];
    for i in 0..4 {
        q[i] = qa[i] + w * (qb[i] - qa[i]);
    }
    let n = q.iter().map(|c| c * c).sum::<f64>().sqrt();
    if n > 0.0 && n.is_finite() {
        q = q.map(|c| c / n);
        if q[3] < 0.0 {
            q = q.map(|c| -c);
        }
    } else {
        q = [0.0, 0.0, 0.0, 1.0];
    }
    let mut out = [0i16; 7];
    for i in 0..3 {
        out[i] = quantize_i16(lerp(pa[i], pb[i]) / POSITION_UNIT);
    }
    for i in 0..4 {
        out[3 + i] = quantize_i16(q[i] * ROTATION_SCALE);
    }
    out
}

/// Rounded half away from zero, clamped to `i16`, NaN as 0.
fn quantize_i16(x: f64) -> i16 {
    // `as` saturates and maps NaN to 0, which is the rule.
    x.round() as i16
}

/// Rounded half away from zero, clamped to `i32`, NaN as 0.
fn quantize_i32(x: f64) -> i32 {
    x.round() as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{replay, Settings};

    #[test]
    fn a_replay_matches_itself_and_not_another_map() {
        let a = MotionSignature::of(&replay(Settings::default()));
        let s = similarity(&a, &a);
        assert_eq!(s.score, 1.0);
        assert_eq!(MotionSignature::from_bytes(&a.to_bytes()), Some(a.clone()));
        let bytes = a.to_bytes();
        assert_eq!(MotionSignature::from_bytes(&bytes[..bytes.len() - 1]), None);
        assert_eq!(MotionSignature::from_bytes(&[0xff; 4]), None);
        assert!(s.same_play && s.matched == a.samples.len());
        let other = MotionSignature::of(&replay(Settings {
            seed: 2,
            ..Settings::default()
        }));
        let s = similarity(&a, &other);
        assert!(!s.same_play && s.score == 0.0, "{s:?}");
    }

    #[test]
    fn interpolation_takes_the_frames_around_the_time() {
        let mut r = replay(Settings {
            seconds: 3.0,
            ..Settings::default()
        });
        r.frames.truncate(2);
        r.frames[0].time = 1.0;
        r.frames[1].time = 2.0;
        r.frames[0].head.position.x = 0.0;
        r.frames[1].head.position.x = 0.010;
        r.notes.truncate(1);
        r.notes[0].event_time = 1.5;
        let s = MotionSignature::of(&r);
        assert_eq!(s.samples[0].poses[0][0], 5);
        assert_eq!(s.samples[0].time, 15000);
        r.notes[0].event_time = 9.0;
        assert_eq!(MotionSignature::of(&r).samples[0].poses[0][0], 10);
        r.notes[0].event_time = f32::NAN;
        let s = MotionSignature::of(&r);
        assert_eq!((s.samples[0].poses[0][0], s.samples[0].time), (0, 0));
    }

    #[test]
    fn placeholders_and_empty_frames_do_not_panic() {
        let mut r = replay(Settings {
            seconds: 2.0,
            ..Settings::default()
        });
        for f in &mut r.frames {
            f.head.rotation = crate::bsor::Quat::default();
            f.left_hand.position.x = f32::NAN;
        }
        let s = MotionSignature::of(&r);
        assert!(s
            .samples
            .iter()
            .all(|x| x.poses[0][3..] == [0, 0, 0, 10000]));
        r.frames.clear();
        let s = MotionSignature::of(&r);
        assert_eq!(s.samples.len(), r.notes.len());
    }
}
