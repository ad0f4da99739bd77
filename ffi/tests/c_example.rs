//! `examples/c/record.c`, built with the system C compiler against the static library and
//! run: its `.bsors` must decode whole, to exactly the `.bsor` it wrote beside it.
//!
//! `CC` names the compiler (default `cc`). The test skips, saying so, when
//! `BSRS_SKIP_C_EXAMPLE` is set: scripts/cross-test.sh sets it under qemu, where it builds
//! and runs the example itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use bsor_stream_core::{bsor, transcode};

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

fn build(root: &Path, out: &Path) -> PathBuf {
    let lib = static_lib();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = out.join("record");
    let status = Command::new(&cc)
        .arg("-std=c99")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-O2")
        .arg(root.join("examples/c/record.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lc"])
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "{cc} failed to build examples/c/record.c");
    exe
}

#[test]
fn the_c_example_records_a_stream_that_decodes_to_its_classic_file() {
    if std::env::var_os("BSRS_SKIP_C_EXAMPLE").is_some() {
        println!("skipped: BSRS_SKIP_C_EXAMPLE is set");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::env::temp_dir().join(format!("bsrs-c-example-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let _cleanup = RemoveOnDrop(out.clone());
    let exe = build(&root, &out);
    let (stream, classic) = (out.join("song.bsors"), out.join("song.bsor"));
    let run = Command::new(&exe)
        .arg(&stream)
        .arg(&classic)
        .arg("12")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "record failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );

    let classic = std::fs::read(&classic).unwrap();
    let r = bsor::parse(&classic).expect("the classic file parses");
    assert_eq!(r.frames.len(), 12 * 90);
    assert!(r.notes.len() >= 20);
    assert_eq!(r.walls.len(), 1);
    assert_eq!(r.pauses.len(), 1);
    assert!(r.controller_offsets.is_some());
    assert_eq!(r.info.player_name.as_str(), Some("C example"));
    let good = r.notes.iter().filter(|n| n.outcome.cut().is_some()).count();
    assert_eq!(
        r.info.score,
        110 * good as i32,
        "the final info replaced the start's"
    );

    let (back, recovery) = transcode::decode_replay(&std::fs::read(&stream).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    assert!(recovery.complete, "{recovery:?}");
    assert_eq!(bsor::to_vec(&back).unwrap(), classic);
}

/// Removes the test's folder (the built program and its files, about 18 MB) when the test
/// ends, whether it passes or not.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
