//! The relay's archive on disk: each session as `DIR/SESSION.bsors`, written as its chunks
//! arrive, and read back for viewers that fell behind or come after the end.
//!
//! This is blocking file I/O (`std::fs`), kept out of the sans-IO [`Relay`](super::relay::Relay):
//! the relay says what to write and what to read (its archive actions), the shell
//! (`server.rs`) calls the functions here and hands the results back.
//!
//! An archive file is the stream header, then every chunk in sequence order, exactly as
//! the publisher sent them, so it is a valid (truncated) `.bsors` at every moment. When the
//! session ends with `End 0` and its last chunk is an index chunk, the footer follows
//! (`format.md` §14: it only says where the index chunk starts, so the file is then byte
//! for byte the publisher's finished file).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::relay::{
    Archived, BacklogLimits, ResumeKey, KEY_CHUNK_KEPT_MAX, KEY_CHUNK_TYPE, KEY_FILE_MAX,
};
use super::wire::{check_chunk, check_chunk_size, EndReason, WireError};
use crate::stream::{footer, parse_footer, ChunkHeader, ChunkType, StreamHeader, FOOTER_SIZE};

/// Why the archive could not be written or read: what failed, and which session, file and
/// byte offset it was at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// Writing a session's archive file failed (it is closed and left as it is: a valid
    /// truncated stream).
    #[error("writing the archive of session {session}: {source}")]
    Write {
        /// The session.
        session: String,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// Opening, seeking or reading an archive file failed.
    #[error("reading {}: {source}", .file.display())]
    Read {
        /// The archive file.
        file: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// The chunk at `offset` is not the one that should be there.
    #[error("{}: chunk {found} where chunk {expected} should be, at byte {offset}", .file.display())]
    OutOfSequence {
        /// The archive file.
        file: PathBuf,
        /// Where the chunk starts.
        offset: u64,
        /// The sequence number wanted.
        expected: u32,
        /// The sequence number found.
        found: u32,
    },
    /// The chunk at `offset` fails its checks (length or CRC).
    #[error("{}: at byte {offset}: {source}", .file.display())]
    BadChunk {
        /// The archive file.
        file: PathBuf,
        /// Where the chunk starts.
        offset: u64,
        /// What is wrong with it.
        #[source]
        source: WireError,
    },
    /// The file ends inside its stream header (or the header is over the size read back).
    #[error("{}: the stream header is cut short", .file.display())]
    HeaderCutShort {
        /// The archive file.
        file: PathBuf,
    },
    /// The stream header does not parse.
    #[error("{}: bad stream header: {reason}", .file.display())]
    BadHeader {
        /// The archive file.
        file: PathBuf,
        /// What the header parser said.
        reason: crate::stream::HeaderError,
    },
}

/// Bytes enough for any chunk header (sync, type, four varints, `t0`, two CRCs).
const CHUNK_HEADER_MAX: usize = 64;
/// The largest stream header the archive reads back.
const STREAM_HEADER_MAX: usize = 1 << 20;

/// Writes a stream as it arrives (header, then chunks) and finishes it with the footer
/// when it ends with an index chunk. Used by the archive and by `watch -o`.
#[derive(Debug)]
pub struct StreamWriter<W: Write> {
    out: W,
    len: u64,
    /// Where the last chunk starts, if it is an index chunk.
    index_at: Option<u64>,
}

impl<W: Write> StreamWriter<W> {
    /// A writer into `out`.
    pub fn new(out: W) -> Self {
        StreamWriter {
            out,
            len: 0,
            index_at: None,
        }
    }

    /// A writer that goes on with a stream of which `len` bytes are written already, its
    /// last chunk starting at `index_at` if that is an index chunk.
    pub fn resume(out: W, len: u64, index_at: Option<u64>) -> Self {
        StreamWriter { out, len, index_at }
    }

    /// Appends a stream header or a chunk.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let is_index =
            ChunkHeader::parse_at(bytes).is_some_and(|(h, _)| h.kind == ChunkType::Index);
        self.index_at = is_index.then_some(self.len);
        self.out.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True before anything is written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ends the stream: when it `finished` and its last chunk is an index chunk, appends the
    /// footer. Returns the writer.
    pub fn finish(mut self, finished: bool) -> io::Result<W> {
        if let (true, Some(at)) = (finished, self.index_at) {
            self.out.write_all(&footer(at))?;
            self.len += FOOTER_SIZE as u64;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The archive file of a session (session names hold no `/`, so it stays inside `dir`).
pub fn path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.bsors"))
}

/// The key file of a session, beside its archive file (`wire.md` §4.1).
pub fn key_path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.key"))
}

/// Reads a session's key file: `None` when there is none, or when it is not a key file
/// (a torn or foreign file can resume nothing). At most [`KEY_FILE_MAX`] + 1 bytes are read.
pub fn read_key(dir: &Path, session: &str) -> Result<Option<ResumeKey>, ArchiveError> {
    let file = key_path(dir, session);
    let f = match File::open(&file) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ArchiveError::Read { file, source }),
    };
    let mut buf = [0u8; KEY_FILE_MAX + 1];
    let n = read_full(&mut f.take(buf.len() as u64), &mut buf)
        .map_err(|source| ArchiveError::Read { file, source })?;
    Ok(ResumeKey::parse(&buf[..n]))
}

