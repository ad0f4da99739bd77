//! The commands of the `bsor-stream` tool.

pub mod classic;
pub mod fingerprint;
pub mod import;
pub mod integrity;
pub mod keys;
pub mod live;
pub mod report;
pub mod serve;
pub mod stream;
pub mod verify;

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use bsor_stream::bsor::{self, Replay};
use bsor_stream::stream::STREAM_MAGIC;
use bsor_stream::transcode::{self, Recovery};

/// How a command ended, when it did not fail outright.
pub enum Outcome {
    /// Everything was done.
    Done,
    /// Only part could be recovered (exit status 2).
    Partial,
    /// The command ran but what it checked failed (exit status 1, report already printed).
    Failed,
}

/// An error for the one line on stderr: what failed, and the cause. An empty message is a
/// closed stdout (as with `| head`), which is not worth one.
pub struct Failure(pub String);

impl<E: std::fmt::Display> From<(&Path, E)> for Failure {
    fn from((path, e): (&Path, E)) -> Self {
        Failure(format!("{}: {e}", path.display()))
    }
}

/// For errors writing to stdout.
pub fn stdout_err(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure(String::new())
    } else {
        Failure(format!("writing to stdout: {e}"))
    }
}

/// For errors writing JSON to stdout.
pub fn json_err(e: serde_json::Error) -> Failure {
    match e.io_error_kind() {
        Some(kind) => stdout_err(kind.into()),
        None => Failure(format!("writing JSON: {e}")),
    }
}

/// `-` is stdin or stdout.
pub fn is_std(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// A reader for a file or stdin.
pub fn open_input(path: &Path) -> Result<Box<dyn Read>, Failure> {
    if is_std(path) {
        Ok(Box::new(io::stdin().lock()))
    } else {
        Ok(Box::new(File::open(path).map_err(|e| (path, e))?))
    }
}

/// A writer for a file or stdout.
pub fn open_output(path: &Path) -> Result<Box<dyn Write>, Failure> {
    if is_std(path) {
        Ok(Box::new(io::stdout().lock()))
    } else {
        Ok(Box::new(File::create(path).map_err(|e| (path, e))?))
    }
}

/// All of a file (or stdin).
pub fn read_all(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    open_input(path)?
        .read_to_end(&mut bytes)
        .map_err(|e| (path, e))?;
    Ok(bytes)
}

/// True when the bytes start like a stream.
pub fn is_stream(bytes: &[u8]) -> bool {
    bytes.starts_with(&STREAM_MAGIC)
}

/// A replay from a classic BSOR or a stream file, with how much of a stream was recovered.
pub fn load_replay(path: &Path) -> Result<(Replay, Option<Recovery>, Vec<u8>), Failure> {
    let bytes = read_all(path)?;
    if is_stream(&bytes) {
        let (r, rec) = transcode::decode_replay(&bytes).map_err(|e| (path, e))?;
        Ok((r, Some(rec), bytes))
    } else {
        let r = bsor::parse(&bytes).map_err(|e| Failure::from((path, e)))?;
        Ok((r, None, bytes))
    }
}
