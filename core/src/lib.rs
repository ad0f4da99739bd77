//! # bsor-stream-core
//!
//! The format and the protocol of bsor-stream, without I/O of their own: what a game mod, a
//! WebAssembly page and the services all build on. No async runtime, HTTP or database is in
//! its dependency tree; the relay and the replay server are crates above it
//! (`bsor-stream-relay`, `bsor-stream-server`), and `bsor-stream` is the facade users
//! depend on.
//!
//! Each module depends only on the ones listed before it:
//!
//! - [`bsor`]: the classic BSOR v1 codec (BeatLeader's open replay format): a typed model,
//!   a whole-buffer parser, a sans-IO push parser and a byte-exact writer.
//! - [`stream`]: the `.bsors` stream format: keyframe groups, delta frames, lossless and lossy
//!   profiles, event chunks, trailer, index; a sans-IO encoder and decoder.
//! - [`transcode`]: classic BSOR to the stream format and back, whole or as bytes arrive.
//! - `integrity` (feature `integrity`): signed streams: a signer the stream encoder drives
//!   and a verifier of signatures, checkpoint chains and the records they cover.
//! - `legacy` (feature `legacy`): legacy ScoreSaber replay JSON imported as BSOR.
//! - `net` (feature `net`): the live protocol (`proto-spec/wire.md`): framing, messages, the
//!   relay's and the client's session logic (sans-IO), the archive's files, and the
//!   publisher on a plain `std::net` thread; with `tls`, TLS from PEM files. Feature
//!   `client` alone gives the framing, the messages and the client state machine, with no
//!   randomness or I/O (the browser player's worker drives it in WebAssembly).
//! - `recorder` (feature `recorder`): the runtime a game mod embeds: pushes from the render
//!   thread into a bounded ring, a background thread that encodes and feeds file, live
//!   (feature `live`) and classic sinks.
//! - `xror` (feature `xror`): XROR recordings (the BOXRR-23 data set's format) read into
//!   the BSOR model.
//! - [`synth`]: synthetic replays from a seed, for demos, tests and benchmarks.
//!
//! With no features, or with `client`, the crate is the classic codec, the stream format and
//! transcoding, and builds for `wasm32-unknown-unknown`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bsor;
#[cfg(feature = "integrity")]
pub mod integrity;
#[cfg(feature = "legacy")]
pub mod legacy;
#[cfg(feature = "client")]
pub mod net;
#[cfg(feature = "recorder")]
pub mod recorder;
pub mod stream;
pub mod synth;
pub mod transcode;
#[cfg(feature = "xror")]
pub mod xror;
