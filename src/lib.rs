//! # bsor-stream
//!
//! A streaming runtime for Beat Saber replays: the crate users depend on. It re-exports the
//! crates of each layer under one name, so that `use bsor_stream::…` reaches all of them:
//!
//! - `bsor-stream-core`, always: [`bsor`] (the classic BSOR v1 codec: a typed model, a
//!   whole-buffer parser, a sans-IO push parser and a byte-exact writer), [`stream`] (the
//!   `.bsors` stream format, a sans-IO encoder and decoder), [`transcode`] (BSOR to the stream
//!   format and back), [`synth`] (synthetic replays), and with their features `integrity`
//!   (signed streams), `legacy` (legacy ScoreSaber JSON imported as BSOR), `recorder` (the
//!   runtime a game mod embeds) and `net` (the live protocol without an async runtime).
//! - `bsor-stream-relay` (feature `relay`): the relay server, its TCP, WebSocket and HTTP,
//!   and the async publisher and viewer, with tokio, under [`net`] beside the core's protocol.
//! - `bsor-stream-server` (feature `server`): the replay server, as `server`.
//!
//! Default features: the core's `recorder`, `live`, `integrity` and `legacy`; no async
//! runtime, HTTP, database or object store is in the tree without `relay` or `server`. With
//! `--no-default-features` the crate is the classic codec, the stream format and
//! transcoding. The command-line tool (crate `bsor-stream-cli`) and the C ABI (crate
//! `bsor-stream-ffi`) sit on top and are not part of the library.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use bsor_stream_core::{bsor, stream, synth, transcode};

#[cfg(feature = "integrity")]
pub use bsor_stream_core::integrity;
#[cfg(feature = "legacy")]
pub use bsor_stream_core::legacy;
#[cfg(feature = "recorder")]
pub use bsor_stream_core::recorder;
#[cfg(feature = "xror")]
pub use bsor_stream_core::xror;
#[cfg(feature = "server")]
pub use bsor_stream_server as server;

/// The live spectating protocol (`proto-spec/wire.md`): the core's framing, relay and
/// client sessions, archive files and plain-thread publisher, and with `relay` the tokio
/// shells (`server`, `tcp`, `ws`, `http`, `gate`, `viewer`, `publisher::publish`).
#[cfg(feature = "net")]
pub mod net {
    pub use bsor_stream_core::net::{archive, client, outbox, pace, relay, spool, wire};

    #[cfg(feature = "tls")]
    pub use bsor_stream_core::net::tls;
    /// Relays that share sessions through NATS JetStream (`wire.md` §5).
    #[cfg(feature = "cluster")]
    pub use bsor_stream_relay::cluster;
    #[cfg(feature = "relay")]
    pub use bsor_stream_relay::{gate, http, server, tcp, viewer, ws};

    pub mod publisher {
        //! The publishing side: the core's ([`Target`], [`Input`], [`Progress`] and the
        //! plain-thread shell [`thread`]), and with `relay` the async `publish`.

        pub use bsor_stream_core::net::publisher::*;
        #[cfg(feature = "relay")]
        pub use bsor_stream_relay::publish::publish;
    }
}
