//! The command-line tool's tests, one test binary: each module runs one command as a user
//! would (the binary cargo builds for it), over 127.0.0.1. Built as one crate so that the
//! suite links once, not once per file. (The benchmark and attack tools' tests are in
//! tools/tests/it/.)

#[path = "../../../core/tests/common/mod.rs"]
mod common;

mod cli;
mod cluster;
mod custom_cli;
mod fingerprint_cli;
mod http_cli;
mod import_cli;
mod integrity_cli;
mod relay_restart;
mod report;
mod server_kill;
mod signed_bsor_cli;
mod tls_cli;
mod witness_cli;
