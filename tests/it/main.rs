//! The library's integration tests, one test binary: each module is the tests of one part
//! (named after it), the shared helpers are in `../common/`. Built as one crate so that the
//! test suite links once, not once per file. Two tests keep binaries of their own
//! (`tests/alloc_bounds.rs`, `tests/recorder_alloc.rs`): each installs a counting global
//! allocator, which would count every other test running beside it.

#[path = "../common/mod.rs"]
mod common;
#[cfg(feature = "server")]
#[path = "../common/replay_http.rs"]
mod replay_http;
#[cfg(feature = "server")]
#[path = "../common/services.rs"]
mod services_env;
#[cfg(feature = "integrity")]
#[path = "../common/signed_mutations.rs"]
mod signed_mutations;
#[cfg(feature = "integrity")]
#[path = "../common/signed_vectors.rs"]
mod signed_vectors;

mod corpus;
mod custom_profile;
mod errors;
mod fingerprint;
mod http;
mod integrity;
mod key_proof;
mod keys;
mod legacy;
mod props;
mod recorder;
mod recorder_signed;
mod relay;
mod relay_bounds;
mod relay_budget;
mod replay_server;
mod same_play;
mod server_limits;
mod services;
mod signed_bsor;
mod signed_props;
mod stream;
mod strict_signatures;
mod synthetic;
mod tcp;
mod tls;
mod vectors;
mod witness;
