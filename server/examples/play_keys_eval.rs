//! Play keys and the similar-play check (proto-spec/integrity.md §11.4): disguised copies of
//! corpus and synthetic replays must share a key with their original and score at least the
//! threshold; honest repeats (the same map played again) must not score so; and the cost of
//! an upload's lookup and scoring on a real SQLite index holding N plays of one map.
//!
//! ```text
//! BSOR_CORPUS=../shared/corpus cargo run --release --example play_keys_eval -- 10000
//! ```
//!
//! The argument is the number of stored plays of one map for the cost (default 10,000).

use std::path::PathBuf;
use std::time::Instant;

use bsor_stream_core::bsor::{BsorString, Replay};
use bsor_stream_core::integrity::fingerprint::eval::repeat;
use bsor_stream_core::integrity::fingerprint::{play_keys, similarity, MotionSignature, THRESHOLD};
use bsor_stream_core::synth;
use bsor_stream_server::{self as server, Index, Record};

fn bases() -> Vec<(String, Replay)> {
    let dir = std::env::var_os("BSOR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/corpus"));
    let mut out = vec![(
        "synthetic seed 1".to_string(),
        synth::replay(synth::Settings::default()),
    )];
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "bsor"));
    files.sort();
    for p in files {
        if let Some(r) = std::fs::read(&p)
            .ok()
            .and_then(|b| bsor_stream_core::bsor::parse(&b).ok())
        {
            out.push((p.display().to_string(), r));
        }
    }
    out
}

/// SplitMix64.
fn rng(seed: &mut u64) -> f64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

fn copies(r: &Replay, seed: u64) -> Vec<(&'static str, Replay)> {
    let mut s = seed;
    let n = r.notes.len();
    let mut out = Vec::new();
    let mut c = r.clone();
    c.notes[n / 2].event_time = f32::from_bits(c.notes[n / 2].event_time.to_bits() + 1);
    out.push(("one ulp", c));
    let mut c = r.clone();
    for _ in 0..5 {
        let i = (rng(&mut s) * n as f64) as usize % n;
        c.notes[i].event_time += ((rng(&mut s) * 2.0 - 1.0) * 0.004) as f32;
    }
    out.push(("5 note times ±4 ms", c));
    let mut c = r.clone();
    for f in &mut c.frames {
        f.head.position.x += ((rng(&mut s) * 2.0 - 1.0) * 0.005) as f32;
        f.left_hand.position.y += ((rng(&mut s) * 2.0 - 1.0) * 0.005) as f32;
        f.right_hand.position.z += ((rng(&mut s) * 2.0 - 1.0) * 0.005) as f32;
    }
    c.notes[1].event_time = f32::from_bits(c.notes[1].event_time.to_bits() - 1);
    out.push(("frames ±5 mm + ulp", c));
    let mut c = r.clone();
    c.info.hash = BsorString::new("edited");
    c.info.difficulty = BsorString::new("Easy");
    c.info.player_id = BsorString::new("thief");
    c.notes[2].event_time = f32::from_bits(c.notes[2].event_time.to_bits() + 1);
    out.push(("info edited + ulp", c));
    let mut c = r.clone();
    c.notes.truncate(n - 2);
    out.push(("last 2 notes dropped", c));
    let mut c = r.clone();
    c.notes.remove(n / 2);
    out.push(("middle note dropped", c));
    let mut c = r.clone();
    for x in &mut c.notes {
        x.event_time += ((rng(&mut s) * 2.0 - 1.0) * 0.002) as f32;
    }
    out.push(("every note ±2 ms", c));
    out
}

fn shared(a: &[i64], b: &[i64]) -> usize {
    a.iter().filter(|k| b.contains(k)).count()
}

