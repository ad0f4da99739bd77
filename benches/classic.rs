//! Classic BSOR codec throughput: whole-buffer parse, push parse and write, over the real
//! replays in `$BSOR_CORPUS` (default `../shared/corpus`), or over a synthetic 5-minute
//! replay when the corpus is absent.
//!
//! Run: `cargo bench --bench classic`. Criterion reports time per file and throughput in
//! bytes of BSOR per second; the benchmark runs on one thread.

use std::hint::black_box;
use std::path::PathBuf;

use bsor_stream::bsor::{self, Event, PushParser};
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

/// Push parse as a network reader would: pieces of `piece` bytes, every event consumed.
fn push_parse(bytes: &[u8], piece: usize) -> usize {
    let mut p = PushParser::new();
    let mut frames = 0;
    for chunk in bytes.chunks(piece) {
        p.push(chunk);
        while let Ok(Some(ev)) = p.next_event() {
            if let Event::Frame(f) = ev {
                frames += 1;
                black_box(&f);
            }
        }
    }
    p.finish();
    while let Ok(Some(ev)) = p.next_event() {
        black_box(&ev);
    }
    frames
}

fn classic(c: &mut Criterion) {
    for (name, bytes) in inputs() {
        let replay = bsor::parse(&bytes).expect("input parses");
        let mut g = c.benchmark_group(format!("classic/{name}"));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.sample_size(30);
        g.bench_function("parse", |b| b.iter(|| bsor::parse(black_box(&bytes))));
        g.bench_function("push_16KiB", |b| {
            b.iter(|| push_parse(black_box(&bytes), 16 * 1024))
        });
        let mut out = Vec::with_capacity(bytes.len());
        g.bench_function("write", |b| {
            b.iter(|| {
                out.clear();
                bsor::write(black_box(&replay), &mut out).expect("writes");
                out.len()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, classic);
criterion_main!(benches);
