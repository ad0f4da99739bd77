//! `decode` of a signed stream writes a signed BSOR; `verify --signatures` accepts it;
//! `encode` of it to a lossless stream carries the signature back (integrity.md §13).

use std::path::Path;
use std::process::{Command, Output};

use bsor_stream::bsor;

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

fn verify(file: &Path) -> (Option<i32>, serde_json::Value) {
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
fn decode_verify_and_encode_a_signed_bsor() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    assert!(run(&[os("keygen"), os("-o"), p("k").as_os_str()])
        .status
        .success());
    assert!(run(&[
        os("synth"),
        os("--seconds"),
        os("4"),
        os("-o"),
        p("synth.bsor").as_os_str()
    ])
    .status
    .success());
    // The synthetic user data is opaque bytes: without it the entry has its place.
    let mut r = bsor::parse(&std::fs::read(p("synth.bsor")).unwrap()).unwrap();
    r.user_data = None;
    std::fs::write(p("play.bsor"), bsor::to_vec(&r).unwrap()).unwrap();
    let out = run(&[
        os("encode"),
        p("play.bsor").as_os_str(),
        os("--key"),
        p("k").as_os_str(),
        os("-o"),
        p("play.bsors").as_os_str(),
    ]);
    assert!(out.status.success());
    let (code, stream) = verify(&p("play.bsors"));
    assert_eq!(code, Some(0), "{stream}");

    let out = run(&[
        os("decode"),
        p("play.bsors").as_os_str(),
        os("-o"),
        p("signed.bsor").as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = verify(&p("signed.bsor"));
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["verdict"], "valid");
    assert_eq!(v["signerKey"], stream["signerKey"]);
    assert_eq!(v["checkpoints"], stream["checkpoints"]);

    // Back to a lossless stream: the same bytes as the signed stream it came from.
    let out = run(&[
        os("encode"),
        p("signed.bsor").as_os_str(),
        os("-o"),
        p("back.bsors").as_os_str(),
    ]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(p("back.bsors")).unwrap(),
        std::fs::read(p("play.bsors")).unwrap()
    );
    // A lossy encode drops the signature, and says so.
    let out = run(&[
        os("encode"),
        p("signed.bsor").as_os_str(),
        os("--profile"),
        os("compact"),
        os("-o"),
        p("lossy.bsors").as_os_str(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("written unsigned"));
    assert_eq!(verify(&p("lossy.bsors")).1["verdict"], "unsigned");

    // The BSOR with its player ID changed: invalid, exit 1.
    let mut stolen = bsor::parse(&std::fs::read(p("signed.bsor")).unwrap()).unwrap();
    stolen.info.player_id = "76561190000000001".into();
    std::fs::write(p("stolen.bsor"), bsor::to_vec(&stolen).unwrap()).unwrap();
    let (code, v) = verify(&p("stolen.bsor"));
    assert_eq!((code, v["verdict"].as_str()), (Some(1), Some("invalid")));
    // The unsigned BSOR: unsigned, exit 1.
    let (code, v) = verify(&p("play.bsor"));
    assert_eq!((code, v["verdict"].as_str()), (Some(1), Some("unsigned")));

    // Opaque user data has no place for the entry: the BSOR is written unsigned, with a
    // notice.
    let out = run(&[
        os("encode"),
        p("synth.bsor").as_os_str(),
        os("--key"),
        p("k").as_os_str(),
        os("-o"),
        p("opaque.bsors").as_os_str(),
    ]);
    assert!(out.status.success());
    let out = run(&[
        os("decode"),
        p("opaque.bsors").as_os_str(),
        os("-o"),
        p("opaque.bsor").as_os_str(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("without its signature"));
    assert_eq!(verify(&p("opaque.bsor")).1["verdict"], "unsigned");
}
