//! The test vectors of `proto-spec/vectors/` (see its README): every stream decodes to its
//! expected BSOR byte for byte, re-encoding its source reproduces it byte for byte, and the
//! damaged stream recovers exactly what `damaged.expected.json` says.

use std::path::PathBuf;

use bsor_stream::bsor;
use bsor_stream::stream::{Profile, Settings};
use bsor_stream::transcode;

fn vector(name: &str) -> Vec<u8> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "proto-spec", "vectors", name]
        .iter()
        .collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (stream, source BSOR, settings it was encoded with, BSOR it decodes to)
fn streams() -> Vec<(&'static str, &'static str, Settings, &'static str)> {
    use Profile::{Compact, Fine, Lossless};
    let (live, archive) = (Settings::live, Settings::archive);
    vec![
        (
            "heights.lossless.bsors",
            "heights.bsor",
            live(Lossless),
            "heights.bsor",
        ),
        (
            "clock.compact.bsors",
            "clock.bsor",
            live(Compact),
            "clock.compact.decoded.bsor",
        ),
        (
            "synthetic.lossless.bsors",
            "synthetic.bsor",
            live(Lossless),
            "synthetic.bsor",
        ),
        (
            "synthetic.fine.bsors",
            "synthetic.bsor",
            live(Fine),
            "synthetic.fine.decoded.bsor",
        ),
        (
            "synthetic.compact.bsors",
            "synthetic.bsor",
            live(Compact),
            "synthetic.compact.decoded.bsor",
        ),
        (
            "synthetic.archive.lossless.bsors",
            "synthetic.bsor",
            archive(Lossless),
            "synthetic.bsor",
        ),
        (
            "synthetic.archive.compact.bsors",
            "synthetic.bsor",
            archive(Compact),
            "synthetic.compact.decoded.bsor",
        ),
        (
            "edge.lossless.bsors",
            "edge.bsor",
            live(Lossless),
            "edge.bsor",
        ),
        (
            "edge.fine.bsors",
            "edge.bsor",
            live(Fine),
            "edge.fine.decoded.bsor",
        ),
        (
            "edge.compact.bsors",
            "edge.bsor",
            live(Compact),
            "edge.compact.decoded.bsor",
        ),
        (
            "cuts.lossless.bsors",
            "cuts.bsor",
            live(Lossless),
            "cuts.bsor",
        ),
        (
            "cuts.compact.bsors",
            "cuts.bsor",
            live(Compact),
            "cuts.compact.decoded.bsor",
        ),
        (
            "nonfinite.lossless.bsors",
            "nonfinite.bsor",
            live(Lossless),
            "nonfinite.bsor",
        ),
        (
            "nonfinite.compact.bsors",
            "nonfinite.bsor",
            live(Compact),
            "nonfinite.compact.decoded.bsor",
        ),
        (
            "turns.fine.bsors",
            "turns.bsor",
            live(Fine),
            "turns.fine.decoded.bsor",
        ),
        (
            "turns.compact.bsors",
            "turns.bsor",
            live(Compact),
            "turns.compact.decoded.bsor",
        ),
    ]
}

#[test]
fn every_stream_decodes_to_its_expected_bsor() {
    for (stream, _, _, expected) in streams() {
        let (replay, rec) =
            transcode::decode_replay(&vector(stream)).unwrap_or_else(|e| panic!("{stream}: {e}"));
        assert!(rec.complete, "{stream}: {rec:?}");
        assert!(rec.damage.is_empty(), "{stream}: {:?}", rec.damage);
        let bytes = bsor::to_vec(&replay).unwrap();
        assert!(
            bytes == vector(expected),
            "{stream} does not decode to {expected}"
        );
    }
}

#[test]
fn encoding_the_source_reproduces_every_stream() {
    for (stream, source, settings, _) in streams() {
        let replay = bsor::parse(&vector(source)).unwrap_or_else(|e| panic!("{source}: {e}"));
        assert!(
            bsor::to_vec(&replay).unwrap() == vector(source),
            "{source} round trip"
        );
        let encoded = transcode::encode_replay(&replay, settings);
        let want = vector(stream);
        if encoded != want {
            let at = encoded.iter().zip(&want).position(|(a, b)| a != b);
            panic!(
                "encoding {source} with {settings:?} does not reproduce {stream}: {} vs {} bytes, \
                 first difference at {at:?}",
                encoded.len(),
                want.len()
            );
        }
    }
}

