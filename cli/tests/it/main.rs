//! The command-line tools' tests, one test binary: each module runs one tool or command
//! as a user would (the binaries cargo builds for it), over 127.0.0.1. Built as one crate so
//! that the suite links once, not once per file.

#[path = "../../../core/tests/common/mod.rs"]
mod common;

mod cli;
mod custom_cli;
mod fingerprint_cli;
mod hostile_cli;
mod http_cli;
mod import_cli;
mod integrity_cli;
mod load_cli;
mod relay_restart;
mod report;
mod server_kill;
mod serverload_cli;
mod signed_bsor_cli;
mod tls_cli;
mod witness_cli;
