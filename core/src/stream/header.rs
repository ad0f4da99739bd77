//! The stream header (what a decoder needs before the first chunk), the settings it
//! carries, and the profiles with their quantization parameters.
//!
//! Byte layout: `proto-spec/format.md`, section "Stream header".

use std::ops::RangeInclusive;

use crate::bsor::{self, Info};

use super::chunk::{put_varint, FORMAT_VERSION, STREAM_MAGIC};
use super::error::{Field, HeaderError};
use super::reader::{Reader, Short};

/// How frames are coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Every bit of every float kept: rebuilds the original BSOR byte for byte.
    Lossless,
    /// Positions within 0.1 mm, rotations within 0.02°.
    Fine,
    /// Positions within 1 mm, rotations within 0.2°.
    Compact,
    /// A lossy profile with the caller's position step and rotation steps (format.md
    /// section 3, profile 3): positions within `step / 1.153`, rotations within `72° / M`.
    Custom(CustomSteps),
}

/// The quantization of a [`Profile::Custom`]: a position step and rotation steps `M`
/// within the ranges a reader accepts (format.md section 3).
///
/// ```
/// use bsor_stream_core::stream::{CustomSteps, Profile};
///
/// let steps = CustomSteps::new(5e-4, 1000).unwrap();
/// assert_eq!(steps.position_step(), 5e-4);
/// let (mm, deg) = steps.bounds();
/// assert!((mm - 0.5 / 1.153).abs() < 1e-6 && (deg - 0.995 * 0.072).abs() < 1e-12);
/// let _profile = Profile::Custom(steps);
/// assert!(CustomSteps::new(0.1, 1000).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CustomSteps {
    /// The position step's `f32` bits (bits, so that the profile stays `Eq` and `Hash`).
    step_bits: u32,
    rotation_steps: u32,
}

impl CustomSteps {
    /// The position steps a reader accepts, in metres (0.01 mm to 50 mm).
    pub const POSITION_STEP: RangeInclusive<f32> = 1e-5..=0.05;
    /// The rotation steps `M` a reader accepts (a grid angle of about 2.25° down to
    /// 0.00008°).
    pub const ROTATION_STEPS: RangeInclusive<u32> = 36..=1_000_000;

    /// The custom quantization with position step `position_step` metres and `M` =
    /// `rotation_steps`: fails, naming the field, outside [`Self::POSITION_STEP`] (or not
    /// finite) and [`Self::ROTATION_STEPS`].
    pub fn new(position_step: f32, rotation_steps: u32) -> Result<Self, HeaderError> {
        if !Self::POSITION_STEP.contains(&position_step) {
            return Err(HeaderError::QuantizationOutOfRange(Field::PositionStep));
        }
        if !Self::ROTATION_STEPS.contains(&rotation_steps) {
            return Err(HeaderError::QuantizationOutOfRange(Field::RotationSteps));
        }
        Ok(CustomSteps {
            step_bits: position_step.to_bits(),
            rotation_steps,
        })
    }

    /// The custom quantization from a position step in millimetres and a rotation step in
    /// degrees, the angle between neighbouring grid rotations ([`Self::rotation_step_deg`]):
    /// `M` is the nearest integer to `√2 · (180/π) / rotation_step_deg`.
    pub fn from_mm_deg(position_step_mm: f64, rotation_step_deg: f64) -> Result<Self, HeaderError> {
        let m = std::f64::consts::SQRT_2 * 180.0 / std::f64::consts::PI / rotation_step_deg;
        let m = if m.is_finite() && m > 0.0 && m < f64::from(u32::MAX) {
            m.round() as u32
        } else {
            0
        };
        Self::new((position_step_mm / 1000.0) as f32, m)
    }

    /// The position step in metres.
    pub fn position_step(self) -> f32 {
        f32::from_bits(self.step_bits)
    }

    /// `M`: the smallest three are quantized to integers in `−M..=M`.
    pub fn rotation_steps(self) -> u32 {
        self.rotation_steps
    }

    /// The grid's rotation step in degrees: one step `1/(√2·M)` of a smallest-three
    /// component turns a rotation by about `√2/M` radians.
    pub fn rotation_step_deg(self) -> f64 {
        std::f64::consts::SQRT_2 / f64::from(self.rotation_steps) * (180.0 / std::f64::consts::PI)
    }

    /// The encoder's bounds (format.md section 10), position in millimetres and rotation in
    /// degrees: `step / 1.153` (rounding keeps positions within `√3/2 · step`, 0.9985 of
    /// it) and `0.995 · 72° / M`. At fine's and compact's step and `M` these are their
    /// bounds (0.1 mm and 0.0199°, 1 mm and 0.199°, the position to 3e-8 mm).
    pub fn bounds(self) -> (f64, f64) {
        (
            1000.0 * f64::from(self.position_step()) / 1.153,
            0.995 * 72.0 / f64::from(self.rotation_steps),
        )
    }

