//! Synthetic replays: plausible play, made from a seed, for demos, tests and benchmarks when
//! no real replay is at hand.
//!
//! The motion is smooth (a head that sways, hands that swing to each note), frame times
//! advance at the given rate with a little jitter, and the events cover what real replays
//! rarely hold: walls, bombs, misses, bad cuts, height changes, a pause, controller offsets
//! and user data. The same seed and settings always give the same bytes, on every platform
//! and with every version of the dependencies: the generator is a hand-written SplitMix64
//! and the motion uses only `f32` arithmetic that IEEE 754 fixes (no `sin` from libm, whose
//! last bits differ between platforms).

use crate::bsor::{
    self, BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome,
    Pause, Pose, Quat, RawBool, Replay, Vec3, Wall,
};

/// What to make.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Seed of the generator.
    pub seed: u64,
    /// Song length in seconds.
    pub seconds: f32,
    /// Frames per second.
    pub fps: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seed: 1,
            seconds: 60.0,
            fps: 90,
        }
    }
}

/// SplitMix64: tiny, well known, and fixed forever (a crate's generator may change its
/// output between versions, which would change test vectors). Also the fingerprint
/// evaluation's noise source (`integrity::fingerprint_eval`).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [-1, 1).
    fn signed(&mut self) -> f32 {
        self.unit() * 2.0 - 1.0
    }

    fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n.max(1))) as u32
    }
}

/// A smooth periodic wave in [-1, 1] from a polynomial (a parabola per half period), so the
/// result is bit-identical everywhere.
fn wave(t: f32) -> f32 {
    let x = t - t.floor(); // [0, 1)
    if x < 0.5 {
        let u = 4.0 * x - 1.0; // [-1, 1)
        1.0 - u * u
    } else {
        let u = 4.0 * x - 3.0;
        u * u - 1.0
    }
}

/// A unit quaternion from small angles about x, y and z (normalized with `sqrt`, which IEEE
/// 754 fixes exactly).
fn rotation(ax: f32, ay: f32, az: f32) -> Quat {
    let (x, y, z, w) = (ax * 0.5, ay * 0.5, az * 0.5, 1.0f32);
    let n = (x * x + y * y + z * z + w * w).sqrt();
    Quat {
        x: x / n,
        y: y / n,
        z: z / n,
        w: w / n,
    }
}

fn pose(p: [f32; 3], r: [f32; 3]) -> Pose {
    Pose {
        position: Vec3 {
            x: p[0],
            y: p[1],
            z: p[2],
        },
        rotation: rotation(r[0], r[1], r[2]),
    }
}

/// A synthetic replay, about 2 notes a second. Its info score equals
/// [`bsor::replay_score`] of its events.
pub fn replay(s: Settings) -> Replay {
    dense(s, DEFAULT_NOTES_PER_SECOND)
}

/// The note density of [`replay`].
pub const DEFAULT_NOTES_PER_SECOND: f32 = 2.0;

