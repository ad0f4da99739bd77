//! Embeds the browser player (every file of `web/` except its README) in the binary:
//! writes `OUT_DIR/web_assets.rs`, a table of (name, bytes) that `include_bytes!` fills.
//!
//! A build script rather than the `include_dir` crate: cargo then rebuilds when a file of
//! `web/` is added, removed or changed (`rerun-if-changed` on the folder), which a proc
//! macro cannot tell it on stable Rust.

use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let web = Path::new(&manifest).join("../web");
    println!("cargo:rerun-if-changed={}", web.display());
    let mut files: Vec<(String, String)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&web) {
        for e in entries.flatten() {
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            let is_file = e.file_type().is_ok_and(|t| t.is_file());
            if !is_file || name == "README.md" || name.starts_with('.') {
                continue;
            }
            let path = e.path().canonicalize().unwrap_or_else(|_| e.path());
            println!("cargo:rerun-if-changed={}", path.display());
            files.push((name, path.display().to_string()));
        }
    }
    files.sort();
    let mut out = String::from(
        "/// The files of `web/` (name, bytes), embedded at build time.\n\
         pub static WEB: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &files {
        out.push_str(&format!("    ({name:?}, include_bytes!({path:?})),\n"));
    }
    out.push_str("];\n");
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("web_assets.rs");
    std::fs::write(dest, out).expect("writing web_assets.rs");
}
