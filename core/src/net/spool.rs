//! The spill file of a publisher's outbox: chunks that do not fit the outbox's memory bound
//! are appended to it while they spill, read back to be sent, and the file is emptied once
//! none waits in it. File I/O only; which chunk goes where is [`super::outbox::Outbox`]'s.

use bytes::Bytes;

/// Spilling to disk beyond the outbox's memory bound.
#[derive(Clone, Debug)]
pub struct Spill {
    /// The folder of the spill file.
    pub dir: std::path::PathBuf,
    /// Bound of the spill file, in bytes.
    pub limit: u64,
}

/// A spill file for the chunks that do not fit the outbox's memory bound: appended to while
/// chunks spill, read back to send them, emptied once none waits in it.
pub struct Spool {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    end: u64,
    limit: u64,
}

impl Spool {
    /// A spill file in `spill.dir`, named after the publisher key (created on first write).
    pub fn new(spill: &Spill, key: [u8; 16]) -> Self {
        let name: String = key.iter().map(|b| format!("{b:02x}")).collect();
        Spool {
            path: spill.dir.join(format!("bsor-live-{name}.spill")),
            file: None,
            end: 0,
            limit: spill.limit,
        }
    }

    /// Appends a chunk; where it starts.
    pub fn write(&mut self, chunk: &[u8]) -> std::io::Result<u64> {
        use std::io::{Seek, SeekFrom, Write};
        if self.end + chunk.len() as u64 > self.limit {
            return Err(std::io::Error::other(format!(
                "the spill file would pass its bound of {} bytes",
                self.limit
            )));
        }
        let f = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&self.path)?,
            ),
        };
        let at = self.end;
        f.seek(SeekFrom::Start(at))?;
        f.write_all(chunk)?;
        self.end += chunk.len() as u64;
        Ok(at)
    }

    /// Reads back a chunk written at `at`.
    pub fn read(&mut self, at: u64, len: usize) -> std::io::Result<Bytes> {
        use std::io::{Read, Seek, SeekFrom};
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no spill file"))?;
        f.seek(SeekFrom::Start(at))?;
        let mut buf = vec![0; len];
        f.read_exact(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// Nothing waits in the file: start it over (and free the disk).
    pub fn reset(&mut self) {
        if self.end > 0 {
            if let Some(f) = &self.file {
                let _ = f.set_len(0);
            }
            self.end = 0;
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
