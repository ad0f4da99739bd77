//! Classic BSOR v1: BeatLeader's open replay format, read and written byte for byte.
//!
//! The layout is specified in `proto-spec/bsor-v1.md`. In short: a magic number and a
//! version byte, then six sections each introduced by a marker byte (info, frames, note
//! events, walls, height changes, pauses), then two optional sections (controller offsets and
//! user data), all little endian.
//!
//! Three ways in:
//! - [`parse`] reads a whole buffer into a [`Replay`];
//! - [`PushParser`] is a sans-IO parser: push bytes in pieces of any size, pull [`Event`]s
//!   out as soon as each record is complete;
//! - [`write()`] / [`to_vec`] turn a [`Replay`] back into bytes, identical to the bytes it was
//!   parsed from (quirks included: see [`BsorString`] and [`RawBool`]).
//!
//! Nothing here panics on input: malformed input gives a [`ParseError`] naming the section,
//! the record, the field and the byte offset, and counts and lengths are checked against the
//! bytes that can remain before anything is allocated.

mod decode;
mod error;
mod ids;
mod json;
mod model;
mod push;
mod read;
mod summary;
mod write;

pub use decode::{
    decode_controller_offsets, decode_frame, decode_height, decode_note, decode_pause, decode_wall,
    parse_info, Event, Limits, CUT_SIZE, HEIGHT_SIZE, NOTE_HEAD_SIZE, OFFSETS_SIZE, PAUSE_SIZE,
    WALL_SIZE,
};
pub use error::{ErrorKind, ParseError, Section};
pub use ids::{
    replay_score, score_at, CutDirection, CutScore, NoteColor, NoteId, NoteOutcomeKind, ScoreAt,
    ScoringType, WallId,
};
#[cfg(feature = "json")]
pub use json::{JsonError, JsonWriter};
pub use model::{
    BsorString, ControllerOffsets, CutInfo, Frame, Height, Info, NoteEvent, NoteOutcome, Pause,
    Pose, Quat, RawBool, Replay, UnknownEventType, Vec3, Wall,
};
pub use push::PushParser;
pub use read::{parse, parse_skipping_frames, parse_with_limits, ReplayBuilder};
pub use summary::{FpsStats, NoteCounts, Summary};
pub use write::{
    encode_controller_offsets, encode_frame, encode_height, encode_info, encode_note, encode_pause,
    encode_wall, to_vec, write, write_head, write_tail, write_to, WriteError, FRAME_SIZE, MAGIC,
};
