//! Proof of possession for the key registry (`proto-spec/http.md` §8.13): the one message a
//! player's key signs to be registered, built here for the server that checks it, the CLI
//! and the C ABI that sign it, and the checks a registered key passes.
//!
//! The message is five fields, each a 4-byte big-endian length then its bytes:
//! [`REGISTRATION_DOMAIN`], the player ID (UTF-8), the server's name (UTF-8), the
//! challenge (32 bytes) and the public key (32 bytes). The lengths make it unambiguous
//! whatever bytes the fields hold; the domain keeps it from being any other signed message of
//! the project (a checkpoint, a witness statement).

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use super::KeyError;

/// The first field of every key registration message.
pub const REGISTRATION_DOMAIN: &str = "bsor-stream key registration v1";

/// Bytes of a registration challenge.
pub const CHALLENGE_LEN: usize = 32;

/// The most bytes of the player ID or the server's name in a registration message.
pub const MAX_REGISTRATION_FIELD: usize = 256;

/// Why a key registration message could not be built, or its key or signature is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The player ID is empty or longer than [`MAX_REGISTRATION_FIELD`] bytes.
    #[error("the player ID is empty or over {MAX_REGISTRATION_FIELD} bytes")]
    BadPlayer,
    /// The server's name is empty or longer than [`MAX_REGISTRATION_FIELD`] bytes.
    #[error("the server name is empty or over {MAX_REGISTRATION_FIELD} bytes")]
    BadServerName,
    /// The 32 bytes are not the canonical encoding of a point of the curve.
    #[error("the 32 bytes are not the canonical encoding of an Ed25519 public key")]
    NotAKey,
    /// The key is a point of small order (its signatures can be forged).
    #[error("the key is a point of small order (a weak key)")]
    SmallOrder,
    /// The key has a torsion component (it is not in the prime-order subgroup).
    #[error("the key has a torsion component (it is not in the prime-order subgroup)")]
    Torsion,
    /// The signature does not verify (`verify_strict`) over the message.
    #[error("the signature does not verify over the registration message")]
    BadSignature,
}

/// The message a key signs to be registered to `player` on the server named `server_name`
/// for `challenge`: each field length-prefixed (module docs).
pub fn key_registration_message(
    player: &str,
    server_name: &str,
    challenge: &[u8; CHALLENGE_LEN],
    key: &[u8; 32],
) -> Result<Vec<u8>, RegistrationError> {
    let ok = |s: &str| !s.is_empty() && s.len() <= MAX_REGISTRATION_FIELD;
    if !ok(player) {
        return Err(RegistrationError::BadPlayer);
    }
    if !ok(server_name) {
        return Err(RegistrationError::BadServerName);
    }
    let fields: [&[u8]; 5] = [
        REGISTRATION_DOMAIN.as_bytes(),
        player.as_bytes(),
        server_name.as_bytes(),
        challenge,
        key,
    ];
    let mut m = Vec::with_capacity(fields.iter().map(|f| 4 + f.len()).sum());
    for f in fields {
        // Every field is at most MAX_REGISTRATION_FIELD bytes: the length fits.
        let len = u32::try_from(f.len()).map_err(|_| RegistrationError::BadPlayer)?;
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(f);
    }
    Ok(m)
}

/// The signature of `secret` registering its public key to `player` on `server_name` for
/// `challenge`.
pub fn sign_key_registration(
    secret: &SigningKey,
    player: &str,
    server_name: &str,
    challenge: &[u8; CHALLENGE_LEN],
) -> Result<[u8; 64], RegistrationError> {
    let key = secret.verifying_key().to_bytes();
    let m = key_registration_message(player, server_name, challenge, &key)?;
    Ok(secret.sign(&m).to_bytes())
}

/// `key` as a key the registry takes: the canonical encoding of a point of the prime-order
/// subgroup that is not of small order.
pub fn registrable_key(key: &[u8; 32]) -> Result<VerifyingKey, RegistrationError> {
    super::strict_key(key).map_err(|e| match e {
        KeyError::NotAPoint | KeyError::NotCanonical => RegistrationError::NotAKey,
        KeyError::SmallOrder => RegistrationError::SmallOrder,
        KeyError::Torsion => RegistrationError::Torsion,
    })
}

