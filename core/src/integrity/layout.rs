//! Byte layouts of the signing chunks and the hashes they hold (`integrity.md` §§3–6).

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

#[cfg(test)]
use crate::bsor::encode_frame;
use crate::bsor::{
    encode_controller_offsets, encode_height, encode_info, encode_note, encode_pause, encode_wall,
    BsorString, ControllerOffsets, Frame, Height, Info, NoteEvent, Pause, Wall, FRAME_SIZE,
};

/// Chunk type of the key chunk (skippable, `format.md` §4.2).
pub const KEY_CHUNK: u8 = 0x10;
/// Chunk type of a checkpoint.
pub const CHECKPOINT_CHUNK: u8 = 0x11;
/// Chunk type of the final checkpoint.
pub const FINAL_CHUNK: u8 = 0x12;
/// The layout version byte that starts each signing chunk's payload.
pub const VERSION: u8 = 1;
/// Bytes of the recording nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a checkpoint payload.
pub const CHECKPOINT_LEN: usize = 1 + NONCE_LEN + 4 + 32 + 40 + 32 + 64;
/// Bytes of a final checkpoint payload.
pub const FINAL_LEN: usize = 1 + NONCE_LEN + 4 + 32 + 20 + 32 + 64;
/// The most bytes a key chunk may hold (the limit of an unknown chunk, `format.md` §4.3).
pub const MAX_KEY_LEN: usize = crate::stream::MAX_EXTENSION_LEN;

pub(crate) const DOMAIN_KEY: &[u8] = b"bsor-stream integrity v1 key chunk";
pub(crate) const DOMAIN_CHECKPOINT: &[u8] = b"bsor-stream integrity v1 checkpoint";
pub(crate) const DOMAIN_FINAL: &[u8] = b"bsor-stream integrity v1 final checkpoint";
pub(crate) const CONTEXT_RECORDS: &str = "bsor-stream integrity v1 records";
pub(crate) const CONTEXT_FINAL: &str = "bsor-stream integrity v1 final sections";
pub(crate) const CONTEXT_CHAIN: &str = "bsor-stream integrity v1 chain";

/// Record kinds in the order of every per-kind array: frames, notes, walls, heights, pauses.
pub(crate) const KINDS: usize = 5;

/// A range of records of each kind, `[first, first + count)`, in the order frames, notes,
/// walls, heights, pauses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    /// Index of the first record of each kind.
    pub first: [u32; KINDS],
    /// Records of each kind.
    pub count: [u32; KINDS],
}

impl Ranges {
    /// One past the last record of each kind (wrapping, as the stream's indices do).
    pub fn end(&self) -> [u32; KINDS] {
        std::array::from_fn(|k| self.first[k].wrapping_add(self.count[k]))
    }
}

/// What a key chunk says: who signs this recording, its nonce, and what it is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyChunk {
    /// The signer's public key.
    pub key: [u8; 32],
    /// The recording nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Player ID, map hash, difficulty, mode and start time, as the header's info has them.
    pub binding: [BsorString; 5],
}

/// The five info fields a key chunk binds.
pub(crate) fn binding_of(info: &Info) -> [BsorString; 5] {
    [
        info.player_id.clone(),
        info.hash.clone(),
        info.difficulty.clone(),
        info.mode.clone(),
        info.timestamp.clone(),
    ]
}

fn put_string(s: &BsorString, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.length_field.to_le_bytes());
    out.extend_from_slice(&s.bytes);
}

/// Why a signing chunk's payload (key chunk, checkpoint, final checkpoint) was refused, with
/// the byte in the payload where that is known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The payload ends inside a field.
    #[error("payload ends at byte {len} inside a field of {field} bytes at byte {at}")]
    Truncated {
        /// The payload's length.
        len: usize,
        /// The field's length.
        field: usize,
        /// Where the field starts.
        at: usize,
    },
    /// A string's length field is negative.
    #[error("negative string length {length} at byte {at}")]
    NegativeLength {
        /// The length field.
        length: i32,
        /// Where the string's bytes would start.
        at: usize,
    },
    /// A layout version this implementation does not know.
    #[error("unknown version {0} at byte 0")]
    UnknownVersion(u8),
    /// Bytes after the signature, which ends the payload.
    #[error("{0} bytes after the signature")]
    Trailing(usize),
    /// A fixed-size payload of another size.
    #[error("{what} payload is {len} bytes, not {expected}")]
    Length {
        /// Which payload: "checkpoint" or "final checkpoint".
        what: &'static str,
        /// Its length.
        len: usize,
        /// The length its layout has.
        expected: usize,
    },
    /// The key chunk's public key is not one a verifier may take.
    #[error("public key at byte 1 {0}")]
    Key(KeyError),
    /// The signature (at this byte) does not verify under the key.
    #[error("signature at byte {0} does not verify")]
    Signature(usize),
}

