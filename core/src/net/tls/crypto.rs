//! The clients' public-key cryptography: the relay's certificate chain and handshake
//! signature checked with ECDSA on P-256 or P-384 (RustCrypto's `p256`, `p384` and `ecdsa`)
//! or Ed25519 (`ed25519-dalek`, which signing links already), and the key exchange with
//! X25519 (`curve25519-dalek`, which signing links already) or P-256 (`p256`). ring keeps what it does well (AES-GCM, HMAC and HKDF, hashing, random numbers);
//! its P-256 base-point table (151 KB), its curve code and its big-number code then drop
//! out of the mod library at link time (docs/benchmarks.md, "The mod library's size").
//!
//! Glue only, through rustls's public traits: the arithmetic, the parsing of keys, points
//! and signatures, and their checks (points on the curve, scalars in range, DER) are those
//! crates' own. What the glue adds is what ring and rustls's ring provider do around the
//! same calls: public keys and key shares as uncompressed points only (certificates,
//! RFC 5480 §2.2; TLS 1.3 allows no other form, RFC 8446 §4.2.8.2), and an all-zero X25519
//! result refused (RFC 8446 §7.4.2).

use rustls::crypto::{ActiveKeyExchange, GetRandomFailed, SecureRandom, SharedSecret};
use rustls::crypto::{SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::SignatureVerificationAlgorithm;
use rustls::pki_types::{alg_id, AlgorithmIdentifier, InvalidSignature};
use rustls::{Error, NamedGroup, PeerMisbehaved, SignatureScheme};

/// The curves of the ECDSA signatures accepted.
#[derive(Debug, Clone, Copy)]
enum Curve {
    P256,
    P384,
}

/// The hashes of the ECDSA signatures accepted.
#[derive(Debug, Clone, Copy)]
enum Hash {
    Sha256,
    Sha384,
}

/// ECDSA verification of one curve and hash, with webpki's identifiers for them.
#[derive(Debug)]
struct Ecdsa {
    curve: Curve,
    hash: Hash,
}

impl SignatureVerificationAlgorithm for Ecdsa {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        use p256::ecdsa::signature::hazmat::PrehashVerifier;
        use sha2::Digest;
        // An uncompressed point, as ring takes it: the crates also take compressed ones.
        if public_key.first() != Some(&4) {
            return Err(InvalidSignature);
        }
        let mut digest = [0; 48];
        let digest = match self.hash {
            Hash::Sha256 => {
                digest[..32].copy_from_slice(&sha2::Sha256::digest(message));
                &digest[..32]
            }
            Hash::Sha384 => {
                digest.copy_from_slice(&sha2::Sha384::digest(message));
                &digest[..]
            }
        };
        let verified = match self.curve {
            Curve::P256 => {
                let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(public_key);
                let signature = p256::ecdsa::Signature::from_der(signature);
                key.and_then(|key| key.verify_prehash(digest, &signature?))
            }
            Curve::P384 => {
                let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(public_key);
                let signature = p384::ecdsa::Signature::from_der(signature);
                key.and_then(|key| key.verify_prehash(digest, &signature?))
            }
        };
        verified.map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        match self.curve {
            Curve::P256 => alg_id::ECDSA_P256,
            Curve::P384 => alg_id::ECDSA_P384,
        }
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        match self.hash {
            Hash::Sha256 => alg_id::ECDSA_SHA256,
            Hash::Sha384 => alg_id::ECDSA_SHA384,
        }
    }
}

/// Ed25519 verification (RFC 8032) with `verify_strict`, as the stream signatures are
/// checked (core/src/integrity): a canonical `S` and no small-order key or `R`, which no honest
/// signer produces.
#[derive(Debug)]
struct Ed25519;

impl SignatureVerificationAlgorithm for Ed25519 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key = <&[u8; 32]>::try_from(public_key).map_err(|_| InvalidSignature)?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(key).map_err(|_| InvalidSignature)?;
        let signature =
            ed25519_dalek::Signature::from_slice(signature).map_err(|_| InvalidSignature)?;
        key.verify_strict(message, &signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ED25519
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ED25519
    }
}

