//! The command-line tool, run as a user would.

mod common;

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bsor-stream-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn synth_then_info_json() {
    let path = tmp("synth.bsor");
    let out = bin()
        .args([
            "synth",
            "--seconds",
            "30",
            "--fps",
            "72",
            "--seed",
            "9",
            "-o",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bin().arg("info").arg(&path).arg("--json").output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames"], 30 * 72);
    assert_eq!(v["playerName"], "Synthetic Player");
    assert_eq!(v["controllerOffsets"], true);
    assert!(v["userDataBytes"].as_u64().unwrap() > 0);
    assert!(v["walls"].as_u64().unwrap() > 0 || v["notes"].as_u64().unwrap() > 0);
    let d = v["durationSeconds"].as_f64().unwrap();
    assert!(d > 28.0 && d < 31.0, "{d}");
    assert_eq!(v["fps"]["median"], 72);
    let text = bin().arg("info").arg(&path).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("Synthetic Song") && text.contains("2160 frames"),
        "{text}"
    );
}

#[test]
fn info_json_agrees_with_expected_json() {
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    for e in expected.as_array().unwrap() {
        let name = e["file"].as_str().unwrap();
        let out = bin()
            .arg("info")
            .arg(dir.join(name))
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for key in [
            "frames",
            "notes",
            "walls",
            "heights",
            "pauses",
            "score",
            "songName",
            "difficulty",
            "mode",
            "controllerOffsets",
            "hmd",
            "platform",
        ] {
            assert_eq!(v[key], e[key], "{name}: {key}");
        }
        assert_eq!(v["modVersion"], e["modVersion"], "{name}");
        assert_eq!(
            v["noteEventTypes"]["good"], e["noteEventTypes"]["good"],
            "{name}"
        );
        let user_data = e
            .get("userDataBytes")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        assert_eq!(v["userDataBytes"], user_data, "{name}");
        assert!(v["durationSeconds"].as_f64().unwrap() > 60.0, "{name}");
    }
}

#[test]
fn export_writes_json_with_non_finite_floats_as_strings() {
    use bsor_stream::bsor;
    let mut r = bsor_stream::synth::replay(bsor_stream::synth::Settings {
        seed: 2,
        seconds: 1.0,
        fps: 10,
    });
    r.frames[1].time = f32::NAN;
    r.frames[2].head.position.x = f32::NEG_INFINITY;
    let path = tmp("nan.bsor");
    std::fs::write(&path, bsor::to_vec(&r).unwrap()).unwrap();
    let out = bin().arg("export").arg(&path).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frames"][1]["time"], "NaN");
    assert_eq!(v["frames"][2]["head"]["position"]["x"], "-Infinity");
    assert_eq!(v["frames"].as_array().unwrap().len(), 10);
    assert_eq!(v["info"]["playerName"], "Synthetic Player");
    assert!(v["notes"].is_array());
}

#[test]
fn errors_are_one_line_on_stderr_with_a_nonzero_exit() {
    let missing = tmp("does-not-exist.bsor");
    for args in [
        vec!["info".into(), missing.clone().into_os_string()],
        vec!["info".into(), std::env::temp_dir().into_os_string()],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("bsor-stream: error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
    // A truncated file names the section, field and byte.
    let r = bsor_stream::synth::replay(bsor_stream::synth::Settings::default());
    let bytes = bsor_stream::bsor::to_vec(&r).unwrap();
    let path = tmp("truncated.bsor");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let out = bin().arg("export").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("section frames") && err.contains("at byte"),
        "{err}"
    );
}
