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

/// `bsor-stream-load` with `args`: its exit code and stderr.
fn load_with(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bsor-stream-load"))
        .args(args)
        .output()
        .expect("run bsor-stream load");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_kill_names_one_of_the_given_relays_or_nats_nodes_and_a_running_one() {
    // Nothing listens on these addresses: each run must stop before connecting.
    let relays = "127.0.0.1:1,127.0.0.1:2";
    let me = std::process::id().to_string();
    let common = ["--relay", relays, "--scenario", "many", "--kill-after", "1"];
    let (code, err) =
        load_with(&[&common[..], &["--relay-pid", "1,2", "--kill-pid", "3"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is neither one of the relays' --relay-pid nor of --nats-pid"),
        "{err}"
    );
    // A NATS node: one of three, and a running nats-server (this test's process is not).
    let (code, err) = load_with(
        &[
            &common[..],
            &[
                "--relay-pid",
                "1,2",
                "--nats-pid",
                &format!("{me},5"),
                "--kill-pid",
                &me,
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("needs a cluster of three in --nats-pid"),
        "{err}"
    );
    let nodes = format!("{me},5,6");
    let (code, err) = load_with(
        &[
            &common[..],
            &[
                "--relay-pid",
                "1,2",
                "--nats-pid",
                &nodes,
                "--kill-pid",
                &me,
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is not a running nats-server"), "{err}");
    // This test's own process is one of the "relays" here, and no `bsor-stream serve`.
    let pids = format!("{me},2");
    let (code, err) =
        load_with(&[&common[..], &["--relay-pid", &pids, "--kill-pid", &me]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is not a running `bsor-stream serve`"),
        "{err}"
    );
    let (code, err) = load_with(&["--relay", relays, "--relay-pid", &pids, "--kill-pid", &me]);
    assert_eq!(code, Some(2), "--kill-after is required: {err}");
    let both = [
        "--relay",
        relays,
        "--relay-pid",
        &pids,
        "--kill-pid",
        &me,
        "--kill-after",
        "1",
    ];
    let (code, err) = load_with(&both);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("give --scenario one or many"), "{err}");
    let late = [&common[..4], &["--kill-after", "60", "--seconds", "5"]].concat();
    let (code, err) = load_with(&[&late[..], &["--relay-pid", &pids, "--kill-pid", &me]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--kill-after must be above 0"), "{err}");
}