static ECDSA_P256_SHA256: &dyn SignatureVerificationAlgorithm = &Ecdsa {
    curve: Curve::P256,
    hash: Hash::Sha256,
};
static ECDSA_P256_SHA384: &dyn SignatureVerificationAlgorithm = &Ecdsa {
    curve: Curve::P256,
    hash: Hash::Sha384,
};
static ECDSA_P384_SHA256: &dyn SignatureVerificationAlgorithm = &Ecdsa {
    curve: Curve::P384,
    hash: Hash::Sha256,
};
static ECDSA_P384_SHA384: &dyn SignatureVerificationAlgorithm = &Ecdsa {
    curve: Curve::P384,
    hash: Hash::Sha384,
};
static ED25519: &dyn SignatureVerificationAlgorithm = &Ed25519;

/// The signature algorithms a client accepts, in the relay's certificate chain and its
/// handshake signature: ECDSA with P-256 or P-384 and Ed25519, what current CAs (and rcgen)
/// issue for TLS 1.3, as webpki's ring algorithms of the same names pair them. RSA is left
/// out: its verification would add a big-number library to the mod library, where every
/// kilobyte counts (docs/quest.md).
pub(super) static SIG_ALGS: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[
        ECDSA_P256_SHA256,
        ECDSA_P256_SHA384,
        ECDSA_P384_SHA256,
        ECDSA_P384_SHA384,
        ED25519,
    ],
    mapping: &[
        (SignatureScheme::ECDSA_NISTP384_SHA384, &[ECDSA_P384_SHA384]),
        (SignatureScheme::ECDSA_NISTP256_SHA256, &[ECDSA_P256_SHA256]),
        (SignatureScheme::ED25519, &[ED25519]),
    ],
};

/// `N` random bytes from the provider's generator (ring's, the operating system's).
fn random<const N: usize>() -> Result<[u8; N], GetRandomFailed> {
    let mut bytes = [0; N];
    super::SystemRandom.fill(&mut bytes)?;
    Ok(bytes)
}

/// X25519 key exchange (RFC 7748) on curve25519-dalek.
#[derive(Debug)]
pub(super) struct X25519;

