//! Shared test helpers: where the corpus is.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real-replay corpus named by `BSOR_CORPUS` (default `shared/corpus` beside the
/// repository, for the tests of every crate of the workspace), or `None` with a notice on
/// the terminal when it is absent.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("../shared/corpus"));
    if dir.join("expected.json").is_file() {
        Some(dir)
    } else {
        skip_notice(&dir);
        None
    }
}

/// The repository's root: the nearest folder above this crate's (or its own) that holds
/// the workspace's `Cargo.lock` (a member crate such as the CLI's lives in a subfolder).
fn repository() -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .map_or(crate_dir.clone(), std::path::Path::to_path_buf)
}

/// Says once per test binary that the corpus checks are skipped. The test runner captures
/// what `println!` and `eprintln!` print inside a test and shows it only for failing tests,
/// so the notice is written to the process's stderr handle directly, which it does not
/// capture: a plain `cargo test` shows it between the test lines.
fn skip_notice(dir: &std::path::Path) {
    use std::io::Write;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let text = format!(
            "\nNOTICE: corpus not found at {} (no expected.json there): the corpus checks \
             of this test binary pass without checking anything. Set BSOR_CORPUS to the \
             corpus folder to run them.\n",
            dir.display()
        );
        // One write, so that the runner's own lines do not cut it in two.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    });
}

/// Every `.bsor` file in the corpus, sorted, with its bytes.
pub fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let Some(dir) = corpus_dir() else {
        return Vec::new();
    };
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("read corpus dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bsor"))
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "corpus at {} holds no .bsor",
        dir.display()
    );
    names
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read corpus file"))
        })
        .collect()
}
