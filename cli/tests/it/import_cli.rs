//! `bsor-stream import`: a legacy ScoreSaber replay JSON document to a BSOR, run as a user
//! would.

use std::process::Command;

use serde_json::json;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

fn pose(y: f64) -> serde_json::Value {
    json!({"r": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}, "p": {"x": 0.0, "y": y, "z": 0.0}})
}

fn doc() -> serde_json::Value {
    let frames: Vec<_> = (0..8)
        .map(|k| json!({"h": pose(1.7), "l": pose(1.0), "r": pose(1.1), "a": k as f64 / 90.0, "i": 90}))
        .collect();
    json!({
        "info": {"version": "2.0", "hash": "ABCDEF0123", "difficulty": 5, "mode": "Standard",
                 "environment": "NiceEnvironment", "modifiers": ["DA"],
                 "noteJumpStartBeatOffset": 0.0, "leftHanded": false, "height": 1.8},
        "frames": frames,
        "scores": [110, 105, -3, -5],
        "combos": [1, 2, 0, 0],
        "noteTime": [0.02, 0.04, 0.06, 0.07],
        "noteInfos": ["1000", "2101", "0083"],
        "dynamicHeight": []
    })
}

#[test]
fn import_writes_a_bsor_that_info_reads() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("legacy.json");
    let output = dir.path().join("legacy.bsor");
    std::fs::write(&input, serde_json::to_vec(&doc()).unwrap()).unwrap();
    let out = bin()
        .arg("import")
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("8 frames, 3 note events, 1 walls"), "{said}");
    let out = bin()
        .arg("info")
        .arg(&output)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames"], 8);
    assert_eq!(v["notes"], 3);
    assert_eq!(v["walls"], 1);
    assert_eq!(v["difficulty"], "Hard");
    assert_eq!(v["hash"], "ABCDEF0123");
    // 110×1 + 105×2: the cut scores survive the import.
    assert_eq!(v["score"], 320);
}

#[test]
fn import_refuses_a_bad_document_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.json");
    let output = dir.path().join("bad.bsor");
    let mut d = doc();
    d["frames"][5]["l"]["p"]["y"] = json!("high");
    std::fs::write(&input, serde_json::to_vec(&d).unwrap()).unwrap();
    let out = bin()
        .arg("import")
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("frames[5].l.p.y"), "{err}");
    assert!(!output.exists());
}

#[test]
fn import_xror_writes_the_same_play_as_bsor_and_as_a_stream() {
    let Some(corpus) = crate::common::corpus_dir() else {
        return;
    };
    let xror = corpus.join("sample1.xror");
    if !xror.is_file() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bsor = dir.path().join("sample1.bsor");
    let out = bin()
        .arg("import")
        .arg(&xror)
        .arg("-o")
        .arg(&bsor)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&bsor).unwrap() == std::fs::read(corpus.join("sample1.bsor")).unwrap());
    let stream = dir.path().join("sample1.bsors");
    let out = bin()
        .arg("import")
        .arg(&xror)
        .arg("-o")
        .arg(&stream)
        .output()
        .unwrap();
    assert!(out.status.success());
    let back = dir.path().join("back.bsor");
    let out = bin()
        .arg("decode")
        .arg(&stream)
        .arg("-o")
        .arg(&back)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&bsor).unwrap());
    // A cut XROR: one line naming what and where, exit 1, nothing written.
    let cut = dir.path().join("cut.xror");
    std::fs::write(&cut, &std::fs::read(&xror).unwrap()[..5000]).unwrap();
    let none = dir.path().join("none.bsor");
    let out = bin()
        .arg("import")
        .arg(&cut)
        .arg("-o")
        .arg(&none)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.xror") && err.contains("document"),
        "{err}"
    );
    assert!(!none.exists());
}