impl SupportedKxGroup for X25519 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let secret = random::<32>()?;
        let public = curve25519_dalek::MontgomeryPoint::mul_base_clamped(secret).to_bytes();
        Ok(Box::new(X25519Share { secret, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// One X25519 exchange under way: the secret scalar (wiped when dropped) and its share.
struct X25519Share {
    secret: [u8; 32],
    public: [u8; 32],
}

impl Drop for X25519Share {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

impl ActiveKeyExchange for X25519Share {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        use subtle::ConstantTimeEq;
        let peer = <[u8; 32]>::try_from(peer).map_err(|_| PeerMisbehaved::InvalidKeyShare)?;
        let shared = curve25519_dalek::MontgomeryPoint(peer)
            .mul_clamped(self.secret)
            .to_bytes();
        // A small-order share gives all zeros, which RFC 8446 §7.4.2 has clients refuse.
        if bool::from(shared.ct_eq(&[0; 32])) {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        Ok(SharedSecret::from(&shared[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// ECDH on P-256 (secp256r1, the group every TLS 1.3 peer must support, RFC 8446 §9.1) on
/// RustCrypto's `p256`.
#[derive(Debug)]
pub(super) struct Secp256r1;

impl SupportedKxGroup for Secp256r1 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        // A random scalar in [1, n): `SecretKey::from_bytes` refuses the others (one draw
        // in 2^32), as `NonZeroScalar::random` does.
        let secret = loop {
            if let Ok(secret) = p256::SecretKey::from_bytes(&random::<32>()?.into()) {
                break secret;
            }
        };
        let public = p256::EncodedPoint::from(secret.public_key());
        let public = <[u8; 65]>::try_from(public.as_bytes())
            .map_err(|_| Error::General("a P-256 key share is 65 bytes uncompressed".into()))?;
        Ok(Box::new(Secp256r1Share { secret, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::secp256r1
    }
}

/// One P-256 exchange under way: the secret (wiped by `p256` when dropped) and its share,
/// uncompressed.
struct Secp256r1Share {
    secret: p256::SecretKey,
    public: [u8; 65],
}

impl ActiveKeyExchange for Secp256r1Share {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        // Uncompressed only (RFC 8446 §4.2.8.2); `from_sec1_bytes` checks the point is on
        // the curve and not the identity.
        if peer.len() != 65 || peer[0] != 4 {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        let peer =
            p256::PublicKey::from_sec1_bytes(peer).map_err(|_| PeerMisbehaved::InvalidKeyShare)?;
        let shared = p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), peer.as_affine());
        Ok(SharedSecret::from(&shared.raw_secret_bytes()[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::secp256r1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{self as ring_sig, KeyPair};

    /// `alg` and ring's `ring_alg` both take `signature` of `message` by `public_key`, and
    /// both refuse it for another message, and when one of its bits is flipped.
    fn agree_with_ring(
        alg: &dyn SignatureVerificationAlgorithm,
        ring_alg: &'static dyn ring_sig::VerificationAlgorithm,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) {
        let ring_verify = |m: &[u8], s: &[u8]| {
            ring_sig::UnparsedPublicKey::new(ring_alg, public_key)
                .verify(m, s)
                .is_ok()
        };
        assert!(ring_verify(message, signature), "{alg:?}: ring refuses");
        alg.verify_signature(public_key, message, signature)
            .unwrap_or_else(|_| panic!("{alg:?} refuses what ring takes"));
        let other = b"another message";
        assert!(!ring_verify(other, signature));
        assert!(alg.verify_signature(public_key, other, signature).is_err());
        for at in [signature.len() / 2, signature.len() - 1] {
            let mut tampered = signature.to_vec();
            tampered[at] ^= 1;
            assert!(!ring_verify(message, &tampered));
            assert!(
                alg.verify_signature(public_key, message, &tampered)
                    .is_err(),
                "{alg:?}: a signature with byte {at} changed"
            );
        }
        assert!(alg.verify_signature(public_key, message, &[]).is_err());
        assert!(alg.verify_signature(&[], message, signature).is_err());
    }

    #[test]
    fn signatures_verify_as_with_ring() {
        let rng = ring::rand::SystemRandom::new();
        let message = b"the relay's handshake transcript";
        for (alg, signing, verifying) in [
            (
                ECDSA_P256_SHA256,
                &ring_sig::ECDSA_P256_SHA256_ASN1_SIGNING,
                &ring_sig::ECDSA_P256_SHA256_ASN1,
            ),
            (
                ECDSA_P384_SHA384,
                &ring_sig::ECDSA_P384_SHA384_ASN1_SIGNING,
                &ring_sig::ECDSA_P384_SHA384_ASN1,
            ),
        ] {
            let pkcs8 = ring_sig::EcdsaKeyPair::generate_pkcs8(signing, &rng).unwrap();
            let key = ring_sig::EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).unwrap();
            let signature = key.sign(&rng, message).unwrap();
            let public = key.public_key().as_ref();
            agree_with_ring(alg, verifying, public, message, signature.as_ref());
            // The same key compressed: ring refuses it, and so do the clients.
            let mut compressed = public[..1 + (public.len() - 1) / 2].to_vec();
            compressed[0] = 2 | (public[public.len() - 1] & 1);
            assert!(alg
                .verify_signature(&compressed, message, signature.as_ref())
                .is_err());
        }
        // The mixed pairs, which ring cannot sign: signed by the RustCrypto crates, checked
        // by ring too (a digest longer than the curve cut, a shorter one padded).
        use p256::ecdsa::signature::hazmat::PrehashSigner;
        use sha2::Digest;
        let digest384 = sha2::Sha384::digest(message);
        let digest256 = sha2::Sha256::digest(message);
        let key = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
        let signature: p256::ecdsa::Signature = key.sign_prehash(&digest384).unwrap();
        let public = key.verifying_key().to_encoded_point(false);
        agree_with_ring(
            ECDSA_P256_SHA384,
            &ring_sig::ECDSA_P256_SHA384_ASN1,
            public.as_bytes(),
            message,
            signature.to_der().as_bytes(),
        );
        let key = p384::ecdsa::SigningKey::from_slice(&[7; 48]).unwrap();
        let signature: p384::ecdsa::Signature = key.sign_prehash(&digest256).unwrap();
        let public = key.verifying_key().to_encoded_point(false);
        agree_with_ring(
            ECDSA_P384_SHA256,
            &ring_sig::ECDSA_P384_SHA256_ASN1,
            public.as_bytes(),
            message,
            signature.to_der().as_bytes(),
        );
        // A P-256 key where a P-384 one belongs, and the other way round.
        let p256_key = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
        let p256_public = p256_key.verifying_key().to_encoded_point(false);
        let p256_signature: p256::ecdsa::Signature = p256_key.sign_prehash(&digest384).unwrap();
        assert!(ECDSA_P384_SHA384
            .verify_signature(
                p256_public.as_bytes(),
                message,
                p256_signature.to_der().as_bytes()
            )
            .is_err());
        assert!(ECDSA_P256_SHA384
            .verify_signature(public.as_bytes(), message, signature.to_der().as_bytes())
            .is_err());

        let pkcs8 = ring_sig::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = ring_sig::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let signature = key.sign(message);
        agree_with_ring(
            ED25519,
            &ring_sig::ED25519,
            key.public_key().as_ref(),
            message,
            signature.as_ref(),
        );
    }

    /// One side's group of ours, the other ring's (rustls's ring provider), both ways: the
    /// same secret.
    #[test]
    fn key_exchanges_agree_with_ring() {
        use rustls::crypto::ring::kx_group;
        let pairs: [(&dyn SupportedKxGroup, &dyn SupportedKxGroup); 2] = [
            (&X25519, kx_group::X25519),
            (&Secp256r1, kx_group::SECP256R1),
        ];
        for (ours, rings) in pairs {
            assert_eq!(ours.name(), rings.name());
            for _ in 0..4 {
                let a = ours.start().unwrap();
                let b = rings.start().unwrap();
                assert_eq!(a.pub_key().len(), b.pub_key().len());
                assert_eq!(a.group(), ours.name());
                let b_pub = b.pub_key().to_vec();
                let from_b = b.complete(a.pub_key()).unwrap();
                let from_a = a.complete(&b_pub).unwrap();
                assert_eq!(from_a.secret_bytes(), from_b.secret_bytes());
            }
        }
    }

    #[test]
    fn bad_key_shares_are_refused() {
        let refused = |group: &dyn SupportedKxGroup, share: &[u8]| {
            let err = group.start().unwrap().complete(share).err();
            assert!(
                matches!(
                    err,
                    Some(Error::PeerMisbehaved(PeerMisbehaved::InvalidKeyShare))
                ),
                "{group:?} {share:02x?}: {err:?}"
            );
        };
        // X25519: a small-order point (all-zero result), a wrong length.
        refused(&X25519, &[0; 32]);
        let mut one = [0; 32];
        one[0] = 1;
        refused(&X25519, &one);
        refused(&X25519, &[9; 31]);
        // P-256: a point off the curve, a compressed one, the wrong length, no point.
        let good = Secp256r1.start().unwrap().pub_key().to_vec();
        let mut off = good.clone();
        off[64] ^= 1;
        refused(&Secp256r1, &off);
        let mut compressed = good[..33].to_vec();
        compressed[0] = 2 | (good[64] & 1);
        refused(&Secp256r1, &compressed);
        refused(&Secp256r1, &good[..64]);
        refused(&Secp256r1, &[0]);
        refused(&Secp256r1, &[]);
    }
}
