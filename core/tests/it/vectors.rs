//! The test vectors of `proto-spec/vectors/` (see its README): every stream decodes to its
//! expected BSOR byte for byte, re-encoding its source reproduces it byte for byte, and the
//! damaged stream recovers exactly what `damaged.expected.json` says.

use std::path::PathBuf;

use bsor_stream_core::bsor;
use bsor_stream_core::stream::{CustomSteps, Profile, Settings};
use bsor_stream_core::transcode;

fn vector(name: &str) -> Vec<u8> {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "proto-spec",
        "vectors",
        name,
    ]
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
            "synthetic.custom.bsors",
            "synthetic.bsor",
            live(Profile::Custom(CustomSteps::new(5e-4, 1000).unwrap())),
            "synthetic.custom.decoded.bsor",
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
    use bsor_stream_core::stream::accuracy::{position_error_mm, rotation_error_deg};
    for (stream, source, settings, expected) in streams() {
        let (max_mm, max_deg) = match settings.profile {
            Profile::Lossless => continue,
            Profile::Fine => (0.1, 0.02),
            Profile::Compact => (1.0, 0.2),
            // The custom bounds: step / 1.153 and 72° / M.
            Profile::Custom(c) => (c.bounds().0, 72.0 / f64::from(c.rotation_steps())),
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

/// `v` as a LEB128 varint of `n` bytes (overlong when `n` is more than it needs).
fn varint(mut v: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            let b = (v & 0x7f) as u8 | if i + 1 < n { 0x80 } else { 0 };
            v >>= 7;
            b
        })
        .collect()
}

