//! Many Ed25519 signatures checked at once (`integrity.md` §8 and §12.3): the point checks
//! `verify_strict` makes and a batch does not, then one random linear combination.
//!
//! The batch is written here on curve25519-dalek's multiscalar multiplication rather than
//! taken from `ed25519_dalek::verify_batch` because the signatures a verifier meets come from
//! very few keys (one recorder key over some 300 checkpoints, a witness key over as many
//! statements): summing each key's coefficients makes one point term per key instead of one
//! per signature, which halves the multiplication (measured by `cargo bench --bench witness`).
//! The equation, the checks on `S` and the derivation of the coefficients from all the inputs
//! are those of `verify_batch`; what is added is only the checks it leaves out: that each
//! `R` is the canonical encoding of a point not of small order and each key is not of small
//! order, each distinct key checked once.

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha512};

/// One signature to check: the key, the whole signed message (domain string and body), the
/// signature.
pub(crate) struct Signed<'a> {
    pub key: &'a VerifyingKey,
    pub message: &'a [u8],
    pub signature: &'a [u8; 64],
}

/// Whether the 32 bytes encode `y` below p = 2^255 - 19 (the sign bit aside). With the
/// point decompressed and not of small order, this is what makes the encoding canonical:
/// the only other non-canonical encodings, `x = 0` with the sign bit set, are `y = ±1`,
/// both of small order (RFC 8032 §5.1.3).
fn canonical_y(bytes: &[u8; 32]) -> bool {
    // p = 0x7fff…ffed, little-endian: ed, then 30 bytes ff, then 7f.
    !(bytes[31] & 0x7f == 0x7f && bytes[1..31].iter().all(|&b| b == 0xff) && bytes[0] >= 0xed)
}

/// The `y` of the eight points of small order (the sign bit aside): 0 and 1, p - 1 and the
/// two `y` of the points of order 8. With `y` canonical, an encoding is that of a point of
/// small order exactly when its `y` is one of these (tests check the list).
const SMALL_ORDER_Y: [[u8; 32]; 5] = {
    let mut one = [0u8; 32];
    one[0] = 1;
    let mut minus_one = [0xff; 32];
    minus_one[0] = 0xec;
    minus_one[31] = 0x7f;
    [
        [0; 32],
        one,
        minus_one,
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef,
            0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88,
            0x6d, 0x53, 0xfc, 0x05,
        ],
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10,
            0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77,
            0x92, 0xac, 0x03, 0x7a,
        ],
    ]
};

/// Whether `verify_strict` would accept this signature's `R` on its encoding: canonical,
/// and not that of a point of small order. Read from the bytes, without decompressing (the
/// batch decompresses `R` anyway, and fails if it is not a point).
pub(crate) fn strict_r(signature: &[u8; 64]) -> bool {
    let mut y = [0u8; 32];
    y.copy_from_slice(&signature[..32]);
    if !canonical_y(&y) {
        return false;
    }
    y[31] &= 0x7f;
    !SMALL_ORDER_Y.contains(&y)
}