/// The archive files being written, one per live session.
#[derive(Debug)]
pub struct ArchiveWriter {
    dir: PathBuf,
    open: HashMap<String, StreamWriter<File>>,
}

impl ArchiveWriter {
    /// Archives into `dir` (created if missing).
    pub fn new(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(ArchiveWriter {
            dir: dir.to_path_buf(),
            open: HashMap::new(),
        })
    }

    /// The archive's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A session starts: its file is created with the stream header. A file of the same
    /// name is never truncated or replaced: if one is there, this fails (the relay refuses
    /// such a publisher before, with `SessionExists`; this guards the file against a race).
    pub fn header(&mut self, session: &str, header: &[u8]) -> Result<(), ArchiveError> {
        self.open.remove(session);
        let created = File::options()
            .write(true)
            .create_new(true)
            .open(path(&self.dir, session))
            .and_then(|f| {
                let mut w = StreamWriter::new(f);
                w.write(header).map(|()| w)
            });
        let w = created.map_err(|source| write_error(session, source))?;
        self.open.insert(session.to_string(), w);
        Ok(())
    }

    /// The next chunk of a session. After a failed write the file is closed and left as
    /// it is (a truncated stream); later chunks of the session are not written.
    pub fn chunk(&mut self, session: &str, chunk: &[u8]) -> Result<(), ArchiveError> {
        let Some(w) = self.open.get_mut(session) else {
            return Ok(());
        };
        if let Err(e) = w.write(chunk) {
            self.open.remove(session);
            return Err(write_error(session, e));
        }
        Ok(())
    }

    /// A session ended: its file gets the footer if it is finished, and is synced and closed;
    /// its key file is removed (an ended session is never resumed, `wire.md` §4.1).
    pub fn end(&mut self, session: &str, reason: EndReason) -> Result<(), ArchiveError> {
        let closed = match self.open.remove(session) {
            Some(w) => w
                .finish(reason == EndReason::Finished)
                .and_then(|f| f.sync_all())
                .map_err(|e| write_error(session, e)),
            None => Ok(()),
        };
        let removed = match std::fs::remove_file(key_path(&self.dir, session)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(write_error(session, e)),
            _ => Ok(()),
        };
        closed.and(removed)
    }

    /// A session starts: its key file is written (replacing any) and synced, so that its
    /// publisher can resume it after a restart (`wire.md` §4.1).
    pub fn key(&mut self, session: &str, key: &ResumeKey) -> Result<(), ArchiveError> {
        let write = || -> io::Result<()> {
            let mut f = File::create(key_path(&self.dir, session))?;
            f.write_all(&key.to_bytes())?;
            f.sync_all()?;
            // The file's name, too, is to survive a crash.
            #[cfg(unix)]
            File::open(&self.dir)?.sync_all()?;
            Ok(())
        };
        write().map_err(|e| write_error(session, e))
    }

