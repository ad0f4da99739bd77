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
//! Reported: p50, p99 and max of the free, in milliseconds. With `NO_FILE=1`, no `.bsors`
//! file: the network alone. After finish, the free also waits for the files to be
//! completed (the stream file's fsync): disk, not network.
//!
//! The free waits for the encoder thread (a wake-up, then its last writes), never for the
//! live thread: on a loaded machine, the tail measures how soon that thread is scheduled.

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
        version: std::ptr::null(),
        game_version: std::ptr::null(),
        timestamp: std::ptr::null(),
        player_id: std::ptr::null(),
        player_name: c"bench".as_ptr(),
        platform: std::ptr::null(),
        tracking_system: std::ptr::null(),
        hmd: std::ptr::null(),
        controller: std::ptr::null(),
        hash: std::ptr::null(),
        song_name: std::ptr::null(),
        mapper: std::ptr::null(),
        difficulty: std::ptr::null(),
        score: 0,
        mode: std::ptr::null(),
        environment: std::ptr::null(),
        modifiers: std::ptr::null(),
        jump_distance: 0.0,
        left_handed: 0,
        height: 0.0,
        start_time: 0.0,
        fail_time: 0.0,
        speed: 1.0,
    }
}

/// One recorder against `addr`, freed mid-song or after finish: how long the free took.
fn one(addr: &CString, stream: &CString, finish: bool) -> Duration {
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
        let t = Instant::now();
        bsrs_recorder_free(rec);
        t.elapsed()
    }
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
    println!("bsrs_recorder_free, {runs} runs each (ms):");
    println!("{:<50} {:>7} {:>7} {:>7}", "case", "p50", "p99", "max");
    for (name, addr) in [
        ("refused", refused),
        ("accepts, never answers", silent_addr),
    ] {
        let addr = CString::new(addr.to_string()).unwrap();
        for finish in [false, true] {
            let mut t: Vec<Duration> = (0..runs).map(|_| one(&addr, &stream, finish)).collect();
            t.sort();
            let p = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
            let when = if finish { "after finish" } else { "mid-song" };
            println!(
                "{:<50} {:>7.3} {:>7.3} {:>7.3}",
                format!("relay {name}, freed {when}"),
                ms(p(0.5)),
                ms(p(0.99)),
                ms(t[t.len() - 1])
            );
        }
    }
    drop(silent);
    let _ = std::fs::remove_dir_all(&dir);
}
