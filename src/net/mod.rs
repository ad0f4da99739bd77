//! The live spectating protocol (`proto-spec/wire.md`): its framing and messages (`wire`)
//! and the relay's session logic (`relay`), both sans-IO. The TCP and WebSocket shells, the
//! archive, the publisher and the viewer are not written yet.

pub mod relay;
pub mod wire;