/// A little-endian cursor over a payload; every read is checked.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], LayoutError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(LayoutError::Truncated {
                len: self.buf.len(),
                field: n,
                at: self.at,
            });
        };
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], LayoutError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, LayoutError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn string(&mut self) -> Result<BsorString, LayoutError> {
        let length_field = i32::from_le_bytes(self.array()?);
        let at = self.at;
        let len = usize::try_from(length_field).map_err(|_| LayoutError::NegativeLength {
            length: length_field,
            at,
        })?;
        Ok(BsorString {
            bytes: self.take(len)?.to_vec(),
            length_field,
        })
    }
}

fn sign(key: &SigningKey, domain: &[u8], body: &[u8]) -> [u8; 64] {
    let mut msg = Vec::with_capacity(domain.len() + body.len());
    msg.extend_from_slice(domain);
    msg.extend_from_slice(body);
    key.sign(&msg).to_bytes()
}

/// Why 32 bytes are not a public key a verifier may take ([`strict_key`]). Each message reads
/// after the key's name ("the witness key is not …").
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not the encoding of a curve point.
    #[error("is not a curve point")]
    NotAPoint,
    /// A point, but not in its canonical encoding (`y` at or above `p`).
    #[error("is not the canonical encoding of its point")]
    NotCanonical,
    /// A point of small order (a weak key: signatures under it can be forged).
    #[error("is not a usable key: a point of small order")]
    SmallOrder,
    /// A point with a torsion component (mixed order).
    #[error("is not torsion-free: a point of mixed order")]
    Torsion,
}

/// A public key as a verifier must take it (`integrity.md` §1): the canonical encoding of a
/// curve point that is torsion-free (in the prime-order subgroup, so neither of small nor of
/// mixed order). `verify_strict` refuses small-order keys but not mixed-order ones, whose
/// holder can make signatures that verifiers disagree on ("Taming the many EdDSAs",
/// Chalkias et al., 2020). Every key this project checks a signature under goes through
/// here: a key chunk's, a witness's, a key registered to a player.
pub fn strict_key(bytes: &[u8; 32]) -> Result<VerifyingKey, KeyError> {
    use curve25519_dalek::edwards::CompressedEdwardsY;
    let point = CompressedEdwardsY(*bytes)
        .decompress()
        .ok_or(KeyError::NotAPoint)?;
    if point.compress().to_bytes() != *bytes {
        return Err(KeyError::NotCanonical);
    }
    if point.is_small_order() {
        return Err(KeyError::SmallOrder);
    }
    if !point.is_torsion_free() {
        return Err(KeyError::Torsion);
    }
    VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::NotAPoint)
}

/// A signature a parse has read but not checked: the message it signs (domain string and
/// body), the signature, and the signature's byte offset in the payload, checked with
/// [`check`](Self::check).
#[derive(Clone, Debug)]
pub(crate) struct Unchecked {
    pub message: Vec<u8>,
    pub signature: [u8; 64],
    pub at: usize,
}

impl Unchecked {
    fn new(domain: &[u8], body: &[u8], signature: [u8; 64]) -> Self {
        let mut message = Vec::with_capacity(domain.len() + body.len());
        message.extend_from_slice(domain);
        message.extend_from_slice(body);
        Unchecked {
            message,
            signature,
            at: body.len(),
        }
    }

    /// Checks the signature alone with `verify_strict`.
    pub(crate) fn check(&self, key: &VerifyingKey) -> Result<(), LayoutError> {
        key.verify_strict(&self.message, &Signature::from_bytes(&self.signature))
            .map_err(|_| LayoutError::Signature(self.at))
    }
}

/// The chain value of a signing chunk: BLAKE3 (derive-key mode, context `CONTEXT_CHAIN`)
/// of its whole payload.
pub(crate) fn chain_hash(payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key(CONTEXT_CHAIN);
    h.update(payload);
    *h.finalize().as_bytes()
}

