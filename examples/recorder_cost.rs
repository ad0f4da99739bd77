//! What signing costs the recorder (docs/benchmarks.md, "Recorder: signing"): records a
//! synthetic song through [`Recorder`] as fast as the pushes go, with or without a signing
//! key, into a `.bsors` file and a classic file in a temporary folder, and prints the
//! process's CPU time per second of song (the background's: the pushes take a few ns each).
//!
//! ```sh
//! cargo run --release --example recorder_cost -- [--key] [--seconds 300] [--fps 90]
//! ```
//!
//! Under callgrind, `push_frame`'s instructions per call (the game thread's cost):
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*Recorder::push_frame*' \
//!     target/release/examples/recorder_cost [--key] --seconds 30
//! ```

use std::time::{Duration, Instant};

use bsor_stream::integrity::SigningKey;
use bsor_stream::recorder::{Config, Push, Recorder, SinkState, MAX_QUEUE_CAPACITY};
use bsor_stream::synth;

/// User and system CPU time of this process so far, from /proc/self/stat (Linux), in
/// seconds; `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (in parentheses): utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: f32| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let key = args.iter().any(|a| a == "--key");
    let (seconds, fps) = (value("--seconds", 300.0), value("--fps", 90.0) as u32);
    let mut r = synth::replay(synth::Settings {
        seed: 1,
        seconds,
        fps,
    });
    // Opaque user data has no place for the signature entry: none, as a recorder gets.
    r.user_data = None;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = Config {
        stream_file: Some(dir.path().join("song.bsors")),
        classic_file: Some(dir.path().join("song.bsor")),
        // The whole song fits: no push waits, so the CPU time is the background's.
        queue_capacity: MAX_QUEUE_CAPACITY,
        signing_key: key.then(|| SigningKey::from_bytes(&[0x42; 32])),
        ..Config::default()
    };
    let before = cpu_seconds();
    let started = Instant::now();
    let mut rec = Recorder::start(r.info.clone(), config).expect("starts");
    let mut n = 0;
    for f in &r.frames {
        while n < r.notes.len() && r.notes[n].event_time <= f.time {
            assert_eq!(rec.push_note(&r.notes[n]), Push::Queued);
            n += 1;
        }
        assert_eq!(rec.push_frame(f), Push::Queued);
    }
    for x in &r.notes[n..] {
        assert_eq!(rec.push_note(x), Push::Queued);
    }
    if let Some(o) = r.controller_offsets {
        rec.set_controller_offsets(o);
    }
    assert!(rec.finish(r.info.clone()));
    let st = rec
        .wait(Duration::from_secs(600))
        .expect("the recorder ends");
    assert_eq!(
        (st.stream_file, st.classic),
        (SinkState::Done, SinkState::Done)
    );
    let wall = started.elapsed().as_secs_f64();
    let stream = std::fs::metadata(dir.path().join("song.bsors")).map_or(0, |m| m.len());
    let classic = std::fs::metadata(dir.path().join("song.bsor")).map_or(0, |m| m.len());
    let cpu = before.zip(cpu_seconds()).map(|(a, b)| b - a);
    println!(
        "{} s at {fps} fps, {}: {} frames, stream {stream} B, classic {classic} B; wall {wall:.3} s; CPU {}",
        seconds,
        if key { "signed" } else { "unsigned" },
        r.frames.len(),
        cpu.map_or("-".into(), |c| format!(
            "{c:.2} s = {:.3}% of a core in real time",
            100.0 * c / f64::from(seconds)
        )),
    );
}
