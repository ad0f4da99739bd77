//! XROR (the BOXRR-23 data set's format): the corpus's sample1.xror is the same play as its
//! sample1.bsor, and damaged XROR gives errors, never a panic.

use crate::common;

use bsor_stream_core::bsor;
use bsor_stream_core::xror;
use proptest::prelude::*;

fn sample() -> Option<(Vec<u8>, Vec<u8>)> {
    let dir = common::corpus_dir()?;
    let x = std::fs::read(dir.join("sample1.xror")).ok()?;
    let b = std::fs::read(dir.join("sample1.bsor")).expect("sample1.bsor beside sample1.xror");
    Some((x, b))
}

#[test]
fn sample1_xror_is_sample1_bsor() {
    let Some((x, b)) = sample() else { return };
    assert!(xror::looks_like_xror(&x) && !xror::looks_like_xror(&b));
    let from_xror = xror::parse(&x).expect("sample1.xror");
    let from_bsor = bsor::parse(&b).expect("sample1.bsor");
    assert_eq!(from_xror.info, from_bsor.info);
    assert_eq!(from_xror.frames.len(), 27931);
    // Every frame's time, fps and pose bit for bit (PartialEq on f32 would pass -0.0 for
    // 0.0: compare the written records).
    let rec = |f: &bsor::Frame| bsor::encode_frame(f);
    for (i, (a, b)) in from_xror.frames.iter().zip(&from_bsor.frames).enumerate() {
        assert_eq!(rec(a), rec(b), "frame {i}");
    }
    assert_eq!(from_xror.notes, from_bsor.notes);
    assert_eq!(from_xror.walls, from_bsor.walls);
    assert_eq!(from_xror.heights, from_bsor.heights);
    assert_eq!(from_xror.pauses, from_bsor.pauses);
    // sample1.bsor has no controller offsets, user data or trailing bytes, which XROR
    // cannot carry: the BSOR written from the XROR is the original, byte for byte.
    assert_eq!(bsor::to_vec(&from_xror).unwrap(), b);
}

/// The reference vectors (core/tests/data/fpzip/, made by scripts/fpzip-vectors/ with fpzip's
/// own library built in each of its four floating-point modes): `CASE.MODE.fpz` decodes bit
/// for bit to `CASE.out.f32` (the library's own decoding, at a lossy precision) or else to
/// `CASE.in.f32` (the input, lossless).
fn fpzip_vectors() -> Vec<(String, Vec<u8>, Vec<u32>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fpzip");
    let words = |b: Vec<u8>| -> Vec<u32> {
        assert_eq!(b.len() % 4, 0);
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).expect("core/tests/data/fpzip") {
        let name = e.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".fpz") else {
            continue;
        };
        let (case, _mode) = stem.rsplit_once('.').expect("CASE.MODE.fpz");
        let out = dir.join(format!("{case}.out.f32"));
        let expected = if out.exists() {
            let input = words(std::fs::read(dir.join(format!("{case}.in.f32"))).unwrap());
            let out = words(std::fs::read(out).unwrap());
            // A lossy case really is lossy, or it tests nothing more than a lossless one.
            assert_ne!(input, out, "{case}");
            out
        } else {
            words(std::fs::read(dir.join(format!("{case}.in.f32"))).unwrap())
        };
        v.push((
            stem.to_string(),
            std::fs::read(dir.join(&name)).unwrap(),
            expected,
        ));
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn fpzip_reference_vectors_decode_bit_for_bit_in_every_mode() {
    let vectors = fpzip_vectors();
    let mut per_mode = std::collections::BTreeMap::<&str, usize>::new();
    for (name, fpz, expected) in &vectors {
        let mode = name.rsplit_once('.').unwrap().1;
        *per_mode.entry(mode).or_default() += 1;
        let a = xror::fpzip_decompress(fpz).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(a.nx * a.ny * a.nz * a.nf, a.values.len(), "{name}");
        let got: Vec<u32> = a.values.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got.len(), expected.len(), "{name}: value count");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
            panic!(
                "{name}: value {i} is {:#010x}, the reference library's is {:#010x}",
                got[i], expected[i]
            );
        }
    }
    // Every case in all four modes (12 cases when this was written).
    let modes: Vec<_> = per_mode.keys().copied().collect();
    assert_eq!(modes, ["emul", "fast", "int", "safe"], "{per_mode:?}");
    let counts: Vec<_> = per_mode.values().copied().collect();
    assert!(
        counts.iter().all(|&n| n == counts[0] && n >= 12),
        "{per_mode:?}"
    );
}

#[test]
fn fpzip_double_precision_is_refused_by_name() {
    // A double-precision stream from the reference library (scripts/fpzip-vectors/): not
    // what XROR stores, and not decoded, with an error that says so.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fpzip");
    let fpz = std::fs::read(dir.join("double4x3.fast.fpz64")).unwrap();
    let e = xror::fpzip_decompress(&fpz).unwrap_err();
    assert!(e.what.contains("double precision"), "{e}");
}

#[test]
fn fpzip_reference_vectors_cut_short_are_errors() {
    for (name, fpz, _) in fpzip_vectors() {
        for cut in 0..fpz.len() {
            let r = xror::fpzip_decompress(&fpz[..cut]);
            // The range coder reads 4 bytes ahead of what it has decoded: the last few
            // bytes of a stream can be zeros it did not need.
            if cut + 4 < fpz.len() {
                assert!(r.is_err(), "{name} cut to {cut} of {} bytes", fpz.len());
            }
        }
    }
}

#[test]
fn not_xror_and_empty_documents_are_errors() {
    for bytes in [
        &b""[..],
        b"\x05\x00\x00\x00\x00",
        b"garbage that is not BSON",
    ] {
        assert!(xror::parse(bytes).is_err());
    }
    // A document without info or frames names the missing field.
    let e = xror::parse(b"\x05\x00\x00\x00\x00").unwrap_err();
    assert_eq!(e.field, "info", "{e}");
    assert!(xror::fpzip_decompress(b"fpz").is_err());
    assert!(xror::fpzip_decompress(&[0xff; 64]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Damage anywhere (flipped bytes, a cut) gives a replay or an error, never a panic.
    #[test]
    fn mutated_xror_never_panics(
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let Some((mut x, _)) = sample() else { return Ok(()) };
        for (at, bits) in &flips {
            let i = at.index(x.len());
            x[i] ^= bits;
        }
        if truncate {
            x.truncate(cut.index(x.len()));
        }
        let _ = xror::parse(&x);
    }

    /// The fpzip decoder on arbitrary bytes after its magic: an error or an array, never a
    /// panic, and never more values than its bound allows.
    #[test]
    fn fpzip_on_arbitrary_bytes_never_panics(tail in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut b = b"fpz\0".to_vec();
        b.extend_from_slice(&tail);
        if let Ok(a) = xror::fpzip_decompress(&b) {
            prop_assert!(a.values.len() as u64 <= b.len() as u64 * 8192);
        }
        let _ = xror::fpzip_decompress(&tail);
    }
}
