//! Shared test helpers: where the corpus is.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real-replay corpus named by `BSOR_CORPUS` (default `../shared/corpus`), or `None`
/// with a printed notice when it is absent.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    if dir.join("expected.json").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "NOTICE: corpus not found at {} (set BSOR_CORPUS); skipping corpus checks",
            dir.display()
        );
        None
    }
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
