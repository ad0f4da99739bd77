//! `serve --witness-key` and `verify --signatures --witness-key`, run as a user would
//! (proto-spec/integrity.md §12).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    bin().args(args).output().unwrap()
}

fn verify(file: &Path, extra: &[&std::ffi::OsStr]) -> (Option<i32>, serde_json::Value) {
    let out = bin()
        .args(["verify", "--signatures", "--json"])
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

#[test]
fn a_witness_relay_dates_a_published_recording() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let (player, witness, bsor, tokens, archive) = (
        p("p.key"),
        p("w.key"),
        p("s.bsor"),
        p("tokens"),
        p("archive"),
    );
    std::fs::write(&tokens, "tok\n").unwrap();
    assert!(run(&["keygen".as_ref(), "-o".as_ref(), player.as_os_str()])
        .status
        .success());
    let out = run(&["keygen".as_ref(), "-o".as_ref(), witness.as_os_str()]);
    let witness_pub = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(bin()
        .args(["synth", "--seconds", "3", "-o"])
        .arg(&bsor)
        .output()
        .unwrap()
        .status
        .success());
    let mut relay = bin()
        .args(["serve", "--tcp", "127.0.0.1:0", "--archive"])
        .arg(&archive)
        .arg("--token-file")
        .arg(&tokens)
        .arg("--witness-key")
        .arg(&witness)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening tcp=")
        .expect(&line)
        .to_string();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let out = bin()
        .arg("publish")
        .arg(&bsor)
        .args(["--to", &addr, "--session", "song", "--token-file"])
        .arg(&tokens)
        .args(["--speed", "0", "--key"])
        .arg(&player)
        .output()
        .unwrap();
    let stopped = Command::new("kill")
        .args(["-INT", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert!(relay.wait().unwrap().success());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stream = archive.join("song.bsors");
    let statements = archive.join("song.witness");
    assert!(statements.exists());

    // Trusted: every checkpoint and the final one, and the recording is dated.
    let (code, v) = verify(&stream, &["--witness-key".as_ref(), witness_pub.as_ref()]);
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(0), Some("valid")),
        "{v}"
    );
    let w = &v["witnesses"][0];
    assert_eq!(w["key"].as_str(), Some(witness_pub.as_str()));
    assert_eq!(w["trusted"], true);
    assert_eq!(w["finalCheckpoint"], true);
    assert_eq!(
        w["checkpoints"].as_array().unwrap().len() as u64,
        v["checkpoints"].as_u64().unwrap()
    );
    let existed = v["existedBy"].as_u64().expect("existedBy");
    assert!(existed >= before.saturating_sub(1000), "{existed} {before}");
    // The play is dated by the final checkpoint's statement, not the first one's.
    assert_eq!(w["finalTime"].as_u64(), Some(existed), "{v}");
    assert!(w["time"].as_u64().unwrap() <= existed, "{v}");
    assert_eq!(v["witnessStatementsRejected"], serde_json::json!([]));

    // Untrusted: listed, dates nothing.
    let (code, v) = verify(&stream, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(v["witnesses"][0]["trusted"], false);
    assert!(v["existedBy"].is_null());

    // A statement backdated by an hour: rejected, the verdict unchanged.
    let mut bytes = std::fs::read(&statements).unwrap();
    let at = 4 + 86;
    let t = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(t - 3_600_000).to_le_bytes());
    let forged = p("forged.witness");
    std::fs::write(&forged, &bytes).unwrap();
    let (code, v) = verify(
        &stream,
        &[
            "--witness-key".as_ref(),
            witness_pub.as_ref(),
            "--witnesses".as_ref(),
            forged.as_os_str(),
        ],
    );
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(0), Some("valid")),
        "{v}"
    );
    let rejected = v["witnessStatementsRejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{v}");
    assert!(rejected[0]["reason"]
        .as_str()
        .unwrap()
        .contains("signature"));
    assert!(v["existedBy"].as_u64().unwrap() >= existed);
}
