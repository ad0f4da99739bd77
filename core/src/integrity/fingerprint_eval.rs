//! The two kinds of play the similarity score must tell apart
//! (proto-spec/integrity-notes.md §11.2), made from a replay and a seed for the evaluation
//! (`examples/fingerprint_eval.rs`) and the tests.
//!
//! - A **repeat**: the same notes played again. Every frame's position coordinates get
//!   independent Gaussian noise of σ 1 cm, its rotation a rotation whose vector has
//!   independent Gaussian components of σ 1°, and every note and wall event time Gaussian
//!   noise of σ 8 ms; frame times and spawn times stay.
//! - A **disguised copy**: every time (frames, events, spawn times) shifted by one offset
//!   drawn uniformly in ±50 ms, position coordinates moved by uniform noise within ±5 mm and
//!   rotations by a rotation vector with components uniform within ±0.5°, and each frame
//!   dropped with probability 5%.
//!
//! The generator is SplitMix64 (like [`crate::synth`]), so a seed always gives the same pair.

use super::{similarity, MotionSignature, THRESHOLD};
use crate::bsor::{Frame, Pose, Quat, Replay};

/// The scores of an evaluation: repeats (which must not match) and disguised copies (which
/// must), each compared with the replay they were made from.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// The repeats' scores, sorted.
    pub repeats: Vec<f64>,
    /// The copies' scores, sorted.
    pub copies: Vec<f64>,
}

impl Evaluation {
    /// Makes `repeats` repeats and `copies` disguised copies, taking the base replays in turn,
    /// pair `k` drawn with seed `seed + 2k` (repeats) or `seed + 2k + 1` (copies).
    pub fn run(bases: &[Replay], repeats: usize, copies: usize, seed: u64) -> Evaluation {
        let signatures: Vec<MotionSignature> = bases.iter().map(MotionSignature::of).collect();
        let mut e = Evaluation::default();
        if bases.is_empty() {
            return e;
        }
        let score = |k: usize, make: fn(&Replay, u64) -> Replay, odd: u64| {
            let i = k % bases.len();
            let s = seed.wrapping_add(2 * k as u64 + odd);
            similarity(&signatures[i], &MotionSignature::of(&make(&bases[i], s))).score
        };
        e.repeats = (0..repeats).map(|k| score(k, repeat, 0)).collect();
        e.copies = (0..copies).map(|k| score(k, disguised_copy, 1)).collect();
        e.repeats.sort_unstable_by(f64::total_cmp);
        e.copies.sort_unstable_by(f64::total_cmp);
        e
    }

    /// Repeats whose score reaches the threshold.
    pub fn false_matches(&self) -> usize {
        self.repeats.iter().filter(|&&s| s >= THRESHOLD).count()
    }

    /// Copies whose score is below the threshold.
    pub fn misses(&self) -> usize {
        self.copies.iter().filter(|&&s| s < THRESHOLD).count()
    }
}

