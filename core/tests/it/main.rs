//! The core's integration tests, one test binary: each module is the tests of one part
//! (named after it), the shared helpers are in `../common/`. Built as one crate so that the
//! test suite links once, not once per file. Two tests keep binaries of their own
//! (`core/tests/alloc_bounds.rs`, `core/tests/recorder_alloc.rs`): each installs a counting global
//! allocator, which would count every other test running beside it. The services' tests
//! (the relay over sockets, the replay server) are the facade's (`tests/it` at the root).

#[path = "../common/mod.rs"]
mod common;
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
#[cfg(feature = "integrity")]
mod integrity;
mod legacy;
mod props;
#[cfg(all(feature = "integrity", feature = "recorder"))]
mod recorder_signed;
#[cfg(feature = "net")]
mod relay;
#[cfg(feature = "net")]
mod relay_bounds;
#[cfg(feature = "net")]
mod relay_budget;
#[cfg(feature = "net")]
mod relay_cluster;
#[cfg(feature = "integrity")]
mod signed_bsor;
#[cfg(feature = "integrity")]
mod signed_props;
mod stream;
#[cfg(feature = "integrity")]
mod strict_signatures;
mod synthetic;
mod vectors;
#[cfg(feature = "integrity")]
mod witness;
#[cfg(feature = "xror")]
mod xror;
