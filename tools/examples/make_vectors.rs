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

use bsor_stream::bsor::{self, NoteOutcome, Quat, Replay};
use bsor_stream::stream::{
    footer, split_stream, ChunkSpan, ChunkType, CustomSteps, Profile, Settings,
};
use bsor_stream::{synth, transcode};

fn dir() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "proto-spec", "vectors"]
        .iter()
        .collect()
}

fn write(name: &str, bytes: &[u8]) {
    std::fs::write(dir().join(name), bytes).expect("write vector");
    println!("{name}: {} bytes", bytes.len());
}

/// `bsor_v1` written, and encoded with every `(profile, name)` given: `name.bsor`,
/// `name.PROFILE.bsors` and, for a lossy profile, `name.PROFILE.decoded.bsor`.
fn write_replay(name: &str, replay: &Replay, profiles: &[Profile]) {
    write(&format!("{name}.bsor"), &bsor::to_vec(replay).expect(name));
    for &profile in profiles {
        let p = format!("{profile:?}").to_lowercase();
        let s = transcode::encode_replay(replay, Settings::live(profile));
        write(&format!("{name}.{p}.bsors"), &s);
        let (back, rec) = transcode::decode_replay(&s).expect("decodes");
        assert!(rec.complete && rec.damage.is_empty(), "{name}.{p}");
        let bytes = bsor::to_vec(&back).expect("writes");
        if profile == Profile::Lossless {
            assert!(
                bytes == bsor::to_vec(replay).expect(name),
                "{name}: lossless"
            );
        } else {
            write(&format!("{name}.{p}.decoded.bsor"), &bytes);
        }
    }
}

/// Cut angles on both sides of the wrap, and NaN predictions of every computed event field
/// (format.md 11.3): `cuts.bsor`.
fn cuts() -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed: 17,
        seconds: 2.0,
        fps: 30,
    });
    let template = *r
        .notes
        .iter()
        .find(|n| n.outcome.cut().is_some())
        .expect("a cut");
    let cut = template.outcome.cut().copied().expect("a cut");
    let note = |i: usize, event_time: f32, spawn_time: f32, dev: f32, angle: f32| {
        let mut c = cut;
        c.cut_dir_deviation = dev;
        c.cut_angle = angle;
        c.time_deviation = spawn_time - event_time;
        bsor::NoteEvent {
            note_id: template.note_id + i as i32,
            event_time,
            spawn_time,
            outcome: NoteOutcome::Good(c),
        }
    };
    let nan = f32::NAN;
    r.notes = vec![
        // Deviation below -90: the angle is predicted as deviation + 270.
        note(0, 0.2, -0.8, -100.0, 170.0),
        note(1, 0.3, -0.7, -179.5, 90.5),
        // -90 exactly: deviation - 90 = -180 is not below -180, no wrap.
        note(2, 0.4, -0.6, -90.0, -180.0),
        note(3, 0.5, -0.5, -90.25, 179.75),
        // Above -90: deviation - 90.
        note(4, 0.6, -0.4, 30.0, -60.0),
        // NaN deviation: the angle's prediction is the previous angle.
        note(5, 0.7, -0.3, nan, -60.0),
        // Infinite deviation: -inf - 90 is below -180, -inf + 270 = -inf (not NaN).
        note(6, 0.8, -0.2, f32::NEG_INFINITY, 12.0),
        // Infinite times: the time deviation spawn - event = inf - inf is NaN (its
        // prediction is the previous time deviation), and so is the next note's spawn
        // prediction (its event time less the gap inf - inf).
        note(7, f32::INFINITY, f32::INFINITY, 5.0, -85.0),
        note(8, 1.0, 0.0, 6.0, -84.0),
    ];
    // A wall whose time is NaN: the next wall's spawn prediction is NaN.
    r.walls = vec![
        bsor::Wall {
            wall_id: 1,
            energy: 0.9,
            time: nan,
            spawn_time: 0.1,
        },
        bsor::Wall {
            wall_id: 2,
            energy: 0.8,
            time: 0.5,
            spawn_time: -0.5,
        },
    ];
    // A height at a NaN time: the next two stepped predictions (a + (a - b)) are NaN.
    r.heights = [0.3, 0.4, nan, 0.6, 0.7, 0.8]
        .iter()
        .enumerate()
        .map(|(i, &time)| bsor::Height {
            height: 1.6 + i as f32 * 0.01,
            time,
        })
        .collect();
    r
}

