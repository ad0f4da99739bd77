//! `encode --profile custom`, `info` and `verify` with custom steps.

use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

#[test]
fn encode_info_and_verify_with_custom_steps() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("s.bsor");
    let out = bin()
        .args(["synth", "--seconds", "5", "--seed", "9", "-o"])
        .arg(&replay)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stream = dir.path().join("s.bsors");
    let encode = |extra: &[&str]| {
        bin()
            .arg("encode")
            .arg(&replay)
            .arg("-o")
            .arg(&stream)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = encode(&[
        "--profile",
        "custom",
        "--position-step-mm",
        "0.5",
        "--rotation-step-deg",
        "0.1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&stream).unwrap();
    assert_eq!(bytes[5], 3, "profile byte");
    let out = bin()
        .arg("info")
        .arg(&stream)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    // M = round(sqrt(2) * 180 / pi / 0.1) = 810.
    assert_eq!(info["profile"], "custom 0.5000 mm / 0.1000° (M 810)");

    // Out of range, missing or stray steps are refused, naming what is wrong.
    for (args, says) in [
        (
            &[
                "--profile",
                "custom",
                "--position-step-mm",
                "80",
                "--rotation-step-deg",
                "0.1",
            ][..],
            "position step out of range",
        ),
        (
            &[
                "--profile",
                "custom",
                "--position-step-mm",
                "1",
                "--rotation-step-deg",
                "5",
            ][..],
            "rotation steps out of range",
        ),
        (&["--profile", "custom"][..], "needs --position-step-mm"),
        (
            &[
                "--profile",
                "fine",
                "--position-step-mm",
                "1",
                "--rotation-step-deg",
                "0.1",
            ][..],
            "go with --profile custom",
        ),
    ] {
        let out = encode(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let out = bin()
        .arg("verify")
        .arg(&replay)
        .args([
            "--json",
            "--position-step-mm",
            "2",
            "--rotation-step-deg",
            "0.5",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let custom = &rows[3];
    assert_eq!(custom["profile"], "custom 2.0000 mm / 0.5002° (M 162)");
    assert!(custom["ok"].as_bool().unwrap());
    assert!(custom["maxPositionErrorMm"].as_f64().unwrap() > 0.0);
    assert!(custom["maxPositionErrorMm"].as_f64().unwrap() <= 2.0 / 1.153);
    assert!(custom["maxRotationErrorDeg"].as_f64().unwrap() <= 72.0 / 162.0);
}
