//! What can be wrong with a stream, typed: the decoder's fatal errors ([`StreamError`]), the
//! damage it steps over ([`DamageKind`]), and why a part of a stream does not parse
//! ([`HeaderError`], [`ChunkHeaderError`], [`ChunkError`], [`FieldError`]). Every variant
//! says what went wrong and, where it is known, where: the chunk's sequence number and type,
//! the byte offset, the section. The Display texts are the messages the decoder has always
//! given (damage reports and the test vectors carry them).

use std::fmt;

use super::chunk::ChunkType;

/// A part of a stream, for saying where something went wrong (`proto-spec/format.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Section {
    /// The stream header.
    StreamHeader,
    /// A chunk header.
    ChunkHeader,
    /// A frame chunk's payload.
    Frames,
    /// An event chunk's payload.
    Events,
    /// The trailer chunk's payload.
    Trailer,
    /// The index chunk's payload.
    Index,
}

impl Section {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Section::StreamHeader => "stream header",
            Section::ChunkHeader => "chunk header",
            Section::Frames => "frames",
            Section::Events => "events",
            Section::Trailer => "trailer",
            Section::Index => "index",
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A varint field of the stream's structures, for saying which one was bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The stream header's rotation steps.
    RotationSteps,
    /// The stream header's position step (an `f32`, checked for the custom profile).
    PositionStep,
    /// The stream header's keyframe frame interval.
    KeyframeFrames,
    /// The length of an info block (stream header or trailer).
    InfoLength,
    /// A chunk header's sequence number.
    Seq,
    /// A chunk header's first index.
    First,
    /// A chunk header's count.
    Count,
    /// A chunk header's payload length.
    PayloadLength,
    /// A count of records or entries.
    RecordCount,
    /// The length of a byte field (user data, trailing bytes).
    ByteLength,
    /// An index entry's first index.
    IndexFirst,
    /// An index entry's count.
    IndexCount,
    /// An index entry's first time.
    IndexT0,
    /// An index entry's last time.
    IndexT1,
    /// An index entry's offset.
    IndexOffset,
    /// The number of records of one kind in an event chunk.
    EventCount,
    /// The index of an event chunk's first record of one kind.
    FirstEventIndex,
}

impl Field {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Field::RotationSteps => "rotation steps",
            Field::PositionStep => "position step",
            Field::KeyframeFrames => "keyframe frame interval",
            Field::InfoLength => "info block length",
            Field::Seq => "sequence number",
            Field::First => "first index",
            Field::Count => "count",
            Field::PayloadLength => "payload length",
            Field::RecordCount => "record count",
            Field::ByteLength => "byte length",
            Field::IndexFirst => "index first",
            Field::IndexCount => "index count",
            Field::IndexT0 => "index t0",
            Field::IndexT1 => "index t1",
            Field::IndexOffset => "index offset",
            Field::EventCount => "event count",
            Field::FirstEventIndex => "first event index",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A varint field that cannot be what the format allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// The varint's tenth byte holds more than the 64th bit.
    #[error("varint overflows 64 bits ({field})")]
    VarintOverflow {
        /// The field.
        field: Field,
    },
    /// The varint goes on past 10 bytes.
    #[error("varint longer than 10 bytes ({field})")]
    VarintTooLong {
        /// The field.
        field: Field,
    },
    /// The value does not fit the field's 32 bits.
    #[error("{field} does not fit in 32 bits")]
    TooLarge {
        /// The field.
        field: Field,
    },
}