impl KeyChunk {
    /// The payload, signed with `key` (whose public half must be `self.key`).
    pub(crate) fn encode(&self, key: &SigningKey) -> Vec<u8> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.nonce);
        for s in &self.binding {
            put_string(s, &mut out);
        }
        let sig = sign(key, DOMAIN_KEY, &out);
        out.extend_from_slice(&sig);
        out
    }

    /// Parses a key chunk payload and checks its signature: the chunk and its public key,
    /// or what is wrong (with the byte in the payload).
    pub fn parse(payload: &[u8]) -> Result<(KeyChunk, VerifyingKey), LayoutError> {
        let (k, vk, sig) = Self::parse_unchecked(payload)?;
        sig.check(&vk)?;
        Ok((k, vk))
    }

    /// [`parse`](Self::parse) without checking the signature: it is returned.
    pub(crate) fn parse_unchecked(
        payload: &[u8],
    ) -> Result<(KeyChunk, VerifyingKey, Unchecked), LayoutError> {
        let mut c = Cursor {
            buf: payload,
            at: 0,
        };
        let [v] = c.array::<1>()?;
        if v != VERSION {
            return Err(LayoutError::UnknownVersion(v));
        }
        let key: [u8; 32] = c.array()?;
        let nonce = c.array()?;
        let binding = [
            c.string()?,
            c.string()?,
            c.string()?,
            c.string()?,
            c.string()?,
        ];
        let body_len = c.at;
        let sig: [u8; 64] = c.array()?;
        if c.at != payload.len() {
            return Err(LayoutError::Trailing(payload.len() - c.at));
        }
        let vk = strict_key(&key).map_err(LayoutError::Key)?;
        Ok((
            KeyChunk {
                key,
                nonce,
                binding,
            },
            vk,
            Unchecked::new(DOMAIN_KEY, &payload[..body_len], sig),
        ))
    }
}

/// What a checkpoint says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The recording nonce.
    pub nonce: [u8; NONCE_LEN],
    /// 0 for the first checkpoint, then +1.
    pub index: u32,
    /// Chain value of the previous checkpoint (of the key chunk for index 0).
    pub prev: [u8; 32],
    /// The records covered.
    pub ranges: Ranges,
    /// Hash of their canonical BSOR bytes (integrity.md §5).
    pub records: [u8; 32],
}

fn split_signed<const N: usize>(
    payload: &[u8],
    what: &'static str,
) -> Result<(u8, [u8; 64]), LayoutError> {
    if payload.len() != N {
        return Err(LayoutError::Length {
            what,
            len: payload.len(),
            expected: N,
        });
    }
    let mut sig = [0u8; 64];
    sig.copy_from_slice(&payload[N - 64..]);
    Ok((payload[0], sig))
}

impl Checkpoint {
    pub(crate) fn encode(&self, key: &SigningKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHECKPOINT_LEN);
        out.push(VERSION);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.prev);
        for k in 0..KINDS {
            out.extend_from_slice(&self.ranges.first[k].to_le_bytes());
            out.extend_from_slice(&self.ranges.count[k].to_le_bytes());
        }
        out.extend_from_slice(&self.records);
        let sig = sign(key, DOMAIN_CHECKPOINT, &out);
        out.extend_from_slice(&sig);
        out
    }

    /// Parses a checkpoint payload and checks its signature against `key`.
    pub fn parse(payload: &[u8], key: &VerifyingKey) -> Result<Checkpoint, LayoutError> {
        let (c, sig) = Self::parse_unchecked(payload)?;
        sig.check(key)?;
        Ok(c)
    }

    /// [`parse`](Self::parse) without checking the signature: it is returned.
    pub(crate) fn parse_unchecked(payload: &[u8]) -> Result<(Checkpoint, Unchecked), LayoutError> {
        let (v, sig) = split_signed::<CHECKPOINT_LEN>(payload, "checkpoint")?;
        if v != VERSION {
            return Err(LayoutError::UnknownVersion(v));
        }
        let mut c = Cursor {
            buf: payload,
            at: 1,
        };
        let nonce = c.array()?;
        let index = c.u32()?;
        let prev = c.array()?;
        let mut ranges = Ranges::default();
        for k in 0..KINDS {
            ranges.first[k] = c.u32()?;
            ranges.count[k] = c.u32()?;
        }
        let records = c.array()?;
        Ok((
            Checkpoint {
                nonce,
                index,
                prev,
                ranges,
                records,
            },
            Unchecked::new(DOMAIN_CHECKPOINT, &payload[..c.at], sig),
        ))
    }
}

/// What the final checkpoint says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalCheckpoint {
    /// The recording nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The number of checkpoints before it.
    pub index: u32,
    /// Chain value of the last checkpoint (of the key chunk if there was none).
    pub prev: [u8; 32],
    /// Records of each kind in the whole recording.
    pub totals: [u32; KINDS],
    /// Hash of the final sections ([`final_hash`]).
    pub sections: [u8; 32],
}

