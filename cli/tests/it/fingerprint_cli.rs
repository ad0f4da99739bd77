//! `fingerprint`, `similar` and the fingerprint in `verify --signatures --json`, run as a
//! user would.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &OsStr {
    s.as_ref()
}

fn synth(path: &Path, seed: &str) {
    let out = run(&[
        os("synth"),
        os("--seconds"),
        os("20"),
        os("--seed"),
        os(seed),
        os("-o"),
        path.as_os_str(),
    ]);
    assert!(out.status.success());
}

fn digest(path: &Path) -> String {
    let out = run(&[os("fingerprint"), path.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn similar(a: &Path, b: &Path) -> (Option<i32>, serde_json::Value) {
    let out = run(&[os("similar"), a.as_os_str(), b.as_os_str(), os("--json")]);
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn a_bsor_and_its_streams_are_the_same_play() {
    let dir = tempfile::tempdir().unwrap();
    let bsor = dir.path().join("play.bsor");
    synth(&bsor, "5");
    let d = digest(&bsor);
    assert_eq!(d.len(), 64);
    assert!(d.bytes().all(|c| c.is_ascii_hexdigit()));
    for profile in ["lossless", "compact"] {
        let stream = dir.path().join(format!("{profile}.bsors"));
        let out = run(&[
            os("encode"),
            bsor.as_os_str(),
            os("-o"),
            stream.as_os_str(),
            os("--profile"),
            os(profile),
        ]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(digest(&stream), d, "{profile}");
        let (code, v) = similar(&bsor, &stream);
        assert_eq!(code, Some(0), "{v}");
        assert_eq!(v["verdict"], "same play");
        assert_eq!(v["sameDigest"], true);
        assert!(v["score"].as_f64().unwrap() >= v["threshold"].as_f64().unwrap());
    }

    let out = run(&[os("fingerprint"), bsor.as_os_str(), os("--json")]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["eventDigest"], d.as_str());
    let samples = v["motion"]["samples"].as_array().unwrap();
    assert!(samples.len() > 20);
    assert_eq!(samples[0]["poses"].as_array().unwrap().len(), 3);

    // A signed stream reports the same digest as its fingerprint.
    let key = dir.path().join("k.key");
    let signed = dir.path().join("signed.bsors");
    assert!(run(&[os("keygen"), os("-o"), key.as_os_str()])
        .status
        .success());
    let sign = [
        os("sign"),
        bsor.as_os_str(),
        os("--key"),
        key.as_os_str(),
        os("-o"),
        signed.as_os_str(),
    ];
    assert!(run(&sign).status.success());
    let out = run(&[
        os("verify"),
        os("--signatures"),
        os("--json"),
        signed.as_os_str(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fingerprint"], d.as_str());
}

#[test]
fn two_synthetic_plays_of_different_seeds_are_different() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.bsor"), dir.path().join("b.bsor"));
    synth(&a, "5");
    synth(&b, "6");
    assert_ne!(digest(&a), digest(&b));
    let (code, v) = similar(&a, &b);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["verdict"], "different play");
    assert_eq!(v["sameDigest"], false);
    let out = run(&[os("similar"), a.as_os_str(), b.as_os_str()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("different play") && text.contains("digests  different"));
}