/// Why the stream header does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The input ended inside the header.
    #[error("input ends inside it")]
    Truncated,
    /// The first four bytes are not `BSRS`.
    #[error("not a BSOR stream (bad magic)")]
    BadMagic,
    /// The version byte names a format version this reader does not know.
    #[error("unsupported stream format version")]
    UnsupportedVersion(
        /// The version byte.
        u8,
    ),
    /// The profile byte names no profile.
    #[error("unknown profile")]
    UnknownProfile(
        /// The profile byte.
        u8,
    ),
    /// A varint field is malformed or out of range.
    #[error("{0}")]
    Field(FieldError),
    /// The info block claims more than 64 MiB.
    #[error("info block length over 64 MiB")]
    InfoTooLong(
        /// The length it claims.
        u64,
    ),
    /// The header's CRC does not match its bytes.
    #[error("stream header CRC mismatch")]
    Crc,
    /// A lossy profile's quantization parameters are not the profile's.
    #[error("quantization does not match the profile")]
    QuantizationMismatch,
    /// The custom profile's position step or rotation steps are outside the ranges a
    /// reader accepts (format.md section 3).
    #[error("custom profile's {0} out of range")]
    QuantizationOutOfRange(
        /// [`Field::PositionStep`] or [`Field::RotationSteps`].
        Field,
    ),
    /// The info block does not parse as BSOR's.
    #[error("malformed info block")]
    MalformedInfo,
}

/// Why bytes that start with the sync marker are not a chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkHeaderError {
    /// The first byte is not the sync marker.
    #[error("no sync marker")]
    NoSync,
    /// A varint field is malformed or out of range.
    #[error("{0}")]
    Field(FieldError),
    /// The header's own CRC does not match its bytes.
    #[error("chunk header CRC mismatch")]
    Crc,
    /// The payload length is over the 64 MiB a reader accepts.
    #[error("chunk payload over 64 MiB")]
    PayloadTooLarge(
        /// The length it claims.
        u32,
    ),
}

/// Why a chunk's payload (or a whole chunk handed to the decoder on its own) does not
/// decode. Its Display text is the message a damage report carries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// The input ends inside the chunk header.
    #[error("chunk header ends early")]
    HeaderEndsEarly,
    /// The chunk header is not valid.
    #[error("{0}")]
    Header(ChunkHeaderError),
    /// The input ends inside the chunk's payload.
    #[error("chunk payload ends early")]
    PayloadEndsEarly,
    /// An event chunk was expected.
    #[error("not an event chunk")]
    NotEvents(
        /// The chunk's type.
        ChunkType,
    ),
    /// The payload's CRC does not match the one in its header.
    #[error("chunk payload CRC mismatch")]
    PayloadCrc,
    /// The zstd decoder could not be set up.
    #[error("zstd unavailable")]
    ZstdUnavailable,
    /// A compressed payload (trailer, index) is not valid zstd.
    #[error("corrupt zstd data")]
    CorruptZstd,
    /// A compressed payload decompresses to more than 256 MiB.
    #[error("decompresses to more than 256 MiB")]
    DecompressedTooLarge,
    /// The payload ends before its last field.
    #[error("{}", ends_early(*section))]
    EndsEarly {
        /// Which payload.
        section: Section,
    },
    /// A varint field is malformed or out of range.
    #[error("{error}")]
    Field {
        /// Which payload.
        section: Section,
        /// What is wrong with the field.
        error: FieldError,
    },
    /// The trailer's info block does not parse as BSOR's.
    #[error("malformed info block")]
    MalformedInfo,
    /// The trailer's flags have bits set that this reader does not know.
    #[error("unknown trailer flags")]
    UnknownTrailerFlags(
        /// The flags byte.
        u8,
    ),
    /// Bytes follow the last field of the payload.
    #[error("{}", trailing_bytes(*section))]
    TrailingBytes {
        /// Which payload.
        section: Section,
    },
    /// The index claims more entries than its bytes can hold.
    #[error("index count exceeds its bytes")]
    IndexCountExceedsBytes {
        /// The count it claims.
        count: u64,
    },
    /// A range coded event count is below 1 or over 65536.
    #[error("event count out of range in an event chunk")]
    EventCountOutOfRange {
        /// The count less one, as decoded.
        count_less_one: i32,
    },
    /// The event kinds byte has bits set for kinds this reader does not know.
    #[error("unknown event kinds in an event chunk")]
    UnknownEventKinds(
        /// The kinds byte.
        u8,
    ),
    /// An event chunk holds more than 65536 records of one kind.
    #[error("more than 65536 events of one kind in a chunk")]
    TooManyEvents {
        /// The count it claims.
        count: u32,
    },
    /// A decoded note record is not a valid BSOR note.
    #[error("malformed note")]
    MalformedNote {
        /// The note's position in the chunk.
        at: usize,
    },
}