/// The `p`-th percentile (0 to 100, nearest rank) of sorted scores, `NaN` if there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The synthetic replays' SplitMix64, drawing `f64`s.
struct Rng(crate::synth::Rng);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-a, a).
    fn uniform(&mut self, a: f64) -> f64 {
        (self.unit() * 2.0 - 1.0) * a
    }

    /// Gaussian with standard deviation `sigma` (Box–Muller).
    fn gauss(&mut self, sigma: f64) -> f64 {
        let u = 1.0 - self.unit(); // (0, 1]
        let v = self.unit();
        sigma * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A repeat of `replay` (see the module's documentation).
pub fn repeat(replay: &Replay, seed: u64) -> Replay {
    let mut rng = Rng(crate::synth::Rng(seed));
    let mut out = replay.clone();
    let pos = 0.01;
    let rot = 1f64.to_radians();
    for f in &mut out.frames {
        perturb(f, |rotation| rng.gauss(if rotation { rot } else { pos }));
    }
    for n in &mut out.notes {
        n.event_time = (f64::from(n.event_time) + rng.gauss(0.008)) as f32;
    }
    for w in &mut out.walls {
        w.time = (f64::from(w.time) + rng.gauss(0.008)) as f32;
    }
    out
}

/// A disguised copy of `replay` (see the module's documentation).
pub fn disguised_copy(replay: &Replay, seed: u64) -> Replay {
    let mut rng = Rng(crate::synth::Rng(seed));
    let mut out = replay.clone();
    let shift = rng.uniform(0.05);
    let shifted = |t: f32| (f64::from(t) + shift) as f32;
    let pos = 0.005;
    let rot = 0.5f64.to_radians();
    out.frames = Vec::with_capacity(replay.frames.len());
    for f in &replay.frames {
        if rng.unit() < 0.05 {
            continue;
        }
        let mut f = *f;
        f.time = shifted(f.time);
        perturb(&mut f, |rotation| {
            rng.uniform(if rotation { rot } else { pos })
        });
        out.frames.push(f);
    }
    for n in &mut out.notes {
        n.event_time = shifted(n.event_time);
        n.spawn_time = shifted(n.spawn_time);
    }
    for w in &mut out.walls {
        w.time = shifted(w.time);
        w.spawn_time = shifted(w.spawn_time);
    }
    for h in &mut out.heights {
        h.time = shifted(h.time);
    }
    for p in &mut out.pauses {
        p.time = shifted(p.time);
    }
    out
}

/// Moves each pose of a frame: `draw(false)` draws each position offset (metres),
/// `draw(true)` each component of the rotation vector (radians).
fn perturb(f: &mut Frame, mut draw: impl FnMut(bool) -> f64) {
    for pose in [&mut f.head, &mut f.left_hand, &mut f.right_hand] {
        let dp = [draw(false), draw(false), draw(false)];
        let dr = [draw(true), draw(true), draw(true)];
        move_pose(pose, dp, dr);
    }
}

fn move_pose(pose: &mut Pose, dp: [f64; 3], v: [f64; 3]) {
    let p = &mut pose.position;
    p.x = (f64::from(p.x) + dp[0]) as f32;
    p.y = (f64::from(p.y) + dp[1]) as f32;
    p.z = (f64::from(p.z) + dp[2]) as f32;
    let angle = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    if angle == 0.0 {
        return;
    }
    let s = (angle / 2.0).sin() / angle;
    let d = [v[0] * s, v[1] * s, v[2] * s, (angle / 2.0).cos()];
    let q = pose.rotation;
    let q = [q.x, q.y, q.z, q.w].map(f64::from);
    // q ⊗ d (Hamilton product, x y z w order).
    pose.rotation = Quat {
        x: (q[3] * d[0] + q[0] * d[3] + q[1] * d[2] - q[2] * d[1]) as f32,
        y: (q[3] * d[1] - q[0] * d[2] + q[1] * d[3] + q[2] * d[0]) as f32,
        z: (q[3] * d[2] + q[0] * d[1] - q[1] * d[0] + q[2] * d[3]) as f32,
        w: (q[3] * d[3] - q[0] * d[0] - q[1] * d[1] - q[2] * d[2]) as f32,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{replay, Settings};

    #[test]
    fn a_copy_shifts_drops_and_moves_within_its_bounds() {
        let r = replay(Settings::default());
        let c = disguised_copy(&r, 3);
        let dropped = r.frames.len() - c.frames.len();
        assert!(dropped > r.frames.len() / 40 && dropped < r.frames.len() / 10);
        let shift = c.notes[0].event_time - r.notes[0].event_time;
        assert!(shift.abs() <= 0.0501 && shift != 0.0);
        for (a, b) in r.notes.iter().zip(&c.notes) {
            assert!((b.event_time - a.event_time - shift).abs() < 1e-4);
        }
        let rep = repeat(&r, 3);
        let d: Vec<f32> = r
            .notes
            .iter()
            .zip(&rep.notes)
            .map(|(a, b)| b.event_time - a.event_time)
            .collect();
        let rms = (d.iter().map(|x| x * x).sum::<f32>() / d.len() as f32).sqrt();
        assert!(rms > 0.004 && rms < 0.016, "{rms}");
        assert_eq!(rep.frames.len(), r.frames.len());
        let moved = (rep.frames[10].head.position.x - r.frames[10].head.position.x).abs();
        assert!(moved > 0.0 && moved < 0.06);
    }
}
