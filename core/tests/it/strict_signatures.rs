//! Strict verification everywhere (proto-spec/integrity.md §1): the edge cases of "Taming
//! the many EdDSAs" (Chalkias, Garillot, Nikolaenko, 2020) built from the curve itself, each
//! refused by every place that checks a signature here: a key chunk, a witness statement.
//! Keys must be canonical and torsion-free; `R` canonical and not of small order; `S`
//! canonical; the equation cofactorless (`verify_strict`). A randomised batch cannot agree
//! with that on torsion components, so there is none.

use bsor_stream_core::integrity::witness::{verify_statements, Statement, Subject};
use bsor_stream_core::integrity::{strict_key, verify_stream, SigningKey, Verdict, KEY_CHUNK};
use bsor_stream_core::stream::{split_stream, ChunkHeader, ChunkType, Profile, Settings};
use bsor_stream_core::{integrity, synth};
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::Identity;
use sha2::{Digest, Sha512};

/// The group order ℓ, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

fn scalar(seed: u8) -> Scalar {
    Scalar::from_bytes_mod_order_wide(&Sha512::digest([seed; 7]).into())
}

/// The challenge k = SHA-512(R || A || M) mod ℓ.
fn challenge(r: &[u8; 32], a: &[u8; 32], m: &[u8]) -> Scalar {
    let mut h = Sha512::new();
    h.update(r);
    h.update(a);
    h.update(m);
    Scalar::from_bytes_mod_order_wide(&h.finalize().into())
}

/// A signature (R, S) over `m` by secret scalar `a` with public encoding `a_enc`, nonce
/// point `r_point` = [r]B + extra, S = r + k·a.
fn sign_raw(a: Scalar, a_enc: [u8; 32], r: Scalar, extra: EdwardsPoint, m: &[u8]) -> [u8; 64] {
    let r_enc = (B * r + extra).compress().to_bytes();
    let k = challenge(&r_enc, &a_enc, m);
    let s = r + k * a;
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&r_enc);
    sig[32..].copy_from_slice(s.as_bytes());
    sig
}

/// Does the cofactorless equation [S]B = R + [k]A hold (what a plain, non-strict check
/// accepts), for a canonical S?
fn cofactorless(sig: &[u8; 64], a_enc: &[u8; 32], m: &[u8]) -> bool {
    let r = CompressedEdwardsY(sig[..32].try_into().unwrap()).decompress();
    let a = CompressedEdwardsY(*a_enc).decompress();
    let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(sig[32..].try_into().unwrap()));
    match (r, a, s) {
        (Some(r), Some(a), Some(s)) => {
            B * s == r + a * challenge(&sig[..32].try_into().unwrap(), a_enc, m)
        }
        _ => false,
    }
}

fn torsion() -> impl Iterator<Item = EdwardsPoint> {
    EIGHT_TORSION
        .iter()
        .copied()
        .filter(|t| *t != EdwardsPoint::identity())
}

#[test]
fn small_order_mixed_order_and_non_canonical_keys_are_refused() {
    let honest = B * scalar(1);
    assert!(strict_key(&honest.compress().to_bytes()).is_ok());
    for t in EIGHT_TORSION {
        let why = strict_key(&t.compress().to_bytes())
            .unwrap_err()
            .to_string();
        assert!(why.contains("small order"), "{why}");
    }
    for t in torsion() {
        let why = strict_key(&(honest + t).compress().to_bytes())
            .unwrap_err()
            .to_string();
        assert!(why.contains("torsion-free"), "{why}");
    }
    // Non-canonical encodings: y ≥ p (p + 0 ..= p + 18), either sign bit. Those that name a
    // point at all are refused.
    let mut named = 0;
    for y in 0u8..19 {
        for sign in [0u8, 0x80] {
            let mut enc = [0xffu8; 32];
            enc[0] = 0xed + y;
            enc[31] = 0x7f | sign;
            if CompressedEdwardsY(enc).decompress().is_some() {
                named += 1;
                assert!(strict_key(&enc).is_err(), "{enc:02x?}");
            }
        }
    }
    assert!(named > 0);
}

/// A witness statement as a witness with secret scalar `a` (public encoding `a_enc`) would
/// sign it, with nonce point [r]B + `extra` and S changed by `tweak`.
fn statement(a: Scalar, a_enc: [u8; 32], extra: EdwardsPoint, time: u64) -> Statement {
    let mut s = Statement {
        witness: a_enc,
        nonce: [0x4e; 16],
        subject: Subject::Checkpoint,
        index: 0,
        chain: [7; 32],
        time_ms: time,
        signature: [0; 64],
    };
    s.signature = sign_raw(a, a_enc, scalar(9), extra, &s.message());
    s
}

