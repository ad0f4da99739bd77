//! The fingerprint's evaluation (proto-spec/integrity-notes.md §11.2): repeats of corpus
//! replays and of a synthetic one must not match them, disguised copies must.
//!
//! ```text
//! BSOR_CORPUS=../shared/corpus cargo run --release --example fingerprint_eval -- 10000 1000
//! ```
//!
//! The arguments are the number of repeat pairs and of disguised copies (default 10,000 and
//! 1,000). It prints the false matches, the misses and both score distributions.

use std::path::PathBuf;

use bsor_stream::integrity::fingerprint::eval::{percentile, Evaluation};
use bsor_stream::integrity::fingerprint::THRESHOLD;
use bsor_stream::synth;

fn main() {
    let mut args = std::env::args().skip(1);
    let repeats = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let copies = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/corpus"));
    let mut bases = vec![synth::replay(synth::Settings::default())];
    let mut names = vec!["synthetic (seed 1, 60 s)".to_string()];
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "bsor"));
    files.sort();
    for path in files {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        match bsor_stream::bsor::parse(&bytes) {
            Ok(r) => {
                names.push(format!("{} ({} notes)", path.display(), r.notes.len()));
                bases.push(r);
            }
            Err(e) => eprintln!("{}: {e}", path.display()),
        }
    }
    if bases.len() == 1 {
        eprintln!(
            "note: no corpus at {}; synthetic replay only",
            dir.display()
        );
    }
    println!("bases: {}", names.join(", "));
    let start = std::time::Instant::now();
    let e = Evaluation::run(&bases, repeats, copies, 1);
    println!(
        "{} repeat pairs, {} disguised copies, threshold {THRESHOLD} ({:.1} s)",
        e.repeats.len(),
        e.copies.len(),
        start.elapsed().as_secs_f64()
    );
    println!("false matches: {}", e.false_matches());
    println!("misses: {}", e.misses());
    let row = |name: &str, s: &[f64]| {
        println!(
            "{name:8} min {:.4}  p1 {:.4}  p50 {:.4}  p99 {:.4}  p99.9 {:.4}  max {:.4}",
            percentile(s, 0.0),
            percentile(s, 1.0),
            percentile(s, 50.0),
            percentile(s, 99.0),
            percentile(s, 99.9),
            percentile(s, 100.0)
        );
    };
    row("repeats", &e.repeats);
    row("copies", &e.copies);
    let (hi, lo) = (percentile(&e.repeats, 100.0), percentile(&e.copies, 0.0));
    println!(
        "margin: lowest copy {lo:.4} / highest repeat {hi:.4} = {:.2}x",
        lo / hi
    );
}
