//! Integrity throughput over the real replays in `$BSOR_CORPUS` (default `../shared/corpus`),
//! or a synthetic 5-minute replay when the corpus is absent:
//!
//! - `fingerprint`: the event digest and motion signature of a parsed replay and its
//!   similarity to a stored signature (what `similar` does per file once parsed);
//! - `parse+fingerprint`: the same from the BSOR bytes;
//! - `records-hash`: the signer's hashing path, every record's canonical BSOR bytes into
//!   BLAKE3 through [`Signer`], one checkpoint at the end;
//! - `sign-live`: the same with a checkpoint (an Ed25519 signature) every 90 frames, as a
//!   live recording makes about once a second;
//! - `blake3-bytes`: BLAKE3 over the file's bytes in one call, for comparison.
//!
//! Run: `cargo bench --bench integrity`. Throughput is in bytes of BSOR per second (MB/s,
//! 10^6 bytes), on one thread.

use std::hint::black_box;
use std::path::PathBuf;

use bsor_stream::bsor::{self, Replay};
use bsor_stream::integrity::fingerprint::{event_digest, similarity, MotionSignature};
use bsor_stream::integrity::{Signer, SigningKey};
use bsor_stream::synth;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn inputs() -> Vec<(String, Vec<u8>)> {
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bsor"))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some((name, std::fs::read(&p).ok()?))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        eprintln!(
            "NOTICE: no corpus at {}; benchmarking a synthetic replay",
            dir.display()
        );
        let r = synth::replay(synth::Settings {
            seed: 1,
            seconds: 300.0,
            fps: 90,
        });
        files.push((
            "synthetic-300s".into(),
            bsor::to_vec(&r).expect("synthetic replay"),
        ));
    }
    files
}

/// The digest, the signature and the score against `other`.
fn fingerprint(r: &Replay, other: &MotionSignature) -> f64 {
    black_box(event_digest(r));
    similarity(&MotionSignature::of(r), other).score
}

/// Every record through the signer's hashers, a checkpoint every `group` frames.
fn sign_hash(r: &Replay, group: usize) -> usize {
    let mut s = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let mut out = 0;
    for (i, f) in r.frames.iter().enumerate() {
        s.frame(f);
        if i % group == group - 1 {
            out += s.checkpoint().len();
        }
    }
    r.notes.iter().for_each(|n| s.note(n));
    r.walls.iter().for_each(|w| s.wall(w));
    r.heights.iter().for_each(|h| s.height(h));
    r.pauses.iter().for_each(|p| s.pause(p));
    out + s.checkpoint().len()
}

fn integrity(c: &mut Criterion) {
    for (name, bytes) in inputs() {
        let replay = bsor::parse(&bytes).expect("input parses");
        let other = MotionSignature::of(&replay);
        let mut g = c.benchmark_group(format!("integrity/{name}"));
        g.throughput(Throughput::BytesDecimal(bytes.len() as u64));
        g.sample_size(20);
        g.bench_function("fingerprint", |b| {
            b.iter(|| fingerprint(black_box(&replay), &other))
        });
        g.bench_function("parse+fingerprint", |b| {
            b.iter(|| {
                let r = bsor::parse(black_box(&bytes)).expect("parses");
                fingerprint(&r, &other)
            })
        });
        g.bench_function("records-hash", |b| {
            b.iter(|| sign_hash(black_box(&replay), usize::MAX))
        });
        g.bench_function("sign-live", |b| {
            b.iter(|| sign_hash(black_box(&replay), 90))
        });
        g.bench_function("blake3-bytes", |b| {
            b.iter(|| blake3::hash(black_box(&bytes)))
        });
        g.finish();
    }
}

criterion_group!(benches, integrity);
criterion_main!(benches);
