//! A BSOR keeps its signature: the signing chunks of a signed stream in one entry of the
//! BSOR's user data, in the key/value form BeatLeader's mod writes there (`integrity.md`
//! §13). Other BSOR readers see one more entry and read the replay as before.
//!
//! In the codec's own terms ([`Replay`]), user data is an `int` length and that many bytes,
//! then trailing bytes. BeatLeader reads the same bytes after marker `7` as an `int` entry
//! count and the entries. So the entries region is `length` (as the count) followed by
//! [`Replay::user_data`] and [`Replay::trailing`]; this module works on that region and
//! splits it back the codec's way, which keeps every BSOR byte as it was.

use crate::bsor::{ControllerOffsets, Pose, Quat, Replay, Vec3};
use crate::stream::{split_stream, ChunkType};

use super::layout::{CHECKPOINT_CHUNK, CHECKPOINT_LEN, FINAL_CHUNK, FINAL_LEN, KEY_CHUNK};

/// The key of the signature entry.
pub const ENTRY_KEY: &str = "bsor-stream:signature";
/// The version byte that starts the entry's value.
pub const ENTRY_VERSION: u8 = 1;
/// Flag: the BSOR as signed had no controller offsets; the entry's writer added the neutral
/// ones (so that readers that expect section 6 before section 7 read the file).
pub const ADDED_OFFSETS: u8 = 1;
/// Flag: the BSOR as signed had no user data; the entry's writer added section 7.
pub const ADDED_USER_DATA: u8 = 2;

/// Why a BSOR cannot carry (or does not carry a readable) signature entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    /// The stream's signing chunks are not a whole signed recording.
    #[error("the stream's signing chunks: {0}")]
    Chunks(String),
    /// The BSOR's tail is not in a form an entry can be added to or removed from.
    #[error("the BSOR's user data: {0}")]
    UserData(String),
    /// The entry itself is malformed.
    #[error("the signature entry: {0}")]
    Entry(String),
}

/// The signing chunks of one whole signed recording: the key chunk, the checkpoints in
/// order, the final checkpoint (payloads, as the stream holds them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SigningChunks {
    /// The key chunk's payload.
    pub key: Vec<u8>,
    /// Each checkpoint's payload.
    pub checkpoints: Vec<Vec<u8>>,
    /// The final checkpoint's payload.
    pub fin: Vec<u8>,
}

impl SigningChunks {
    /// The signing chunks of a stream, in stream order: a key chunk first, checkpoints, a
    /// final checkpoint last. Signatures are not checked here (the verifier does).
    pub fn from_stream(stream: &[u8]) -> Result<SigningChunks, EntryError> {
        let (_, _, chunks) =
            split_stream(stream).ok_or_else(|| EntryError::Chunks("no stream header".into()))?;
        let mut out = SigningChunks::default();
        let (mut key, mut fin) = (false, false);
        for c in &chunks {
            let ChunkType::Unknown(kind) = c.header.kind else {
                continue;
            };
            let payload = &c.bytes(stream)[c.header_len..];
            let seq = c.header.seq;
            match kind {
                KEY_CHUNK if key => {
                    return Err(EntryError::Chunks(format!("a second key chunk ({seq})")))
                }
                KEY_CHUNK => {
                    key = true;
                    out.key = payload.to_vec();
                }
                CHECKPOINT_CHUNK | FINAL_CHUNK if !key || fin => {
                    return Err(EntryError::Chunks(format!(
                        "signing chunk {seq} is not between the key chunk and the final checkpoint"
                    )))
                }
                CHECKPOINT_CHUNK => out.checkpoints.push(payload.to_vec()),
                FINAL_CHUNK => {
                    fin = true;
                    out.fin = payload.to_vec();
                }
                _ => {}
            }
        }
        if !key {
            return Err(EntryError::Chunks(
                "no key chunk: the stream is unsigned".into(),
            ));
        }
        if !fin {
            return Err(EntryError::Chunks(
                "no final checkpoint: only a finished recording's signature is kept in a BSOR"
                    .into(),
            ));
        }
        Ok(out)
    }

    /// The chunks as (type, payload), in stream order.
    pub fn chunks(&self) -> Vec<(u8, &[u8])> {
        let mut v = vec![(KEY_CHUNK, self.key.as_slice())];
        v.extend(
            self.checkpoints
                .iter()
                .map(|c| (CHECKPOINT_CHUNK, c.as_slice())),
        );
        v.push((FINAL_CHUNK, self.fin.as_slice()));
        v
    }

