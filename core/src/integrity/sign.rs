//! The signing side: what the stream encoder calls as it records (`integrity.md` §7), as
//! its [`EncoderHook`].

use ed25519_dalek::SigningKey;

use crate::bsor::{ControllerOffsets, Frame, Height, Info, NoteEvent, Pause, Wall};

use super::entry::SigningChunks;
use super::layout::{
    binding_of, chain_hash, final_hash, Checkpoint, FinalCheckpoint, KeyChunk, Ranges,
    RecordHasher, KINDS, MAX_KEY_LEN, NONCE_LEN,
};
use super::layout::{CHECKPOINT_CHUNK, FINAL_CHUNK, KEY_CHUNK};
use crate::stream::{EncoderHook, Profile, Settings, StreamEncoder};

/// Why a stream cannot be signed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignError {
    /// Only the lossless profile is signed: a lossy stream's records are not the recorded
    /// ones, so no checkpoint over them could verify against the recording.
    #[error("a {0} stream cannot be signed: only the lossless profile keeps the records a checkpoint hashes")]
    Lossy(crate::stream::Profile),
    /// The header's info makes a key chunk over the limit of a skippable chunk.
    #[error("the key chunk would be {0} bytes, over the {MAX_KEY_LEN}-byte limit of a skippable chunk (info strings too long)")]
    KeyTooLarge(usize),
}

