//! The stream header (what a decoder needs before the first chunk), the settings it
//! carries, and the profiles with their quantization parameters.
//!
//! Byte layout: `proto-spec/format.md`, section "Stream header".

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
        let (profile, step, steps) = match (s.profile, s.profile.quantization()) {
            (
                p,
                Quantization::Lossy {
                    position_step,
                    rotation_steps,
                    ..
                },
            ) => (
                if p == Profile::Fine { 1 } else { 2 },
                position_step,
                rotation_steps,
            ),
            (_, Quantization::Lossless) => (0, 0.0, 0),
        };
        out.push(profile);
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
        if let Quantization::Lossy {
            position_step,
            rotation_steps,
            ..
        } = profile.quantization()
        {
            if step != position_step || steps != rotation_steps {
                return Err(Short::Bad(HeaderError::QuantizationMismatch));
            }
        }
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
