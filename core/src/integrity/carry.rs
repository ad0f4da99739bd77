//! Lossless transcoding of a signed stream: the records re-encoded with other settings (or
//! read back from the BSOR the stream decoded to), with the original signing chunks placed
//! after the records each covers (`integrity.md` §9).

use crate::bsor::Replay;
use crate::stream::{split_stream, ChunkType, Profile, Settings, StreamEncoder};

use super::entry::{take_entry, SigningChunks, ENTRY_KEY};
use super::layout::{
    Checkpoint, KeyChunk, CHECKPOINT_CHUNK, CHECKPOINT_LEN, FINAL_CHUNK, KEY_CHUNK, KINDS,
};
use super::sign::{SignError, Signer};
use super::verify::{verify_stream, Report, Verdict, Verifier};

/// Why a signed stream's chunks cannot be carried over.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CarryError {
    /// The settings are lossy.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The source is not a readable stream, or has no key chunk that verifies.
    #[error("the signed source: {0}")]
    Source(String),
}

/// Encodes `replay` (the records of `signed`, e.g. decoded from it or from the BSOR it
/// decoded to) with `settings`, carrying `signed`'s key chunk, checkpoints and final
/// checkpoint over unchanged: every checkpoint still verifies, as it hashes the records, not
/// the chunks. Only lossless settings keep the records.
pub fn transcode_signed(
    signed: &[u8],
    replay: &Replay,
    settings: Settings,
) -> Result<Vec<u8>, CarryError> {
    if settings.profile != Profile::Lossless {
        return Err(SignError::Lossy(settings.profile).into());
    }
    let (_, _, chunks) =
        split_stream(signed).ok_or_else(|| CarryError::Source("no stream header".into()))?;
    let signing: Vec<(u8, &[u8])> = chunks
        .iter()
        .filter_map(|c| match c.header.kind {
            ChunkType::Unknown(k @ (KEY_CHUNK | CHECKPOINT_CHUNK | FINAL_CHUNK)) => {
                Some((k, &c.bytes(signed)[c.header_len..]))
            }
            _ => None,
        })
        .collect();
    let Some(&(KEY_CHUNK, key)) = signing.first() else {
        return Err(CarryError::Source("no key chunk first".into()));
    };
    let (_, vk) =
        KeyChunk::parse(key).map_err(|e| CarryError::Source(format!("key chunk: {e}")))?;

    for &(kind, payload) in &signing[1..] {
        if kind == CHECKPOINT_CHUNK {
            Checkpoint::parse(payload, &vk)
                .map_err(|e| CarryError::Source(format!("checkpoint: {e}")))?;
        }
    }
    Ok(carry(&signing, replay, settings))
}

/// Encodes `replay` with lossless `settings`, carrying the signing chunks a signed BSOR's
/// entry holds (`integrity.md` §13.4): the stream the BSOR was decoded from, as far as its
/// records and signatures go. The chunks are not checked here: a verifier of the output
/// checks them.
pub fn transcode_with_entry(
    chunks: &SigningChunks,
    replay: &Replay,
    settings: Settings,
) -> Result<Vec<u8>, CarryError> {
    if settings.profile != Profile::Lossless {
        return Err(SignError::Lossy(settings.profile).into());
    }
    Ok(carry(&chunks.chunks(), replay, settings))
}

/// Verifies a signed BSOR (`integrity.md` §13.4): its entry taken out, the replay and the
/// entry's chunks encoded again as a live lossless stream, and that stream verified.
/// Sequence numbers and byte offsets in the reason are that stream's. A BSOR without an
/// entry is unsigned.
pub fn verify_bsor(bytes: &[u8]) -> Report {
    let fail = |why: String| {
        let mut r = Verifier::new().report();
        r.signed = true;
        r.verdict = Verdict::Invalid;
        r.reason = Some(why);
        r
    };
    let mut replay = match crate::bsor::parse(bytes) {
        Ok(r) => r,
        Err(e) => {
            let mut r = fail(format!("the BSOR cannot be read: {e}"));
            r.signed = false;
            return r;
        }
    };
    match take_entry(&mut replay) {
        Err(e) => fail(e.to_string()),
        Ok(None) => {
            let mut r = Verifier::new().report();
            r.reason = Some(format!("no {ENTRY_KEY} entry in the user data"));
            r
        }
        Ok(Some(chunks)) => {
            match transcode_with_entry(&chunks, &replay, Settings::live(Profile::Lossless)) {
                Ok(stream) => verify_stream(&stream),
                Err(e) => fail(e.to_string()),
            }
        }
    }
}

