//! `bsor-stream-load` end to end at a small scale: it starts its own relay process, and every
//! viewer gets every frame. Only what arrived is checked, never how fast (the latency
//! target is for the full-size run on a quiet machine, not for a test).

use std::process::Command;

/// The two counts of a `received A of B frames` line.
fn received(report: &str) -> Vec<(u64, u64)> {
    report
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("received ")?;
            let mut w = rest.split_whitespace();
            let got = w.next()?.parse().ok()?;
            let _of = w.next()?;
            let expected = w.next()?.parse().ok()?;
            Some((got, expected))
        })
        .collect()
}

#[test]
fn both_scenarios_deliver_every_frame_to_every_viewer() {
    crate::require_user_binary();
    let out = Command::new(env!("CARGO_BIN_EXE_bsor-stream-load"))
        .args([
            "--viewers",
            "5",
            "--sessions",
            "3",
            "--session-viewers",
            "2",
        ])
        .args(["--seconds", "2", "--speed", "4"])
        .output()
        .expect("run bsor-stream load");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = received(&report);
    assert_eq!(counts.len(), 2, "one line per scenario:\n{report}");
    // 2 s at 90 fps for 5 viewers, then for 3 x 2 viewers.
    let per_viewer = counts[0].1 / 5;
    assert!((170..=190).contains(&per_viewer), "{report}");
    assert_eq!(counts[0], (5 * per_viewer, 5 * per_viewer), "{report}");
    assert_eq!(counts[1], (6 * per_viewer, 6 * per_viewer), "{report}");
    assert!(report.contains("0 chunks skipped"), "{report}");
    assert!(report.contains("0 errors"), "{report}");
    assert!(report.contains("relay memory:"), "{report}");
}
