//! The live spectating protocol (`proto-spec/wire.md`): its framing and messages (`wire`)
//! and the relay's session logic (`relay`), both sans-IO, and a tokio shell serving the relay
//! over TCP (`tcp`). The WebSocket shell, the archive, the publisher and the viewer are not
//! written yet.

pub mod publisher;
pub mod relay;
pub mod tcp;
pub mod wire;
