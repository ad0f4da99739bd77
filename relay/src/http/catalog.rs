//! The archived sessions `GET /sessions` lists: the `.bsors` files of the archive folder,
//! newest first, each described by its stream header (and, when finished, its index),
//! read once per file version and kept in a bounded cache keyed by (length, mtime).
//!
//! Blocking file I/O: the shell runs [`Catalog::list`] on the blocking pool, one at a time.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::rules::{self, Entry, MAX_SESSIONS};
use bsor_stream_core::net::wire::valid_session_name;
use bsor_stream_core::stream::{parse_footer, ChunkHeader, ChunkType, StreamHeader, FOOTER_SIZE};

/// Folder entries looked at per listing at most (a folder with more lists the first ones
/// the file system gives).
const MAX_SCAN: usize = 20_000;
/// Bytes of a file's start read for its stream header at most.
const HEADER_MAX: usize = 64 << 10;
/// The largest index chunk read for a duration.
const INDEX_MAX: u64 = 1 << 20;
/// Files described in the cache at most; past it the cache starts over.
const CACHE_MAX: usize = 4 * MAX_SESSIONS;
/// Chunk headers walked for the duration of a file without an index at most.
const WALK_MAX: u32 = 100_000;

/// What is known of one archive file version.
#[derive(Clone, Debug)]
struct Described {
    len: u64,
    mtime: SystemTime,
    entry: Entry,
}

/// The archive folder's sessions, described once per file version.
#[derive(Debug)]
pub struct Catalog {
    dir: PathBuf,
    cache: Mutex<HashMap<String, Described>>,
}