#[test]
fn witness_statements_with_edge_case_signatures_are_refused() {
    let a = scalar(2);
    let a_enc = (B * a).compress().to_bytes();
    let good = statement(a, a_enc, EdwardsPoint::identity(), 1);
    assert_eq!(verify_statements(&[good]), vec![true]);

    // Small-order R: R = identity, S = k·a: [S]B = R + [k]A holds without any nonce; strict
    // verification refuses a small-order R.
    let mut s = good;
    let r_enc = EdwardsPoint::identity().compress().to_bytes();
    let k = challenge(&r_enc, &a_enc, &s.message());
    s.signature[..32].copy_from_slice(&r_enc);
    s.signature[32..].copy_from_slice((k * a).as_bytes());
    assert!(cofactorless(&s.signature, &a_enc, &s.message()));
    assert_eq!(verify_statements(&[s]), vec![false]);

    // The same R in a non-canonical encoding (y = p + 1).
    let mut s2 = s;
    let mut enc = [0xffu8; 32];
    enc[0] = 0xee;
    enc[31] = 0x7f;
    s2.signature[..32].copy_from_slice(&enc);
    assert_eq!(verify_statements(&[s2]), vec![false]);

    // Mixed-order R: [r]B + T, S = r + k·a: only the cofactored equation holds; a
    // randomised cofactorless batch accepts it for some coefficients, strict never.
    for t in torsion() {
        let s = statement(a, a_enc, t, 2);
        assert!(!cofactorless(&s.signature, &a_enc, &s.message()));
        assert_eq!(verify_statements(&[s, good]), vec![false, true]);
    }

    // Non-canonical S: S + ℓ (the same residue).
    let mut s = good;
    let sum = {
        let mut out = [0u8; 32];
        let mut carry = 0u16;
        for i in 0..32 {
            let v = u16::from(s.signature[32 + i]) + u16::from(L[i]) + carry;
            out[i] = v as u8;
            carry = v >> 8;
        }
        out
    };
    s.signature[32..].copy_from_slice(&sum);
    assert_eq!(verify_statements(&[s]), vec![false]);

    // Small-order key A = T with S = r, R = [r]B: [S]B = R + [k]T holds whenever [k]T is the
    // identity; refused for the key whatever k is.
    for t in EIGHT_TORSION {
        let t_enc = t.compress().to_bytes();
        let s = statement(Scalar::ZERO, t_enc, EdwardsPoint::identity(), 3);
        assert_eq!(verify_statements(&[s]), vec![false]);
    }

    // Mixed-order key A = [a]B + T, signed with a: the cofactorless equation holds when
    // [k]T is the identity (k a multiple of T's order), which `verify_strict` alone accepts;
    // the key's torsion refuses it every time.
    for t in torsion() {
        let mixed = B * a + t;
        let enc = mixed.compress().to_bytes();
        let mut accepted_by_plain_strict = 0;
        for time in 0..64u64 {
            let s = statement(a, enc, EdwardsPoint::identity(), time);
            if cofactorless(&s.signature, &enc, &s.message()) {
                accepted_by_plain_strict += 1;
                let vk = integrity::VerifyingKey::from_bytes(&enc).unwrap();
                let sig = integrity::Signature::from_bytes(&s.signature);
                assert!(vk.verify_strict(&s.message(), &sig).is_ok());
            }
            assert_eq!(verify_statements(&[s]), vec![false]);
        }
        assert!(
            accepted_by_plain_strict > 0,
            "no k with [k]T = 0 in 64 tries"
        );
    }
}

/// A key chunk whose key has a torsion component, signed by its holder, makes the stream
/// invalid whatever its signature.
#[test]
fn a_key_chunk_with_a_mixed_order_key_is_invalid() {
    let r = synth::replay(synth::Settings {
        seed: 7,
        seconds: 2.0,
        fps: 30,
    });
    let signed = integrity::sign_replay(
        &r,
        Settings::live(Profile::Lossless),
        integrity::Signer::new(SigningKey::from_bytes(&[0x42; 32]), [0x4e; 16]),
    )
    .unwrap();
    let (_, hl, spans) = split_stream(&signed).unwrap();
    let key = &spans[0];
    assert_eq!(key.header.kind, ChunkType::Unknown(KEY_CHUNK));
    let payload = &key.bytes(&signed)[key.header_len..];
    // The same chunk with the key A + T, signed by the holder of a.
    let a = scalar(3);
    let t = torsion().next().unwrap();
    let enc = (B * a + t).compress().to_bytes();
    let mut body = payload[..payload.len() - 64].to_vec();
    body[1..33].copy_from_slice(&enc);
    let mut m = b"bsor-stream integrity v1 key chunk".to_vec();
    m.extend_from_slice(&body);
    let sig = sign_raw(a, enc, scalar(4), EdwardsPoint::identity(), &m);
    body.extend_from_slice(&sig);
    let mut out = signed[..hl].to_vec();
    ChunkHeader::new(key.header.kind, 0, 0, 0, 0.0).write_to(&body, &mut out);
    out.extend_from_slice(&signed[key.offset + key.len..]);
    let rep = verify_stream(&out);
    assert_eq!(rep.verdict, Verdict::Invalid);
    let why = rep.reason.unwrap();
    assert!(
        why.contains("key chunk 0") && why.contains("torsion-free"),
        "{why}"
    );
}