    /// A session cut short by a restart resumes: its file is cut to `end` bytes (a torn
    /// tail after its last whole chunk goes) and opened for appending.
    pub fn reopen(
        &mut self,
        session: &str,
        end: u64,
        index_at: Option<u64>,
    ) -> Result<(), ArchiveError> {
        self.open.remove(session);
        let reopened = File::options()
            .append(true)
            .open(path(&self.dir, session))
            .and_then(|f| {
                if f.metadata()?.len() != end {
                    f.set_len(end)?;
                    f.sync_all()?;
                }
                Ok(StreamWriter::resume(f, end, index_at))
            });
        let w = reopened.map_err(|e| write_error(session, e))?;
        self.open.insert(session.to_string(), w);
        Ok(())
    }

    /// Sessions whose files are open.
    pub fn open_sessions(&self) -> usize {
        self.open.len()
    }

    /// Syncs and closes every open file (on shutdown): each is a valid truncated stream.
    /// The last failure, if any, is returned (every file is tried).
    pub fn close_all(&mut self) -> Result<(), ArchiveError> {
        let mut result = Ok(());
        for (session, w) in self.open.drain() {
            if let Err(e) = w.finish(false).and_then(|f| f.sync_all()) {
                result = Err(write_error(&session, e));
            }
        }
        result
    }
}

fn write_error(session: &str, source: io::Error) -> ArchiveError {
    ArchiveError::Write {
        session: session.to_string(),
        source,
    }
}

/// Reads up to `buf.len()` bytes at the reader's position (fewer only at the end).
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads chunks from `seq` on, the first at `offset` of the file: at most `max_chunks`,
/// and at most `max_bytes` unless the first chunk alone is larger. Each chunk's sequence
/// number and CRCs are checked. Fewer chunks (or none) when the file ends.
pub fn read_chunks(
    file: &Path,
    offset: u64,
    seq: u32,
    max_chunks: usize,
    max_bytes: usize,
) -> Result<Vec<Bytes>, ArchiveError> {
    let io = |source| ArchiveError::Read {
        file: file.to_path_buf(),
        source,
    };
    let mut f = File::open(file).map_err(io)?;
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = vec![0u8; max_bytes.max(CHUNK_HEADER_MAX)];
    let n = read_full(&mut f, &mut buf).map_err(io)?;
    buf.truncate(n);
    let buf = Bytes::from(buf);
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < max_chunks {
        let Some((h, hlen)) = ChunkHeader::parse_at(&buf[at..]) else {
            break;
        };
        let want = seq.wrapping_add(out.len() as u32);
        if h.seq != want {
            return Err(ArchiveError::OutOfSequence {
                file: file.to_path_buf(),
                offset: offset + at as u64,
                expected: want,
                found: h.seq,
            });
        }
        let len = hlen + h.len as usize;
        let chunk = if at + len <= buf.len() {
            buf.slice(at..at + len)
        } else if out.is_empty() {
            // One chunk larger than max_bytes: read it whole.
            let mut whole = vec![0u8; len];
            f.seek(SeekFrom::Start(offset)).map_err(io)?;
            if read_full(&mut f, &mut whole).map_err(io)? < len {
                break;
            }
            Bytes::from(whole)
        } else {
            break;
        };
        check_chunk(&chunk).map_err(|source| ArchiveError::BadChunk {
            file: file.to_path_buf(),
            offset: offset + at as u64,
            source,
        })?;
        at += len;
        out.push(chunk);
    }
    Ok(out)
}

/// Where, in an archive file, the chunks lie that a live session's backlog would hold
/// (`wire.md` §4.1): found by [`scan_backlog`], read by [`read_backlog`]. Holds offsets
/// only, at most [`BacklogLimits::chunks`] of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BacklogSpan {
    /// Chunk 0, when it is a key chunk of at most 4096 bytes: its offset and length.
    key_chunk: Option<(u64, usize)>,
    /// The last chunks (offset and length, consecutive in the file), from the last
    /// keyframe chunk on, within the limits.
    chunks: VecDeque<(u64, usize)>,
    /// Bytes of `chunks`.
    bytes: usize,
}