impl FinalCheckpoint {
    pub(crate) fn encode(&self, key: &SigningKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(FINAL_LEN);
        out.push(VERSION);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.prev);
        for t in self.totals {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out.extend_from_slice(&self.sections);
        let sig = sign(key, DOMAIN_FINAL, &out);
        out.extend_from_slice(&sig);
        out
    }

    /// Parses a final checkpoint payload and checks its signature against `key`.
    pub fn parse(payload: &[u8], key: &VerifyingKey) -> Result<FinalCheckpoint, LayoutError> {
        let (f, sig) = Self::parse_unchecked(payload)?;
        sig.check(key)?;
        Ok(f)
    }

    /// [`parse`](Self::parse) without checking the signature: it is returned.
    pub(crate) fn parse_unchecked(
        payload: &[u8],
    ) -> Result<(FinalCheckpoint, Unchecked), LayoutError> {
        let (v, sig) = split_signed::<FINAL_LEN>(payload, "final checkpoint")?;
        if v != VERSION {
            return Err(LayoutError::UnknownVersion(v));
        }
        let mut c = Cursor {
            buf: payload,
            at: 1,
        };
        let nonce = c.array()?;
        let index = c.u32()?;
        let prev = c.array()?;
        let mut totals = [0u32; KINDS];
        for t in &mut totals {
            *t = c.u32()?;
        }
        let sections = c.array()?;
        Ok((
            FinalCheckpoint {
                nonce,
                index,
                prev,
                totals,
                sections,
            },
            Unchecked::new(DOMAIN_FINAL, &payload[..c.at], sig),
        ))
    }
}

/// Hashes records as they come, one BLAKE3 hasher per kind over their canonical BSOR bytes
/// (`bsor-v1.md` §3, as the classic writer writes them).
#[derive(Clone, Debug)]
pub(crate) struct RecordHasher {
    kinds: [blake3::Hasher; KINDS],
    note: Vec<u8>,
    /// Each kind's bytes not hashed yet. BLAKE3 hashes several 1 KiB chunks at once (SIMD)
    /// only when one update holds them; a record at a time (8 to 92 bytes) it goes block by
    /// block with a call's overhead each, several times slower (benches/integrity.rs). At
    /// most `BATCH` + 88 bytes each.
    pending: [Vec<u8>; KINDS],
}

