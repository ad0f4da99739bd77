//! Regenerates the stream test vectors in `proto-spec/vectors/` (see its README) after a
//! deliberate change of the format:
//!
//! ```sh
//! cargo run --release --example make_vectors
//! ```
//!
//! `synthetic.bsor` is made again from the synthetic generator (and must come out the same);
//! `edge.bsor` is the input of record and is only read. Every stream, lossy decode and the
//! damaged stream with its expected recovery are written anew. Check the result with an
//! independent decoder before committing it: the vectors pin the format down.

use std::path::PathBuf;

use bsor_stream::bsor;
use bsor_stream::stream::{split_stream, Profile, Settings};
use bsor_stream::{synth, transcode};

fn dir() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "proto-spec", "vectors"]
        .iter()
        .collect()
}

fn write(name: &str, bytes: &[u8]) {
    std::fs::write(dir().join(name), bytes).expect("write vector");
    println!("{name}: {} bytes", bytes.len());
}

// Long: one block per vector file, in the order proto-spec/vectors/README.md lists them.
fn main() {
    let synthetic = synth::replay(synth::Settings {
        seed: 7,
        seconds: 3.0,
        fps: 30,
    });
    let synthetic_bytes = bsor::to_vec(&synthetic).expect("synthetic");
    let on_disk = std::fs::read(dir().join("synthetic.bsor")).unwrap_or_default();
    assert!(
        on_disk.is_empty() || on_disk == synthetic_bytes,
        "the synthetic generator changed: synthetic.bsor would differ"
    );
    write("synthetic.bsor", &synthetic_bytes);
    let edge = bsor::parse(&std::fs::read(dir().join("edge.bsor")).expect("edge.bsor"))
        .expect("edge.bsor parses");
    // A second of play with a height change every frame (format.md 11.3, "stepped").
    let mut heights = synth::replay(synth::Settings {
        seed: 11,
        seconds: 1.0,
        fps: 30,
    });
    heights.heights = heights
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| bsor::Height {
            height: 1.6 + 0.001 * (i as f32 * 0.3).sin(),
            time: f.time,
        })
        .collect();
    let heights_bytes = bsor::to_vec(&heights).expect("heights");
    write("heights.bsor", &heights_bytes);
    write(
        "heights.lossless.bsors",
        &transcode::encode_replay(&heights, Settings::live(Profile::Lossless)),
    );

    // Three seconds on a game clock that ticks in 2^-14 s, one time off it (format.md 10.7).
    let mut clock = synth::replay(synth::Settings {
        seed: 13,
        seconds: 3.0,
        fps: 30,
    });
    for f in &mut clock.frames {
        f.time = ((f64::from(f.time) * 16384.0).round() / 16384.0) as f32;
    }
    clock.frames[45].time = f32::from_bits(clock.frames[45].time.to_bits() + 1);
    write("clock.bsor", &bsor::to_vec(&clock).expect("clock"));
    let s = transcode::encode_replay(&clock, Settings::live(Profile::Compact));
    write("clock.compact.bsors", &s);
    let (back, rec) = transcode::decode_replay(&s).expect("decodes");
    assert!(rec.complete);
    write(
        "clock.compact.decoded.bsor",
        &bsor::to_vec(&back).expect("writes"),
    );

    let mut lossless_synthetic = Vec::new();
    for (source, replay) in [("synthetic", &synthetic), ("edge", &edge)] {
        for (profile, name) in [
            (Profile::Lossless, "lossless"),
            (Profile::Fine, "fine"),
            (Profile::Compact, "compact"),
        ] {
            let s = transcode::encode_replay(replay, Settings::live(profile));
            write(&format!("{source}.{name}.bsors"), &s);
            if profile != Profile::Lossless {
                let (back, rec) = transcode::decode_replay(&s).expect("decodes");
                assert!(rec.complete);
                write(
                    &format!("{source}.{name}.decoded.bsor"),
                    &bsor::to_vec(&back).expect("writes"),
                );
            } else if source == "synthetic" {
                lossless_synthetic = s;
            }
        }
    }
    for (profile, name) in [
        (Profile::Lossless, "lossless"),
        (Profile::Compact, "compact"),
    ] {
        let s = transcode::encode_replay(&synthetic, Settings::archive(profile));
        write(&format!("synthetic.archive.{name}.bsors"), &s);
    }

    // The damaged stream: the middle payload byte of the second frame chunk, inverted.
    let s = lossless_synthetic;
    let (_, _, list) = split_stream(&s).expect("stream");
    let frame_chunks: Vec<_> = list
        .iter()
        .filter(|c| matches!(c.header.kind.byte(), 1 | 2))
        .collect();
    let (offset, hlen, h) = (
        frame_chunks[1].offset,
        frame_chunks[1].header_len,
        frame_chunks[1].header,
    );
    let at = offset + hlen + h.len as usize / 2;
    let mut damaged = s.clone();
    damaged[at] = !damaged[at];
    write("damaged.bsors", &damaged);
    // What is lost follows from the format: the damaged chunk and the rest of its group.
    let group_end = frame_chunks
        .iter()
        .skip(2)
        .find(|c| c.header.kind.byte() == 1)
        .map_or(synthetic.frames.len() as u32, |c| c.header.first);
    let lost = group_end - h.first;
    let (_, rec) = transcode::decode_replay(&damaged).expect("decodes");
    let damage: Vec<serde_json::Value> = rec
        .damage
        .iter()
        .map(|d| serde_json::json!({ "offset": d.offset, "skipped_bytes": d.skipped_bytes, "what": d.what() }))
        .collect();
    let json = serde_json::json!({
        "file": "damaged.bsors",
        "made_from": "synthetic.lossless.bsors",
        "flipped_offset": at,
        "original_byte": s[at],
        "damaged_byte": damaged[at],
        "damaged_chunk": {
            "offset": offset, "type": h.kind.byte(), "seq": h.seq, "first": h.first,
            "count": h.count, "payload_len": h.len,
        },
        "frames_recovered": synthetic.frames.len() as u32 - lost,
        "frame_ranges_recovered": [[0, h.first], [group_end, synthetic.frames.len()]],
        "events_recovered": synthetic.notes.len() + synthetic.walls.len()
            + synthetic.heights.len() + synthetic.pauses.len(),
        "events_are_all_of_synthetic_bsor": true,
        "complete": false,
        "reference_decoder": {
            "frames_lost": rec.stats.frames_lost,
            "events_lost": rec.stats.events_lost,
            "bytes_skipped": rec.stats.bytes_skipped,
            "damage": damage,
        },
    });
    let text = serde_json::to_string_pretty(&json).expect("json") + "\n";
    write("damaged.expected.json", text.as_bytes());
}