/// Non-finite values where the frame predictions fall back (format.md 9.3, 10.4):
/// `nonfinite.bsor`.
fn nonfinite() -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed: 19,
        seconds: 1.0,
        fps: 30,
    });
    let f = &mut r.frames;
    // Lossless extrapolation 2a - b: NaN in (frames 6 and 7), and inf - inf (frame 10).
    f[5].left_hand.position.x = f32::NAN;
    f[8].head.position.y = f32::INFINITY;
    f[9].head.position.y = f32::INFINITY;
    // A signalling NaN time: the time from the fps (NaN + 1/fps) is not finite, so frame
    // 13's time is predicted by extrapolation, which gives the NaN's own bits.
    f[12].time = f32::from_bits(0x7f80_0001);
    // Escaped hand rotations whose saber axis is huge (frames 15 to 17) or infinite and NaN
    // (24 to 26, 28 to 30): the lossy saber term falls back to 0.
    f[15].left_hand.rotation = Quat {
        x: 1e5,
        y: 0.0,
        z: 0.0,
        w: 1.0,
    };
    f[24].right_hand.rotation = Quat {
        x: f32::INFINITY,
        y: 1.0,
        z: 1.0,
        w: 1.0,
    };
    f[28].right_hand.rotation = Quat {
        x: f32::NAN,
        y: 0.0,
        z: 0.0,
        w: 1.0,
    };
    r
}

/// Changes of the largest rotation component whose base needs the sign flip, and ties in
/// the rounding of the lossy saber term (format.md 10.4, 10.5): `turns.bsor`.
fn turns() -> Replay {
    let mut r = synth::replay(synth::Settings {
        seed: 23,
        seconds: 1.0,
        fps: 30,
    });
    let unit = |x: f32, y: f32, z: f32, w: f32| {
        let n = (x * x + y * y + z * z + w * w).sqrt();
        Quat {
            x: x / n,
            y: y / n,
            z: z / n,
            w: w / n,
        }
    };
    let f = &mut r.frames;
    // Head: w largest with x negative, then x largest (the predicted x is negative: the base
    // is the negated prediction), then w largest again (the predicted w, of a rotation with
    // x positive, is negative).
    let (a, b) = (unit(-0.6, 0.1, 0.2, 0.75), unit(-0.8, 0.1, 0.2, 0.55));
    for (i, q) in [(18, a), (19, a), (20, b), (21, a), (22, a)] {
        f[i].head.rotation = q;
    }
    // Hands: escaped rotations (not unit) with saber axes (0, 0, 1), (0, 0, 1) and then one
    // whose x is exactly -1.5 / k (left) and 4.5 / k (right), k = 0.15 / step: ties.
    let zero = Quat {
        x: 0.0,
        y: 0.0,
        z: 0.0,
        w: 0.0,
    };
    let q = |x: u32, y: u32, z: u32, w: u32| Quat {
        x: f32::from_bits(x),
        y: f32::from_bits(y),
        z: f32::from_bits(z),
        w: f32::from_bits(w),
    };
    for i in [8, 9] {
        f[i].left_hand.rotation = zero;
        f[i].right_hand.rotation = zero;
    }
    f[10].left_hand.rotation = q(0xbcbc_e854, 0x2fe0_7038, 0x3e80_0000, 0x3e92_0000);
    f[10].right_hand.rotation = q(0x3d8d_ae3f, 0xb085_90b2, 0x3e80_0000, 0x3eb8_0000);
    r
}

