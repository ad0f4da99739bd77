//! What recording costs the game: `push_frame` on the calling thread, in real time.
//!
//! Run: `cargo bench --bench recorder -- [--seconds 300] [--fps 90,120]`
//!
//! For each frame rate, a synthetic song plays at its real speed: the calling thread (the
//! "render thread") pushes each frame at its song time and the events as they happen, with
//! the background encoding into a `.bsors` file (lossless, live settings). Between frames
//! the calling thread spins rather than sleeps, so that every context switch it shows is
//! one it did not ask for (preemption): a push makes no system call. Reported: the
//! duration of each push (p50, p99, p99.9, max; the clock's own cost is measured and shown
//! beside), the calling thread's voluntary and involuntary context switches, and the
//! background threads' CPU time per second of play. On 2 shared cores a max mostly
//! measures preemption: read it beside the involuntary switches.
//!
//! Beside it, the floor of any queue on this machine: half way between two frames, the same
//! clock pair around the least a push into a ring must do (copy the frame into the next slot
//! of a 1 MiB array and publish the index with one release store), with a thread that polls
//! the index every 4 ms and reads the new slots, as the recorder's background does.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsor_stream::bsor::Frame;
use bsor_stream::recorder::{Config, Push, Recorder};
use bsor_stream::synth;

/// The floor's ring: 1 MiB of 96-byte slots (a frame's 23 words, as 12 `u64`s), and the
/// published index.
struct Floor {
    slots: Vec<AtomicU64>,
    published: AtomicUsize,
    stop: AtomicBool,
}

const SLOT_WORDS: usize = 12;

impl Floor {
    fn slots(&self) -> usize {
        self.slots.len() / SLOT_WORDS
    }

    /// The least a queue's push does: the frame into slot `i`, then `i + 1` published.
    fn push(&self, i: usize, f: &Frame) {
        let mut w = [0u32; 2 * SLOT_WORDS];
        w[0] = f.time.to_bits();
        w[1] = f.fps as u32;
        for (d, p) in [f.head, f.left_hand, f.right_hand].iter().enumerate() {
            let v = [
                p.position.x,
                p.position.y,
                p.position.z,
                p.rotation.x,
                p.rotation.y,
                p.rotation.z,
                p.rotation.w,
            ];
            for (k, x) in v.iter().enumerate() {
                w[2 + 7 * d + k] = x.to_bits();
            }
        }
        let base = (i % self.slots()) * SLOT_WORDS;
        for (k, pair) in w.chunks_exact(2).enumerate() {
            let v = u64::from(pair[0]) | u64::from(pair[1]) << 32;
            self.slots[base + k].store(v, Ordering::Relaxed);
        }
        self.published.store(i + 1, Ordering::Release);
    }
}

/// (voluntary, involuntary) context switches of the calling thread.
fn switches() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        get("voluntary_ctxt_switches:"),
        get("nonvoluntary_ctxt_switches:"),
    )
}

/// CPU seconds (user + system) of this process's threads whose name starts with
/// `bsor-recorder`.
fn recorder_cpu() -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0u64;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("bsor-recorder") {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the ")" that closes the name: state is 3rd, utime 14th, stime 15th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += n(11) + n(12);
    }
    total as f64 / ticks
}

fn pct(sorted: &[u32], p: f64) -> u32 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// "p50 … p99 … p99.9 … max …" of sorted durations.
fn spread(sorted: &[u32]) -> String {
    format!(
        "p50 {} p99 {} p99.9 {} max {}",
        pct(sorted, 0.5),
        pct(sorted, 0.99),
        pct(sorted, 0.999),
        sorted.last().copied().unwrap_or(0)
    )
}

