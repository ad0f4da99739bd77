//! The BSOR stream format (`.bsors`): keyframes, deltas, and chunks that a viewer can decode
//! as they arrive. Specified in `proto-spec/format.md`.

pub mod accuracy;
mod bits;
mod chunk;
mod decoder;
mod encoder;
mod events;
mod frames;
mod header;
mod range;

mod trailer;

pub use chunk::{
    footer, parse_footer, split_stream, ChunkHeader, ChunkSpan, ChunkType, Settings, StreamHeader,
    FOOTER_SIZE, STREAM_MAGIC,
};
pub use decoder::{Damage, DecodeStats, StreamDecoder, StreamError, StreamEvent};
pub use encoder::StreamEncoder;
pub use events::EventBatch;
pub use header::Profile;
pub use trailer::{IndexEntry, SectionCounts, Trailer};
