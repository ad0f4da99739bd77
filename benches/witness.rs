//! Verifying a signed stream with one witness (proto-spec/integrity.md §8, §12): a synthetic
//! 5-minute song (`synth --seconds 300`, 90 fps) in the live lossless settings, signed, with
//! a witness's statement for each of its checkpoints and its final checkpoint.
//!
//! Run: `cargo bench --bench witness`. Every signature is checked alone with `verify_strict`
//! (integrity.md §1: no batch). Reports the stream's verification (`verify_stream`), its
//! verifying decode (`decode_verified`: the replay made of the records the signatures
//! cover), the statements' signatures alone (`verify_strict` each), and the stream with its
//! statements as `verify --signatures` does it (`verify_witnessed`: the statements'
//! signatures on a second thread while the stream is verified).

use std::hint::black_box;

use bsor_stream::integrity::witness::{
    append_record, check_witnesses, parse_file, verify_witnessed, Statement, Witness,
};
use bsor_stream::integrity::{self, Signer, SigningKey, Verdict};
use bsor_stream::stream::{split_stream, ChunkType, Profile, Settings};
use bsor_stream::synth;
use criterion::{criterion_group, criterion_main, Criterion};

fn witnessed() -> (Vec<u8>, Vec<u8>, [u8; 32]) {
    let r = synth::replay(synth::Settings {
        seed: 1,
        seconds: 300.0,
        fps: 90,
    });
    let signer = Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]);
    let s = integrity::sign_replay(&r, Settings::live(Profile::Lossless), signer).expect("signs");
    let w = Witness::new(SigningKey::from_bytes(&[0x57; 32]));
    let (_, _, spans) = split_stream(&s).expect("a stream");
    let mut file = Vec::new();
    for (i, c) in spans.iter().enumerate() {
        if let ChunkType::Unknown(kind) = c.header.kind {
            let payload = &c.bytes(&s)[c.header_len..];
            if let Some(st) = w.countersign(kind, payload, 1_700_000_000_000 + i as u64) {
                append_record(&mut file, &st);
            }
        }
    }
    (s, file, w.public_key())
}

fn witness(c: &mut Criterion) {
    let (s, file, key) = witnessed();
    let rep = integrity::verify_stream(&s);
    assert_eq!(rep.verdict, Verdict::Valid);
    let w = check_witnesses(&s, &file, &[key]);
    assert!(w.rejected.is_empty() && w.existed_by_ms.is_some());
    eprintln!(
        "stream {} bytes, {} checkpoints, {} statements",
        s.len(),
        rep.checkpoints,
        w.witnesses[0].checkpoints.len() + 1
    );
    let mut g = c.benchmark_group("signed/5min-live-lossless");
    g.sample_size(20);
    g.bench_function("verify_stream", |b| {
        b.iter(|| black_box(integrity::verify_stream(black_box(&s))))
    });
    g.bench_function("decode_verified", |b| {
        b.iter(|| black_box(integrity::decode_verified(black_box(&s))))
    });
    let statements: Vec<Statement> = parse_file(&file)
        .records
        .iter()
        .map(|r| Statement::parse(r).expect("a statement"))
        .collect();
    g.bench_function("statements one by one (verify_strict)", |b| {
        b.iter(|| black_box(&statements).iter().all(|st| st.verify().is_ok()))
    });
    assert_eq!(
        verify_witnessed(&s, &file, &[key]),
        (rep.clone(), w.clone())
    );
    g.bench_function("verify_witnessed (statements on a second thread)", |b| {
        b.iter(|| black_box(verify_witnessed(black_box(&s), black_box(&file), &[key])))
    });
    g.finish();
}

criterion_group!(benches, witness);
criterion_main!(benches);