/// A frame's canonical BSOR bytes, the same as [`encode_frame`]'s: its 23 four-byte fields
/// in order, each little-endian. Written as one array of words so that the compiler can
/// make it a few vector moves; field by field (`encode_frame`'s bounds-checked cursor) it
/// cost as much as BLAKE3 over the bytes (benches/integrity.rs).
#[inline]
fn frame_bytes(f: &Frame) -> [u8; FRAME_SIZE] {
    let (h, l, r) = (&f.head, &f.left_hand, &f.right_hand);
    // Written out, not chained iterators: the compiler then stores whole vectors.
    let words: [u32; FRAME_SIZE / 4] = [
        f.time.to_bits(),
        f.fps as u32,
        h.position.x.to_bits(),
        h.position.y.to_bits(),
        h.position.z.to_bits(),
        h.rotation.x.to_bits(),
        h.rotation.y.to_bits(),
        h.rotation.z.to_bits(),
        h.rotation.w.to_bits(),
        l.position.x.to_bits(),
        l.position.y.to_bits(),
        l.position.z.to_bits(),
        l.rotation.x.to_bits(),
        l.rotation.y.to_bits(),
        l.rotation.z.to_bits(),
        l.rotation.w.to_bits(),
        r.position.x.to_bits(),
        r.position.y.to_bits(),
        r.position.z.to_bits(),
        r.rotation.x.to_bits(),
        r.rotation.y.to_bits(),
        r.rotation.z.to_bits(),
        r.rotation.w.to_bits(),
    ];
    let mut out = [0u8; FRAME_SIZE];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Bytes gathered per kind before they are hashed (whole 1 KiB chunks are handed over).
const BATCH: usize = 16 * 1024;

impl Default for RecordHasher {
    fn default() -> Self {
        RecordHasher {
            kinds: std::array::from_fn(|_| blake3::Hasher::new()),
            note: Vec::new(),
            pending: std::array::from_fn(|_| Vec::new()),
        }
    }
}

impl RecordHasher {
    fn push(&mut self, kind: usize, bytes: &[u8]) {
        let buf = &mut self.pending[kind];
        buf.extend_from_slice(bytes);
        if buf.len() >= BATCH {
            // Whole chunks only, so that the hasher stays on a chunk boundary.
            let n = buf.len() / 1024 * 1024;
            self.kinds[kind].update(&buf[..n]);
            buf.copy_within(n.., 0);
            buf.truncate(buf.len() - n);
        }
    }
    pub(crate) fn frame(&mut self, f: &Frame) {
        self.push(0, &frame_bytes(f));
    }
    pub(crate) fn note(&mut self, n: &NoteEvent) {
        let mut note = std::mem::take(&mut self.note);
        note.clear();
        encode_note(n, &mut note);
        self.push(1, &note);
        self.note = note;
    }
    pub(crate) fn wall(&mut self, w: &Wall) {
        self.push(2, &encode_wall(w));
    }
    pub(crate) fn height(&mut self, h: &Height) {
        self.push(3, &encode_height(h));
    }
    pub(crate) fn pause(&mut self, p: &Pause) {
        self.push(4, &encode_pause(p));
    }

    /// The records hash: BLAKE3 (derive-key mode, `CONTEXT_RECORDS`) of the five per-kind
    /// hashes in kind order. The hasher starts afresh.
    pub(crate) fn take(&mut self) -> [u8; 32] {
        for (k, buf) in self.kinds.iter_mut().zip(&mut self.pending) {
            k.update(buf);
            buf.clear();
        }
        let mut h = blake3::Hasher::new_derive_key(CONTEXT_RECORDS);
        for k in &mut self.kinds {
            h.update(k.finalize().as_bytes());
            k.reset();
        }
        *h.finalize().as_bytes()
    }
}

/// The hash the final checkpoint holds over what only the end knows: BLAKE3 (derive-key
/// mode, `CONTEXT_FINAL`) of the final info block (as BSOR writes it), a flags byte (bit 0
/// controller offsets, bit 1 user data), the 56 offset bytes if present, the user data's
/// length (`u32` LE) and bytes if present, and the trailing bytes.
pub fn final_hash(
    info: &Info,
    offsets: Option<&ControllerOffsets>,
    user_data: Option<&[u8]>,
    trailing: &[u8],
) -> [u8; 32] {
    let mut out = Vec::new();
    encode_info(info, &mut out);
    out.push(u8::from(offsets.is_some()) | (u8::from(user_data.is_some()) << 1));
    if let Some(o) = offsets {
        out.extend_from_slice(&encode_controller_offsets(o));
    }
    if let Some(d) = user_data {
        out.extend_from_slice(&(d.len() as u32).to_le_bytes());
        out.extend_from_slice(d);
    }
    out.extend_from_slice(trailing);
    let mut h = blake3::Hasher::new_derive_key(CONTEXT_FINAL);
    h.update(&out);
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bsor::Height;

    /// The word-wise frame bytes are the classic writer's, on every frame of a synthetic
    /// replay and on values whose bits matter (NaN payloads, negative zero, infinities).
    #[test]
    fn frame_bytes_are_the_classic_writers() {
        let r = crate::synth::replay(crate::synth::Settings::default());
        for f in &r.frames {
            assert_eq!(frame_bytes(f), encode_frame(f));
        }
        let mut f = r.frames[1];
        f.time = f32::from_bits(0x7fc0_1234);
        f.fps = -7;
        f.head.rotation.w = -0.0;
        f.left_hand.position.y = f32::INFINITY;
        f.right_hand.rotation.x = f32::from_bits(0xffff_fffe);
        assert_eq!(frame_bytes(&f), encode_frame(&f));
    }

    #[test]
    fn batched_records_hash_as_one_stream_of_bytes() {
        let r = crate::synth::replay(crate::synth::Settings::default());
        let expected = |frames: &[u8], heights: &[u8]| {
            let mut h = blake3::Hasher::new_derive_key(CONTEXT_RECORDS);
            for bytes in [frames, &[], &[], heights, &[]] {
                h.update(blake3::hash(bytes).as_bytes());
            }
            *h.finalize().as_bytes()
        };
        // Nothing, less than a batch, about one, several and a remainder; then a second
        // round after `take`.
        for n in [0, 1, 178, 179, 2000] {
            let mut hasher = RecordHasher::default();
            let (mut frames, mut heights) = (Vec::new(), Vec::new());
            for (i, f) in r.frames[..n].iter().enumerate() {
                hasher.frame(f);
                frames.extend_from_slice(&encode_frame(f));
                let h = Height {
                    height: 1.5,
                    time: i as f32,
                };
                hasher.height(&h);
                heights.extend_from_slice(&encode_height(&h));
            }
            assert_eq!(hasher.take(), expected(&frames, &heights), "{n} records");
            hasher.frame(&r.frames[0]);
            assert_eq!(hasher.take(), expected(&encode_frame(&r.frames[0]), &[]));
        }
    }
}
