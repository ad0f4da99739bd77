//! `ffi/tests/signed.c`, built with the system C compiler against the static library and
//! run: a recording signed through `BsrsConfig::signing_key`, whose stream file and classic
//! file both verify (proto-spec/integrity.md, §13) under the key it was given.
#![cfg(feature = "sign")]

use std::path::{Path, PathBuf};
use std::process::Command;

use bsor_stream_core::integrity::{take_entry, verify_bsor, verify_stream, SigningKey, Verdict};
use bsor_stream_core::{bsor, transcode};

fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libbsor_stream_ffi.a"))
        .find(|p| p.exists())
        .expect("cargo builds libbsor_stream_ffi.a with the tests")
}

/// Removes the test's folder when the test ends, whether it passes or not.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_c_recording_with_the_players_key_verifies() {
    if std::env::var_os("BSRS_SKIP_C_EXAMPLE").is_some() {
        println!("skipped: BSRS_SKIP_C_EXAMPLE is set");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::env::temp_dir().join(format!("bsrs-c-signed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let _cleanup = RemoveOnDrop(out.clone());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = out.join("signed");
    let status = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Werror", "-O2"])
        .arg(root.join("ffi/tests/signed.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lc"])
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "{cc} failed to build ffi/tests/signed.c");
    let (stream, classic) = (out.join("song.bsors"), out.join("song.bsor"));
    let run = Command::new(&exe)
        .arg(&stream)
        .arg(&classic)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "signed failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    let key = SigningKey::from_bytes(&[0x42; 32])
        .verifying_key()
        .to_bytes();
    let stream = std::fs::read(&stream).unwrap();
    let rep = verify_stream(&stream);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.signer_key, Some(key));
    assert_eq!(rep.player_id.as_deref(), Some("76561198000000001"));
    assert!(rep.checkpoints >= 6, "{}", rep.checkpoints);

    let classic = std::fs::read(&classic).unwrap();
    let rep = verify_bsor(&classic);
    assert_eq!(rep.verdict, Verdict::Valid, "{:?}", rep.reason);
    assert_eq!(rep.signer_key, Some(key));
    // Without its entry, the classic file is what the stream decodes to.
    let mut r = bsor::parse(&classic).unwrap();
    take_entry(&mut r).unwrap().expect("the signature entry");
    let (back, rec) = transcode::decode_replay(&stream).unwrap();
    assert!(rec.complete);
    assert_eq!(r, back);
    assert_eq!(r.notes.len(), 11);
}
