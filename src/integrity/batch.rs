//! Many Ed25519 signatures checked at once (`integrity.md` §8 and §12.3): the point checks
//! `verify_strict` makes and `ed25519_dalek::verify_batch` does not, then one batch.
//!
//! The batch itself is ed25519-dalek's; what is written here is only the part it leaves
//! out: that each `R` is the canonical encoding of a point not of small order and each key
//! is not of small order, each distinct key checked once.

use ed25519_dalek::{Signature, VerifyingKey};

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
pub(crate) fn all_verify(items: &[Signed<'_>]) -> bool {
    if items.is_empty() {
        return true;
    }
    // Keys are few (one signer, a witness or two): each is checked once.
    let mut good_keys: Vec<&VerifyingKey> = Vec::new();
    for s in items {
        if !good_keys.contains(&s.key) {
            if s.key.is_weak() {
                return false;
            }
            good_keys.push(s.key);
        }
        if !strict_r(s.signature) {
            return false;
        }
    }
    let messages: Vec<&[u8]> = items.iter().map(|s| s.message).collect();
    let signatures: Vec<Signature> = items
        .iter()
        .map(|s| Signature::from_bytes(s.signature))
        .collect();
    let keys: Vec<VerifyingKey> = items.iter().map(|s| *s.key).collect();
    ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::CompressedEdwardsY;
    use ed25519_dalek::{Signer as _, SigningKey};

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
}
