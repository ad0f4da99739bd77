//! # bsor-stream
//!
//! A streaming runtime for Beat Saber replays.
//!
//! The crate is layered so that each module depends only on the ones below it:
//!
//! - [`bsor`]: the classic BSOR v1 codec (BeatLeader's open replay format): a typed model,
//!   a whole-buffer parser, a sans-IO push parser and a byte-exact writer.
//! - [`stream`]: the `.bsors` stream format: keyframe groups, delta frames, lossless and lossy
//!   profiles, event chunks, trailer, index; a sans-IO encoder and decoder.
//! - [`transcode`]: classic BSOR to the stream format and back, whole or as bytes arrive.
//! - [`net`]: the live protocol: framing, messages and the relay's session logic (sans-IO).
//! - [`recorder`]: the runtime a game mod embeds: pushes from the render thread into a
//!   bounded ring, a background thread that encodes and feeds file, live and classic sinks.
//! - `integrity` (feature `integrity`): signed streams: a signer the stream encoder drives
//!   and a verifier of signatures, checkpoint chains and the records they cover.
//! - `legacy` (feature `legacy`): legacy ScoreSaber replay JSON imported as BSOR.
//! - `server` (feature `server`): the replay server: uploads validated and kept as streams
//!   in an object store, indexed with SQL, served whole, by song time or as events.
//! - [`synth`]: synthetic replays from a seed, for demos, tests and benchmarks.
//!
//! Features: `recorder` (the runtime), `net` (the protocol without I/O, and its blocking
//! `std::net` shells), `live` (the recorder's live sink), `tokio` (the async relay server,
//! transports and publisher); all on by default. With `--no-default-features` the crate is
//! the classic codec, the stream format and transcoding, and builds for
//! `wasm32-unknown-unknown`. The command-line tool (crate `bsor-stream-cli`) and the C ABI
//! (crate `bsor-stream-ffi`) sit on top and are not part of the library.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bsor;
#[cfg(feature = "integrity")]
pub mod integrity;
#[cfg(feature = "legacy")]
pub mod legacy;
#[cfg(feature = "net")]
pub mod net;
#[cfg(feature = "recorder")]
pub mod recorder;
#[cfg(feature = "server")]
pub mod server;
pub mod stream;
pub mod synth;
pub mod transcode;
