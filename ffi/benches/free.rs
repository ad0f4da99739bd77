//! How long `bsrs_recorder_free` blocks the calling thread (the game's) when the live
//! sink's relay is away: the target is under 5 ms whatever the network does.
//!
//! Run: `cargo bench -p bsor-stream-ffi --bench free -- [--runs 100]`
//!
//! Four cases, each `runs` times: the relay refuses connections (a closed 127.0.0.1 port)
//! or accepts them and never answers (a listener that never accepts: the kernel completes
//! the handshake); the recorder freed mid-song, or right after `bsrs_recorder_finish`
//! (while the sink waits for acknowledgements that never come). Each recorder has the live
//! sink and a `.bsors` file in a temporary folder, gets 2 s of frames at 90 fps, waits
//! 50 ms (so that the sink is connecting or waiting for an answer), and is freed.
//! Reported: p50, p99 and max of the free, in milliseconds, and the slowest free split by
//! the kernel's scheduler statistics into time on a CPU, time runnable but waiting for a
//! CPU (the machine's load, not the library) and time blocked (sleeping or on a lock: the
//! library's choice). The kernel updates those counters at scheduling events, so the split
//! is approximate. With `NO_FILE=1`, no `.bsors` file: the network alone.
//!
//! The free waits for neither the encoder thread nor the live thread: it never sleeps.

use std::ffi::CString;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use bsor_stream_ffi::*;

fn config() -> BsrsConfig {
    let mut c = std::mem::MaybeUninit::<BsrsConfig>::uninit();
    // SAFETY: bsrs_config_default writes the whole struct.
    unsafe {
        assert_eq!(bsrs_config_default(c.as_mut_ptr()), BSRS_OK);
        c.assume_init()
    }
}

fn info() -> BsrsInfo {
    BsrsInfo {
        player_name: c"bench".as_ptr(),
        ..BsrsInfo::default()
    }
}

/// One recorder against `addr`, freed mid-song or after finish: how long the free took.
fn one(addr: &CString, stream: &CString, finish: bool) -> Sample {
    let mut c = config();
    c.live_addr = addr.as_ptr();
    c.live_session = c"bench".as_ptr();
    c.live_retry_interval_ms = 50;
    if std::env::var_os("NO_FILE").is_none() {
        c.stream_path = stream.as_ptr();
    }
    let info = info();
    let mut rec = std::ptr::null_mut();
    // SAFETY: valid pointers throughout (the strings outlive the recorder); the handle is
    // freed once.
    unsafe {
        assert_eq!(bsrs_recorder_start(&info, &c, &mut rec), BSRS_OK);
        let mut f = BsrsFrame::default();
        f.head.rotation.w = 1.0;
        for k in 0..180 {
            f.time = k as f32 / 90.0;
            assert_eq!(bsrs_push_frame(rec, &f), BSRS_OK);
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut st = BsrsStatus::default();
        let deadline = Instant::now() + Duration::from_secs(5);
        while st.live == BSRS_SINK_OFF && Instant::now() < deadline {
            assert_eq!(bsrs_recorder_status(rec, &mut st), BSRS_OK);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(st.live, BSRS_SINK_CONNECTING, "the relay is away");
        if finish {
            assert_eq!(bsrs_recorder_finish(rec, &info), BSRS_OK);
        }
        let before = schedstat();
        let t = Instant::now();
        bsrs_recorder_free(rec);
        let wall = t.elapsed();
        let after = schedstat();
        Sample {
            wall,
            on_cpu: after.0.saturating_sub(before.0),
            runnable: after.1.saturating_sub(before.1),
        }
    }
}

/// One free: its wall time, and how much of it the thread ran and how much it waited,
/// runnable, for a CPU (Linux's /proc/thread-self/schedstat). The rest it was blocked:
/// sleeping or waiting for a lock, the part the library decides.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    on_cpu: Duration,
    runnable: Duration,
}

impl Sample {
    fn blocked(&self) -> Duration {
        self.wall.saturating_sub(self.on_cpu + self.runnable)
    }
}

/// This thread's time on a CPU and time runnable but waiting for one, so far (zero where
/// the kernel does not say).
fn schedstat() -> (Duration, Duration) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s
        .split_whitespace()
        .map(|n| Duration::from_nanos(n.parse().unwrap_or(0)));
    (f.next().unwrap_or_default(), f.next().unwrap_or_default())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let mut runs = 100usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--runs" {
            runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N");
        }
    }
    let dir = std::env::temp_dir().join(format!("bsrs-bench-free-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stream = CString::new(dir.join("song.bsors").to_str().unwrap()).unwrap();
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // Never accepted: connections complete in the kernel's backlog and get no answer.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    println!("bsrs_recorder_free, {runs} runs each (ms); the slowest free split into time");
    println!("on a CPU, waiting for one (runnable) and blocked (sleeping or on a lock):");
    println!(
        "{:<42} {:>7} {:>7} {:>7} | {:>6} {:>8} {:>7}",
        "case", "p50", "p99", "max", "cpu", "runnable", "blocked"
    );
    for (name, addr) in [
        ("refused", refused),
        ("accepts, never answers", silent_addr),
    ] {
        let addr = CString::new(addr.to_string()).unwrap();
        for finish in [false, true] {
            let mut t: Vec<Sample> = (0..runs).map(|_| one(&addr, &stream, finish)).collect();
            t.sort_by_key(|s| s.wall);
            let p = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize].wall;
            let when = if finish { "after finish" } else { "mid-song" };
            let worst = t[t.len() - 1];
            println!(
                "{:<42} {:>7.3} {:>7.3} {:>7.3} | {:>6.3} {:>8.3} {:>7.3}",
                format!("relay {name}, freed {when}"),
                ms(p(0.5)),
                ms(p(0.99)),
                ms(worst.wall),
                ms(worst.on_cpu),
                ms(worst.runnable),
                ms(worst.blocked())
            );
        }
    }
    drop(silent);
    let _ = std::fs::remove_dir_all(&dir);
}
