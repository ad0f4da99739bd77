//! Writes the signed-stream vectors of `proto-spec/vectors/` (`signed*.bsors` and
//! `signed.expected.json`, integrity.md §10) with the fixed test keys and nonces:
//!
//! ```sh
//! cargo run --release --example make_signed_vectors
//! ```
//!
//! `core/tests/it/integrity.rs` makes them again from the same recipes and checks them.

#[path = "../../core/tests/common/signed_vectors.rs"]
mod signed_vectors;

use std::path::PathBuf;

use bsor_stream::integrity::verify_stream;

fn main() {
    let dir: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "proto-spec", "vectors"]
        .iter()
        .collect();
    let mut expected = serde_json::Map::new();
    for (name, bytes) in signed_vectors::vectors() {
        std::fs::write(dir.join(name), &bytes).expect("write vector");
        let report = signed_vectors::report_json(&verify_stream(&bytes));
        println!("{name}: {} bytes, {}", bytes.len(), report["verdict"]);
        expected.insert(name.to_string(), report);
    }
    let json = serde_json::to_string_pretty(&serde_json::Value::Object(expected)).expect("json");
    std::fs::write(dir.join("signed.expected.json"), json + "\n").expect("write json");
}