/// A synthetic replay with about `notes_per_second` notes a second (0.1 to 20; a dense
/// Expert+ map has 8 to 12): the same as [`replay`] at [`DEFAULT_NOTES_PER_SECOND`].
// Long: one pass that builds every section of the replay in song order, so a seed gives the same replay; split, it would pass its RNG and clock through every part.
pub fn dense(s: Settings, notes_per_second: f32) -> Replay {
    // The gap between notes is 0.25 to 0.75 s at the default density, scaled by this (1.0,
    // exactly, at the default: the same bytes as ever).
    let gap_scale = if notes_per_second.is_finite() {
        DEFAULT_NOTES_PER_SECOND / notes_per_second.clamp(0.1, 20.0)
    } else {
        1.0
    };
    let mut rng = Rng(s.seed);
    let fps = s.fps.max(1);
    let seconds = if s.seconds.is_finite() {
        s.seconds.clamp(0.0, 3600.0)
    } else {
        0.0
    };
    let n_frames = (seconds * fps as f32) as usize;
    let dt = 1.0 / fps as f32;
    let mut frames = Vec::with_capacity(n_frames);
    let mut time = 0.0f32;
    for i in 0..n_frames {
        let t = time;
        let sway = wave(t * 0.25);
        let swing_l = wave(t * 1.1 + 0.3);
        let swing_r = wave(t * 0.9 + 0.7);
        frames.push(Frame {
            time,
            fps: fps as i32 + (rng.below(5) as i32 - 2),
            head: pose(
                [0.05 * sway, 1.7 + 0.02 * wave(t * 0.5), -0.05 * sway],
                [0.1 * wave(t * 0.3), 0.2 * sway, 0.05 * wave(t * 0.7)],
            ),
            left_hand: pose(
                [-0.3 + 0.25 * swing_l, 1.2 + 0.3 * wave(t * 1.3), 0.3],
                [0.8 * swing_l, 0.3 * wave(t * 0.8), 0.5 * swing_l],
            ),
            right_hand: pose(
                [0.3 + 0.25 * swing_r, 1.2 + 0.3 * wave(t * 1.2 + 0.5), 0.3],
                [0.8 * swing_r, -0.3 * wave(t * 0.8), -0.5 * swing_r],
            ),
        });
        // Real replays repeat a time now and then, and jitter around the nominal rate.
        if i % 97 != 0 {
            time += dt * (1.0 + 0.05 * rng.signed());
        }
    }

    let mut notes = Vec::new();
    let mut walls = Vec::new();
    let mut note_time = 1.0f32;
    while note_time < seconds - 0.5 {
        let line = rng.below(4) as i32;
        let layer = rng.below(3) as i32;
        let roll = rng.below(100);
        let (color, direction, outcome) = if roll < 4 {
            (-1, 9, NoteOutcome::Bomb)
        } else {
            let color = rng.below(2) as i32;
            let direction = rng.below(9) as i32;
            let cut = CutInfo {
                speed_ok: RawBool(1),
                direction_ok: RawBool(u8::from(roll >= 8)),
                saber_type_ok: RawBool(1),
                was_cut_too_soon: RawBool(0),
                saber_speed: 2.0 + 4.0 * rng.unit(),
                saber_dir: Vec3 {
                    x: rng.signed(),
                    y: rng.signed(),
                    z: 0.1 * rng.signed(),
                },
                saber_type: color,
                time_deviation: 0.02 * rng.signed(),
                cut_dir_deviation: 20.0 * rng.signed(),
                cut_point: Vec3 {
                    x: -0.9 + 0.6 * line as f32,
                    y: 0.6 + 0.5 * layer as f32,
                    z: 0.9,
                },
                cut_normal: Vec3 {
                    x: rng.signed(),
                    y: rng.signed(),
                    z: 0.0,
                },
                cut_distance_to_center: 0.3 * rng.unit(),
                cut_angle: 90.0 + 40.0 * rng.unit(),
                before_cut_rating: 0.7 + 0.5 * rng.unit(),
                after_cut_rating: 0.6 + 0.5 * rng.unit(),
            };
            let outcome = match roll {
                4..=7 => NoteOutcome::Miss,
                8..=10 => NoteOutcome::Bad(cut),
                _ => NoteOutcome::Good(cut),
            };
            (color, direction, outcome)
        };
        let scoring = if color == -1 { 2 } else { 3 };
        notes.push(NoteEvent {
            note_id: scoring * 10000 + line * 1000 + layer * 100 + color * 10 + direction,
            event_time: note_time,
            spawn_time: note_time - 0.9,
            outcome,
        });
        if rng.below(40) == 0 {
            walls.push(Wall {
                wall_id: rng.below(4) as i32 * 100 + rng.below(2) as i32 * 10 + 1,
                energy: 0.5 + 0.5 * rng.unit(),
                time: note_time + 0.1,
                spawn_time: note_time - 0.8,
            });
        }
        note_time += (0.25 + 0.5 * rng.unit()) * gap_scale;
    }

    let heights = (0..(seconds / 10.0) as usize)
        .map(|i| Height {
            height: 1.7 + 0.01 * rng.signed(),
            time: i as f32 * 10.0 + 0.5,
        })
        .collect();
    let pauses = if seconds > 20.0 {
        vec![Pause {
            duration: 3,
            time: seconds * 0.5,
        }]
    } else {
        Vec::new()
    };

    let mut replay = Replay {
        info: Info {
            version: "0.9.9".into(),
            game_version: "1.29.1".into(),
            timestamp: BsorString::new(&(1_700_000_000 + s.seed % 10_000_000).to_string()),
            player_id: "76561190000000000".into(),
            player_name: "Synthetic Player".into(),
            platform: "steam".into(),
            tracking_system: "OpenVR".into(),
            hmd: "Synthetic HMD".into(),
            controller: "Synthetic Controller".into(),
            hash: "0000000000000000000000000000000000000000".into(),
            song_name: "Synthetic Song".into(),
            mapper: "bsor-stream".into(),
            difficulty: "ExpertPlus".into(),
            score: 0,
            mode: "Standard".into(),
            environment: "DefaultEnvironment".into(),
            modifiers: "".into(),
            jump_distance: 18.0,
            left_handed: RawBool(0),
            height: 1.7,
            start_time: 0.0,
            fail_time: 0.0,
            speed: 0.0,
        },
        frames,
        notes,
        walls,
        heights,
        pauses,
        controller_offsets: Some(ControllerOffsets {
            left: pose([0.0, 0.0, 0.05], [0.0, 0.0, 0.0]),
            right: pose([0.0, 0.0, 0.05], [0.0, 0.0, 0.0]),
        }),
        user_data: Some(b"{\"source\":\"bsor-stream synth\"}".to_vec()),
        trailing: Vec::new(),
    };
    replay.info.score = i32::try_from(bsor::replay_score(&replay)).unwrap_or(i32::MAX);
    replay
}
