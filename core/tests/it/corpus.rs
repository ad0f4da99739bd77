//! The real replays in `$BSOR_CORPUS`: exact round trips, and agreement with
//! `expected.json` from an independent parser.

use crate::common;

use bsor_stream_core::bsor::{self, Event, NoteOutcomeKind, PushParser, ReplayBuilder};

/// A line in the runner's list that names the corpus. With the corpus this checks that it
/// holds replays; without it this passes too, and `common::corpus_dir` writes a notice
/// straight to the terminal (not captured by the runner) saying the corpus checks are skipped.
#[test]
fn corpus_found_or_notice_says_corpus_checks_skipped() {
    // Panics when the folder holds no `.bsor`; prints the notice when it is absent.
    let _ = common::corpus_files();
}

#[test]
fn every_corpus_file_round_trips_byte_for_byte() {
    for (name, bytes) in common::corpus_files() {
        let replay = bsor::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let written = bsor::to_vec(&replay).unwrap();
        assert_eq!(written.len(), bytes.len(), "{name}: length");
        assert!(written == bytes, "{name}: bytes differ");
    }
}

#[test]
fn push_parser_one_byte_at_a_time_matches_whole_buffer() {
    for (name, bytes) in common::corpus_files() {
        let mut parser = PushParser::new();
        let mut builder = ReplayBuilder::default();
        for b in bytes.chunks(1) {
            parser.push(b);
            while let Some(ev) = parser.next_event().unwrap() {
                assert_ne!(ev, Event::End, "{name}: end before finish");
                builder.apply(ev);
            }
        }
        parser.finish();
        while let Some(ev) = parser.next_event().unwrap() {
            builder.apply(ev);
        }
        assert!(builder.is_complete(), "{name}");
        let replay = builder.finish().unwrap();
        assert!(bsor::to_vec(&replay).unwrap() == bytes, "{name}");
    }
}

// Long: one assertion per field of expected.json.
#[test]
fn counts_and_info_equal_expected_json() {
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let entries = expected.as_array().unwrap();
    assert!(!entries.is_empty());
    for e in entries {
        let name = e["file"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(bytes.len() as u64, e["bytes"].as_u64().unwrap(), "{name}");
        let r = bsor::parse(&bytes).unwrap();
        let count = |k: NoteOutcomeKind| r.notes.iter().filter(|n| n.kind() == k).count() as u64;
        let t = &e["noteEventTypes"];
        assert_eq!(
            r.frames.len() as u64,
            e["frames"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.notes.len() as u64, e["notes"].as_u64().unwrap(), "{name}");
        assert_eq!(
            count(NoteOutcomeKind::Good),
            t["good"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            count(NoteOutcomeKind::Bad),
            t["bad"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            count(NoteOutcomeKind::Miss),
            t["miss"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            count(NoteOutcomeKind::Bomb),
            t["bomb"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(r.walls.len() as u64, e["walls"].as_u64().unwrap(), "{name}");
        assert_eq!(
            r.heights.len() as u64,
            e["heights"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            r.pauses.len() as u64,
            e["pauses"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            r.controller_offsets.is_some(),
            e["controllerOffsets"].as_bool().unwrap(),
            "{name}"
        );
        assert_eq!(
            r.user_data.is_some(),
            e["userDataSection"].as_bool().unwrap(),
            "{name}"
        );
        if let Some(n) = e.get("userDataBytes") {
            assert_eq!(
                r.user_data.as_ref().map(|d| d.len() as u64),
                n.as_u64(),
                "{name}"
            );
        }
        assert!(
            r.trailing.is_empty(),
            "{name}: no bytes after the known sections"
        );
        let i = &r.info;
        assert_eq!(i.score as i64, e["score"].as_i64().unwrap(), "{name}");
        for (got, key) in [
            (&i.version, "modVersion"),
            (&i.game_version, "gameVersion"),
            (&i.platform, "platform"),
            (&i.hmd, "hmd"),
            (&i.difficulty, "difficulty"),
            (&i.mode, "mode"),
            (&i.song_name, "songName"),
        ] {
            assert_eq!(got.as_str(), e[key].as_str(), "{name}: {key}");
            assert!(!got.has_legacy_length(), "{name}: {key}");
        }
    }
}

#[test]
fn recomputed_score_matches_the_info_score() {
    for (name, bytes) in common::corpus_files() {
        let r = bsor::parse(&bytes).unwrap();
        // The info score is the game's; recomputing it from the cut info of every note
        // checks the cut-info fields, the scoring formulas and the multiplier together.
        assert_eq!(bsor::replay_score(&r), i64::from(r.info.score), "{name}");
    }
}