fn main() {
    let n_stored: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let bases = bases();
    let mut min_copy = f64::INFINITY;
    let mut max_repeat: f64 = 0.0;
    let mut repeat_key_hits = 0;
    let mut repeats = 0;
    for (k, (name, r)) in bases.iter().enumerate() {
        let (keys, sig) = (play_keys(r), MotionSignature::of(r));
        println!("{name}: {} notes, {} keys", r.notes.len(), keys.len());
        for (what, c) in copies(r, 7 + k as u64) {
            let (ck, cs) = (play_keys(&c), MotionSignature::of(&c));
            let score = similarity(&sig, &cs).score;
            let found = shared(&keys, &ck);
            println!("  copy {what:22} shared keys {found:2}, score {score:.3}");
            if found > 0 && !what.starts_with("middle") && !what.starts_with("every") {
                min_copy = min_copy.min(score);
            }
        }
        for seed in 0..200u64 {
            let rep = repeat(r, 100 + seed);
            let score = similarity(&sig, &MotionSignature::of(&rep)).score;
            max_repeat = max_repeat.max(score);
            repeats += 1;
            repeat_key_hits += usize::from(shared(&keys, &play_keys(&rep)) > 0);
        }
        // Other plays: the other bases and other synthetic seeds.
        for (j, (_, o)) in bases.iter().enumerate() {
            if j != k {
                max_repeat = max_repeat.max(similarity(&sig, &MotionSignature::of(o)).score);
            }
        }
        for seed in 2..12u64 {
            let o = synth::replay(synth::Settings {
                seed,
                ..synth::Settings::default()
            });
            max_repeat = max_repeat.max(similarity(&sig, &MotionSignature::of(&o)).score);
        }
    }
    println!(
        "threshold {THRESHOLD}: lowest copy score found by keys {min_copy:.3}, highest \
         repeat/other-play score {max_repeat:.4} ({repeats} repeats, {repeat_key_hits} shared a key)"
    );
    cost(n_stored);
}

/// The cost of an upload's lookup and scoring with `n` honest plays of one map stored.
fn cost(n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile_dir();
        let url = format!("sqlite://{}", dir.join("index.sqlite").display());
        let index = Index::open(&url).await.unwrap();
        let base = synth::replay(synth::Settings {
            seed: 5,
            seconds: 120.0,
            fps: 30,
        });
        let start = Instant::now();
        for i in 0..n {
            let rep = repeat(&base, 10_000 + i as u64);
            let play = server::play_of(&rep);
            let r = Record {
                id: format!("{i:032x}"),
                blob: format!("b{i}"),
                player: format!("p{i}"),
                player_name: String::new(),
                map_hash: "map".into(),
                song: String::new(),
                difficulty: String::new(),
                mode: String::new(),
                score: 0,
                played: 0,
                uploaded: i as i64,
                duration: 0.0,
                format: "lossless".into(),
                stored_bytes: 0,
                bsor_bytes: 0,
                header_bytes: 0,
                fingerprint: format!("f{i}"),
                signed: false,
                countersigned: false,
                existed_by: i as i64,
            };
            index.lease(&r.blob, 0).await.unwrap();
            index.commit(&r, &play).await.unwrap();
        }
        println!(
            "stored {n} plays of one map ({} notes each) in {:.1} s",
            base.notes.len(),
            start.elapsed().as_secs_f64()
        );
        let mut worst = 0f64;
        let mut total = 0f64;
        let mut most = 0;
        let uploads = 50;
        for u in 0..uploads {
            let up = if u % 2 == 0 {
                repeat(&base, 900_000 + u)
            } else {
                let mut c = repeat(&base, 10_000 + u * 7);
                c.notes[3].event_time = f32::from_bits(c.notes[3].event_time.to_bits() + 1);
                c
            };
            let play = server::play_of(&up);
            let mine = MotionSignature::of(&up);
            let t = Instant::now();
            let cands = index
                .similar_candidates(&play.keys, server::MAX_CANDIDATES)
                .await
                .unwrap();
            use base64::Engine as _;
            for (_, s) in &cands {
                let b = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
                let theirs = MotionSignature::from_bytes(&b).unwrap();
                let _ = similarity(&theirs, &mine);
            }
            let e = t.elapsed().as_secs_f64() * 1e3;
            worst = worst.max(e);
            total += e;
            most = most.max(cands.len());
        }
        println!(
            "lookup + score per upload with {n} stored: mean {:.2} ms, worst {worst:.2} ms, \
             at most {most} candidates ({uploads} uploads: honest repeats and one-ulp copies)",
            total / uploads as f64
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("play-keys-eval-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