impl Catalog {
    /// The catalog of the archive in `dir`.
    pub fn new(dir: &Path) -> Self {
        Catalog {
            dir: dir.to_path_buf(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The archive's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Up to [`MAX_SESSIONS`] archived sessions, newest (last modified) first. A file
    /// that cannot be read or described is listed with what is known (its name, size).
    pub fn list(&self) -> Vec<Entry> {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(String, u64, SystemTime)> = read
            .take(MAX_SCAN)
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                let session = name.strip_suffix(".bsors")?;
                if !valid_session_name(session) {
                    return None;
                }
                let meta = e.metadata().ok()?;
                if !meta.is_file() {
                    return None;
                }
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                Some((session.to_string(), meta.len(), mtime))
            })
            .collect();
        files.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        files.truncate(MAX_SESSIONS);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() > CACHE_MAX {
            cache.clear();
        }
        files
            .into_iter()
            .map(|(name, len, mtime)| {
                if let Some(d) = cache.get(&name) {
                    if d.len == len && d.mtime == mtime {
                        return d.entry.clone();
                    }
                }
                let entry = describe(&self.dir, &name, len);
                cache.insert(
                    name,
                    Described {
                        len,
                        mtime,
                        entry: entry.clone(),
                    },
                );
                entry
            })
            .collect()
    }
}

/// An archived session's entry from its file: the stream header's info, and the duration
/// from the index (a finished file) or the chunk headers (a truncated one).
pub fn describe(dir: &Path, name: &str, len: u64) -> Entry {
    let file = bsor_stream_core::net::archive::path(dir, name);
    let mut entry = match File::open(&file).and_then(|mut f| read_described(&mut f, len)) {
        Ok((header, duration)) => Entry {
            duration: rules::seconds(duration),
            ..Entry::new(name, header.as_ref())
        },
        Err(_) => Entry::new(name, None),
    };
    entry.bytes = len;
    entry
}

/// The stream header (if it parses within [`HEADER_MAX`] bytes) and the song time of the
/// last frames.
fn read_described(f: &mut File, len: u64) -> io::Result<(Option<StreamHeader>, f32)> {
    let mut head = vec![0u8; HEADER_MAX.min(len as usize)];
    f.read_exact(&mut head)?;
    let Ok(Some((header, header_len))) = StreamHeader::parse_prefix_len(&head) else {
        return Ok((None, 0.0));
    };
    // A finished file: the last keyframe group's chunks, from the index; a truncated one:
    // every chunk header.
    let duration = match index_duration(f, len)? {
        Some((t1, from)) => t1.max(walk_duration(f, from, len)?),
        None => walk_duration(f, header_len as u64, len)?,
    };
    Ok((Some(header), duration))
}

/// When the file ends with a footer: the latest frame time the index gives (the end of a
/// keyframe chunk) and where the last keyframe chunk starts (frame chunks may follow it).
fn index_duration(f: &mut File, len: u64) -> io::Result<Option<(f32, u64)>> {
    if len < FOOTER_SIZE as u64 {
        return Ok(None);
    }
    let mut tail = [0u8; FOOTER_SIZE];
    f.seek(SeekFrom::Start(len - FOOTER_SIZE as u64))?;
    f.read_exact(&mut tail)?;
    let Some(at) = parse_footer(&tail) else {
        return Ok(None);
    };
    let end = len - FOOTER_SIZE as u64;
    if at >= end || end - at > INDEX_MAX {
        return Ok(None);
    }
    let mut chunk = vec![0u8; (end - at) as usize];
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(&mut chunk)?;
    let Some((h, hlen)) = ChunkHeader::parse_at(&chunk) else {
        return Ok(None);
    };
    if h.kind != ChunkType::Index || hlen + h.len as usize > chunk.len() {
        return Ok(None);
    }
    let payload = &chunk[hlen..hlen + h.len as usize];
    let Ok(entries) = bsor_stream_core::stream::decode_index(payload) else {
        return Ok(None);
    };
    let keyframes = entries.iter().filter(|e| e.kind == ChunkType::Keyframes);
    let last = keyframes
        .clone()
        .map(|e| e.t1.max(e.t0))
        .filter(|t| t.is_finite())
        .fold(0.0f32, f32::max);
    let from = keyframes.map(|e| e.offset).max().unwrap_or(len);
    Ok(Some((last, from.min(len))))
}

/// The latest `t0` of a frame chunk from `at` on, walking the chunk headers (bounded in
/// count): within one flush interval of the last frame.
fn walk_duration(f: &mut File, mut at: u64, len: u64) -> io::Result<f32> {
    let mut window = [0u8; bsor_stream_core::net::wire::CHUNK_HEADER_MAX];
    let mut latest = 0.0f32;
    for _ in 0..WALK_MAX {
        if at >= len {
            break;
        }
        f.seek(SeekFrom::Start(at))?;
        let n = (len - at).min(window.len() as u64) as usize;
        f.read_exact(&mut window[..n])?;
        let Some((h, hlen)) = ChunkHeader::parse_at(&window[..n]) else {
            break;
        };
        if matches!(h.kind, ChunkType::Keyframes | ChunkType::Frames) && h.t0.is_finite() {
            latest = latest.max(h.t0);
        }
        at += hlen as u64 + u64::from(h.len);
    }
    Ok(latest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bsor_stream_core::stream::{Profile, Settings};
    use std::time::Duration;

    fn stream(seconds: f32) -> Vec<u8> {
        let r = bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings {
            seed: 3,
            seconds,
            fps: 90,
        });
        bsor_stream_core::transcode::encode_replay(&r, Settings::live(Profile::Lossless))
    }

    fn write(dir: &Path, name: &str, bytes: &[u8], age_s: u64) {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let t = SystemTime::now() - Duration::from_secs(age_s);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn archived_files_are_listed_newest_first_with_their_info() {
        let dir = tempfile::tempdir().unwrap();
        let whole = stream(4.0);
        write(dir.path(), "old.bsors", &whole, 100);
        // A session cut short: no footer, so its duration comes from its chunk headers.
        write(dir.path(), "cut.bsors", &whole[..whole.len() / 2], 50);
        write(dir.path(), "junk.bsors", b"not a stream at all", 10);
        write(dir.path(), "..bsors", &whole, 5);
        write(dir.path(), "notes.txt", b"x", 1);
        let c = Catalog::new(dir.path());
        let list = c.list();
        let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["junk", "cut", "old"]);
        let (junk, cut, old) = (&list[0], &list[1], &list[2]);
        assert_eq!(old.bytes, whole.len() as u64);
        assert!(!old.player.is_empty() && !old.song.is_empty(), "{old:?}");
        assert!((3.5..=4.0).contains(&old.duration), "{old:?}");
        assert!(old.started > 0, "{old:?}");
        assert!(!old.live);
        assert_eq!(cut.player, old.player);
        assert!(cut.duration > 0.5 && cut.duration < old.duration, "{cut:?}");
        assert_eq!(junk.player, "");
        assert_eq!(junk.bytes, 19);
        // A changed file is described again; an unchanged one comes from the cache.
        write(dir.path(), "junk.bsors", &whole, 10);
        let again = c.list();
        assert_eq!(again[0].player, old.player);
        assert_eq!(again[2], list[2]);
    }
}
