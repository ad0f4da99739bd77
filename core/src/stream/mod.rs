//! The BSOR stream format (`.bsors`): keyframes, deltas, and chunks that a viewer can decode
//! as they arrive. Specified in `proto-spec/format.md`.

pub mod accuracy;
mod bits;
mod chunk;
mod decoder;
mod encoder;
mod error;
mod events;
mod frames;
mod header;
mod range;
mod reader;
mod trailer;

pub use chunk::{
    footer, parse_footer, split_stream, ChunkHeader, ChunkSpan, ChunkType, FOOTER_SIZE,
    STREAM_MAGIC,
};
pub use decoder::{DecodeStats, DecoderHook, NoHook, StreamDecoder, StreamItem};
pub use encoder::{EncoderHook, StreamEncoder, MAX_EXTENSION_LEN};
pub use error::{
    ChunkError, ChunkHeaderError, Damage, DamageKind, Field, FieldError, HeaderError, Section,
    StreamError,
};
pub use events::{EventBatch, Records};
pub use header::{CustomSteps, Profile, Settings, StreamHeader};
pub use trailer::{decode_index, IndexEntry, SectionCounts, Trailer};
