//! The live spectating protocol (`proto-spec/wire.md`).
//!
//! Without I/O: its framing and messages (`wire`), the relay's session logic (`relay`), the
//! client's (`client`) with the publisher's bounded outbox (`outbox`), and the rates with bursts
//! both limit clients by (`pace`). With I/O over `std`:
//! the archive's files (`archive`), the publisher's spill file (`spool`) and the publisher
//! on a plain thread (`publisher::thread`). With the `tokio` feature, the async shells: the
//! relay server shared by every transport (`server`), TCP (`tcp`) and WebSocket (`ws`) in
//! front of it with the relay's HTTP on the WebSocket address (`http`), and the async publisher (`publisher::publish`) and viewer (`viewer`). With
//! the `tls` feature, TLS from PEM files for all of them (`tls`).

pub mod archive;
pub mod client;
#[cfg(feature = "tokio")]
pub mod gate;
#[cfg(feature = "tokio")]
pub mod http;
pub mod outbox;
pub mod pace;
pub mod publisher;
pub mod relay;
#[cfg(feature = "tokio")]
pub mod server;
pub mod spool;
#[cfg(feature = "tokio")]
pub mod tcp;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tokio")]
pub mod viewer;
pub mod wire;
#[cfg(feature = "tokio")]
pub mod ws;
