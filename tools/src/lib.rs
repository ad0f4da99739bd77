//! The project's benchmark and attack tools, kept out of the user's `bsor-stream` binary:
//! the relay load generator `bsor-stream-load`, the hostile-client tool
//! `bsor-stream-hostile` and the replay-server load generator `bsor-stream-serverload`
//! (docs/benchmarks.md). Each binary in `src/bin/` is its command line; what they share is
//! here.
//!
//! - [`bench`](mod@bench): the synthetic song and its paced publisher, a recording viewer, the relay
//!   started as its own process, a process's memory and CPU time from `/proc`.
//! - [`hostile`]: the hostile scenarios against a relay and a replay server, and their
//!   verdicts.

pub mod bench;
pub mod hostile;
