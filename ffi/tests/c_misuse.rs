//! `ffi/tests/misuse.c`, built with the system C compiler against the static library and
//! run: a C program that misuses the ABI in every way the header allows a careless mod to
//! (see the file), in one process that must survive each case, checking every return code
//! and last error. Its folder is a temporary one, removed after.
//!
//! `CC` names the compiler (default `cc`). The test skips, saying so, when
//! `BSRS_SKIP_C_EXAMPLE` is set: scripts/cross-test.sh sets it under qemu, where it builds
//! and runs the program itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The static library cargo built with this test: in target/<profile>/deps/ beside the
/// test, or uplifted to target/<profile>/.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libbsor_stream_ffi.a"))
        .find(|p| p.exists())
        .expect("cargo builds libbsor_stream_ffi.a with the tests")
}

/// A folder removed when dropped, whatever the test did.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_c_misuse_program_survives_every_case_with_the_documented_codes() {
    if std::env::var_os("BSRS_SKIP_C_EXAMPLE").is_some() {
        println!("skipped: BSRS_SKIP_C_EXAMPLE is set");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = TempDir(std::env::temp_dir().join(format!("bsrs-misuse-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let work = tmp.0.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = tmp.0.join("misuse");
    let status = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Werror", "-O2"])
        .arg(root.join("ffi/tests/misuse.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lc"])
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "{cc} failed to build ffi/tests/misuse.c");
    let run = Command::new(&exe).arg(&work).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(
        run.status.success(),
        "misuse failed ({:?}):\n{out}{err}",
        run.status
    );
    assert!(
        err.is_empty(),
        "nothing on stderr (no panic message): {err}"
    );
    let checks: u32 = out
        .trim()
        .strip_prefix("misuse: ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a summary line: {out}"));
    assert!(checks > 300, "{checks} checks ran");
}
