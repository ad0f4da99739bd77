//! The fingerprint (proto-spec/integrity.md §11): the same digest and a matching score in
//! every profile and format; repeats that do not match and disguised copies that do.
#![cfg(feature = "integrity")]

use crate::common;

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::integrity::fingerprint::eval::{disguised_copy, Evaluation};
use bsor_stream_core::integrity::fingerprint::{event_digest, similarity, MotionSignature};
use bsor_stream_core::stream::{CustomSteps, Profile, Settings};
use bsor_stream_core::{synth, transcode};

fn synthetic(seed: u64) -> Replay {
    synth::replay(synth::Settings {
        seed,
        ..synth::Settings::default()
    })
}

/// The synthetic replays, and the corpus when it is there, each replay cut to its first
/// 40 seconds of notes (scripts/cross-test.sh runs this under qemu; the evaluation example
/// takes the whole replays).
fn bases() -> Vec<Replay> {
    let mut v = vec![synthetic(1), synthetic(2)];
    for (name, bytes) in common::corpus_files() {
        let mut r = bsor::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let end = r.notes.first().map_or(0.0, |n| n.event_time) + 40.0;
        r.frames.retain(|f| f.time < end);
        r.notes.retain(|n| n.event_time < end);
        r.walls.retain(|w| w.time < end);
        r.heights.retain(|h| h.time < end);
        r.pauses.retain(|p| p.time < end);
        assert!(r.notes.len() > 50, "{name}: {} notes", r.notes.len());
        v.push(r);
    }
    v
}

#[test]
fn every_profile_and_format_has_the_same_digest_and_matches() {
    let profiles = [
        Profile::Lossless,
        Profile::Fine,
        Profile::Compact,
        Profile::Custom(CustomSteps::new(2e-3, 360).unwrap()),
    ];
    for r in bases() {
        let digest = event_digest(&r);
        let sig = MotionSignature::of(&r);
        let bsor_back = bsor::parse(&bsor::to_vec(&r).unwrap()).unwrap();
        assert_eq!(event_digest(&bsor_back), digest);
        let mut settings: Vec<Settings> = profiles.map(Settings::archive).to_vec();
        settings.push(Settings::live(Profile::Lossless));
        for settings in settings {
            let p = settings.profile;
            let stream = transcode::encode_replay(&r, settings);
            let (back, rec) = transcode::decode_replay(&stream).unwrap();
            assert!(rec.complete);
            assert_eq!(event_digest(&back), digest, "{p:?}");
            let s = similarity(&sig, &MotionSignature::of(&back));
            assert!(s.same_play && s.score > 0.5, "{p:?}: {s:?}");
            // A disguised copy of the lossy stream still matches the original.
            let s = similarity(&sig, &MotionSignature::of(&disguised_copy(&back, 9)));
            assert!(s.same_play, "{p:?} copy: {s:?}");
        }
    }
}

#[test]
fn no_false_match_in_200_repeats_and_no_miss_in_100_copies() {
    let e = Evaluation::run(&bases(), 200, 100, 1);
    assert_eq!((e.repeats.len(), e.copies.len()), (200, 100));
    assert_eq!(e.false_matches(), 0, "repeats: {:?}", e.repeats.last());
    assert_eq!(e.misses(), 0, "copies: {:?}", e.copies.first());
}

#[test]
fn different_plays_do_not_match() {
    let a = MotionSignature::of(&synthetic(1));
    let b = MotionSignature::of(&synthetic(3));
    let s = similarity(&a, &b);
    assert!(!s.same_play && s.score == 0.0, "{s:?}");
    assert_ne!(event_digest(&synthetic(1)), event_digest(&synthetic(3)));
    // The same notes with other motion (the synthetic motion depends on the time only, so
    // shift it by 0.37 s): comparable, and not a match.
    let mut moved = synthetic(1);
    for f in &mut moved.frames {
        f.time += 0.37;
    }
    let s = similarity(&a, &MotionSignature::of(&moved));
    assert!(!s.same_play && s.matched == a.samples.len(), "{s:?}");
}

/// `proto-spec/vectors/fingerprint.json` (integrity.md §11.3): each file's event digest and
/// motion signature, and scores between them. `BLESS=1` rewrites it.
#[test]
fn the_fingerprint_vector_holds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-spec/vectors");
    let load = |name: &str| {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        if name.ends_with(".bsors") {
            transcode::decode_replay(&bytes).unwrap().0
        } else {
            bsor::parse(&bytes).unwrap()
        }
    };
    let files = [
        "synthetic.bsor",
        "synthetic.compact.bsors",
        "cuts.bsor",
        "cuts.compact.bsors",
        "cuts.compact.decoded.bsor",
    ];
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|&name| {
            let r = load(name);
            let sig = MotionSignature::of(&r);
            serde_json::json!({
                "file": name,
                "eventDigest": bsor_stream_core::integrity::hex(&event_digest(&r)),
                "motionHash": blake3::hash(&sig.to_bytes()).to_hex().to_string(),
                "motion": sig,
            })
        })
        .collect();
    let pairs = [
        ("cuts.bsor", "cuts.bsor"),
        ("cuts.bsor", "cuts.compact.decoded.bsor"),
        ("synthetic.bsor", "synthetic.compact.bsors"),
    ];
    let scores: Vec<serde_json::Value> = pairs
        .iter()
        .map(|&(a, b)| {
            let s = similarity(
                &MotionSignature::of(&load(a)),
                &MotionSignature::of(&load(b)),
            );
            serde_json::json!({
                "a": a, "b": b, "score": s.score, "matched": s.matched, "samePlay": s.same_play,
            })
        })
        .collect();
    let v = serde_json::json!({ "files": entries, "scores": scores });
    let path = dir.join("fingerprint.json");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
    }
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("fingerprint.json; BLESS=1 makes it"))
            .unwrap();
    assert_eq!(stored, v, "fingerprint.json is stale: BLESS=1 rewrites it");
    // What the vector shows: one digest per play whatever the profile.
    assert_eq!(v["files"][0]["eventDigest"], v["files"][1]["eventDigest"]);
    assert_eq!(v["files"][2]["eventDigest"], v["files"][3]["eventDigest"]);
    assert_eq!(v["scores"][1]["samePlay"], true);
}