/// Signs one recording: the key chunk at the start, a checkpoint over the records of each
/// keyframe group, a final checkpoint at the end. The encoder feeds it every record it is
/// given and places the chunks it returns.
pub struct Signer {
    key: SigningKey,
    nonce: [u8; NONCE_LEN],
    /// Index of the next checkpoint.
    index: u32,
    /// Chain value of the last signing chunk.
    prev: [u8; 32],
    /// Records covered by the checkpoints so far, and seen since.
    covered: [u32; KINDS],
    pending: [u32; KINDS],
    hasher: RecordHasher,
    /// A copy of every signing chunk made, when asked for ([`keeping`](Self::keeping)).
    kept: Option<Box<SigningChunks>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret key stays out of logs.
        f.debug_struct("Signer")
            .field("key", &super::hex(self.key.verifying_key().as_bytes()))
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for one recording with `key` and its `nonce` (16 random bytes, fresh for
    /// every recording: [`random_nonce`](super::random_nonce); a fixed one only for test
    /// vectors).
    pub fn new(key: SigningKey, nonce: [u8; NONCE_LEN]) -> Self {
        Signer {
            key,
            nonce,
            index: 0,
            prev: [0; 32],
            covered: [0; KINDS],
            pending: [0; KINDS],
            hasher: RecordHasher::default(),
            kept: None,
        }
    }

    /// Keeps a copy of every signing chunk it makes, for a signed BSOR's entry
    /// ([`kept`](Self::kept)): 189 bytes a checkpoint, one per keyframe group.
    pub fn keeping(mut self) -> Self {
        self.kept = Some(Box::default());
        self
    }

    /// The signing chunks made so far, if [`keeping`](Self::keeping); whole once
    /// [`finish`](Self::finish) has run.
    pub fn kept(&self) -> Option<&SigningChunks> {
        self.kept.as_deref()
    }

    /// Whether a stream whose header has `info` can be signed: its key chunk within the
    /// limit of a skippable chunk (checked without signing anything).
    pub fn fits(info: &Info) -> Result<(), SignError> {
        let len = 1
            + 32
            + NONCE_LEN
            + 64
            + binding_of(info)
                .iter()
                .map(|s| 4 + s.bytes.len())
                .sum::<usize>();
        if len > MAX_KEY_LEN {
            return Err(SignError::KeyTooLarge(len));
        }
        Ok(())
    }

    /// The public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The key chunk's payload for a stream whose header has `info`; the chain starts at it.
    pub fn key_chunk(&mut self, info: &Info) -> Result<Vec<u8>, SignError> {
        let payload = KeyChunk {
            key: self.public_key(),
            nonce: self.nonce,
            binding: binding_of(info),
        }
        .encode(&self.key);
        if payload.len() > MAX_KEY_LEN {
            return Err(SignError::KeyTooLarge(payload.len()));
        }
        self.prev = chain_hash(&payload);
        if let Some(k) = &mut self.kept {
            k.key = payload.clone();
        }
        Ok(payload)
    }

    /// A frame was recorded.
    pub fn frame(&mut self, f: &Frame) {
        self.hasher.frame(f);
        self.pending[0] += 1;
    }
    /// A note event was recorded.
    pub fn note(&mut self, n: &NoteEvent) {
        self.hasher.note(n);
        self.pending[1] += 1;
    }
    /// A wall was recorded.
    pub fn wall(&mut self, w: &Wall) {
        self.hasher.wall(w);
        self.pending[2] += 1;
    }
    /// A height change was recorded.
    pub fn height(&mut self, h: &Height) {
        self.hasher.height(h);
        self.pending[3] += 1;
    }
    /// A pause was recorded.
    pub fn pause(&mut self, p: &Pause) {
        self.hasher.pause(p);
        self.pending[4] += 1;
    }

    /// Records seen since the last checkpoint.
    pub fn has_pending(&self) -> bool {
        self.pending.iter().any(|&n| n > 0)
    }

    /// The next checkpoint's payload, over every record seen since the last one.
    pub fn checkpoint(&mut self) -> Vec<u8> {
        let ranges = Ranges {
            first: self.covered,
            count: self.pending,
        };
        let payload = Checkpoint {
            nonce: self.nonce,
            index: self.index,
            prev: self.prev,
            ranges,
            records: self.hasher.take(),
        }
        .encode(&self.key);
        self.covered = ranges.end();
        self.pending = [0; KINDS];
        self.index = self.index.wrapping_add(1);
        self.prev = chain_hash(&payload);
        if let Some(k) = &mut self.kept {
            k.checkpoints.push(payload.clone());
        }
        payload
    }

    /// The final checkpoint's payload (call after the last checkpoint).
    pub fn finish(
        &mut self,
        info: &Info,
        offsets: Option<&ControllerOffsets>,
        user_data: Option<&[u8]>,
        trailing: &[u8],
    ) -> Vec<u8> {
        let payload = FinalCheckpoint {
            nonce: self.nonce,
            index: self.index,
            prev: self.prev,
            totals: self.covered,
            sections: final_hash(info, offsets, user_data, trailing),
        }
        .encode(&self.key);
        self.prev = chain_hash(&payload);
        if let Some(k) = &mut self.kept {
            k.fin = payload.clone();
        }
        payload
    }
}

impl Signer {
    /// A stream encoder that this signer rides along with: the header, then the key chunk
    /// (`integrity.md`), then checkpoints at each keyframe group's end and the final one
    /// before the trailer. Only the lossless profile can be signed.
    pub fn into_encoder(
        mut self,
        info: Info,
        settings: Settings,
    ) -> Result<StreamEncoder, SignError> {
        if settings.profile != Profile::Lossless {
            return Err(SignError::Lossy(settings.profile));
        }
        let key = self.key_chunk(&info)?;
        let mut e = StreamEncoder::with_hook(info, settings, Box::new(self));
        // The key chunk is within the limit (`key_chunk` checked it) and of a skippable type.
        let _ = e.push_extension(KEY_CHUNK, &key);
        Ok(e)
    }
}

impl EncoderHook for Signer {
    fn frame(&mut self, f: &Frame) {
        Signer::frame(self, f);
    }

    fn note(&mut self, n: &NoteEvent) {
        Signer::note(self, n);
    }

    fn wall(&mut self, w: &Wall) {
        Signer::wall(self, w);
    }

    fn height(&mut self, h: &Height) {
        Signer::height(self, h);
    }

    fn pause(&mut self, p: &Pause) {
        Signer::pause(self, p);
    }

    fn group_end(&mut self) -> Option<(u8, Vec<u8>)> {
        self.has_pending()
            .then(|| (CHECKPOINT_CHUNK, self.checkpoint()))
    }

    fn stream_end(
        &mut self,
        info: &Info,
        offsets: Option<&ControllerOffsets>,
        user_data: Option<&[u8]>,
        trailing: &[u8],
    ) -> Option<(u8, Vec<u8>)> {
        Some((FINAL_CHUNK, self.finish(info, offsets, user_data, trailing)))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