    /// The entry's value (`integrity.md` §13.2).
    fn encode(&self, flags: u8) -> Vec<u8> {
        let mut v = Vec::with_capacity(
            14 + self.key.len() + self.checkpoints.len() * CHECKPOINT_LEN + FINAL_LEN,
        );
        v.push(ENTRY_VERSION);
        v.push(flags);
        v.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        v.extend_from_slice(&self.key);
        v.extend_from_slice(&(self.checkpoints.len() as u32).to_le_bytes());
        for c in &self.checkpoints {
            v.extend_from_slice(c);
        }
        v.extend_from_slice(&self.fin);
        v
    }

    fn decode(v: &[u8]) -> Result<(SigningChunks, u8), EntryError> {
        let err = |what: String| EntryError::Entry(what);
        let mut at = 0usize;
        let mut take = |n: usize, what: &str| -> Result<&[u8], EntryError> {
            let s = at
                .checked_add(n)
                .and_then(|end| v.get(at..end))
                .ok_or_else(|| {
                    err(format!(
                        "the value ends at byte {} inside the {what} at byte {at}",
                        v.len()
                    ))
                })?;
            at += n;
            Ok(s)
        };
        let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let head = take(2, "version and flags")?;
        let (version, flags) = (head[0], head[1]);
        if version != ENTRY_VERSION {
            return Err(err(format!("unknown version {version} at byte 0")));
        }
        if flags & !(ADDED_OFFSETS | ADDED_USER_DATA) != 0 {
            return Err(err(format!("unknown flags {flags:#04x} at byte 1")));
        }
        let key_len = u32_at(take(4, "key chunk length")?);
        let key = take(key_len, "key chunk")?.to_vec();
        let n = u32_at(take(4, "checkpoint count")?);
        // The count is checked against what is there before anything is allocated for it.
        let cps = take(n.saturating_mul(CHECKPOINT_LEN), "checkpoints")?;
        let checkpoints = cps.chunks(CHECKPOINT_LEN).map(<[u8]>::to_vec).collect();
        let fin = take(FINAL_LEN, "final checkpoint")?.to_vec();
        if at != v.len() {
            return Err(err(format!(
                "{} bytes after the final checkpoint",
                v.len() - at
            )));
        }
        Ok((
            SigningChunks {
                key,
                checkpoints,
                fin,
            },
            flags,
        ))
    }
}

/// The controller offsets an entry's writer adds when the replay has none: zero positions
/// and identity rotations.
pub fn neutral_offsets() -> ControllerOffsets {
    let pose = Pose {
        position: Vec3::default(),
        rotation: Quat {
            x: 0.0,
            y: 0.0,
            z: 0.0,
            w: 1.0,
        },
    };
    ControllerOffsets {
        left: pose,
        right: pose,
    }
}

/// One key/value entry, as positions in the entries region.
struct Entry {
    /// Where the entry starts and ends in the region.
    span: (usize, usize),
    key: (usize, usize),
    value: (usize, usize),
}

/// The entries region of a replay's user data (`count` then entries), if it has user data.
fn region(r: &Replay) -> Option<Vec<u8>> {
    let d = r.user_data.as_ref()?;
    let mut v = Vec::with_capacity(4 + d.len() + r.trailing.len());
    v.extend_from_slice(&(d.len() as i32).to_le_bytes());
    v.extend_from_slice(d);
    v.extend_from_slice(&r.trailing);
    Some(v)
}