/// Checks that `signature` by `key` registers it to `player` on `server_name` for
/// `challenge`: the key is [`registrable_key`] and the signature verifies with
/// `verify_strict` over [`key_registration_message`].
pub fn verify_key_registration(
    key: &[u8; 32],
    player: &str,
    server_name: &str,
    challenge: &[u8; CHALLENGE_LEN],
    signature: &[u8; 64],
) -> Result<(), RegistrationError> {
    let vk = registrable_key(key)?;
    let m = key_registration_message(player, server_name, challenge, key)?;
    vk.verify_strict(&m, &Signature::from_bytes(signature))
        .map_err(|_| RegistrationError::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
    use curve25519_dalek::edwards::CompressedEdwardsY;

    #[test]
    fn the_message_is_its_length_prefixed_fields() {
        let m = key_registration_message("p1", "srv", &[7; 32], &[9; 32]).unwrap();
        let mut want = Vec::new();
        for f in [
            REGISTRATION_DOMAIN.as_bytes(),
            b"p1",
            b"srv",
            &[7; 32],
            &[9; 32],
        ] {
            want.extend_from_slice(&(f.len() as u32).to_be_bytes());
            want.extend_from_slice(f);
        }
        assert_eq!(m, want);
        // Moving a byte from one field to the next changes the message.
        let shifted = key_registration_message("p", "1srv", &[7; 32], &[9; 32]).unwrap();
        assert_ne!(m, shifted);
        let long = "x".repeat(MAX_REGISTRATION_FIELD + 1);
        assert_eq!(
            key_registration_message("", "s", &[0; 32], &[0; 32]),
            Err(RegistrationError::BadPlayer)
        );
        assert_eq!(
            key_registration_message(&long, "s", &[0; 32], &[0; 32]),
            Err(RegistrationError::BadPlayer)
        );
        assert_eq!(
            key_registration_message("p", &long, &[0; 32], &[0; 32]),
            Err(RegistrationError::BadServerName)
        );
    }

    #[test]
    fn a_signature_verifies_for_its_fields_only() {
        let sk = SigningKey::from_bytes(&[3; 32]);
        let key = sk.verifying_key().to_bytes();
        let sig = sign_key_registration(&sk, "p1", "srv", &[5; 32]).unwrap();
        assert_eq!(
            verify_key_registration(&key, "p1", "srv", &[5; 32], &sig),
            Ok(())
        );
        for (p, s, c) in [
            ("p2", "srv", [5; 32]),
            ("p1", "other", [5; 32]),
            ("p1", "srv", [6; 32]),
        ] {
            assert_eq!(
                verify_key_registration(&key, p, s, &c, &sig),
                Err(RegistrationError::BadSignature)
            );
        }
    }

    #[test]
    fn weak_and_mixed_order_keys_are_refused() {
        for t in EIGHT_TORSION {
            let small = t.compress().to_bytes();
            assert_eq!(
                registrable_key(&small).unwrap_err(),
                RegistrationError::SmallOrder
            );
        }
        let honest = SigningKey::from_bytes(&[3; 32]).verifying_key().to_bytes();
        let point = CompressedEdwardsY(honest).decompress().unwrap();
        let mixed = (point + EIGHT_TORSION[1]).compress().to_bytes();
        assert_eq!(
            registrable_key(&mixed).unwrap_err(),
            RegistrationError::Torsion
        );
        assert!(registrable_key(&honest).is_ok());
        assert!(registrable_key(&ED25519_BASEPOINT_POINT.compress().to_bytes()).is_ok());
        // y = 2 is not on the curve.
        let mut off = [0u8; 32];
        off[0] = 2;
        assert_eq!(registrable_key(&off), Err(RegistrationError::NotAKey));
        // y = p + 1 (non-canonical; the same point as y = 1, the identity, small order).
        let mut big = [0xffu8; 32];
        big[0] = 0xee;
        big[31] = 0x7f;
        assert_eq!(registrable_key(&big), Err(RegistrationError::NotAKey));
    }
}
