//! `bsor-stream-serverload`: its arguments and bounds, and, once `serve` has a replay store,
//! a small run end to end. Only what was answered is checked, never how fast (the targets
//! are for the full-size run on a quiet machine, not for a test).

use std::process::Command;

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream-serverload"))
}

#[test]
fn help_names_every_phase_option() {
    let out = tool().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--server",
        "--server-pid",
        "--store",
        "--index",
        "--uploads",
        "--downloads",
        "--events",
        "--mixed-seconds",
        "--mixed-uploads",
        "--mixed-downloads",
        "--concurrency",
        "--max-seconds",
    ] {
        assert!(help.contains(opt), "{opt} missing from:\n{help}");
    }
}

#[test]
fn only_a_server_on_this_machine() {
    // Refused before any connection is made.
    for addr in ["10.1.2.3:8080", "192.168.0.1:80", "8.8.8.8:80"] {
        let out = tool().args(["--server", addr]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{addr}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("only a server on this machine"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn counts_and_times_are_bounded() {
    for args in [
        &["--uploads", "0"][..],
        &["--uploads", "5001"],
        &["--downloads", "100001"],
        &["--events", "0"],
        &["--mixed-seconds", "121"],
        &["--mixed-uploads", "501"],
        &["--mixed-downloads", "2001"],
        &["--concurrency", "257"],
        &["--max-seconds", "3601"],
        &["--server-pid", "1"],
        &["--server", "127.0.0.1:1", "--store", "/x"],
    ] {
        let out = tool().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} was accepted");
    }
    let out = tool().args(["--seconds", "0.5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seconds"));
}

#[test]
fn a_small_run_end_to_end() {
    crate::require_user_binary();
    let out = tool()
        .args(["--uploads", "6", "--downloads", "12", "--events", "6"])
        .args([
            "--mixed-seconds",
            "1",
            "--mixed-uploads",
            "2",
            "--mixed-downloads",
            "4",
        ])
        .args([
            "--seconds",
            "8",
            "--concurrency",
            "2",
            "--max-seconds",
            "120",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "{report}\n{err}"
    );
    for line in [
        "uploads alone: 6 in",
        "downloads alone: 12 over 6 ids",
        "events: 6 in",
        "mixed: 2 uploads/s + 4 downloads/s for 1 s",
        "server memory: peak",
        "targets:",
    ] {
        assert!(report.contains(line), "{line:?} missing:\n{report}\n{err}");
    }
    assert_eq!(report.matches("0 errors").count(), 5, "{report}\n{err}");
    assert!(report.contains("no errors met"), "{report}");
}
