//! The live spectating protocol (`proto-spec/wire.md`): its framing and messages (`wire`)
//! and the relay's session logic (`relay`), both sans-IO; the network shell shared by every
//! transport (`server`), with TCP (`tcp`) and WebSocket (`ws`) in front of it, and the
//! archive's file I/O (`archive`); and the publishing side for a recorder (`publisher`).

pub mod archive;
pub mod publisher;
pub mod relay;
pub mod server;
pub mod tcp;
pub mod wire;
pub mod ws;
