//! The fingerprint of a play (proto-spec/integrity.md §11): an exact digest of its events,
//! the same in every profile and format, since every profile keeps events exact, and a motion
//! signature with a similarity score that recognises a disguised copy of the play.
//!
//! The digest leaves out the info block (player ID and name, which a thief changes) and the
//! frames (which lossy profiles round): two files with the same digest hold the same play.

use crate::bsor::{encode_height, encode_note, encode_pause, encode_wall, Replay};

#[path = "fingerprint_eval.rs"]
pub mod eval;
#[path = "fingerprint_keys.rs"]
mod keys;
#[path = "fingerprint_motion.rs"]
mod motion;

pub use keys::{play_keys, CONTEXT_KEYS, KEYS, KEY_TIME_UNIT, WINDOW};

pub use motion::{
    similarity, MotionSignature, Poses, Sample, Similarity, MIN_MATCHED, POSITION_UNIT,
    ROTATION_SCALE, SCORE_POSITION_MM, SCORE_ROTATION_DEG, SCORE_TIME_S, SIGNATURE_VERSION,
    THRESHOLD, TIME_UNIT,
};

/// The derive-key context of the event digest.
pub const CONTEXT_EVENTS: &str = "bsor-stream fingerprint v1 events";

/// The exact digest of a replay's events: BLAKE3 in derive-key mode with
/// [`CONTEXT_EVENTS`] over, for notes, walls, heights and pauses in that order, the count as
/// a `u32` then each record as BSOR writes it (proto-spec/integrity.md §11.1).
pub fn event_digest(replay: &Replay) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key(CONTEXT_EVENTS);
    let mut buf = Vec::with_capacity(88);
    h.update(&count(replay.notes.len()));
    for n in &replay.notes {
        buf.clear();
        encode_note(n, &mut buf);
        h.update(&buf);
    }
    h.update(&count(replay.walls.len()));
    for w in &replay.walls {
        h.update(&encode_wall(w));
    }
    h.update(&count(replay.heights.len()));
    for x in &replay.heights {
        h.update(&encode_height(x));
    }
    h.update(&count(replay.pauses.len()));
    for x in &replay.pauses {
        h.update(&encode_pause(x));
    }
    *h.finalize().as_bytes()
}

/// A section's record count as the digest takes it: a `u32`, saturated (a replay cannot
/// hold 2^32 records of any kind within a parser's limits).
fn count(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{replay, Settings};

    #[test]
    fn the_digest_ignores_the_player_and_the_frames_but_not_an_event() {
        let replay = replay(Settings::default());
        let base = event_digest(&replay);
        let mut other = replay.clone();
        other.info.player_id = crate::bsor::BsorString::new("thief");
        for f in &mut other.frames {
            f.head.position.x += 0.01;
        }
        assert_eq!(event_digest(&other), base);
        let mut edited = replay.clone();
        edited.notes[0].event_time += 0.001;
        assert_ne!(event_digest(&edited), base);
        let mut dropped = replay;
        dropped.notes.pop();
        assert_ne!(event_digest(&dropped), base);
    }
}
