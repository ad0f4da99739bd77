//! Synthetic replays for what the corpus lacks: walls, bombs, heights, user data, legacy
//! length fields, odd bool bytes, non-ASCII strings, zero frames, non-finite floats,
//! undefined event types and trailing bytes.

use bsor_stream_core::bsor::{
    self, BsorString, CutInfo, Event, Frame, NoteEvent, NoteId, NoteOutcome, NoteOutcomeKind, Pose,
    PushParser, Quat, RawBool, Replay, ReplayBuilder, ScoringType, Summary, UnknownEventType, Vec3,
    Wall, WallId,
};
use bsor_stream_core::synth;

/// Writes, parses and writes again; both writes must equal, and the parse must equal what
/// the push parser gives when fed one byte at a time.
fn round_trip(r: &Replay) -> Replay {
    let bytes = bsor::to_vec(r).unwrap();
    let back = bsor::parse(&bytes).unwrap();
    assert!(bsor::to_vec(&back).unwrap() == bytes, "rewrite differs");
    let mut p = PushParser::new();
    let mut b = ReplayBuilder::default();
    for x in bytes.chunks(1) {
        p.push(x);
        while let Some(ev) = p.next_event().unwrap() {
            b.apply(ev);
        }
    }
    p.finish();
    while let Some(ev) = p.next_event().unwrap() {
        b.apply(ev);
    }
    assert!(b.is_complete());
    assert!(bsor::to_vec(&b.finish().unwrap()).unwrap() == bytes);
    back
}

fn cut(before: f32, after: f32, dist: f32) -> CutInfo {
    CutInfo {
        speed_ok: RawBool(1),
        direction_ok: RawBool(1),
        saber_type_ok: RawBool(1),
        before_cut_rating: before,
        after_cut_rating: after,
        cut_distance_to_center: dist,
        ..CutInfo::default()
    }
}

fn small_replay() -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed: 7,
        seconds: 2.0,
        fps: 10,
    });
    r.notes.truncate(3);
    r
}

#[test]
fn synthetic_replay_has_every_section_and_survives_a_round_trip() {
    let r = synth::replay(synth::Settings {
        seed: 42,
        seconds: 90.0,
        fps: 120,
    });
    assert_eq!(r.frames.len(), 90 * 120);
    assert!(!r.walls.is_empty(), "walls");
    assert!(r.notes.iter().any(|n| n.kind() == NoteOutcomeKind::Bomb));
    assert!(r.notes.iter().any(|n| n.kind() == NoteOutcomeKind::Miss));
    assert!(r.notes.iter().any(|n| n.kind() == NoteOutcomeKind::Bad));
    assert!(!r.heights.is_empty() && !r.pauses.is_empty());
    assert!(r.user_data.as_ref().is_some_and(|d| !d.is_empty()));
    let back = round_trip(&r);
    assert_eq!(back.walls, r.walls);
    assert_eq!(back.heights, r.heights);
    assert_eq!(back.user_data, r.user_data);
    assert_eq!(bsor::replay_score(&back), i64::from(back.info.score));
}

#[test]
fn synth_is_deterministic() {
    let s = synth::Settings {
        seed: 3,
        seconds: 5.0,
        fps: 90,
    };
    let a = bsor::to_vec(&synth::replay(s)).unwrap();
    let b = bsor::to_vec(&synth::replay(s)).unwrap();
    assert!(a == b);
    let c = bsor::to_vec(&synth::replay(synth::Settings { seed: 4, ..s })).unwrap();
    assert!(a != c);
}

/// The legacy writer: the length field is the UTF-16 code-unit count.
fn legacy(s: &str) -> BsorString {
    BsorString {
        bytes: s.as_bytes().to_vec(),
        length_field: s.encode_utf16().count() as i32,
    }
}