/// A chunk header: sync, type, the four varints in the given byte counts, both CRCs.
fn chunk_header(
    kind: u8,
    h: &bsor_stream_core::stream::ChunkHeader,
    seq: u32,
    n: [usize; 4],
) -> Vec<u8> {
    let mut out = vec![0xb5, kind];
    out.extend(varint(seq.into(), n[0]));
    out.extend(varint(h.first.into(), n[1]));
    out.extend(varint(h.count.into(), n[2]));
    out.extend(h.t0.to_le_bytes());
    out.extend(varint(h.len.into(), n[3]));
    out.extend(h.payload_crc.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// The hand-made streams, made again from `synthetic.lossless.bsors` as the README says.
fn hand_made(name: &str) -> Vec<u8> {
    use bsor_stream_core::stream::{footer, split_stream, ChunkType};
    let s = vector("synthetic.lossless.bsors");
    let (_, _, list) = split_stream(&s).unwrap();
    let index = list.last().unwrap();
    let (at, h) = (index.offset, index.header);
    let body = &s[at + index.header_len..at + index.len];
    let kind = |c: &&bsor_stream_core::stream::ChunkSpan| c.header.kind;
    let mut out;
    match name {
        "overlong.bsors" => {
            out = s[..at].to_vec();
            out.extend(chunk_header(5, &h, h.seq, [5, 10, 3, 4]));
            out.extend_from_slice(&s[at + index.header_len..]);
        }
        "unknown.bsors" | "critical.bsors" => {
            let t = if name == "unknown.bsors" { 0x06 } else { 0x86 };
            out = s[..at].to_vec();
            let mut extra = h;
            extra.count = 0;
            extra.len = 5;
            extra.payload_crc = crc32fast::hash(b"extra");
            out.extend(chunk_header(t, &extra, h.seq, [1; 4]));
            out.extend_from_slice(b"extra");
            let new_at = out.len() as u64;
            out.extend(chunk_header(5, &h, h.seq + 1, [1; 4]));
            out.extend_from_slice(body);
            out.extend(footer(new_at));
        }
        "stray.bsors" => {
            let third = list
                .iter()
                .filter(|c| matches!(kind(c), ChunkType::Keyframes | ChunkType::Frames))
                .nth(2)
                .unwrap()
                .offset;
            out = s[..third].to_vec();
            out.extend_from_slice(&[0x00, 0xb5, 0x01, 0x02, 0x03, 0xb5, 0xff]);
            out.extend_from_slice(&s[third..]);
        }
        "gap.bsors" => {
            let e = list
                .iter()
                .filter(|c| kind(c) == ChunkType::Events)
                .nth(1)
                .unwrap();
            out = s[..e.offset].to_vec();
            out.extend_from_slice(&s[e.offset + e.len..]);
        }
        _ => panic!("{name}"),
    }
    out
}

#[test]
fn hand_made_streams_are_their_recipes() {
    for name in [
        "overlong.bsors",
        "unknown.bsors",
        "critical.bsors",
        "stray.bsors",
        "gap.bsors",
    ] {
        assert!(hand_made(name) == vector(name), "{name} is not its recipe");
    }
}

#[test]
fn overlong_varints_and_skippable_chunks_are_accepted() {
    let synthetic = vector("synthetic.bsor");
    for name in ["overlong.bsors", "unknown.bsors"] {
        let (replay, rec) = transcode::decode_replay(&vector(name)).unwrap();
        assert!(rec.complete && rec.damage.is_empty(), "{name}: {rec:?}");
        assert!(bsor::to_vec(&replay).unwrap() == synthetic, "{name}");
    }
    // The unknown chunk is reported as skipped, with its offset and type.
    let mut d = bsor_stream_core::stream::StreamDecoder::new();
    d.push(&vector("unknown.bsors"));
    d.finish();
    let mut skipped = Vec::new();
    while let Some(item) = d.next_item().unwrap() {
        if let bsor_stream_core::stream::StreamItem::Skipped { offset, kind } = item {
            skipped.push((offset, kind));
        }
    }
    assert_eq!(skipped, [(5769, 6)]);
}

#[test]
fn damaged_hand_made_streams_recover_what_their_json_says() {
    let source = bsor::parse(&vector("synthetic.bsor")).unwrap();
    for name in ["critical", "stray", "gap"] {
        let json: serde_json::Value =
            serde_json::from_slice(&vector(&format!("{name}.expected.json"))).unwrap();
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{name}: {v}"));
        let result = transcode::decode_replay(&vector(&format!("{name}.bsors")));
        if let Some(error) = json.get("error") {
            let e = result.err().unwrap_or_else(|| panic!("{name} decodes"));
            assert!(matches!(
                e,
                bsor_stream_core::stream::StreamError::CriticalChunk {
                    offset: 5769,
                    seq: 32,
                    kind: 0x86
                }
            ));
            assert_eq!(e.to_string(), error.as_str().unwrap(), "{name}");
            continue;
        }
        let (replay, rec) = result.unwrap();
        assert_eq!(rec.complete, json["complete"].as_bool().unwrap(), "{name}");
        assert_eq!(rec.frames, n(&json["frames_recovered"]), "{name}");
        assert_eq!(rec.events, n(&json["events_recovered"]), "{name}");
        let pick = |key: &str, all: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
            json[key]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| all[n(&r[0]) as usize..n(&r[1]) as usize].to_vec())
                .collect()
        };
        let frames = |r: &bsor::Replay| -> Vec<Vec<u8>> {
            r.frames
                .iter()
                .map(|f| bsor::encode_frame(f).to_vec())
                .collect()
        };
        let notes = |r: &bsor::Replay| -> Vec<Vec<u8>> {
            r.notes
                .iter()
                .map(|x| {
                    let mut v = Vec::new();
                    bsor::encode_note(x, &mut v);
                    v
                })
                .collect()
        };
        assert!(
            frames(&replay) == pick("frame_ranges_recovered", frames(&source)),
            "{name}"
        );
        assert!(
            notes(&replay) == pick("note_ranges_recovered", notes(&source)),
            "{name}"
        );
        assert!(
            replay.walls == source.walls && replay.heights == source.heights,
            "{name}"
        );
        let reference = &json["reference_decoder"];
        assert_eq!(
            rec.stats.frames_lost,
            n(&reference["frames_lost"]),
            "{name}"
        );
        assert_eq!(
            rec.stats.events_lost,
            n(&reference["events_lost"]),
            "{name}"
        );
        assert_eq!(
            rec.stats.bytes_skipped,
            n(&reference["bytes_skipped"]),
            "{name}"
        );
        let want: Vec<(u64, u64, &str)> = reference["damage"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    n(&d["offset"]),
                    n(&d["skipped_bytes"]),
                    d["what"].as_str().unwrap(),
                )
            })
            .collect();
        let got: Vec<(u64, u64, String)> = rec
            .damage
            .iter()
            .map(|d| (d.offset, d.skipped_bytes, d.what().to_string()))
            .collect();
        let got: Vec<(u64, u64, &str)> = got.iter().map(|(a, b, c)| (*a, *b, c.as_str())).collect();
        assert_eq!(got, want, "{name}");
    }
}

/// `resume.key`: a relay's key file (wire.md §4.1), byte for byte.
#[cfg(feature = "net")]
#[test]
fn the_key_file_is_its_recipe() {
    use bsor_stream_core::net::relay::ResumeKey;
    let key: [u8; 16] = std::array::from_fn(|i| i as u8);
    let want = vector("resume.key");
    let made = ResumeKey::new(&key, Some("76561190000000000".into()));
    assert_eq!(made.to_bytes(), want);
    let parsed = ResumeKey::parse(&want).unwrap();
    assert!(parsed.proves(&key));
    assert_eq!(parsed.player.as_deref(), Some("76561190000000000"));
}
