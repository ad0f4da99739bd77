//! Profiles and their quantization parameters.

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
        /// Bits per smallest-three component (sign included).
        rotation_bits: u8,
    },
}

impl Profile {
    pub(crate) fn quantization(self) -> Quantization {
        match self {
            Profile::Lossless => Quantization::Lossless,
            Profile::Fine => Quantization::Lossy {
                position_step: 1e-4,
                rotation_bits: 14,
            },
            Profile::Compact => Quantization::Lossy {
                position_step: 1e-3,
                rotation_bits: 11,
            },
        }
    }
}
