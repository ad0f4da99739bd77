//! The benchmark and attack tools' tests, one test binary: each module runs one tool as a
//! user would (the binaries cargo builds for it), over 127.0.0.1. Built as one crate so that
//! the suite links once, not once per file.

mod hostile_cli;
mod load_cli;
mod serverload_cli;

use std::path::Path;

/// The user's `bsor-stream` binary, which the tools start as the relay or the replay
/// server they measure, found where they look for it: beside their own binaries. It is
/// another package's (`bsor-stream-cli`), which Cargo builds for these tests only when both
/// are tested together (`cargo test -p bsor-stream-cli -p bsor-stream-tools`, or the
/// workspace): a binary is no dependency a package can take. Panics, saying so, when it
/// is missing.
fn require_user_binary() {
    let tool = Path::new(env!("CARGO_BIN_EXE_bsor-stream-hostile"));
    let user = tool.with_file_name(format!("bsor-stream{}", std::env::consts::EXE_SUFFIX));
    assert!(
        user.is_file(),
        "{} is missing: the tools run it beside them. Test with `cargo test -p \
         bsor-stream-cli -p bsor-stream-tools` (add --release as needed), or build it first \
         with `cargo build -p bsor-stream-cli` in the same profile",
        user.display()
    );
}
