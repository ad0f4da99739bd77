//! The game thread's side of the recorder allocates nothing: pushes of frames and events,
//! full ring or not, while the background thread is asleep (so that every allocation dhat
//! counts in the window is the game thread's).
//!
//! One test in its own binary: dhat's heap statistics are process-wide.

use std::time::Duration;

use bsor_stream_core::recorder::{Config, OnFull, Push, Recorder};
use bsor_stream_core::synth;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn pushes_allocate_nothing() {
    let r = synth::replay(synth::Settings {
        seed: 3,
        seconds: 30.0,
        fps: 90,
    });
    let _profiler = dhat::Profiler::builder().testing().build();
    for on_full in [OnFull::Drop, OnFull::BackPressure] {
        let config = Config {
            queue_capacity: 1024,
            on_full,
            // The background looks once at the start, then sleeps through the pushes.
            poll_interval: Duration::from_secs(5),
            ..Config::default()
        };
        let mut rec = Recorder::start(r.info.clone(), config).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let before = dhat::HeapStats::get().total_blocks;
        let mut outcomes = [0usize; 4];
        for (f, n) in r.frames.iter().zip(r.notes.iter().cycle()) {
            let a = rec.push_frame(f);
            let b = rec.push_note(n);
            for p in [a, b] {
                outcomes[match p {
                    Push::Queued => 0,
                    Push::Dropped => 1,
                    Push::Full => 2,
                    Push::Closed => 3,
                }] += 1;
            }
        }
        let after = dhat::HeapStats::get().total_blocks;
        assert_eq!(
            after,
            before,
            "allocations during {} pushes",
            2 * r.frames.len()
        );
        // The ring filled: both the taken and the refused path ran.
        assert_eq!(outcomes[0], 1024);
        assert!(outcomes[1] + outcomes[2] > 0);
        drop(rec);
    }
}
