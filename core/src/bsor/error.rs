//! Parse errors that say what went wrong and where.

use std::fmt;

/// A part of a BSOR file, for error messages and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// The magic number and version byte.
    Header,
    /// Section 0, the info block.
    Info,
    /// Section 1.
    Frames,
    /// Section 2.
    Notes,
    /// Section 3.
    Walls,
    /// Section 4.
    Heights,
    /// Section 5.
    Pauses,
    /// Optional section 6.
    ControllerOffsets,
    /// Optional section 7.
    UserData,
    /// Bytes after the last known section.
    Trailing,
}

impl Section {
    /// The marker byte that introduces the section on disk, if it has one.
    pub fn marker(self) -> Option<u8> {
        Some(match self {
            Section::Info => 0,
            Section::Frames => 1,
            Section::Notes => 2,
            Section::Walls => 3,
            Section::Heights => 4,
            Section::Pauses => 5,
            Section::ControllerOffsets => 6,
            Section::UserData => 7,
            Section::Header | Section::Trailing => return None,
        })
    }

    /// The name used in messages and in the spec.
    pub fn name(self) -> &'static str {
        match self {
            Section::Header => "header",
            Section::Info => "info",
            Section::Frames => "frames",
            Section::Notes => "notes",
            Section::Walls => "walls",
            Section::Heights => "heights",
            Section::Pauses => "pauses",
            Section::ControllerOffsets => "controller offsets",
            Section::UserData => "user data",
            Section::Trailing => "trailing bytes",
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input ended inside a field.
    #[error("input ends {needed} bytes short")]
    Truncated {
        /// How many more bytes the field (or record) needed.
        needed: u64,
    },
    /// The file does not start with 0x442d3d69.
    #[error("bad magic number 0x{found:08x} (expected 0x442d3d69)")]
    BadMagic {
        /// What the first four bytes hold.
        found: u32,
    },
    /// A version byte other than 1.
    #[error("unsupported BSOR version {found} (only version 1 exists)")]
    UnsupportedVersion {
        /// The version byte.
        found: u8,
    },
    /// A section marker byte that is not the one this position requires.
    #[error("section marker {found} where {expected} was required")]
    WrongMarker {
        /// The marker required here.
        expected: u8,
        /// The byte found.
        found: u8,
    },
    /// A negative count or length.
    #[error("negative count or length {value}")]
    Negative {
        /// The value read.
        value: i32,
    },
    /// A count or length that the rest of the input cannot hold.
    #[error("declares {value} records or bytes, needing at least {min_bytes} bytes, but only {remaining} remain")]
    ExceedsInput {
        /// The value read.
        value: u32,
        /// The fewest bytes that many records or bytes take.
        min_bytes: u64,
        /// The bytes left in the input after the field.
        remaining: u64,
    },
    /// Bytes left over after a structure that must fill its input exactly.
    #[error("{extra} bytes follow where the input should end")]
    Unconsumed {
        /// How many bytes follow.
        extra: u64,
    },
    /// A length over the configured [`super::Limits`].
    #[error("length {value} is over the limit of {limit} bytes")]
    OverLimit {
        /// The length read (or reached, for trailing bytes).
        value: u64,
        /// The limit.
        limit: u64,
    },
}

/// A malformed or truncated BSOR input: what is wrong, in which section, record and field,
/// and at which byte offset from the start of the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong.
    pub kind: ErrorKind,
    /// The section being read.
    pub section: Section,
    /// The index of the record within its section, for per-record sections.
    pub record: Option<u32>,
    /// The field being read, as named in the spec (`leftHand.position.x`, `playerName`...).
    pub field: &'static str,
    /// Byte offset of that field from the start of the input.
    pub offset: u64,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in section {}", self.kind, self.section)?;
        if let Some(r) = self.record {
            write!(f, ", record {r}")?;
        }
        write!(f, ", field {}, at byte {}", self.field, self.offset)
    }
}

impl std::error::Error for ParseError {}