fn ends_early(section: Section) -> &'static str {
    match section {
        Section::Events => "event chunk ends inside its counts",
        _ => "ends early",
    }
}

fn trailing_bytes(section: Section) -> &'static str {
    match section {
        Section::Index => "bytes after the index entries",
        _ => "bytes after the trailer",
    }
}

/// A fault that stops decoding altogether. After it the decoder returns it again on every
/// call: nothing past it is decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream header is missing, damaged or of another format or version: nothing of
    /// the stream can be read.
    #[error("stream header at byte 0: {0}")]
    Header(HeaderError),
    /// A chunk type this reader does not know and must not skip (its high bit is set,
    /// format.md "Chunks"): what follows may depend on it.
    #[error("chunk {seq} at byte {offset} has critical unknown type 0x{kind:02x}")]
    CriticalChunk {
        /// Offset of the chunk.
        offset: u64,
        /// Its sequence number.
        seq: u32,
        /// Its type byte.
        kind: u8,
    },
}

/// What was wrong where the decoder stepped over damage. Its Display text is the message
/// of the damage report (`Damage::what`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DamageKind {
    /// Bytes that are neither a chunk with a valid header nor the footer.
    #[error("bytes that are not a chunk")]
    NotAChunk,
    /// The input ended inside a chunk whose header was read.
    #[error("input ends inside a chunk (truncated stream)")]
    Truncated {
        /// The chunk's sequence number.
        seq: u32,
        /// Its type.
        kind: ChunkType,
    },
    /// A chunk's payload does not match its CRC.
    #[error("chunk payload CRC mismatch")]
    PayloadCrc {
        /// The chunk's sequence number.
        seq: u32,
        /// Its type.
        kind: ChunkType,
    },
    /// Sequence numbers were skipped: chunks went missing before this one.
    #[error("chunk sequence gap (chunks missing)")]
    SequenceGap {
        /// The sequence number expected.
        expected: u32,
        /// The one found.
        found: u32,
    },
    /// A frame chunk claims more frames than a reader accepts.
    #[error("frame chunk claims more than 4096 frames")]
    TooManyFrames {
        /// The chunk's sequence number.
        seq: u32,
        /// The count it claims.
        count: u32,
    },
    /// Frames whose group's keyframe (or an earlier chunk of the group) was lost: they
    /// cannot be predicted.
    #[error("frames of a group whose keyframe was lost")]
    FramesWithoutKeyframe {
        /// The chunk's sequence number.
        seq: u32,
    },
    /// Events whose group's earlier event chunks were lost: their context is gone.
    #[error("events of a group whose earlier events were lost")]
    EventsWithoutContext {
        /// The chunk's sequence number.
        seq: u32,
    },
    /// A chunk whose CRC holds but whose payload does not decode.
    #[error("{error}")]
    Undecodable {
        /// The chunk's sequence number.
        seq: u32,
        /// Its type.
        kind: ChunkType,
        /// Why.
        error: ChunkError,
    },
}

/// Something the decoder had to step over.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// Byte offset where it was found.
    pub offset: u64,
    /// Bytes skipped because of it.
    pub skipped_bytes: u64,
    /// What was wrong.
    pub kind: DamageKind,
}

impl Damage {
    pub(crate) fn new(offset: u64, skipped_bytes: u64, kind: DamageKind) -> Self {
        Damage {
            offset,
            skipped_bytes,
            kind,
        }
    }

    /// What was wrong, as the damage report says it (the Display text of [`Self::kind`]).
    pub fn what(&self) -> String {
        self.kind.to_string()
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at byte {}: {} ({} bytes skipped)",
            self.offset, self.kind, self.skipped_bytes
        )
    }
}