#[test]
fn legacy_utf16_length_fields_are_recovered_and_kept() {
    let mut r = small_replay();
    r.info.player_name = legacy("Darwin Polio🥴");
    r.info.song_name = legacy("ロキ (Loki)");
    r.info.mapper = legacy("Jöhn Smíth");
    r.info.environment = legacy("Ümgebung");
    assert!(r.info.player_name.has_legacy_length());
    let bytes = bsor::to_vec(&r).unwrap();
    let back = round_trip(&r);
    assert_eq!(back.info.player_name.as_str(), Some("Darwin Polio🥴"));
    assert_eq!(back.info.player_name.length_field, 14);
    assert_eq!(back.info.platform.as_str(), Some("steam"));
    assert_eq!(back.info.song_name.as_str(), Some("ロキ (Loki)"));
    assert_eq!(back.info.mapper.as_str(), Some("Jöhn Smíth"));
    assert_eq!(back.info.difficulty.as_str(), Some("ExpertPlus"));
    assert_eq!(back.info.environment.as_str(), Some("Ümgebung"));
    assert_eq!(back.info.modifiers, r.info.modifiers);
    assert_eq!(back.frames.len(), r.frames.len());
    assert_eq!(
        Summary::of(&back).legacy_length_fields,
        vec!["playerName", "songName", "mapper", "environment"]
    );
    assert_eq!(bsor::to_vec(&back).unwrap(), bytes);
}

