//! Legacy ScoreSaber replay JSON import (proto-spec/legacy-import.md), field by field, on
//! documents built here (no sample of the legacy form exists).
#![cfg(feature = "legacy")]

use bsor_stream_core::bsor::{self, NoteId, NoteOutcome, Replay};
use bsor_stream_core::legacy::{import, ImportError, ImportLimits};
use serde_json::{json, Value};

/// A field path and how to break the document there.
type Case = (&'static str, fn(&mut Value));

fn pose(px: f64, py: f64, pz: f64, rx: f64, ry: f64, rz: f64, rw: f64) -> Value {
    json!({"r": {"x": rx, "y": ry, "z": rz, "w": rw}, "p": {"x": px, "y": py, "z": pz}})
}

fn frame(t: f64, fps: i64, k: f64) -> Value {
    json!({
        "h": pose(0.1 + k, 1.7, -0.2, 0.0, 0.1, 0.0, 0.995),
        "l": pose(-0.3, 1.1 + k, 0.25, 0.5, -0.5, 0.5, 0.5),
        "r": pose(0.3, 1.2, 0.3 + k, -0.25, 0.0, 0.0, 0.968),
        "a": t,
        "i": fps,
    })
}

/// A document with every field the legacy description names.
fn full() -> Value {
    json!({
        "info": {
            "version": "1.2.3",
            "hash": "3585B3438A5B78DEAFAAA9D8FBA9A9E88556D218",
            "difficulty": 7,
            "mode": "OneSaber",
            "environment": "BigMirrorEnvironment",
            "modifiers": ["GN", "FS"],
            "noteJumpStartBeatOffset": 0.5,
            "leftHanded": true,
            "height": 1.75
        },
        "frames": [frame(0.0, 90, 0.0), frame(0.011, 90, 0.01), frame(0.022, 91, 0.02),
                   frame(0.033, 89, 0.03)],
        "scores": [115, 100, 14, -2, -3, -4, -5, -5],
        "combos": [1, 2, 3, 0, 0, 0, 0, 0],
        "noteTime": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5],
        "noteInfos": ["1000", "2111", "3201", "0000", "1111", "2093"],
        "dynamicHeight": [{"h": 1.68, "a": 0.0}, {"h": 1.71, "a": 30.5}]
    })
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn ok(v: &Value) -> Replay {
    import(&bytes(v), &ImportLimits::default()).unwrap()
}

fn err(v: &Value) -> ImportError {
    import(&bytes(v), &ImportLimits::default()).unwrap_err()
}

fn s(b: &bsor::BsorString) -> &str {
    b.as_str().unwrap()
}

#[test]
fn info_fields_filled_derived_and_empty() {
    let r = ok(&full());
    let i = &r.info;
    // Filled.
    assert_eq!(s(&i.version), "1.2.3");
    assert_eq!(s(&i.hash), "3585B3438A5B78DEAFAAA9D8FBA9A9E88556D218");
    assert_eq!(s(&i.mode), "OneSaber");
    assert_eq!(s(&i.environment), "BigMirrorEnvironment");
    assert_eq!(i.left_handed.0, 1);
    assert_eq!(i.height, 1.75);
    // Derived.
    assert_eq!(s(&i.difficulty), "Expert");
    assert_eq!(s(&i.modifiers), "GN,FS");
    // 115×1 + 100×2 (multiplier 2 after two good cuts) + 14×2, then the rest break the combo.
    assert_eq!(i.score, 115 + 200 + 28);
    assert_eq!(i64::from(i.score), bsor::replay_score(&r));
    // Empty.
    for (name, f) in [
        ("gameVersion", &i.game_version),
        ("timestamp", &i.timestamp),
        ("playerID", &i.player_id),
        ("playerName", &i.player_name),
        ("platform", &i.platform),
        ("trackingSystem", &i.tracking_system),
        ("hmd", &i.hmd),
        ("controller", &i.controller),
        ("songName", &i.song_name),
        ("mapper", &i.mapper),
    ] {
        assert_eq!(f, &bsor::BsorString::default(), "{name}");
    }
    assert_eq!(i.jump_distance.to_bits(), 0);
    assert_eq!(i.start_time.to_bits(), 0);
    assert_eq!(i.fail_time.to_bits(), 0);
    assert_eq!(i.speed.to_bits(), 0);
    assert!(r.pauses.is_empty());
    assert_eq!(r.controller_offsets, None);
    assert_eq!(r.user_data, None);
    assert!(r.trailing.is_empty());
}

#[test]
fn every_difficulty_number() {
    for (n, name) in [
        (1, "Easy"),
        (3, "Normal"),
        (5, "Hard"),
        (7, "Expert"),
        (9, "ExpertPlus"),
    ] {
        let mut d = full();
        d["info"]["difficulty"] = json!(n);
        assert_eq!(s(&ok(&d).info.difficulty), name);
    }
    for bad in [0, 2, 10, -1] {
        let mut d = full();
        d["info"]["difficulty"] = json!(bad);
        let e = err(&d);
        assert_eq!(e.field(), "info.difficulty", "{e}");
        assert!(e.to_string().contains(&bad.to_string()), "{e}");
    }
}

#[test]
fn frames_field_by_field() {
    let r = ok(&full());
    assert_eq!(r.frames.len(), 4);
    let f = &r.frames[2];
    assert_eq!(f.time, 0.022f32);
    assert_eq!(f.fps, 91);
    assert_eq!(f.head.position.x, 0.12f32);
    assert_eq!(f.head.position.y, 1.7f32);
    assert_eq!(f.head.position.z, -0.2f32);
    assert_eq!(f.head.rotation.y, 0.1f32);
    assert_eq!(f.head.rotation.w, 0.995f32);
    assert_eq!(f.left_hand.position.y, 1.12f32);
    assert_eq!(f.left_hand.rotation.x, 0.5f32);
    assert_eq!(f.left_hand.rotation.y, -0.5f32);
    assert_eq!(f.right_hand.position.z, 0.32f32);
    assert_eq!(f.right_hand.rotation.x, -0.25f32);
    assert_eq!(f.right_hand.rotation.w, 0.968f32);
}

#[test]
fn notes_walls_and_heights() {
    let r = ok(&full());
    assert_eq!(r.notes.len(), 6);
    assert_eq!(r.walls.len(), 2);
    // "1000": line 1, layer 0, direction 0, red.
    let id = |k: usize| NoteId::split(r.notes[k].note_id);
    assert_eq!(
        (id(0).scoring_type, id(0).line_index, id(0).note_line_layer),
        (0, 1, 0)
    );
    assert_eq!((id(0).cut_direction, id(0).color_type), (0, 0));
    // "2111": line 2, layer 1, direction 1, blue.
    assert_eq!((id(1).line_index, id(1).note_line_layer), (2, 1));
    assert_eq!((id(1).cut_direction, id(1).color_type), (1, 1));
    // "2093": a bomb, colour -1, direction 9.
    assert_eq!((id(5).color_type, id(5).cut_direction), (-1, 9));
    assert_eq!(r.notes[5].note_id, 2000 - 10 + 9);
    // Event types from scores.
    let types: Vec<i32> = r.notes.iter().map(|n| n.outcome.event_type()).collect();
    assert_eq!(types, [0, 0, 0, 1, 2, 3]);
    // Times from noteTime; spawn times unknown.
    assert_eq!(r.notes[3].event_time, 2.5);
    assert!(r.notes.iter().all(|n| n.spawn_time.to_bits() == 0));
    // Walls: time from noteTime, the rest unknown.
    assert_eq!(r.walls[0].time, 4.0);
    assert_eq!(r.walls[1].time, 4.5);
    assert!(r
        .walls
        .iter()
        .all(|w| w.wall_id == 0 && w.energy.to_bits() == 0 && w.spawn_time.to_bits() == 0));
    // Heights.
    assert_eq!(r.heights.len(), 2);
    assert_eq!((r.heights[1].height, r.heights[1].time), (1.71, 30.5));
}

#[test]
fn good_cut_scores_survive_for_every_value() {
    for score in 1..=115 {
        let mut d = full();
        d["scores"] = json!([score]);
        d["combos"] = json!([1]);
        d["noteTime"] = json!([1.0]);
        d["noteInfos"] = json!(["1101"]);
        let r = ok(&d);
        let n = &r.notes[0];
        assert_eq!(n.score().unwrap().total(), score, "score {score}");
        let NoteOutcome::Good(cut) = n.outcome else {
            panic!("not a good cut")
        };
        assert_eq!(
            (cut.speed_ok.0, cut.direction_ok.0, cut.saber_type_ok.0),
            (1, 1, 1)
        );
        assert_eq!(cut.was_cut_too_soon.0, 0);
        assert_eq!(cut.saber_type, 1, "blue note, right saber");
        assert_eq!(r.info.score, score);
    }
}

#[test]
fn bad_cut_has_empty_cut_info() {
    let r = ok(&full());
    let NoteOutcome::Bad(cut) = r.notes[3].outcome else {
        panic!("not a bad cut")
    };
    assert_eq!(cut, bsor::CutInfo::default());
}

#[test]
fn imported_replay_writes_and_reads_back() {
    let r = ok(&full());
    let bytes = bsor::to_vec(&r).unwrap();
    assert_eq!(bsor::parse(&bytes).unwrap(), r);
}

#[test]
fn optional_fields_missing() {
    let mut d = full();
    let info = d["info"].as_object_mut().unwrap();
    for k in [
        "version",
        "mode",
        "environment",
        "modifiers",
        "noteJumpStartBeatOffset",
        "leftHanded",
        "height",
    ] {
        info.remove(k);
    }
    let o = d.as_object_mut().unwrap();
    o.remove("combos");
    o.remove("dynamicHeight");
    let r = ok(&d);
    assert_eq!(s(&r.info.mode), "Standard");
    assert_eq!(s(&r.info.version), "");
    assert_eq!(s(&r.info.environment), "");
    assert_eq!(s(&r.info.modifiers), "");
    assert_eq!(r.info.left_handed.0, 0);
    assert_eq!(r.info.height.to_bits(), 0);
    assert!(r.heights.is_empty());
    assert_eq!(r.notes.len(), 6);
}

#[test]
fn unknown_fields_are_ignored() {
    let mut d = full();
    d["extra"] = json!({"deep": [1, 2, {"x": "y"}]});
    d["info"]["somethingNew"] = json!(42);
    assert_eq!(ok(&d), ok(&full()));
}

#[test]
fn noteinfos_one_per_entry_walls_included() {
    let mut d = full();
    d["noteInfos"]
        .as_array_mut()
        .unwrap()
        .extend([json!("0000"), json!("0000")]);
    assert_eq!(ok(&d), ok(&full()));
}

#[test]
fn required_fields_missing() {
    for k in ["info", "frames", "scores", "noteTime", "noteInfos"] {
        let mut d = full();
        d.as_object_mut().unwrap().remove(k);
        let e = err(&d);
        assert!(matches!(e, ImportError::Invalid { .. }), "{k}: {e}");
        assert!(e.to_string().contains(k), "{k}: {e}");
    }
    for k in ["hash", "difficulty"] {
        let mut d = full();
        d["info"].as_object_mut().unwrap().remove(k);
        let e = err(&d);
        assert_eq!(e.field(), "info", "{e}");
        assert!(e.to_string().contains(k), "{k}: {e}");
    }
    let mut d = full();
    d["frames"][1]["h"].as_object_mut().unwrap().remove("p");
    let e = err(&d);
    assert_eq!(e.field(), "frames[1].h", "{e}");
}

#[test]
fn wrong_types_name_the_field() {
    let cases: Vec<Case> = vec![
        ("info.hash", |d| d["info"]["hash"] = json!(5)),
        ("info.difficulty", |d| d["info"]["difficulty"] = json!("9")),
        ("info.difficulty", |d| d["info"]["difficulty"] = json!(9.5)),
        ("info.leftHanded", |d| d["info"]["leftHanded"] = json!(1)),
        ("info.height", |d| d["info"]["height"] = json!("tall")),
        ("info.modifiers[1]", |d| {
            d["info"]["modifiers"][1] = json!(7)
        }),
        ("frames", |d| d["frames"] = json!({})),
        ("frames[2].a", |d| d["frames"][2]["a"] = json!(null)),
        ("frames[3].i", |d| d["frames"][3]["i"] = json!(90.5)),
        ("frames[3].i", |d| d["frames"][3]["i"] = json!(1u64 << 40)),
        ("frames[0].l.r.w", |d| {
            d["frames"][0]["l"]["r"]["w"] = json!(true)
        }),
        ("frames[0].r.p.x", |d| {
            d["frames"][0]["r"]["p"]["x"] = json!(1e300)
        }),
        ("scores[2]", |d| d["scores"][2] = json!("115")),
        ("combos[0]", |d| d["combos"][0] = json!([1])),
        ("noteTime[4]", |d| d["noteTime"][4] = json!(-1e39)),
        ("noteInfos[0]", |d| d["noteInfos"][0] = json!(1003)),
        ("dynamicHeight[1].h", |d| {
            d["dynamicHeight"][1]["h"] = json!({})
        }),
    ];
    for (field, set) in cases {
        let mut d = full();
        set(&mut d);
        let e = err(&d);
        assert!(matches!(e, ImportError::Invalid { .. }), "{field}: {e}");
        assert_eq!(e.field(), field, "{e}");
    }
}

#[test]
fn values_out_of_range_name_the_field() {
    let cases: Vec<Case> = vec![
        ("scores[1]", |d| d["scores"][1] = json!(116)),
        ("scores[1]", |d| d["scores"][1] = json!(0)),
        ("scores[1]", |d| d["scores"][1] = json!(-1)),
        ("scores[1]", |d| d["scores"][1] = json!(-6)),
        ("scores[6]", |d| {
            d["scores"] = json!([115, 100, 14, -2, -3, -5, 90, -5])
        }),
        ("combos[2]", |d| d["combos"][2] = json!(-1)),
        ("noteTime", |d| {
            d["noteTime"].as_array_mut().unwrap().pop();
        }),
        ("combos", |d| {
            d["combos"].as_array_mut().unwrap().push(json!(0));
        }),
        ("noteInfos", |d| {
            d["noteInfos"].as_array_mut().unwrap().pop();
        }),
        ("noteInfos[2]", |d| d["noteInfos"][2] = json!("320")),
        ("noteInfos[2]", |d| d["noteInfos"][2] = json!("32011")),
        ("noteInfos[2]", |d| d["noteInfos"][2] = json!("32a1")),
        ("noteInfos[2]", |d| d["noteInfos"][2] = json!("3204")),
        ("noteInfos[2]", |d| d["noteInfos"][2] = json!("32\u{0661}1")),
        ("info.modifiers[0]", |d| {
            d["info"]["modifiers"][0] = json!("GN,FS")
        }),
        ("info.modifiers[0]", |d| {
            d["info"]["modifiers"][0] = json!("")
        }),
    ];
    for (field, set) in cases {
        let mut d = full();
        set(&mut d);
        let e = err(&d);
        assert_eq!(e.field(), field, "{e}");
    }
}

#[test]
fn absurd_counts_and_sizes() {
    let limits = ImportLimits {
        max_json_bytes: 4096,
        max_frames: 3,
        max_notes: 7,
        max_heights: 1,
        max_string_bytes: 16,
        max_modifiers: 1,
    };
    let run = |d: &Value| import(&bytes(d), &limits).unwrap_err();
    let mut d = full();
    d["scores"].as_array_mut().unwrap().truncate(6);
    d["combos"].as_array_mut().unwrap().truncate(6);
    d["noteTime"].as_array_mut().unwrap().truncate(6);
    d["frames"].as_array_mut().unwrap().truncate(3);
    d["dynamicHeight"].as_array_mut().unwrap().truncate(1);
    d["info"]["modifiers"] = json!(["GN"]);
    d["info"]["hash"] = json!("ABCDEF");
    d["info"]["environment"] = json!("Origins");
    import(&bytes(&d), &limits).unwrap();

    let mut big = d.clone();
    big["frames"]
        .as_array_mut()
        .unwrap()
        .push(frame(1.0, 90, 0.0));
    let e = run(&big);
    assert!(matches!(&e, ImportError::OverLimit { limit: 3, .. }), "{e}");
    assert!(e.field().starts_with("frames"), "{e}");
    for k in ["scores", "combos", "noteTime", "noteInfos"] {
        let mut big = d.clone();
        let a = big[k].as_array_mut().unwrap();
        let more = a[0].clone();
        a.extend([more.clone(), more]);
        let e = run(&big);
        assert!(
            matches!(&e, ImportError::OverLimit { limit: 7, .. }),
            "{k}: {e}"
        );
        assert!(e.field().starts_with(k), "{e}");
    }
    let mut big = d.clone();
    big["dynamicHeight"]
        .as_array_mut()
        .unwrap()
        .push(json!({"h": 1.0, "a": 1.0}));
    assert!(matches!(run(&big), ImportError::OverLimit { limit: 1, .. }));
    let mut big = d.clone();
    big["info"]["modifiers"] = json!(["GN", "FS"]);
    let e = run(&big);
    assert_eq!(e.field(), "info.modifiers", "{e}");
    let mut big = d.clone();
    big["info"]["hash"] = json!("A".repeat(17));
    let e = run(&big);
    assert_eq!(e.field(), "info.hash", "{e}");
    let mut big = d.clone();
    big["padding"] = json!("x".repeat(4096));
    assert!(matches!(
        run(&big),
        ImportError::TooLarge { limit: 4096, .. }
    ));

    // A count far past any limit is refused at the limit, without reading on.
    let mut huge = b"{\"info\":{\"hash\":\"\",\"difficulty\":9},\"scores\":[".to_vec();
    huge.extend(std::iter::repeat_n(&b"1,"[..], 300_000).flatten());
    huge.extend(b"1]}");
    let e = import(&huge, &ImportLimits::default()).unwrap_err();
    assert!(
        matches!(&e, ImportError::OverLimit { limit: 200_000, .. }),
        "{e}"
    );
}

#[test]
fn not_json_and_not_an_object() {
    for (doc, want_syntax) in [
        (&b""[..], true),
        (b"{", true),
        (b"{\"info\": ", true),
        (b"{} trailing", false),
        (b"[1, 2]", false),
        (b"null", false),
        (b"\xff\xfe{}", true),
        (
            b"{\"info\": {\"hash\": \"\\ud800\", \"difficulty\": 9}}",
            true,
        ),
    ] {
        let e = import(doc, &ImportLimits::default()).unwrap_err();
        if want_syntax {
            assert!(matches!(e, ImportError::Syntax { .. }), "{doc:?}: {e}");
        } else {
            assert!(e.to_string().contains("legacy replay JSON"), "{e}");
        }
    }
    // Duplicate fields are refused, not merged.
    let e = import(br#"{"frames": [], "frames": []}"#, &ImportLimits::default()).unwrap_err();
    assert!(e.to_string().contains("duplicate"), "{e}");
    // Deep nesting in a skipped field is skipped without recursion; in a read one it is
    // refused by the parser's depth limit. Neither overflows the stack.
    let mut deep = b"{\"x\":".to_vec();
    deep.extend(std::iter::repeat_n(b'[', 100_000));
    deep.extend(std::iter::repeat_n(b']', 100_000));
    deep.extend(b"}");
    let e = import(&deep, &ImportLimits::default()).unwrap_err();
    assert!(e.to_string().contains("missing field `info`"), "{e}");
    let mut deep = b"{\"info\":{\"hash\":\"\",\"difficulty\":9,\"environment\":".to_vec();
    deep.extend(std::iter::repeat_n(b'[', 100_000));
    let e = import(&deep, &ImportLimits::default()).unwrap_err();
    assert_eq!(e.field(), "info.environment", "{e}");
}
