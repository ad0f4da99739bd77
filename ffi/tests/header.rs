//! `include/bsor_stream.h` is what cbindgen makes of `ffi/src/` now: a stale header
//! fails here. `BLESS=1 cargo test -p bsor-stream-ffi --test header` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads ffi/src/")
        .write(&mut made);
    let path = crate_dir.join("../include/bsor_stream.h");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == made,
        "include/bsor_stream.h is stale: run `BLESS=1 cargo test -p bsor-stream-ffi --test header`"
    );
}