impl BacklogSpan {
    /// Chunks it names (the key chunk apart).
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// True when it names no chunk (the key chunk apart).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes of the chunks it names (the key chunk apart).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The chunk of `len` bytes at `at` is the next whole chunk of the file (`head` holds
    /// its first bytes, its header whole).
    fn push(&mut self, limits: BacklogLimits, at: u64, len: usize, head: &[u8]) {
        let Some((h, _)) = ChunkHeader::parse_at(head) else {
            return;
        };
        if h.seq == 0 && h.kind == ChunkType::Unknown(KEY_CHUNK_TYPE) && len <= KEY_CHUNK_KEPT_MAX {
            self.key_chunk = Some((at, len));
        }
        // A chunk over its type's limit or the publisher's frame limit is none the relay
        // would have held: nothing before it can be in the backlog either.
        let fits =
            len <= limits.max_chunk && matches!(check_chunk_size(head), Ok(Some(n)) if n == len);
        if h.kind == ChunkType::Keyframes || !fits {
            // The group before it is not what a late joiner gets.
            self.chunks.clear();
            self.bytes = 0;
        }
        if !fits {
            return;
        }
        self.chunks.push_back((at, len));
        self.bytes += len;
        // As the relay drops its oldest chunks (the newest stays).
        while self.chunks.len() > 1
            && (self.chunks.len() > limits.chunks.max(1) || self.bytes > limits.bytes)
        {
            if let Some((_, n)) = self.chunks.pop_front() {
                self.bytes -= n;
            }
        }
    }
}

/// Looks a session up in the archive: its stream header, how many whole chunks follow in
/// sequence, where they end, and whether the file ends with its footer. `None` when there
/// is no file. Only chunk headers are read, not payloads; the key file is not read (see
/// [`read_key`]).
pub fn scan(file: &Path) -> Result<Option<Archived>, ArchiveError> {
    Ok(scan_with(file, None)?.map(|(a, _)| a))
}

/// [`scan`], and where the chunks lie that the session's live backlog would hold within
/// `limits` (its key chunk, and its last chunks from the last keyframe chunk on), for
/// [`read_backlog`] if the session is resumed (`wire.md` §4.1). Reads no more than `scan`.
pub fn scan_backlog(
    file: &Path,
    limits: BacklogLimits,
) -> Result<Option<(Archived, BacklogSpan)>, ArchiveError> {
    scan_with(file, Some(limits))
}

