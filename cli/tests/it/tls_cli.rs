//! `serve`, `publish` and `watch` over TLS, run as a user would, with a CA and a relay
//! certificate the test makes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

/// A CA and a relay certificate for 127.0.0.1 it signs: (ca.pem, relay.pem, relay.key).
fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "cli test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    (
        write("ca.pem", ca.pem()),
        write("relay.pem", leaf.pem()),
        write("relay.key", key.serialize_pem()),
    )
}

#[test]
fn publish_over_tls_and_watch_over_wss_rebuild_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(dir.path());
    let tokens = dir.path().join("tokens.txt");
    std::fs::write(&tokens, "tok\n").unwrap();
    let replay = dir.path().join("song.bsor");
    assert!(bin()
        .args(["synth", "--seconds", "6", "-o"])
        .arg(&replay)
        .output()
        .unwrap()
        .status
        .success());
    let mut relay = bin()
        .args([
            "serve",
            "--tcp",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--token-file",
        ])
        .arg(&tokens)
        // With an archive, a watcher that connects only after the (fast) publisher ended
        // still gets the whole stream: the test does not race the two processes.
        .arg("--archive")
        .arg(dir.path().join("archive"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (tcp, ws) = line
        .trim()
        .strip_prefix("listening tcp=")
        .and_then(|r| r.split_once(" ws="))
        .expect(&line);
    let watched = dir.path().join("watched.bsors");
    let watcher = bin()
        .args(["watch", ws, "--ws", "--tls", "--ca-file"])
        .arg(&ca)
        .args(["--session", "s", "--wait", "20", "-o"])
        .arg(&watched)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let published = bin()
        .arg("publish")
        .arg(&replay)
        .args(["--to", tcp, "--tls", "--ca-file"])
        .arg(&ca)
        .args(["--session", "s", "--token", "tok", "--speed", "0"])
        .output()
        .unwrap();
    let watched_ok = watcher.wait_with_output().unwrap().status.success();
    // Without --ca-file, --tls is refused by the argument parser.
    let no_ca = bin()
        .args(["watch", tcp, "--tls", "--session", "s"])
        .output()
        .unwrap();
    relay.kill().unwrap();
    relay.wait().unwrap();
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    assert!(watched_ok);
    assert_eq!(no_ca.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_ca.stderr).contains("--ca-file"));
    let decoded = dir.path().join("watched.bsor");
    let out = bin()
        .arg("decode")
        .arg(&watched)
        .arg("-o")
        .arg(&decoded)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&decoded).unwrap() == std::fs::read(&replay).unwrap());
}

#[test]
fn serve_names_a_bad_key_file_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, _) = pki(dir.path());
    let tokens = dir.path().join("tokens.txt");
    std::fs::write(&tokens, "tok\n").unwrap();
    // The CA's certificate where the key should be.
    let out = bin()
        .args(["serve", "--tcp", "127.0.0.1:0", "--token-file"])
        .arg(&tokens)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&ca)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ca.pem") && err.contains("no private key"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