    /// The residual models' prior centre (format.md 10.6): the mean, rounded down, of
    /// `bitlen(M) − 8` and `−9 − e`, `e` the step's binary exponent (`floor(log2 step)`),
    /// at least 0. Each term grows by one bit as its step halves; both are 1 at compact's
    /// grid and 4 and 5 at fine's, so the rule gives their centres, 1 and 4.
    pub(crate) fn prior_centre(self) -> u32 {
        let bitlen = 32 - self.rotation_steps.leading_zeros() as i32;
        // The range keeps the step a normal f32: its exponent field is floor(log2 step).
        let e = ((self.step_bits >> 23) & 0xff) as i32 - 127;
        ((bitlen - 8) + (-9 - e)).div_euclid(2).max(0) as u32
    }
}

/// The quantization a profile implies, as the stream header stores it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Quantization {
    Lossless,
    Lossy {
        /// Position step in metres.
        position_step: f32,
        /// The smallest three are quantized to integers in `−M..=M`: this is `M`.
        rotation_steps: u32,
        /// The encoder's bounds: position error in millimetres, rotation error in degrees.
        bounds: (f64, f64),
        /// The length the device columns' residual models start around (format.md 10.6).
        prior_centre: u32,
    },
}

impl Quantization {
    /// Whether frames and events are range coded (format.md 10.6, 11.3).
    pub(crate) fn is_lossy(self) -> bool {
        matches!(self, Quantization::Lossy { .. })
    }
}

impl Profile {
    pub(crate) fn quantization(self) -> Quantization {
        match self {
            Profile::Lossless => Quantization::Lossless,
            Profile::Fine => Quantization::Lossy {
                position_step: 1.153e-4,
                rotation_steps: 3600,
                bounds: self.bounds(),
                prior_centre: 4,
            },
            Profile::Compact => Quantization::Lossy {
                position_step: 1.153e-3,
                rotation_steps: 360,
                bounds: self.bounds(),
                prior_centre: 1,
            },
            Profile::Custom(c) => Quantization::Lossy {
                position_step: c.position_step(),
                rotation_steps: c.rotation_steps(),
                bounds: c.bounds(),
                prior_centre: c.prior_centre(),
            },
        }
    }

    /// The profile byte of the stream header (format.md section 3).
    pub fn byte(self) -> u8 {
        match self {
            Profile::Lossless => 0,
            Profile::Fine => 1,
            Profile::Compact => 2,
            Profile::Custom(_) => 3,
        }
    }

    /// The error limits the encoder keeps every quantized pose within (format.md 10.1):
    /// position in millimetres, rotation in degrees. Positions: the profile's bound (the
    /// step keeps every position within 0.9985 of it). Rotations: 0.995 of the bound, room
    /// for other ways of computing the angle (`2·acos` near 1 loses digits). The rounded
    /// smallest three are within them for almost every rotation (98.6% of the corpus's at
    /// `M = 360`); where they are not, the encoder tries the grid's neighbours, and a pose
    /// within none is sent verbatim (42 of 201,194 on the corpus).
    pub(crate) fn bounds(self) -> (f64, f64) {
        match self {
            Profile::Lossless => (0.0, 0.0),
            Profile::Fine => (0.1, 0.0199),
            Profile::Compact => (1.0, 0.199),
            Profile::Custom(c) => c.bounds(),
        }
    }
}

impl std::fmt::Display for Profile {
    /// `lossless`, `fine`, `compact`, or `custom` with its steps (`custom 0.5000 mm /
    /// 0.0810° (M 1000)`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Profile::Lossless => f.write_str("lossless"),
            Profile::Fine => f.write_str("fine"),
            Profile::Compact => f.write_str("compact"),
            Profile::Custom(c) => write!(
                f,
                "custom {:.4} mm / {:.4}° (M {})",
                f64::from(c.position_step()) * 1000.0,
                c.rotation_step_deg(),
                c.rotation_steps()
            ),
        }
    }
}

/// How often keyframes and flushes come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The frame coding profile.
    pub profile: Profile,
    /// A keyframe at least every this many seconds of song time.
    pub keyframe_seconds: f32,
    /// And at least every this many frames (0: by time only).
    pub keyframe_frames: u32,
    /// Emit a chunk every this many seconds of song time within a group (0: only at
    /// keyframes).
    pub flush_seconds: f32,
    /// zstd level of the event, trailer and index chunks (19 measured 0.2% of BSOR smaller
    /// than 3 on the corpus, at a hundred times the encoding time).
    pub zstd_level: i32,
}

impl Settings {
    /// What a live spectator needs: a keyframe about every second, a chunk every 100 ms.
    pub fn live(profile: Profile) -> Self {
        Settings {
            profile,
            keyframe_seconds: 1.0,
            keyframe_frames: 0,
            flush_seconds: 0.1,
            zstd_level: 3,
        }
    }

