//! Play keys (proto-spec/integrity.md §11.4): short keys made from a play's note events
//! alone, so that a server finds the stored plays a new upload may be a copy of by an
//! indexed lookup, however the copy's info, frames or a few of its events were edited.
//!
//! Each run of [`WINDOW`] consecutive note events gives one key: BLAKE3 (derive-key mode,
//! [`CONTEXT_KEYS`]) over the run's note IDs and the times of its notes after the first,
//! relative to the first, rounded to [`KEY_TIME_UNIT`]; its first 8 bytes as an `i64`. A
//! play's keys are the [`KEYS`] smallest distinct ones of all its runs (a bottom-k sample).
//! An edit of one note changes the [`WINDOW`] runs that hold it and no other; the sample of a
//! copy keeps the original's smallest keys unless the edits reach the runs they came from.

use crate::bsor::Replay;

/// The derive-key context of the play keys.
pub const CONTEXT_KEYS: &str = "bsor-stream play keys v1";
/// Notes per run.
pub const WINDOW: usize = 4;
/// The relative times of a run are rounded to this (seconds): 2 ms.
pub const KEY_TIME_UNIT: f64 = 0.002;
/// The most keys a play has.
pub const KEYS: usize = 16;

/// A play's keys, smallest first, distinct (fewer than [`KEYS`] for a play of fewer runs).
pub fn play_keys(replay: &Replay) -> Vec<i64> {
    let notes = &replay.notes;
    let mut all: Vec<i64> = Vec::new();
    if notes.len() < WINDOW {
        return all;
    }
    let mut buf = Vec::with_capacity(WINDOW * 12);
    'runs: for run in notes.windows(WINDOW) {
        let t0 = f64::from(run[0].event_time);
        buf.clear();
        for (j, n) in run.iter().enumerate() {
            buf.extend_from_slice(&n.note_id.to_le_bytes());
            if j > 0 {
                let d = (f64::from(n.event_time) - t0) / KEY_TIME_UNIT;
                if !d.is_finite() {
                    continue 'runs;
                }
                // Saturating (`as`): a time beyond i64 is a broken replay; its key is still one.
                buf.extend_from_slice(&(d.round() as i64).to_le_bytes());
            }
        }
        let h = blake3::derive_key(CONTEXT_KEYS, &buf);
        let mut first = [0u8; 8];
        first.copy_from_slice(&h[..8]);
        all.push(i64::from_le_bytes(first));
    }
    all.sort_unstable();
    all.dedup();
    all.truncate(KEYS);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{replay, Settings};

    fn shared(a: &[i64], b: &[i64]) -> usize {
        a.iter().filter(|k| b.contains(k)).count()
    }

    #[test]
    fn keys_survive_small_edits_and_ignore_the_info_and_frames() {
        let r = replay(Settings::default());
        let base = play_keys(&r);
        assert_eq!(base.len(), KEYS);
        let mut copy = r.clone();
        copy.info.hash = crate::bsor::BsorString::new("other");
        copy.info.player_id = crate::bsor::BsorString::new("thief");
        for f in &mut copy.frames {
            f.head.position.x += 0.003;
        }
        for i in [3, 40, 77, 100] {
            copy.notes[i].event_time += 0.004;
        }
        let n = copy.notes.len() / 2;
        copy.notes[n].event_time = f32::from_bits(copy.notes[n].event_time.to_bits() + 1);
        copy.notes.remove(10);
        // A shift of the whole timeline.
        for x in &mut copy.notes {
            x.event_time += 0.031;
        }
        assert!(shared(&base, &play_keys(&copy)) >= KEYS / 2);
        let other = play_keys(&replay(Settings {
            seed: 2,
            ..Settings::default()
        }));
        assert_eq!(shared(&base, &other), 0);
    }

    #[test]
    fn short_and_broken_plays_do_not_panic() {
        let mut r = replay(Settings {
            seconds: 2.0,
            ..Settings::default()
        });
        r.notes.truncate(2);
        assert!(play_keys(&r).is_empty());
        let mut r = replay(Settings::default());
        for n in &mut r.notes {
            n.event_time = f32::NAN;
        }
        assert!(play_keys(&r).is_empty());
        r.notes[5].event_time = f32::INFINITY;
        r.notes[0].event_time = f32::MAX;
        let _ = play_keys(&r);
    }
}
