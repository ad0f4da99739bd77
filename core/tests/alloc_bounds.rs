//! Forged counts and lengths allocate nothing in proportion to what they claim.
//!
//! One test in its own binary: dhat's heap statistics are process-wide, and only one
//! profiler may run at a time.

use bsor_stream_core::bsor::{self, PushParser, Replay};
use bsor_stream_core::stream::{Profile, Settings};
use bsor_stream_core::synth;
use bsor_stream_core::transcode::BsorToStream;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Peak heap bytes (above what was live before) while `f` runs.
fn peak_during(f: impl FnOnce()) -> u64 {
    let _profiler = dhat::Profiler::builder().testing().build();
    f();
    dhat::HeapStats::get().max_bytes as u64
}

// Long: one forged input per section, each with its own assertion.
#[test]
fn forged_counts_and_lengths_allocate_nothing_large() {
    let r = synth::replay(synth::Settings {
        seed: 5,
        seconds: 1.0,
        fps: 10,
    });
    let empty = Replay {
        frames: vec![],
        notes: vec![],
        ..r.clone()
    };
    let bytes = bsor::to_vec(&empty).unwrap();
    let mut info = Vec::new();
    bsor::encode_info(&r.info, &mut info);
    let count_at = 6 + info.len() + 1;
    let limit = 64 * 1024;

    // framesCount = 2^31-1 in a file of a few hundred bytes.
    let mut forged = bytes.clone();
    forged[count_at..count_at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    forged.truncate(count_at + 4 + 60);
    let peak = peak_during(|| assert!(bsor::parse(&forged).is_err()));
    assert!(peak < limit, "whole-buffer parse peaked at {peak} bytes");
    let peak = peak_during(|| {
        let mut p = PushParser::new();
        for piece in forged.chunks(3) {
            p.push(piece);
            while let Ok(Some(_)) = p.next_event() {}
        }
        p.finish();
        while let Ok(Some(_)) = p.next_event() {}
    });
    assert!(peak < limit, "push parse peaked at {peak} bytes");

    // The first string's length = 2^31-1, and one just under the string limit.
    for len in [i32::MAX, (1 << 20) - 1] {
        let mut forged = bytes.clone();
        forged[6..10].copy_from_slice(&len.to_le_bytes());
        let peak = peak_during(|| assert!(bsor::parse(&forged).is_err()));
        assert!(peak < limit, "string length {len}: peaked at {peak} bytes");
    }

    // User data length = 2^31-1 (the last section: its length is 4 bytes before its data).
    let ud = r.user_data.as_ref().map_or(0, Vec::len);
    let full = bsor::to_vec(&r).unwrap();
    let at = full.len() - ud - 4;
    let mut forged = full.clone();
    forged[at..at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    let before = full.len() as u64;
    let peak = peak_during(|| assert!(bsor::parse(&forged).is_err()));
    // Parsing the frames before the fault legitimately holds about the file's size.
    assert!(
        peak < 4 * before + limit,
        "user data: peaked at {peak} bytes"
    );

    // Live transcoding in a pipe: memory does not grow with the number of frames. Frames
    // only (events are held until the end by design: BSOR stores them after the frames).
    let peak_for = |seconds: f32| {
        let mut r = synth::replay(synth::Settings {
            seed: 1,
            seconds,
            fps: 90,
        });
        r.notes.clear();
        r.walls.clear();
        r.heights.clear();
        r.pauses.clear();
        let bytes = bsor::to_vec(&r).unwrap();
        peak_during(|| {
            let mut t = BsorToStream::new(Settings::live(Profile::Lossless));
            for piece in bytes.chunks(64 * 1024) {
                t.push(piece).unwrap();
                drop(t.take_output());
            }
            t.finish().unwrap();
            drop(t.take_output());
        })
    };
    let short = peak_for(60.0);
    let long = peak_for(600.0);
    eprintln!("pipe transcoding peak heap: 60 s {short} bytes, 600 s {long} bytes");
    // Ten times the frames; the peak may grow only by the index (a few bytes per second).
    assert!(
        long < short + 256 * 1024,
        "60 s peaked at {short} bytes, 600 s at {long}"
    );
    assert!(long < 4 << 20, "600 s peaked at {long} bytes");
}
