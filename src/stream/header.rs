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
    },
}

impl Profile {
    pub(crate) fn quantization(self) -> Quantization {
        match self {
            Profile::Lossless => Quantization::Lossless,
            Profile::Fine => Quantization::Lossy {
                position_step: 1.153e-4,
                rotation_steps: 7200,
                bounds: self.bounds(),
            },
            Profile::Compact => Quantization::Lossy {
                position_step: 1.153e-3,
                rotation_steps: 720,
                bounds: self.bounds(),
            },
        }
    }

    /// The profile's error bounds: position in millimetres, rotation in degrees (format.md
    /// 10.1). The steps above keep every quantized pose within them (a position's worst
    /// error is `√3/2` steps, 0.9985 of the bound; a rotation's about `2√3/(√2·M)` radians,
    /// 0.975 of it), and the encoder sends any pose that would not be, verbatim.
    pub(crate) fn bounds(self) -> (f64, f64) {
        match self {
            Profile::Lossless => (0.0, 0.0),
            Profile::Fine => (0.1, 0.02),
            Profile::Compact => (1.0, 0.2),
        }
    }
}