/// `v` as a LEB128 varint of exactly `n` bytes (overlong when `n` is more than it needs).
fn varint_of_len(mut v: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let more = if i + 1 < n { 0x80 } else { 0 };
        out.push((v & 0x7f) as u8 | more);
        v >>= 7;
    }
    assert_eq!(v, 0, "{n} bytes are too few");
    out
}

/// The chunk header of `c` written again with the varints `seq`, `first`, `count` and `len`
/// in `lens` bytes and type byte `kind`, and a header CRC of its own.
fn header_bytes(c: &ChunkSpan, kind: u8, seq: u32, lens: [usize; 4]) -> Vec<u8> {
    let h = c.header;
    let mut out = vec![0xb5, kind];
    out.extend(varint_of_len(u64::from(seq), lens[0]));
    out.extend(varint_of_len(u64::from(h.first), lens[1]));
    out.extend(varint_of_len(u64::from(h.count), lens[2]));
    out.extend(h.t0.to_le_bytes());
    out.extend(varint_of_len(u64::from(h.len), lens[3]));
    out.extend(h.payload_crc.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// The hand-made streams, all from `synthetic.lossless.bsors` (`s`): overlong varints, an
/// unknown skippable and an unknown critical chunk, stray bytes, a missing chunk.
fn hand_made(s: &[u8], synthetic: &Replay) {
    let (_, _, list) = split_stream(s).expect("stream");
    let index = list.last().expect("chunks");
    assert_eq!(index.header.kind, ChunkType::Index);
    let at = index.offset;
    let body = &s[at + index.header_len..at + index.len];
    let tail = &s[at + index.len..];

    // The index chunk's header with every varint overlong: seq in 5 bytes, first in 10 (the
    // most a reader accepts), count in 3, len in 4. The index stays where it was.
    let mut overlong = s[..at].to_vec();
    overlong.extend(header_bytes(index, 5, index.header.seq, [5, 10, 3, 4]));
    overlong.extend_from_slice(body);
    overlong.extend_from_slice(tail);
    write("overlong.bsors", &overlong);

    // A chunk of unknown type `kind` (6: skippable, 0x86: critical) with seq of the index,
    // a 5-byte payload, between the trailer and the index; the index's seq one more, the
    // footer pointing to its new offset.
    let insert = |kind: u8| {
        let mut out = s[..at].to_vec();
        let mut h = index.header;
        h.kind = ChunkType::from_byte(kind);
        h.count = 0;
        h.write_to(b"extra", &mut out);
        let new_at = out.len();
        let mut moved = *index;
        moved.header.seq += 1;
        out.extend(header_bytes(&moved, 5, moved.header.seq, [1, 1, 1, 1]));
        out.extend_from_slice(body);
        out.extend(footer(new_at as u64));
        out
    };
    write("unknown.bsors", &insert(0x06));
    let critical = insert(0x86);
    write("critical.bsors", &critical);
    let json = outcome("critical.bsors", &critical, synthetic);
    write_json("critical.expected.json", json);

    // Seven bytes between the second and third frame chunks (two of them B5, candidates that
    // fail their header CRC). Index and footer are not changed (format.md 13: a decoder does
    // not check where the index entries point).
    let frames: Vec<_> = list
        .iter()
        .filter(|c| matches!(c.header.kind.byte(), 1 | 2))
        .collect();
    let cut = frames[2].offset;
    let mut stray = s[..cut].to_vec();
    stray.extend_from_slice(&[0x00, 0xb5, 0x01, 0x02, 0x03, 0xb5, 0xff]);
    stray.extend_from_slice(&s[cut..]);
    write("stray.bsors", &stray);
    write_json(
        "stray.expected.json",
        outcome("stray.bsors", &stray, synthetic),
    );

    // The second event chunk left out (index and footer unchanged): the next chunk's seq
    // is one more than expected.
    let events: Vec<_> = list
        .iter()
        .filter(|c| c.header.kind == ChunkType::Events)
        .collect();
    let e = events[1];
    let mut gap = s[..e.offset].to_vec();
    gap.extend_from_slice(&s[e.offset + e.len..]);
    write("gap.bsors", &gap);
    write_json("gap.expected.json", outcome("gap.bsors", &gap, synthetic));
}

fn write_json(name: &str, json: serde_json::Value) {
    let text = serde_json::to_string_pretty(&json).expect("json") + "\n";
    write(name, text.as_bytes());
}

/// What this crate's `decode_replay` makes of `bytes`: the error, or which frames and notes
/// of `synthetic` it recovers, and its report.
fn outcome(file: &str, bytes: &[u8], synthetic: &Replay) -> serde_json::Value {
    let (replay, rec) = match transcode::decode_replay(bytes) {
        Err(e) => return serde_json::json!({ "file": file, "error": e.to_string() }),
        Ok(r) => r,
    };
    // Recovered frames and notes as half-open index ranges of synthetic's.
    let ranges = |got: Vec<Vec<u8>>, all: Vec<Vec<u8>>| {
        let mut out: Vec<[usize; 2]> = Vec::new();
        let mut j = 0;
        for g in got {
            while all[j] != g {
                j += 1;
            }
            match out.last_mut() {
                Some(r) if r[1] == j => r[1] = j + 1,
                _ => out.push([j, j + 1]),
            }
            j += 1;
        }
        out
    };
    let frames = |r: &Replay| {
        r.frames
            .iter()
            .map(|f| bsor::encode_frame(f).to_vec())
            .collect()
    };
    let notes = |r: &Replay| {
        r.notes
            .iter()
            .map(|n| {
                let mut v = Vec::new();
                bsor::encode_note(n, &mut v);
                v
            })
            .collect()
    };
    let damage: Vec<serde_json::Value> = rec
        .damage
        .iter()
        .map(|d| serde_json::json!({ "offset": d.offset, "skipped_bytes": d.skipped_bytes, "what": d.what() }))
        .collect();
    serde_json::json!({
        "file": file,
        "frames_recovered": rec.frames,
        "frame_ranges_recovered": ranges(frames(&replay), frames(synthetic)),
        "note_ranges_recovered": ranges(notes(&replay), notes(synthetic)),
        "events_recovered": rec.events,
        "complete": rec.complete,
        "reference_decoder": {
            "frames_lost": rec.stats.frames_lost,
            "events_lost": rec.stats.events_lost,
            "bytes_skipped": rec.stats.bytes_skipped,
            "damage": damage,
        },
    })
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

    write_replay("cuts", &cuts(), &[Profile::Lossless, Profile::Compact]);
    write_replay(
        "nonfinite",
        &nonfinite(),
        &[Profile::Lossless, Profile::Compact],
    );
    write_replay("turns", &turns(), &[Profile::Fine, Profile::Compact]);

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
    // Profile 3: a 0.5 mm position step and M = 1000 (a grid of about 0.081°).
    let custom = Profile::Custom(CustomSteps::new(5e-4, 1000).expect("in range"));
    let s = transcode::encode_replay(&synthetic, Settings::live(custom));
    write("synthetic.custom.bsors", &s);
    let (back, rec) = transcode::decode_replay(&s).expect("decodes");
    assert!(rec.complete);
    write(
        "synthetic.custom.decoded.bsor",
        &bsor::to_vec(&back).expect("writes"),
    );
    for (profile, name) in [
        (Profile::Lossless, "lossless"),
        (Profile::Compact, "compact"),
    ] {
        let s = transcode::encode_replay(&synthetic, Settings::archive(profile));
        write(&format!("synthetic.archive.{name}.bsors"), &s);
    }

    // The damaged stream: the middle payload byte of the second frame chunk, inverted.
    let s = lossless_synthetic;
    hand_made(&s, &synthetic);
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
