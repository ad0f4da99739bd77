//! The classic `.bsor` sink: frames are spooled to a side file as they come (BSOR puts the
//! events after all frames, and the info block, known only at the end, before them); at
//! finish the BSOR is put together in a `.part` file and renamed into place, so the path
//! never holds half a replay.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::bsor::{self, Height, Info, NoteEvent, Pause, Replay, Wall};

use super::Record;

pub(super) struct ClassicSink {
    path: PathBuf,
    spool_path: PathBuf,
    spool: BufWriter<File>,
    frames: usize,
    notes: Vec<NoteEvent>,
    walls: Vec<Wall>,
    heights: Vec<Height>,
    pauses: Vec<Pause>,
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl ClassicSink {
    pub(super) fn create(path: &Path) -> io::Result<Self> {
        let spool_path = with_suffix(path, ".frames");
        Ok(ClassicSink {
            path: path.to_owned(),
            spool: BufWriter::new(File::create(&spool_path)?),
            spool_path,
            frames: 0,
            notes: Vec::new(),
            walls: Vec::new(),
            heights: Vec::new(),
            pauses: Vec::new(),
        })
    }

    pub(super) fn record(&mut self, r: &Record) -> io::Result<()> {
        match r {
            Record::Frame(f) => {
                self.spool.write_all(&bsor::encode_frame(f))?;
                self.frames += 1;
            }
            Record::Note(n) => self.notes.push(*n),
            Record::Wall(w) => self.walls.push(*w),
            Record::Height(h) => self.heights.push(*h),
            Record::Pause(p) => self.pauses.push(*p),
        }
        Ok(())
    }

    /// Writes the file: `tail` gives the controller offsets, user data and trailing bytes.
    pub(super) fn finish(self, info: Info, tail: Replay) -> io::Result<()> {
        let spool = self.spool.into_inner().map_err(|e| e.into_error())?;
        drop(spool);
        let part = with_suffix(&self.path, ".part");
        let mut out = BufWriter::new(File::create(&part)?);
        let mut head = Vec::new();
        bsor::write_head(&info, self.frames, &mut head)?;
        out.write_all(&head)?;
        let copied = io::copy(&mut File::open(&self.spool_path)?, &mut out)?;
        if copied != (self.frames * bsor::FRAME_SIZE) as u64 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the frame spool {} holds {copied} bytes, not {} frames",
                    self.spool_path.display(),
                    self.frames
                ),
            ));
        }
        let tail = Replay {
            notes: self.notes,
            walls: self.walls,
            heights: self.heights,
            pauses: self.pauses,
            controller_offsets: tail.controller_offsets,
            user_data: tail.user_data,
            trailing: tail.trailing,
            ..Replay::default()
        };
        let mut bytes = Vec::new();
        bsor::write_tail(&tail, &mut bytes)?;
        out.write_all(&bytes)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&part, &self.path)?;
        fs::remove_file(&self.spool_path)
    }

    /// The song did not finish: no classic file; the spool is removed.
    pub(super) fn abandon(self) {
        drop(self.spool);
        let _ = fs::remove_file(&self.spool_path);
    }
}