/// Encodes `replay` with the signing chunks placed after the records each covers: the key
/// chunk first, each checkpoint once the records up to the end of its ranges are in (its
/// ranges read from its layout, `integrity.md` §4), the final checkpoint before the trailer.
fn carry(signing: &[(u8, &[u8])], replay: &Replay, settings: Settings) -> Vec<u8> {
    let mut enc = StreamEncoder::new(replay.info.clone(), settings);
    let mut next = [0usize; KINDS];
    for &(kind, payload) in signing {
        let end = match kind {
            KEY_CHUNK => [0; KINDS],
            CHECKPOINT_CHUNK if payload.len() == CHECKPOINT_LEN => {
                // Ranges at bytes 53..93: `first` and `count` `u32` for each kind.
                std::array::from_fn(|k| {
                    let at = 53 + 8 * k;
                    let word = |i: usize| {
                        u32::from_le_bytes([
                            payload[i],
                            payload[i + 1],
                            payload[i + 2],
                            payload[i + 3],
                        ])
                    };
                    word(at).wrapping_add(word(at + 4)) as usize
                })
            }
            _ => [usize::MAX; KINDS],
        };
        push_until(&mut enc, replay, &mut next, end);
        // A payload over the skippable limit is left out; the verifier then misses it.
        let _ = enc.push_extension(kind, payload);
    }
    push_until(&mut enc, replay, &mut next, [usize::MAX; KINDS]);
    enc.finish(
        replay.info.clone(),
        replay.controller_offsets,
        replay.user_data.clone(),
        replay.trailing.clone(),
    );
    enc.take_output()
}

/// Encodes and signs a whole replay in the lossless profile, as a recorder would have:
/// events with the first frame after their song time (as `transcode::encode_replay`).
pub fn sign_replay(r: &Replay, settings: Settings, signer: Signer) -> Result<Vec<u8>, SignError> {
    let mut enc = signer.into_encoder(r.info.clone(), settings)?;
    push_until(&mut enc, r, &mut [0; KINDS], [usize::MAX; KINDS]);
    enc.finish(
        r.info.clone(),
        r.controller_offsets,
        r.user_data.clone(),
        r.trailing.clone(),
    );
    Ok(enc.take_output())
}

/// Pushes records below `end` of each kind, events with the first frame after their time
/// (as `transcode::encode_replay` does).
fn push_until(enc: &mut StreamEncoder, r: &Replay, next: &mut [usize; KINDS], end: [usize; KINDS]) {
    let events = |enc: &mut StreamEncoder, next: &mut [usize; KINDS], t: Option<f32>| {
        let due = |time: f32| t.is_none_or(|t| time <= t);
        while let Some(n) = r
            .notes
            .get(next[1])
            .filter(|n| next[1] < end[1] && due(n.event_time))
        {
            enc.push_note(*n);
            next[1] += 1;
        }
        while let Some(w) = r
            .walls
            .get(next[2])
            .filter(|w| next[2] < end[2] && due(w.time))
        {
            enc.push_wall(*w);
            next[2] += 1;
        }
        while let Some(h) = r
            .heights
            .get(next[3])
            .filter(|h| next[3] < end[3] && due(h.time))
        {
            enc.push_height(*h);
            next[3] += 1;
        }
        while let Some(p) = r
            .pauses
            .get(next[4])
            .filter(|p| next[4] < end[4] && due(p.time))
        {
            enc.push_pause(*p);
            next[4] += 1;
        }
    };
    while let Some(f) = r.frames.get(next[0]).filter(|_| next[0] < end[0]) {
        events(enc, next, Some(f.time));
        enc.push_frame(f);
        next[0] += 1;
    }
    events(enc, next, None);
}