#[test]
fn a_length_field_that_fits_no_reading_is_taken_as_it_is() {
    // playerName says 3 bytes, then garbage that reads as no plausible string at any split:
    // the parser keeps the declared length and the next field's garbage fails cleanly.
    let mut r = small_replay();
    r.info.player_name = BsorString {
        bytes: vec![
            b'a', b'b', b'c', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
        length_field: 3,
    };
    let bytes = bsor::to_vec(&r).unwrap();
    let err = bsor::parse(&bytes).unwrap_err();
    assert_eq!(err.section, bsor::Section::Info);
    assert_eq!(err.field, "platform");
    assert_eq!(err.kind, bsor::ErrorKind::Negative { value: -1 });
    // header, version "0.9.9", gameVersion "1.29.1", timestamp "1700000007", playerID
    // "76561190000000000", then playerName's length field and its 3 declared bytes.
    assert_eq!(
        err.offset,
        6 + (4 + 5) + (4 + 6) + (4 + 10) + (4 + 17) + 4 + 3
    );
}

#[test]
fn bool_bytes_other_than_0_and_1_survive() {
    let mut r = small_replay();
    r.info.left_handed = RawBool(7);
    let mut c = cut(1.0, 1.0, 0.0);
    c.speed_ok = RawBool(2);
    c.direction_ok = RawBool(255);
    c.saber_type_ok = RawBool(0);
    c.was_cut_too_soon = RawBool(128);
    r.notes[0].outcome = NoteOutcome::Good(c);
    let back = round_trip(&r);
    assert_eq!(back.info.left_handed, RawBool(7));
    assert!(back.info.left_handed.get());
    let c = back.notes[0].outcome.cut().copied().unwrap();
    assert_eq!(
        [
            c.speed_ok.0,
            c.direction_ok.0,
            c.saber_type_ok.0,
            c.was_cut_too_soon.0
        ],
        [2, 255, 0, 128]
    );
    let json = serde_json::to_value(&back).unwrap();
    assert_eq!(json["info"]["leftHanded"], 7);
    assert_eq!(json["notes"][0]["noteCutInfo"]["saberTypeOK"], false);
}

#[test]
fn non_ascii_strings_with_correct_lengths() {
    let mut r = small_replay();
    r.info.player_name = "Ψυχή 🎵 名前".into();
    r.info.song_name = "Ünïcödé — ソング".into();
    let back = round_trip(&r);
    assert_eq!(back.info.player_name.as_str(), Some("Ψυχή 🎵 名前"));
    assert_eq!(back.info.song_name.as_str(), Some("Ünïcödé — ソング"));
    assert!(!back.info.player_name.has_legacy_length());
}

#[test]
fn invalid_utf8_strings_are_kept_as_bytes() {
    let mut r = small_replay();
    r.info.hmd = BsorString {
        bytes: vec![0xc3, 0x28, 0xff],
        length_field: 3,
    };
    let back = round_trip(&r);
    assert_eq!(back.info.hmd.bytes, vec![0xc3, 0x28, 0xff]);
    assert_eq!(back.info.hmd.as_str(), None);
}

#[test]
fn zero_frames_and_empty_sections() {
    let r = Replay::default();
    let bytes = bsor::to_vec(&r).unwrap();
    // magic, version, marker 0, 16 empty strings, 25 bytes of info numbers, 5 empty sections
    assert_eq!(bytes.len(), 6 + 16 * 4 + 25 + 5 * 5);
    let back = round_trip(&r);
    assert!(back.frames.is_empty());
    let s = Summary::of(&back);
    assert_eq!(s.duration_seconds, 0.0);
    assert_eq!(s.fps, None);
    assert_eq!(s.user_data_bytes, None);
}

#[test]
fn non_finite_floats_and_negative_zero_survive_bit_for_bit() {
    let quiet_payload = f32::from_bits(0x7fc0_1234);
    let signalling = f32::from_bits(0x7f80_0001);
    let negative_nan = f32::from_bits(0xffc0_0000);
    let specials = [
        quiet_payload,
        signalling,
        negative_nan,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        f32::from_bits(1), // smallest subnormal
    ];
    let mut r = small_replay();
    let q = Quat {
        x: specials[0],
        y: specials[1],
        z: specials[2],
        w: specials[5],
    };
    r.frames[0] = Frame {
        time: specials[3],
        fps: -1,
        head: Pose {
            position: Vec3 {
                x: specials[4],
                y: specials[5],
                z: specials[6],
            },
            rotation: q,
        },
        ..r.frames[0]
    };
    r.info.jump_distance = quiet_payload;
    r.info.fail_time = f32::NEG_INFINITY;
    r.notes[0].event_time = signalling;
    let bytes = bsor::to_vec(&r).unwrap();
    let back = round_trip(&r);
    let f = back.frames[0];
    assert_eq!(f.head.rotation.x.to_bits(), 0x7fc0_1234);
    assert_eq!(f.head.rotation.y.to_bits(), 0x7f80_0001);
    assert_eq!(f.head.rotation.z.to_bits(), 0xffc0_0000);
    assert_eq!(f.head.rotation.w.to_bits(), 0x8000_0000);
    assert_eq!(f.head.position.z.to_bits(), 1);
    assert_eq!(back.info.jump_distance.to_bits(), 0x7fc0_1234);
    assert_eq!(back.notes[0].event_time.to_bits(), 0x7f80_0001);
    assert!(bsor::to_vec(&back).unwrap() == bytes);

    let json = serde_json::to_string(&back).unwrap();
    assert!(
        !json.contains("null,") && !json.contains(":null"),
        "no nulls"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["frames"][0]["time"], "Infinity");
    assert_eq!(v["frames"][0]["head"]["position"]["x"], "-Infinity");
    assert_eq!(v["frames"][0]["head"]["rotation"]["x"], "NaN");
    assert_eq!(v["info"]["failTime"], "-Infinity");
    assert!(json.contains(r#""w":-0.0"#));
}

#[test]
fn walls_bombs_heights_user_data_and_undefined_event_types() {
    let mut r = small_replay();
    r.walls = vec![
        Wall {
            wall_id: 321,
            energy: 0.75,
            time: 1.5,
            spawn_time: 0.5,
        },
        Wall {
            wall_id: 0,
            energy: 1.0,
            time: 1.6,
            spawn_time: 0.6,
        },
    ];
    r.notes.push(NoteEvent {
        note_id: 20999,
        event_time: 1.7,
        spawn_time: 0.7,
        outcome: NoteOutcome::Bomb,
    });
    r.notes.push(NoteEvent {
        note_id: 31234,
        event_time: 1.8,
        spawn_time: 0.8,
        outcome: NoteOutcome::Unknown(UnknownEventType::new(-5).unwrap()),
    });
    r.notes.push(NoteEvent {
        note_id: 31234,
        event_time: 1.9,
        spawn_time: 0.9,
        outcome: NoteOutcome::Unknown(UnknownEventType::new(4).unwrap()),
    });
    r.user_data = Some((0..=255).collect());
    let back = round_trip(&r);
    assert_eq!(back.walls, r.walls);
    assert_eq!(back.walls[0].id(), WallId::split(321));
    assert_eq!(back.notes.len(), r.notes.len());
    let n = back.notes.len();
    assert_eq!(back.notes[n - 3].kind(), NoteOutcomeKind::Bomb);
    assert_eq!(back.notes[n - 2].outcome.event_type(), -5);
    assert_eq!(back.notes[n - 1].outcome.event_type(), 4);
    assert_eq!(back.user_data.as_ref().map(Vec::len), Some(256));
    assert!(UnknownEventType::new(1).is_none());
}

#[test]
fn optional_sections_and_trailing_bytes_in_every_combination() {
    let offsets = small_replay().controller_offsets;
    for with_offsets in [false, true] {
        for user_data in [None, Some(vec![]), Some(vec![1, 2, 3])] {
            for trailing in [vec![], vec![9], vec![0, 0, 0, 0, 1]] {
                let mut r = small_replay();
                r.controller_offsets = if with_offsets { offsets } else { None };
                r.user_data = user_data.clone();
                r.trailing = trailing.clone();
                let back = round_trip(&r);
                assert_eq!(back.controller_offsets.is_some(), with_offsets);
                assert_eq!(back.user_data, user_data);
                assert_eq!(back.trailing, trailing);
            }
        }
    }
    // After the user data, even a 6 or a 7 is trailing.
    let mut r = small_replay();
    r.trailing = vec![6, 7, 6];
    assert_eq!(round_trip(&r).trailing, vec![6, 7, 6]);
}

#[test]
fn push_parser_yields_each_record_as_soon_as_it_is_complete() {
    let r = small_replay();
    let bytes = bsor::to_vec(&r).unwrap();
    let mut p = PushParser::new();
    let mut frames_seen = 0;
    let mut first_frame_at = None;
    for (i, b) in bytes.iter().enumerate() {
        p.push(std::slice::from_ref(b));
        while let Some(ev) = p.next_event().unwrap() {
            if let Event::Frame(_) = ev {
                frames_seen += 1;
                first_frame_at.get_or_insert(i + 1);
            }
        }
        // Never more than one record's bytes wait in the buffer before the tail.
        if frames_seen > 0 && frames_seen < r.frames.len() {
            assert!(p.buffered() < bsor::FRAME_SIZE);
        }
    }
    // The first frame came exactly when its 92nd byte arrived.
    let info_len = {
        let mut v = Vec::new();
        bsor::encode_info(&r.info, &mut v);
        v.len()
    };
    assert_eq!(first_frame_at, Some(6 + info_len + 5 + bsor::FRAME_SIZE));
    // Before `finish`, the missing end is not an error and the end is not yet known.
    assert!(!p.is_done());
    assert_eq!(p.next_event().unwrap(), None);
    p.finish();
    assert_eq!(p.next_event().unwrap(), Some(Event::End));
    assert_eq!(p.next_event().unwrap(), None);
    assert!(p.is_done());
}

#[test]
fn note_ids_split_into_their_parts() {
    let id = NoteId::split(31234);
    assert_eq!(
        (
            id.scoring_type,
            id.line_index,
            id.note_line_layer,
            id.color_type,
            id.cut_direction
        ),
        (3, 1, 2, 3, 4)
    );
    let bomb = NoteId::split(20999);
    assert_eq!(
        (
            bomb.scoring_type,
            bomb.line_index,
            bomb.note_line_layer,
            bomb.color_type,
            bomb.cut_direction
        ),
        (2, 1, 0, -1, 9)
    );
    assert_eq!(bomb.color(), bsor::NoteColor::None);
    assert_eq!(bomb.scoring(), ScoringType::NoScore);
    assert_eq!(bomb.direction(), bsor::CutDirection::None);
    let legacy = NoteId::split(1118);
    assert_eq!(legacy.scoring(), ScoringType::Legacy);
    assert_eq!(legacy.direction(), bsor::CutDirection::Any);
    assert_eq!(legacy.color(), bsor::NoteColor::Blue);
    let w = WallId::split(321);
    assert_eq!((w.line_index, w.obstacle_type, w.width), (3, 2, 1));
}

#[test]
fn cut_scores_follow_the_reference_formulas() {
    assert_eq!(cut(1.0, 1.0, 0.0).score().total(), 115);
    assert_eq!(
        cut(2.0, 5.0, -1.0).score().total(),
        115,
        "ratings clamp to 1"
    );
    assert_eq!(cut(-1.0, -1.0, 0.3).score().total(), 0);
    // 70 * 0.5 = 35; 30 * 0.25 = 7.5 rounds to even 8; 15 * (1 - 0.15/0.3) = 7.5 → 8.
    let s = cut(0.5, 0.25, 0.15).score();
    assert_eq!((s.before, s.after, s.accuracy), (35, 8, 8));
    assert_eq!(cut(f32::NAN, 1.0, 0.0).score().before, 0);

    let note = |scoring: i32, outcome| NoteEvent {
        note_id: scoring * 10000 + 1000 + 100 + 10 + 1,
        event_time: 1.0,
        spawn_time: 0.0,
        outcome,
    };
    let c = cut(0.5, 0.5, 0.0);
    assert_eq!(
        note(3, NoteOutcome::Good(c)).score().unwrap().total(),
        35 + 15 + 15
    );
    assert_eq!(note(4, NoteOutcome::Good(c)).score().unwrap().after, 30);
    assert_eq!(note(5, NoteOutcome::Good(c)).score().unwrap().before, 70);
    assert_eq!(note(6, NoteOutcome::Good(c)).score().unwrap().after, 0);
    assert_eq!(note(7, NoteOutcome::Good(c)).score().unwrap().total(), 20);
    assert_eq!(note(3, NoteOutcome::Bad(c)).score(), None);
}

#[test]
fn replay_score_applies_the_combo_multiplier() {
    let good = |t: f32| NoteEvent {
        note_id: 31111,
        event_time: t,
        spawn_time: 0.0,
        outcome: NoteOutcome::Good(cut(1.0, 1.0, 0.0)),
    };
    // The multiplier doubles after 2 good cuts at 1x and 4 at 2x, before the cut is scored.
    let mut r = Replay {
        notes: (0..7).map(|i| good(i as f32)).collect(),
        ..Replay::default()
    };
    assert_eq!(bsor::replay_score(&r), 115 * (1 + 2 * 4 + 4 * 2));
    r.walls.push(Wall {
        wall_id: 1,
        energy: 1.0,
        time: 6.5,
        spawn_time: 0.0,
    });
    r.notes.push(good(7.0));
    // The wall halves 4x to 2x for the last note.
    assert_eq!(bsor::replay_score(&r), 115 * (1 + 2 * 4 + 4 * 2 + 2));
}

#[test]
fn a_well_formed_long_next_string_is_not_mistaken_for_a_legacy_length() {
    let mut r = small_replay();
    r.info.version = "ab".into();
    let long: String = std::iter::once('\0')
        .chain("x".repeat(1099).chars())
        .collect();
    r.info.game_version = BsorString::new(&long);
    let back = round_trip(&r);
    assert_eq!(back.info.version.as_str(), Some("ab"));
    assert_eq!(back.info.game_version.bytes.len(), 1100);
}

#[test]
fn trailing_bytes_that_would_read_as_a_section_are_refused_by_the_writer() {
    let mut r = small_replay();
    r.user_data = None;
    r.controller_offsets = None;
    for (first, refused) in [(6u8, true), (7, true), (5, false), (8, false)] {
        r.trailing = vec![first, 0, 0];
        assert_eq!(
            bsor::to_vec(&r).err(),
            refused.then_some(bsor::WriteError::AmbiguousTrailing { first })
        );
    }
    r.controller_offsets = small_replay().controller_offsets;
    r.trailing = vec![6];
    assert_eq!(
        round_trip(&r).trailing,
        vec![6],
        "after section 6, a 6 is trailing"
    );
    r.trailing = vec![7];
    assert!(bsor::to_vec(&r).is_err());
}
