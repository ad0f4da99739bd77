//! The relay's integration tests, one test binary: the relay over TCP, WebSocket, HTTP and
//! TLS on 127.0.0.1, and the recorder publishing to it. Built as one crate so that the test
//! suite links once, not once per file.

mod http;
mod recorder;
mod tcp;
mod tls;