    /// What a leaderboard stores: a keyframe about every 10 s, no flushes in between.
    pub fn archive(profile: Profile) -> Self {
        Settings {
            profile,
            keyframe_seconds: 10.0,
            keyframe_frames: 0,
            flush_seconds: 0.0,
            zstd_level: 3,
        }
    }
}

/// The stream header: what a decoder needs before the first chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamHeader {
    /// Profile and intervals.
    pub settings: Settings,
    /// The info block as known when the song started.
    pub info: Info,
}

impl StreamHeader {
    pub(crate) fn quantization(&self) -> Quantization {
        self.settings.profile.quantization()
    }

    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&STREAM_MAGIC);
        out.push(FORMAT_VERSION);
        let s = &self.settings;
        let (step, steps) = match s.profile.quantization() {
            Quantization::Lossy {
                position_step,
                rotation_steps,
                ..
            } => (position_step, rotation_steps),
            Quantization::Lossless => (0.0, 0),
        };
        out.push(s.profile.byte());
        out.extend_from_slice(&step.to_le_bytes());
        put_varint(&mut out, u64::from(steps));
        out.extend_from_slice(&s.keyframe_seconds.to_le_bytes());
        put_varint(&mut out, u64::from(s.keyframe_frames));
        out.extend_from_slice(&s.flush_seconds.to_le_bytes());
        let mut info = Vec::new();
        bsor::encode_info(&self.info, &mut info);
        put_varint(&mut out, info.len() as u64);
        out.extend_from_slice(&info);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses a header from the start of `buf`: `Ok(None)` if `buf` is too short yet.
    pub fn parse_prefix(buf: &[u8]) -> Result<Option<StreamHeader>, HeaderError> {
        match Self::parse(buf) {
            Ok((h, _)) => Ok(Some(h)),
            Err(Short::More) => Ok(None),
            Err(Short::Bad(e)) => Err(e),
        }
    }

    /// Like [`parse_prefix`](Self::parse_prefix), with the header's length in bytes.
    pub fn parse_prefix_len(buf: &[u8]) -> Result<Option<(StreamHeader, usize)>, HeaderError> {
        match Self::parse(buf) {
            Ok(h) => Ok(Some(h)),
            Err(Short::More) => Ok(None),
            Err(Short::Bad(e)) => Err(e),
        }
    }

    /// Parses a header from the start of `buf`: the header and its length.
    pub(crate) fn parse(buf: &[u8]) -> Result<(StreamHeader, usize), Short<HeaderError>> {
        let mut r = Reader::new(buf);
        if r.bytes(4)? != STREAM_MAGIC {
            return Err(Short::Bad(HeaderError::BadMagic));
        }
        let version = r.u8()?;
        if version != FORMAT_VERSION {
            return Err(Short::Bad(HeaderError::UnsupportedVersion(version)));
        }
        let profile = match r.u8()? {
            0 => Profile::Lossless,
            1 => Profile::Fine,
            2 => Profile::Compact,
            // Profile 3 takes its steps from the fields below, checked after the CRC.
            3 => Profile::Custom(CustomSteps {
                step_bits: 0,
                rotation_steps: 0,
            }),
            b => return Err(Short::Bad(HeaderError::UnknownProfile(b))),
        };
        let step = r.f32()?;
        let steps = r.varint_u32(Field::RotationSteps)?;
        let keyframe_seconds = r.f32()?;
        let keyframe_frames = r.varint_u32(Field::KeyframeFrames)?;
        let flush_seconds = r.f32()?;
        let info_len = r.varint(Field::InfoLength)?;
        if info_len > 64 << 20 {
            return Err(Short::Bad(HeaderError::InfoTooLong(info_len)));
        }
        let info_bytes = r.bytes(info_len as usize)?;
        let end = r.pos;
        let crc = r.u32()?;
        if crc != crc32fast::hash(&buf[..end]) {
            return Err(Short::Bad(HeaderError::Crc));
        }
        let profile = match profile {
            Profile::Custom(_) => {
                Profile::Custom(CustomSteps::new(step, steps).map_err(Short::Bad)?)
            }
            Profile::Fine | Profile::Compact => match profile.quantization() {
                Quantization::Lossy {
                    position_step,
                    rotation_steps,
                    ..
                } if step.to_bits() == position_step.to_bits() && steps == rotation_steps => {
                    profile
                }
                _ => return Err(Short::Bad(HeaderError::QuantizationMismatch)),
            },
            Profile::Lossless => profile,
        };
        let info = parse_info(info_bytes).ok_or(Short::Bad(HeaderError::MalformedInfo))?;
        Ok((
            StreamHeader {
                settings: Settings {
                    profile,
                    keyframe_seconds,
                    keyframe_frames,
                    flush_seconds,
                    zstd_level: 0,
                },
                info,
            },
            r.pos,
        ))
    }
}

/// Parses a bare BSOR info block (as `bsor::encode_info` writes it).
pub(crate) fn parse_info(bytes: &[u8]) -> Option<Info> {
    bsor::parse_info(bytes, &bsor::Limits::default()).ok()
}
