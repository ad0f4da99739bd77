//! `keygen`, `sign`, `encode --key` and `verify --signatures`, run as a user would.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

fn verify_json(file: &Path) -> (Option<i32>, serde_json::Value) {
    let out = run(&[
        os("verify"),
        os("--signatures"),
        os("--json"),
        file.as_os_str(),
    ]);
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn keygen_sign_and_verify_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("player.key");
    let bsor = dir.path().join("play.bsor");
    let signed = dir.path().join("play.bsors");
    let out = run(&[os("keygen"), os("-o"), key.as_os_str()]);
    assert!(out.status.success());
    let public = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(public.len(), 64, "{public}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Never over an existing key.
    assert!(!run(&[os("keygen"), os("-o"), key.as_os_str()])
        .status
        .success());

    let synth = [
        os("synth"),
        os("--seconds"),
        os("4"),
        os("-o"),
        bsor.as_os_str(),
    ];
    assert!(run(&synth).status.success());
    let out = run(&[
        os("sign"),
        bsor.as_os_str(),
        os("--key"),
        key.as_os_str(),
        os("-o"),
        signed.as_os_str(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("not who played"));

    let (code, v) = verify_json(&signed);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["verdict"], "valid");
    assert_eq!(v["signed"], true);
    assert_eq!(v["signerKey"], public.as_str());
    assert_eq!(v["playerId"], "76561190000000000");
    assert!(v["checkpoints"].as_u64().unwrap() >= 4);
    assert!(v["chainValidToChunk"].is_u64());
    assert!(v["chainValidToSeconds"].as_f64().unwrap() > 3.9);
    assert_eq!(v["witnesses"], serde_json::json!([]));
    assert_eq!(v["fingerprint"].as_str().map(str::len), Some(64), "{v}");
    assert!(v["reason"].is_null());

    // Cut in the middle: incomplete, exit 2.
    let bytes = std::fs::read(&signed).unwrap();
    let cut = dir.path().join("cut.bsors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, v) = verify_json(&cut);
    assert_eq!((code, v["verdict"].as_str()), (Some(2), Some("incomplete")));
    // One byte changed: invalid, exit 1, with a reason.
    let mut bad = bytes.clone();
    let at = bad.len() / 3;
    bad[at] ^= 0x20;
    let tampered = dir.path().join("tampered.bsors");
    std::fs::write(&tampered, &bad).unwrap();
    let (code, v) = verify_json(&tampered);
    assert_eq!((code, v["verdict"].as_str()), (Some(1), Some("invalid")));
    assert!(v["reason"].is_string());

    // encode without --key: unsigned, exit 1; with --key in a lossy profile: refused.
    let plain = dir.path().join("plain.bsors");
    let enc = [os("encode"), bsor.as_os_str(), os("-o"), plain.as_os_str()];
    assert!(run(&enc).status.success());
    let (code, v) = verify_json(&plain);
    assert_eq!((code, v["verdict"].as_str()), (Some(1), Some("unsigned")));
    let lossy = dir.path().join("lossy.bsors");
    let out = run(&[
        os("encode"),
        bsor.as_os_str(),
        os("--key"),
        key.as_os_str(),
        os("--profile"),
        os("compact"),
        os("-o"),
        lossy.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be signed"));
    // encode --key --archive: valid, the same key.
    let archived = dir.path().join("archived.bsors");
    let out = run(&[
        os("encode"),
        bsor.as_os_str(),
        os("--key"),
        key.as_os_str(),
        os("--archive"),
        os("-o"),
        archived.as_os_str(),
    ]);
    assert!(out.status.success());
    let (code, v) = verify_json(&archived);
    assert_eq!(
        (code, &v["signerKey"]),
        (Some(0), &serde_json::json!(public))
    );
}

#[test]
fn publish_with_key_through_a_relay_archives_a_valid_stream() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (key, bsor, tokens) = (
        dir.path().join("k.key"),
        dir.path().join("p.bsor"),
        dir.path().join("tokens"),
    );
    let archive = dir.path().join("archive");
    std::fs::write(&tokens, "tok\n").unwrap();
    assert!(run(&[os("keygen"), os("-o"), key.as_os_str()])
        .status
        .success());
    let synth = [
        os("synth"),
        os("--seconds"),
        os("3"),
        os("-o"),
        bsor.as_os_str(),
    ];
    assert!(run(&synth).status.success());
    let mut relay = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(["serve", "--tcp", "127.0.0.1:0", "--archive"])
        .arg(&archive)
        .arg("--token-file")
        .arg(&tokens)
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
    let out = Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .arg("publish")
        .arg(&bsor)
        .args(["--to", &addr, "--session", "signed", "--token-file"])
        .arg(&tokens)
        .args(["--speed", "0", "--key"])
        .arg(&key)
        .output()
        .unwrap();
    let interrupted = Command::new("kill")
        .args(["-INT", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    assert!(relay.wait().unwrap().success());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = verify_json(&archive.join("signed.bsors"));
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(0), Some("valid")),
        "{v}"
    );
}

/// The forgeries of the signed vectors (integrity.md §10), as a user would check them:
/// records in front of the key chunk and records out of order verify as invalid, exit 1,
/// with the reason; and `decode` writes neither with a signature.
#[test]
fn forged_vectors_are_invalid_and_decode_unsigned() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-spec/vectors");
    let tmp = tempfile::tempdir().unwrap();
    for (name, why) in [
        ("signed.prefixed.bsors", "is not the stream's first chunk"),
        ("signed.reordered.bsors", "out of order"),
    ] {
        let file = dir.join(name);
        let (code, v) = verify_json(&file);
        assert_eq!(
            (code, v["verdict"].as_str()),
            (Some(1), Some("invalid")),
            "{name}"
        );
        assert!(v["reason"].as_str().unwrap().contains(why), "{name}: {v}");
        let out_file = tmp.path().join(format!("{name}.bsor"));
        // (The reordered one decodes incomplete, exit 2: its frames come out of order.)
        let out = run(&[
            os("decode"),
            file.as_os_str(),
            os("-o"),
            out_file.as_os_str(),
        ]);
        assert!(
            out.status.code() != Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, v) = verify_json(&out_file);
        assert_eq!(
            (code, v["verdict"].as_str()),
            (Some(1), Some("unsigned")),
            "{name}: {v}"
        );
    }
}
