//! `bsor-stream-hostile`: attacks a relay (or a replay server) with hostile clients while an
//! honest session runs through each scenario, and judges it. The scenarios and their
//! verdicts are the library's `hostile` module (docs/benchmarks.md, "Hostile clients").

use bsor_stream_tools::{bench, hostile};
use clap::Parser;

fn main() -> std::process::ExitCode {
    bench::exit_code("bsor-stream-hostile", hostile::run(&hostile::Args::parse()))
}
