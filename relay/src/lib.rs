//! # bsor-stream-relay
//!
//! The live relay as a service: the tokio shells around the core's sans-IO relay and client
//! (crate `bsor-stream-core`, `proto-spec/wire.md`), and the relay's HTTP
//! (`proto-spec/http.md`).
//!
//! - [`server`]: the relay server every transport shares: the sans-IO relay behind one
//!   mutex, its clock and timers, the archive's file I/O.
//! - [`gate`]: how far the relay reads ahead of a connection's last whole message.
//! - [`tcp`] and [`ws`]: the transports, in the clear or over TLS; [`http`] on the
//!   WebSocket address: the player's page, `/sessions`, archived sessions by ranges and
//!   their events, and any service mounted on it ([`http::Mount`]: the replay server).
//! - [`publish`] and [`viewer`]: the async publisher and viewer (the command-line tool's).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "cluster")]
pub mod cluster;
pub mod gate;
pub mod http;
pub mod publish;
pub mod server;
pub mod tcp;
pub mod viewer;
pub mod ws;
