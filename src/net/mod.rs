//! The live spectating protocol (`proto-spec/wire.md`). So far: its framing and messages,
//! sans-IO, with a `tokio_util` codec for the transports. The relay's session logic, the
//! TCP and WebSocket shells and the publisher and viewer are not written yet.

pub mod wire;