/// Parses an entries region: an `int` count, then that many entries of a BSOR string key
/// and an `int` length with that many value bytes, ending exactly at the region's end.
fn entries(region: &[u8]) -> Result<Vec<Entry>, String> {
    let int_at = |at: usize| -> Result<usize, String> {
        let b = region
            .get(at..at + 4)
            .ok_or_else(|| format!("ends inside the length field at byte {at}"))?;
        let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        usize::try_from(n).map_err(|_| format!("negative length {n} at byte {at}"))
    };
    let count = int_at(0)?;
    // Each entry takes at least 8 bytes: a count beyond that is not this form.
    if count > region.len() / 8 {
        return Err(format!(
            "{count} entries cannot fit in {} bytes",
            region.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    let mut at = 4usize;
    for _ in 0..count {
        let start = at;
        let klen = int_at(at)?;
        let key = (at + 4, at + 4 + klen);
        at = key.1;
        let vlen = int_at(at)?;
        let value = (at + 4, (at + 4).saturating_add(vlen));
        if value.1 > region.len() {
            return Err(format!("entry at byte {start} ends past the user data"));
        }
        at = value.1;
        out.push(Entry {
            span: (start, at),
            key,
            value,
        });
    }
    if at != region.len() {
        return Err(format!(
            "{} bytes follow the {count} entries",
            region.len() - at
        ));
    }
    Ok(out)
}

/// Sets a replay's user data and trailing bytes so that the BSOR holds `region` after
/// marker 7, split the way the codec reads it back.
fn set_region(r: &mut Replay, region: &[u8]) {
    let count = i32::from_le_bytes([region[0], region[1], region[2], region[3]]) as usize;
    // `entries` accepted the region, so it holds at least 8 bytes an entry.
    let split = (4 + count).min(region.len());
    r.user_data = Some(region[4..split].to_vec());
    r.trailing = region[split..].to_vec();
}

/// Adds the signature entry to a replay decoded from a signed stream: the last entry of its
/// user data (section 7 added if it has none, and neutral controller offsets if it has
/// none, each noted in the entry's flags). The replay's own user data must be in the
/// key/value form, with no trailing bytes past it; a replay without user data must have no
/// trailing bytes.
pub fn add_entry(r: &mut Replay, chunks: &SigningChunks) -> Result<(), EntryError> {
    let mut flags = 0;
    let mut region = match region(r) {
        Some(region) => {
            let e = entries(&region)
                .map_err(|e| EntryError::UserData(format!("not in the key/value form ({e})")))?;
            if e.iter()
                .any(|e| &region[e.key.0..e.key.1] == ENTRY_KEY.as_bytes())
            {
                return Err(EntryError::UserData(format!(
                    "it already holds a {ENTRY_KEY} entry"
                )));
            }
            region
        }
        None if !r.trailing.is_empty() => {
            return Err(EntryError::UserData(format!(
                "{} trailing bytes after the replay and no user data: no place for an entry",
                r.trailing.len()
            )))
        }
        None => {
            flags |= ADDED_USER_DATA;
            0i32.to_le_bytes().to_vec()
        }
    };
    if r.controller_offsets.is_none() {
        flags |= ADDED_OFFSETS;
    }
    let value = chunks.encode(flags);
    let count = i32::from_le_bytes([region[0], region[1], region[2], region[3]]);
    let too_big = || EntryError::UserData("the entry would not fit an int length".into());
    let count = count.checked_add(1).ok_or_else(too_big)?;
    let vlen = i32::try_from(value.len()).map_err(|_| too_big())?;
    region[..4].copy_from_slice(&count.to_le_bytes());
    region.extend_from_slice(&(ENTRY_KEY.len() as i32).to_le_bytes());
    region.extend_from_slice(ENTRY_KEY.as_bytes());
    region.extend_from_slice(&vlen.to_le_bytes());
    region.extend_from_slice(&value);
    if flags & ADDED_OFFSETS != 0 {
        r.controller_offsets = Some(neutral_offsets());
    }
    set_region(r, &region);
    Ok(())
}

/// Takes the signature entry out of a replay, leaving the replay as it was signed (the rule
/// of `integrity.md` §13.3), and returns its signing chunks; `None` when the replay has no
/// such entry (its user data absent or not in the key/value form).
pub fn take_entry(r: &mut Replay) -> Result<Option<SigningChunks>, EntryError> {
    let Some(mut region) = region(r) else {
        return Ok(None);
    };
    let Ok(e) = entries(&region) else {
        return Ok(None);
    };
    let mut ours = e
        .iter()
        .filter(|e| &region[e.key.0..e.key.1] == ENTRY_KEY.as_bytes());
    let Some(entry) = ours.next() else {
        return Ok(None);
    };
    if ours.next().is_some() {
        return Err(EntryError::UserData(format!(
            "more than one {ENTRY_KEY} entry"
        )));
    }
    let (chunks, flags) = SigningChunks::decode(&region[entry.value.0..entry.value.1])?;
    let count = e.len() - 1;
    if flags & ADDED_USER_DATA != 0 && count != 0 {
        return Err(EntryError::Entry(format!(
            "says the user data was added for it, but {count} other entries are there"
        )));
    }
    if flags & ADDED_OFFSETS != 0 && r.controller_offsets != Some(neutral_offsets()) {
        return Err(EntryError::Entry(
            "says the controller offsets were added for it, but they are not the neutral ones"
                .into(),
        ));
    }
    if flags & ADDED_OFFSETS != 0 {
        r.controller_offsets = None;
    }
    if flags & ADDED_USER_DATA != 0 {
        r.user_data = None;
        r.trailing.clear();
        return Ok(Some(chunks));
    }
    region.drain(entry.span.0..entry.span.1);
    region[..4].copy_from_slice(&(count as i32).to_le_bytes());
    set_region(r, &region);
    Ok(Some(chunks))
}