/// Whether every signature verifies with `verify_strict` semantics as far as a batch can
/// tell (`integrity.md` §12.3): `false` if any point check fails or the batch does not
/// verify, and then the caller checks each alone to find which. An empty list is `true`.
///
/// The batch: with `k_i = SHA-512(R_i || A_i || M_i)` and 128-bit coefficients `z_i`,
/// `[-Σ z_i s_i] B + Σ z_i R_i + Σ_A [Σ_{i: A_i = A} z_i k_i] A` is the identity (the
/// cofactorless equation). The `z_i` are read from BLAKE3 over every `k_i` and `s_i`, so that
/// nobody can choose a signature knowing its coefficient, and the same input always gets the
/// same answer.
pub(crate) fn all_verify(items: &[Signed<'_>]) -> bool {
    if items.is_empty() {
        return true;
    }
    // Keys are few (one signer, a witness or two): each is checked once and given one term.
    let mut keys: Vec<(&VerifyingKey, Scalar)> = Vec::new();
    let mut key_of = Vec::with_capacity(items.len());
    let mut rs = Vec::with_capacity(items.len());
    let mut ss = Vec::with_capacity(items.len());
    let mut ks = Vec::with_capacity(items.len());
    let mut seed = blake3::Hasher::new_derive_key("bsor-stream ed25519 batch v1");
    for s in items {
        let at = match keys.iter().position(|(k, _)| *k == s.key) {
            Some(at) => at,
            None => {
                if s.key.is_weak() {
                    return false;
                }
                keys.push((s.key, Scalar::ZERO));
                keys.len() - 1
            }
        };
        if !strict_r(s.signature) {
            return false;
        }
        let mut r = [0u8; 32];
        r.copy_from_slice(&s.signature[..32]);
        let Some(r) = CompressedEdwardsY(r).decompress() else {
            return false;
        };
        let mut sb = [0u8; 32];
        sb.copy_from_slice(&s.signature[32..]);
        let Some(sc) = Option::<Scalar>::from(Scalar::from_canonical_bytes(sb)) else {
            return false;
        };
        let mut h = Sha512::new();
        h.update(&s.signature[..32]);
        h.update(s.key.as_bytes());
        h.update(s.message);
        let k: [u8; 64] = h.finalize().into();
        seed.update(&k);
        seed.update(&sb);
        key_of.push(at);
        rs.push(r);
        ss.push(sc);
        ks.push(Scalar::from_bytes_mod_order_wide(&k));
    }
    let mut coefficients = seed.finalize_xof();
    let mut b = Scalar::ZERO;
    let mut scalars = Vec::with_capacity(items.len() + keys.len() + 1);
    scalars.push(Scalar::ZERO);
    for i in 0..items.len() {
        let mut z = [0u8; 16];
        coefficients.fill(&mut z);
        let z = Scalar::from(u128::from_le_bytes(z));
        b -= z * ss[i];
        keys[key_of[i]].1 += z * ks[i];
        scalars.push(z);
    }
    scalars[0] = b;
    scalars.extend(keys.iter().map(|(_, c)| *c));
    let points = std::iter::once(ED25519_BASEPOINT_POINT)
        .chain(rs)
        .chain(keys.iter().map(|(k, _)| k.to_edwards()));
    EdwardsPoint::vartime_multiscalar_mul(scalars, points).is_identity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::CompressedEdwardsY;
    use ed25519_dalek::{Signature, Signer as _, SigningKey};

    /// The list holds the eight points of small order: each `y` with each sign bit that
    /// makes a canonical encoding decompresses to a point of small order, eight in all.
    #[test]
    fn small_order_y_are_the_eight_torsion_points() {
        let mut points = Vec::new();
        for y in SMALL_ORDER_Y {
            for sign in [0, 0x80] {
                let mut b = y;
                b[31] |= sign;
                let p = CompressedEdwardsY(b).decompress().expect("a point");
                assert!(p.is_small_order(), "{b:02x?}");
                if p.compress().to_bytes() == b {
                    points.push(b);
                }
            }
        }
        points.dedup();
        assert_eq!(points.len(), 8);
    }

    /// The byte test agrees with decompressing and compressing again, on encodings around
    /// p, of the points of small order with either sign, and on points of real signatures.
    #[test]
    fn canonical_y_is_the_round_trip() {
        let round_trip = |b: [u8; 32]| {
            CompressedEdwardsY(b)
                .decompress()
                .map(|p| (p.compress().to_bytes() == b, p.is_small_order()))
        };
        let mut cases: Vec<[u8; 32]> = Vec::new();
        for low in 0xe0..=0xffu8 {
            for top in [0x7f, 0xff] {
                let mut b = [0xff; 32];
                b[0] = low;
                b[31] = top;
                cases.push(b);
            }
        }
        for sign in [0, 0x80] {
            for y in SMALL_ORDER_Y {
                let mut b = y;
                b[31] |= sign;
                cases.push(b);
            }
        }
        let key = SigningKey::from_bytes(&[7; 32]);
        for i in 0..64u8 {
            let sig = key.sign(&[i]).to_bytes();
            cases.push(sig[..32].try_into().expect("32 bytes"));
        }
        // Encodings that are not points are left to the batch, which fails on them.
        let mut compared = 0;
        let mut rejected = 0;
        for b in cases {
            let Some((canonical, small)) = round_trip(b) else {
                continue;
            };
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&b);
            assert_eq!(strict_r(&sig), canonical && !small, "{b:02x?}");
            compared += 1;
            rejected += usize::from(!canonical || small);
        }
        // Non-canonical and small-order encodings were among those compared.
        assert!(compared > 64 + 10 && rejected > 10, "{compared} {rejected}");
    }

    #[test]
    fn a_bad_signature_fails_the_batch() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let vk = key.verifying_key();
        let messages: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10]).collect();
        let mut sigs: Vec<[u8; 64]> = messages.iter().map(|m| key.sign(m).to_bytes()).collect();
        let items = |sigs: &[[u8; 64]]| -> bool {
            let v: Vec<Signed<'_>> = messages
                .iter()
                .zip(sigs)
                .map(|(m, s)| Signed {
                    key: &vk,
                    message: m,
                    signature: s,
                })
                .collect();
            all_verify(&v)
        };
        assert!(items(&sigs));
        sigs[3][40] ^= 1;
        assert!(!items(&sigs));
    }

    /// Over signatures by three keys, whole and with one thing changed (a bit of `R`, of
    /// `S`, of the message, `S` made non-canonical, the key swapped for another), the batch
    /// says what `verify_strict` one by one says.
    #[test]
    fn the_batch_agrees_with_verify_strict_across_keys() {
        let signers: Vec<SigningKey> = (1..=3u8)
            .map(|i| SigningKey::from_bytes(&[i; 32]))
            .collect();
        let vks: Vec<VerifyingKey> = signers.iter().map(|k| k.verifying_key()).collect();
        let messages: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 1 + usize::from(i)]).collect();
        let owner = |i: usize| i % 3;
        let good: Vec<[u8; 64]> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| signers[owner(i)].sign(m).to_bytes())
            .collect();
        let check = |sigs: &[[u8; 64]], msgs: &[Vec<u8>], key: &dyn Fn(usize) -> usize| {
            let items: Vec<Signed<'_>> = (0..sigs.len())
                .map(|i| Signed {
                    key: &vks[key(i)],
                    message: &msgs[i],
                    signature: &sigs[i],
                })
                .collect();
            let strict = (0..sigs.len()).all(|i| {
                vks[key(i)]
                    .verify_strict(&msgs[i], &Signature::from_bytes(&sigs[i]))
                    .is_ok()
            });
            (all_verify(&items), strict)
        };
        assert_eq!(check(&good, &messages, &owner), (true, true));
        let mut cases = 0;
        for at in [0usize, 5, 11] {
            for byte in [3usize, 31, 40, 63] {
                let mut sigs = good.clone();
                sigs[at][byte] ^= 0x10;
                assert_eq!(
                    check(&sigs, &messages, &owner),
                    (false, false),
                    "sig {at} byte {byte}"
                );
                cases += 1;
            }
            let mut msgs = messages.clone();
            msgs[at][0] ^= 1;
            assert_eq!(check(&good, &msgs, &owner), (false, false));
            // S + l: the same point equation, but not canonical.
            let mut sigs = good.clone();
            let s = Scalar::from_canonical_bytes(sigs[at][32..].try_into().expect("32"))
                .expect("canonical");
            let mut plus_l = [0u8; 32];
            let mut carry = 0u16;
            // l = 2^252 + 27742317777372353535851937790883648493, little-endian.
            let mut l = [0u8; 32];
            l[..16].copy_from_slice(&[
                0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
                0xde, 0x14,
            ]);
            l[31] = 0x10;
            for (j, out) in plus_l.iter_mut().enumerate() {
                let v = u16::from(s.to_bytes()[j]) + u16::from(l[j]) + carry;
                *out = v as u8;
                carry = v >> 8;
            }
            if carry == 0 && plus_l[31] < 0x80 {
                sigs[at][32..].copy_from_slice(&plus_l);
                assert_eq!(check(&sigs, &messages, &owner), (false, false));
                cases += 1;
            }
            let swapped = |i: usize| {
                if i == at {
                    (owner(i) + 1) % 3
                } else {
                    owner(i)
                }
            };
            assert_eq!(check(&good, &messages, &swapped), (false, false));
        }
        assert!(cases >= 12);
    }
}
