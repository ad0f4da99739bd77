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