#[test]
fn lossy_decodes_are_within_the_profile_bounds() {
    use bsor_stream::stream::accuracy::{position_error_mm, rotation_error_deg};
    for (stream, source, settings, expected) in streams() {
        let (max_mm, max_deg) = match settings.profile {
            Profile::Lossless => continue,
            Profile::Fine => (0.1, 0.02),
            Profile::Compact => (1.0, 0.2),
        };
        let original = bsor::parse(&vector(source)).unwrap();
        let decoded = bsor::parse(&vector(expected)).unwrap();
        assert_eq!(original.frames.len(), decoded.frames.len(), "{stream}");
        for (a, b) in original.frames.iter().zip(&decoded.frames) {
            assert_eq!(a.time.to_bits(), b.time.to_bits(), "{stream}: time is kept");
            assert_eq!(a.fps, b.fps, "{stream}: fps is kept");
            for (p, q) in [
                (&a.head, &b.head),
                (&a.left_hand, &b.left_hand),
                (&a.right_hand, &b.right_hand),
            ] {
                match position_error_mm(&p.position, &q.position) {
                    Some(e) => assert!(e <= max_mm, "{stream} t={}: {e} mm", a.time),
                    None => assert_eq!(
                        [p.position.x, p.position.y, p.position.z].map(f32::to_bits),
                        [q.position.x, q.position.y, q.position.z].map(f32::to_bits),
                        "{stream} t={}",
                        a.time
                    ),
                }
                match rotation_error_deg(&p.rotation, &q.rotation) {
                    Some(e) => assert!(e <= max_deg, "{stream} t={}: {e}°", a.time),
                    // Not a rotation: passed through verbatim (an escape).
                    None => assert_eq!(
                        [p.rotation.x, p.rotation.y, p.rotation.z, p.rotation.w].map(f32::to_bits),
                        [q.rotation.x, q.rotation.y, q.rotation.z, q.rotation.w].map(f32::to_bits),
                        "{stream} t={}",
                        a.time
                    ),
                }
            }
        }
        // Everything but the frames' poses is the original's.
        let without_poses = |r: &bsor::Replay| {
            let mut r = r.clone();
            for f in &mut r.frames {
                f.head = Default::default();
                f.left_hand = Default::default();
                f.right_hand = Default::default();
            }
            bsor::to_vec(&r).unwrap()
        };
        assert!(
            without_poses(&original) == without_poses(&decoded),
            "{stream}"
        );
    }
}

#[test]
fn damaged_stream_recovers_what_its_json_says() {
    let json: serde_json::Value =
        serde_json::from_slice(&vector("damaged.expected.json")).expect("damaged.expected.json");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));

    // The file is the lossless stream with exactly the one byte changed.
    let original = vector(json["made_from"].as_str().unwrap());
    let damaged = vector(json["file"].as_str().unwrap());
    let at = n(&json["flipped_offset"]) as usize;
    assert_eq!(original.len(), damaged.len());
    let differ: Vec<usize> = (0..original.len())
        .filter(|&i| original[i] != damaged[i])
        .collect();
    assert_eq!(differ, [at]);
    assert_eq!(u64::from(original[at]), n(&json["original_byte"]));
    assert_eq!(u64::from(damaged[at]), n(&json["damaged_byte"]));
    let chunk = &json["damaged_chunk"];
    let start = n(&chunk["offset"]) as usize;
    assert!(at > start && at < start + 35 + n(&chunk["payload_len"]) as usize);

    let (replay, rec) = transcode::decode_replay(&damaged).unwrap();
    assert_eq!(rec.complete, json["complete"].as_bool().unwrap());
    assert!(!rec.complete);
    assert_eq!(rec.frames, n(&json["frames_recovered"]));
    assert_eq!(rec.events, n(&json["events_recovered"]));

    // The recovered frames are exactly the listed ranges of the source, bit for bit.
    let source = bsor::parse(&vector("synthetic.bsor")).unwrap();
    let mut want = Vec::new();
    for range in json["frame_ranges_recovered"].as_array().unwrap() {
        let (a, b) = (n(&range[0]) as usize, n(&range[1]) as usize);
        want.extend(source.frames[a..b].iter().map(bsor::encode_frame));
    }
    let got: Vec<_> = replay.frames.iter().map(bsor::encode_frame).collect();
    assert!(
        got == want,
        "recovered frames differ from the listed ranges"
    );
    assert_eq!(want.len() as u64, rec.frames);

    // Every event survives, in order.
    assert!(json["events_are_all_of_synthetic_bsor"].as_bool().unwrap());
    let events = |r: &bsor::Replay| {
        bsor::to_vec(&bsor::Replay {
            info: Default::default(),
            frames: Vec::new(),
            ..r.clone()
        })
        .unwrap()
    };
    assert!(events(&replay) == events(&source));

    // This decoder's own report.
    let reference = &json["reference_decoder"];
    assert_eq!(rec.stats.frames_lost, n(&reference["frames_lost"]));
    assert_eq!(rec.stats.events_lost, n(&reference["events_lost"]));
    assert_eq!(rec.stats.bytes_skipped, n(&reference["bytes_skipped"]));
    let damage: Vec<(u64, u64)> = reference["damage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (n(&d["offset"]), n(&d["skipped_bytes"])))
        .collect();
    let got: Vec<(u64, u64)> = rec
        .damage
        .iter()
        .map(|d| (d.offset, d.skipped_bytes))
        .collect();
    assert_eq!(got, damage);
    assert_eq!(
        rec.damage[0].what(),
        reference["damage"][0]["what"].as_str().unwrap()
    );
}
