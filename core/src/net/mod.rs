//! The live spectating protocol (`proto-spec/wire.md`), without an async runtime.
//!
//! Without I/O: its framing and messages (`wire`), the relay's session logic (`relay`), the
//! client's (`client`) with the publisher's bounded outbox (`outbox`), and the rates with
//! bursts both limit clients by (`pace`). With blocking I/O over `std`: the archive's files
//! (`archive`), the publisher's spill file (`spool`) and the publisher on a plain thread
//! (`publisher::thread`). With the `tls` feature, TLS from PEM files (`tls`). The tokio
//! shells (the relay server, TCP, WebSocket, HTTP, the async publisher and viewer) are the
//! relay crate's (`bsor-stream-relay`). Feature `client` alone gives `wire`, `client` and
//! `outbox`: no randomness, hashing or I/O, so that `wasm32-unknown-unknown` builds them.

#[cfg(feature = "net")]
pub mod archive;
pub mod client;
pub mod outbox;
#[cfg(feature = "net")]
pub mod pace;
#[cfg(feature = "net")]
pub mod publisher;
#[cfg(feature = "net")]
pub mod relay;
#[cfg(feature = "net")]
pub mod spool;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wire;
