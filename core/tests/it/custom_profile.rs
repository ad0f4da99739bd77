//! Profile 3, the custom lossy grid (format.md sections 3 and 10): its header, its range
//! checks, its equivalence with fine at fine's grid, its error bounds, and forged headers.

use crate::common;

use bsor_stream_core::bsor::{self, Replay};
use bsor_stream_core::stream::{
    accuracy, CustomSteps, Field, HeaderError, Profile, Settings, StreamHeader,
};
use bsor_stream_core::synth;
use bsor_stream_core::transcode;
use proptest::prelude::*;

fn synthetic(seed: u64, seconds: f32) -> Replay {
    synth::replay(synth::Settings {
        seed,
        seconds,
        fps: 90,
    })
}

/// The events, optional sections and info as BSOR bytes (frames left out).
fn events_bytes(r: &Replay) -> Vec<u8> {
    bsor::to_vec(&Replay {
        frames: Vec::new(),
        ..r.clone()
    })
    .unwrap()
}

/// A header's bytes with the position step and `M` replaced (and the CRC made right).
fn forge(header: &[u8], step_bits: u32, m: u32) -> Vec<u8> {
    // magic 4, version 1, profile 1, step 4, then M as a varint.
    let mut at = 10;
    while header[at] & 0x80 != 0 {
        at += 1;
    }
    let mut out = header[..6].to_vec();
    out.extend_from_slice(&step_bits.to_le_bytes());
    let mut v = m;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(&header[at + 1..header.len() - 4]);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn header_len(stream: &[u8]) -> usize {
    StreamHeader::parse_prefix_len(stream).unwrap().unwrap().1
}

/// The maximum position (mm) and rotation (°) errors of `back` against `r`, after checking
/// that times, fps and events are exact; `None` errors (not finite, not a rotation) must be
/// verbatim.
fn max_errors(r: &Replay, back: &Replay) -> (f64, f64) {
    assert_eq!(r.frames.len(), back.frames.len());
    assert!(events_bytes(r) == events_bytes(back), "events are exact");
    let (mut mp, mut mr) = (0f64, 0f64);
    for (a, b) in r.frames.iter().zip(&back.frames) {
        assert_eq!(a.time.to_bits(), b.time.to_bits());
        assert_eq!(a.fps, b.fps);
        for (p, q) in [
            (&a.head, &b.head),
            (&a.left_hand, &b.left_hand),
            (&a.right_hand, &b.right_hand),
        ] {
            match accuracy::position_error_mm(&p.position, &q.position) {
                Some(e) => mp = mp.max(e),
                None => assert_eq!(p.position, q.position),
            }
            match accuracy::rotation_error_deg(&p.rotation, &q.rotation) {
                Some(e) => mr = mr.max(e),
                None => assert_eq!(
                    [p.rotation.x, p.rotation.y, p.rotation.z, p.rotation.w].map(f32::to_bits),
                    [q.rotation.x, q.rotation.y, q.rotation.z, q.rotation.w].map(f32::to_bits)
                ),
            }
        }
    }
    (mp, mr)
}

/// The bounds the custom profile promises: `step / 1.153` and `72° / M`.
fn promised(c: CustomSteps) -> (f64, f64) {
    (c.bounds().0, 72.0 / f64::from(c.rotation_steps()))
}

#[test]
fn custom_header_round_trips() {
    let c = CustomSteps::new(2.5e-4, 7200).unwrap();
    for settings in [
        Settings::live(Profile::Custom(c)),
        Settings::archive(Profile::Custom(c)),
    ] {
        let h = StreamHeader {
            settings,
            info: synthetic(1, 1.0).info,
        };
        let bytes = h.encode();
        assert_eq!(bytes[5], 3, "profile byte");
        assert_eq!(&bytes[6..10], &2.5e-4f32.to_le_bytes());
        let (back, len) = StreamHeader::parse_prefix_len(&bytes).unwrap().unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(back.settings.profile, Profile::Custom(c));
        assert_eq!(back.encode(), bytes);
    }
}

#[test]
fn custom_steps_out_of_range_are_rejected_naming_the_field() {
    let step = HeaderError::QuantizationOutOfRange(Field::PositionStep);
    let steps = HeaderError::QuantizationOutOfRange(Field::RotationSteps);
    for (s, m, want) in [
        (0.050001f32, 1000, &step),
        (9.9e-6, 1000, &step),
        (f32::NAN, 1000, &step),
        (f32::INFINITY, 1000, &step),
        (-1e-3, 1000, &step),
        (1e-3, 35, &steps),
        (1e-3, 1_000_001, &steps),
        (1e-3, 0, &steps),
    ] {
        assert_eq!(CustomSteps::new(s, m).as_ref(), Err(want), "{s} {m}");
        let h = StreamHeader {
            settings: Settings::live(Profile::Custom(CustomSteps::new(1e-3, 1000).unwrap())),
            info: synthetic(1, 1.0).info,
        };
        let forged = forge(&h.encode(), s.to_bits(), m);
        assert_eq!(StreamHeader::parse_prefix(&forged).as_ref(), Err(want));
        assert!(want.to_string().contains(if want == &step {
            "position step"
        } else {
            "rotation steps"
        }));
    }
    // The ends of the ranges are in.
    assert!(CustomSteps::new(1e-5, 36).is_ok() && CustomSteps::new(0.05, 1_000_000).is_ok());
    // Fine's and compact's headers must still carry exactly their grids.
    let fine = StreamHeader {
        settings: Settings::live(Profile::Fine),
        info: synthetic(1, 1.0).info,
    };
    let forged = forge(&fine.encode(), 1.2e-4f32.to_bits(), 3600);
    assert_eq!(
        StreamHeader::parse_prefix(&forged),
        Err(HeaderError::QuantizationMismatch)
    );
}

#[test]
fn custom_bounds_and_prior_give_fine_and_compact_at_their_grids() {
    let fine = CustomSteps::new(1.153e-4, 3600).unwrap();
    let compact = CustomSteps::new(1.153e-3, 360).unwrap();
    let (p, r) = fine.bounds();
    assert!((p - 0.1).abs() < 1e-7 && r == 0.0199, "{p} {r}");
    // sqrt(3)/2 * step, the rounding's worst case, is 0.9985 of the bound.
    assert!((3f64.sqrt() / 2.0 * 1.153e-1 - 0.09985).abs() < 1e-5);
    let (p, r) = compact.bounds();
    assert!((p - 1.0).abs() < 1e-6 && r == 0.199, "{p} {r}");
    assert!(
        (CustomSteps::from_mm_deg(0.1153, 0.0225)
            .unwrap()
            .rotation_steps() as i32
            - 3601)
            .abs()
            <= 1
    );
}

/// At fine's step and `M`, the custom profile codes every frame chunk as fine does (same
/// prior centre, same bounds but 2e-9 mm): the streams differ in the header only.
fn same_as_fine(r: &Replay, what: &str) {
    let custom = Profile::Custom(CustomSteps::new(1.153e-4, 3600).unwrap());
    for make in [Settings::live as fn(Profile) -> Settings, Settings::archive] {
        let f = transcode::encode_replay(r, make(Profile::Fine));
        let c = transcode::encode_replay(r, make(custom));
        assert!(
            f[header_len(&f)..] == c[header_len(&c)..],
            "{what}: chunks differ"
        );
        let (bf, _) = transcode::decode_replay(&f).unwrap();
        let (bc, rec) = transcode::decode_replay(&c).unwrap();
        assert!(rec.complete && rec.damage.is_empty());
        assert!(
            bsor::to_vec(&bf).unwrap() == bsor::to_vec(&bc).unwrap(),
            "{what}"
        );
    }
}

#[test]
fn custom_at_fines_grid_codes_as_fine() {
    same_as_fine(&synthetic(5, 20.0), "synthetic");
    for (name, bytes) in common::corpus_files() {
        same_as_fine(&bsor::parse(&bytes).unwrap(), &name);
    }
}

#[test]
fn corpus_custom_decodes_are_within_their_bounds() {
    for (name, bytes) in common::corpus_files() {
        let r = bsor::parse(&bytes).unwrap();
        for (mm, deg) in [(0.05, 0.005), (5.0, 1.0), (0.3, 0.5)] {
            let c = CustomSteps::from_mm_deg(mm, deg).unwrap();
            let s = transcode::encode_replay(&r, Settings::archive(Profile::Custom(c)));
            let (back, rec) = transcode::decode_replay(&s).unwrap();
            assert!(rec.complete, "{name}");
            let (mp, mr) = max_errors(&r, &back);
            let (bp, br) = promised(c);
            assert!(mp <= bp && mr <= br, "{name} {mm} mm {deg}°: {mp} mm {mr}°");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn synthetic_custom_decodes_are_within_their_bounds(
        seed in 0u64..1000,
        step in 1e-5f32..=0.05,
        m in 36u32..=1_000_000,
    ) {
        let r = synthetic(seed, 3.0);
        let c = CustomSteps::new(step, m).unwrap();
        let s = transcode::encode_replay(&r, Settings::live(Profile::Custom(c)));
        let (back, rec) = transcode::decode_replay(&s).unwrap();
        prop_assert!(rec.complete);
        let (mp, mr) = max_errors(&r, &back);
        let (bp, br) = promised(c);
        prop_assert!(mp <= bp && mr <= br, "{} {}: {} mm {}°", step, m, mp, mr);
    }

    /// Any step and `M` in a custom header, valid or not, with the chunks of another grid's
    /// stream after it: the decoder returns or fails, it never panics.
    #[test]
    fn forged_custom_headers_never_panic(
        step_bits in prop_oneof![
            any::<u32>(),
            (1e-5f32..=0.05).prop_map(f32::to_bits),
        ],
        m in prop_oneof![any::<u32>(), 36u32..=1_000_000],
        seed in 0u64..100,
    ) {
        let r = synthetic(seed, 2.0);
        let s = transcode::encode_replay(
            &r,
            Settings::live(Profile::Custom(CustomSteps::new(1e-3, 500).unwrap())),
        );
        let n = header_len(&s);
        let mut forged = forge(&s[..n], step_bits, m);
        forged.extend_from_slice(&s[n..]);
        let valid = CustomSteps::new(f32::from_bits(step_bits), m).is_ok();
        match transcode::decode_replay(&forged) {
            Ok(_) => prop_assert!(valid),
            Err(_) => prop_assert!(!valid),
        }
    }
}