/// Reads the chunks `span` names from `file` (as [`scan_backlog`] found them) into
/// `archived`'s [`key_chunk`](Archived::key_chunk) and [`backlog`](Archived::backlog),
/// checking each chunk's sequence number and CRCs. Reads at most the key chunk (4096
/// bytes) and the span's bytes (within the limits it was found with, or one chunk within
/// them and its type's limit).
pub fn read_backlog(
    file: &Path,
    span: &BacklogSpan,
    archived: &mut Archived,
) -> Result<(), ArchiveError> {
    let fail = |source| ArchiveError::Read {
        file: file.to_path_buf(),
        source,
    };
    let mut f = File::open(file).map_err(fail)?;
    let mut read_at = |at: u64, len: usize| -> Result<Bytes, ArchiveError> {
        f.seek(SeekFrom::Start(at)).map_err(fail)?;
        let mut buf = vec![0u8; len];
        if read_full(&mut f, &mut buf).map_err(fail)? < len {
            let short = io::Error::new(io::ErrorKind::UnexpectedEof, "the file got shorter");
            return Err(fail(short));
        }
        Ok(Bytes::from(buf))
    };
    let checked = |offset: u64, chunk: &Bytes, expected: u32| -> Result<(), ArchiveError> {
        check_chunk(chunk).map_err(|source| ArchiveError::BadChunk {
            file: file.to_path_buf(),
            offset,
            source,
        })?;
        match ChunkHeader::parse_at(chunk) {
            Some((h, _)) if h.seq == expected => Ok(()),
            found => Err(ArchiveError::OutOfSequence {
                file: file.to_path_buf(),
                offset,
                expected,
                found: found.map_or(u32::MAX, |(h, _)| h.seq),
            }),
        }
    };
    let key_chunk = match span.key_chunk {
        Some((at, len)) => {
            let k = read_at(at, len)?;
            checked(at, &k, 0)?;
            Some(k)
        }
        None => None,
    };
    let mut backlog = Vec::with_capacity(span.chunks.len());
    if let (Some(&(start, _)), Some(first)) = (
        span.chunks.front(),
        u32::try_from(span.chunks.len())
            .ok()
            .and_then(|n| archived.chunks.checked_sub(n)),
    ) {
        let all = read_at(start, span.bytes)?;
        let mut at = 0;
        for (&(offset, len), seq) in span.chunks.iter().zip(first..) {
            if at + len > all.len() {
                break;
            }
            let chunk = all.slice(at..at + len);
            checked(offset, &chunk, seq)?;
            backlog.push(chunk);
            at += len;
        }
    }
    archived.key_chunk = key_chunk;
    archived.backlog = backlog;
    Ok(())
}

fn scan_with(
    file: &Path,
    limits: Option<BacklogLimits>,
) -> Result<Option<(Archived, BacklogSpan)>, ArchiveError> {
    let io = |source| ArchiveError::Read {
        file: file.to_path_buf(),
        source,
    };
    let mut f = match File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let file_len = f.metadata().map_err(io)?.len();
    // The stream header: read more until it parses.
    let mut head = vec![0u8; 4096.min(STREAM_HEADER_MAX)];
    let (header_len, mut head) = loop {
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        let n = read_full(&mut f, &mut head).map_err(io)?;
        match StreamHeader::parse_prefix_len(&head[..n]) {
            Ok(Some((_, len))) => break (len, head),
            Ok(None) if n == head.len() && head.len() < STREAM_HEADER_MAX => {
                head.resize(head.len() * 4, 0);
            }
            Ok(None) => {
                let file = file.to_path_buf();
                return Err(ArchiveError::HeaderCutShort { file });
            }
            Err(reason) => {
                let file = file.to_path_buf();
                return Err(ArchiveError::BadHeader { file, reason });
            }
        }
    };
    head.truncate(header_len);
    let mut at = header_len as u64;
    let mut chunks = 0u32;
    let mut index_at = None;
    let mut window = [0u8; CHUNK_HEADER_MAX];
    let mut span = BacklogSpan::default();
    loop {
        f.seek(SeekFrom::Start(at)).map_err(io)?;
        let n = read_full(&mut f, &mut window).map_err(io)?;
        let Some((h, hlen)) = ChunkHeader::parse_at(&window[..n]) else {
            break;
        };
        let end = at + hlen as u64 + u64::from(h.len);
        if h.seq != chunks || end > file_len {
            break;
        }
        if let Some(limits) = limits {
            let len = usize::try_from(end - at).unwrap_or(usize::MAX);
            span.push(limits, at, len, &window[..n]);
        }
        chunks += 1;
        index_at = (h.kind == ChunkType::Index).then_some(at);
        at = end;
    }
    let finished = file_len == at + FOOTER_SIZE as u64 && {
        let mut tail = [0u8; FOOTER_SIZE];
        f.seek(SeekFrom::Start(at)).map_err(io)?;
        read_full(&mut f, &mut tail).map_err(io)? == FOOTER_SIZE && parse_footer(&tail).is_some()
    };
    let archived = Archived {
        header: Bytes::from(head),
        chunks,
        end: at,
        index_at,
        finished,
        key: None,
        key_chunk: None,
        backlog: Vec::new(),
    };
    Ok(Some((archived, span)))
}
