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