// Long: the timed loop and its setup stay in one place so that nothing but the push sits between the clock reads.
fn run(seconds: f32, fps: u32) {
    let r = synth::replay(synth::Settings {
        seed: 7,
        seconds,
        fps,
    });
    let dir = std::env::temp_dir().join(format!("bsor-bench-recorder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("song-{fps}.bsors"));
    let config = Config {
        stream_file: Some(path.clone()),
        ..Config::default()
    };
    let mut rec = Recorder::start(r.info.clone(), config).unwrap();
    let mut took = vec![0u32; r.frames.len()];
    // The same two clock reads around nothing, at the same moments: what the machine adds.
    let mut idle = vec![0u32; r.frames.len()];
    // What two clock reads cost with nothing between them.
    let mut clock = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        let a = Instant::now();
        let b = Instant::now();
        clock.push((b - a).as_nanos() as u32);
    }
    clock.sort_unstable();
    let floor = Arc::new(Floor {
        // Written with non-zero values, so that every page is there before the song (as the
        // recorder's ring: a zeroed allocation would map its pages at their first push).
        slots: (0..(1u64 << 20) / 8).map(AtomicU64::new).collect(),
        published: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    let mut floor_took = vec![0u32; r.frames.len()];
    let reader = {
        let floor = Arc::clone(&floor);
        std::thread::spawn(move || {
            let (mut seen, mut sum) = (0usize, 0u64);
            while !floor.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(4));
                let upto = floor.published.load(Ordering::Acquire);
                for i in seen..upto {
                    let base = (i % floor.slots()) * SLOT_WORDS;
                    for w in &floor.slots[base..base + SLOT_WORDS] {
                        sum = sum.wrapping_add(w.load(Ordering::Relaxed));
                    }
                }
                seen = upto;
            }
            std::hint::black_box(sum);
        })
    };
    let cpu0 = recorder_cpu();
    let sw0 = switches();
    let start = Instant::now();
    let t0 = r.frames[0].time;
    let mut note = 0;
    let mut dropped = 0;
    for (i, f) in r.frames.iter().enumerate() {
        let due = Duration::from_secs_f32((f.time - t0).max(0.0));
        let half = due.saturating_sub(Duration::from_secs_f64(0.5 / f64::from(fps)));
        while start.elapsed() < half {
            std::hint::spin_loop();
        }
        let frame = std::hint::black_box(*f);
        let a = Instant::now();
        floor.push(i, &frame);
        let b = Instant::now();
        floor_took[i] = (b - a).as_nanos().min(u128::from(u32::MAX)) as u32;
        while start.elapsed() < due {
            std::hint::spin_loop();
        }
        while note < r.notes.len() && r.notes[note].event_time <= f.time {
            let _ = rec.push_note(&r.notes[note]);
            note += 1;
        }
        let a = Instant::now();
        let b = Instant::now();
        idle[i] = (b - a).as_nanos().min(u128::from(u32::MAX)) as u32;
        // The game pushes the pose it has just computed: a frame in its cache, not one read
        // from a song-long array (a cache miss the recorder does not cause).
        let frame = std::hint::black_box(*f);
        let a = Instant::now();
        let p = rec.push_frame(&frame);
        let b = Instant::now();
        took[i] = (b - a).as_nanos().min(u128::from(u32::MAX)) as u32;
        dropped += u32::from(p != Push::Queued);
    }
    let played = start.elapsed().as_secs_f64();
    floor.stop.store(true, Ordering::Relaxed);
    reader.join().expect("the floor's reader ends");
    floor_took.sort_unstable();
    let sw1 = switches();
    let cpu1 = recorder_cpu();
    rec.finish(r.info.clone());
    let status = rec
        .wait(Duration::from_secs(60))
        .expect("the recorder ends");
    took.sort_unstable();
    idle.sort_unstable();
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{fps} fps, {seconds} s ({} frames, {dropped} not queued, stream {size} bytes, file sink {:?}):",
        r.frames.len(),
        status.stream_file
    );
    println!(
        "  push_frame ns: {} (two clock reads alone: p50 {} p99 {})",
        spread(&took),
        pct(&clock, 0.5),
        pct(&clock, 0.99),
    );
    println!(
        "  nothing, timed the same way just before each push, ns: {}",
        spread(&idle)
    );
    println!(
        "  floor (a frame copied into a 1 MiB ring, one release store), half way between frames, ns: {}",
        spread(&floor_took)
    );
    println!(
        "  calling thread context switches: voluntary {}, involuntary {}",
        sw1.0 - sw0.0,
        sw1.1 - sw0.1
    );
    println!(
        "  background CPU: {:.3} s over {:.1} s of play = {:.2}% of one core",
        cpu1 - cpu0,
        played,
        100.0 * (cpu1 - cpu0) / played
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seconds: f32 = arg("--seconds").map_or(300.0, |v| v.parse().expect("--seconds"));
    let fps: Vec<u32> = arg("--fps").map_or(vec![90, 120], |v| {
        v.split(',').map(|x| x.parse().expect("--fps")).collect()
    });
    for f in fps {
        run(seconds, f);
    }
}
