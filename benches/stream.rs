//! Stream format speed: encode (BSOR bytes in → stream bytes out) and decode (stream bytes
//! in → BSOR bytes out), per profile, live and archive settings, on one thread.
//!
//! Run: `cargo bench --bench stream`. Throughput is in bytes of BSOR (input of the encoder,
//! output of the decoder), over the corpus in `$BSOR_CORPUS` (default `../shared/corpus`),
//! or a synthetic 5-minute replay when it is absent.

use std::hint::black_box;
use std::path::PathBuf;

use bsor_stream::bsor;
use bsor_stream::stream::{Profile, Settings};
use bsor_stream::synth;
use bsor_stream::transcode;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn corpus() -> Vec<Vec<u8>> {
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bsor"))
        .collect();
    files.sort();
    let mut out: Vec<Vec<u8>> = files.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    if out.is_empty() {
        eprintln!(
            "NOTICE: no corpus at {}; benchmarking a synthetic replay",
            dir.display()
        );
        let r = synth::replay(synth::Settings {
            seed: 1,
            seconds: 300.0,
            fps: 90,
        });
        out.push(bsor::to_vec(&r).expect("synthetic replay"));
    }
    out
}

fn stream(c: &mut Criterion) {
    let files = corpus();
    let total: usize = files.iter().map(Vec::len).sum();
    for (label, make) in [
        ("live", Settings::live as fn(Profile) -> Settings),
        ("archive", Settings::archive),
    ] {
        for (pname, profile) in [
            ("lossless", Profile::Lossless),
            ("fine", Profile::Fine),
            ("compact", Profile::Compact),
        ] {
            let settings = make(profile);
            let streams: Vec<Vec<u8>> = files
                .iter()
                .map(|b| transcode::encode_replay(&bsor::parse(b).expect("parses"), settings))
                .collect();
            let mut g = c.benchmark_group(format!("stream/{pname}/{label}"));
            g.throughput(Throughput::Bytes(total as u64));
            g.sample_size(10);
            g.bench_function("encode", |b| {
                b.iter(|| {
                    for f in &files {
                        let r = bsor::parse(black_box(f)).expect("parses");
                        black_box(transcode::encode_replay(&r, settings));
                    }
                })
            });
            g.bench_function("decode", |b| {
                b.iter(|| {
                    for s in &streams {
                        let (r, _) = transcode::decode_replay(black_box(s)).expect("decodes");
                        black_box(bsor::to_vec(&r).expect("writes"));
                    }
                })
            });
            g.finish();
        }
    }
}

criterion_group!(benches, stream);
criterion_main!(benches);
