//! The replay server's integration tests, one test binary: its HTTP on 127.0.0.1 (mounted
//! on a relay), its limits, keys and storage, against the real PostgreSQL and S3 server of
//! `scripts/services.sh` when they are there. Built as one crate so that the test suite
//! links once, not once per file; the shared helpers are in `../common/`.

#[path = "../common/replay_http.rs"]
mod replay_http;
#[path = "../common/services.rs"]
mod services_env;

mod key_proof;
mod keys;
mod replay_server;
mod same_play;
mod server_limits;
mod services;
