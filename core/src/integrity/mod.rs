//! Signed streams: a recording signs what it records as it records it, and a verifier checks
//! the signatures, the chain of checkpoints and the records they cover. Specified in
//! `proto-spec/integrity.md` (rationale and threat model in `integrity-notes.md`).
//!
//! Sans-IO like the rest of the format: a [`Signer`] that rides along with the stream encoder
//! as its [`EncoderHook`](crate::stream::EncoderHook) ([`Signer::into_encoder`]) and a
//! [`Verifier`] fed with what a stream decoder yields ([`verify_stream`] does it for a whole
//! file).
//!
//! A signature proves only that the holder of a key produced the stream: a key means a
//! player once a key registry binds it to one (the replay server's).

mod carry;
mod entry;
pub mod fingerprint;
mod layout;
mod registration;
mod sign;
mod verify;
pub mod witness;

pub use carry::{sign_replay, transcode_signed, transcode_with_entry, verify_bsor, CarryError};
pub use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
pub use entry::{
    add_entry, neutral_offsets, take_entry, EntryError, SigningChunks, ADDED_OFFSETS,
    ADDED_USER_DATA, ENTRY_KEY, ENTRY_VERSION,
};
pub use layout::{
    final_hash, strict_key, Checkpoint, FinalCheckpoint, KeyChunk, KeyError, LayoutError, Ranges,
    CHECKPOINT_CHUNK, CHECKPOINT_LEN, FINAL_CHUNK, FINAL_LEN, KEY_CHUNK, MAX_KEY_LEN, NONCE_LEN,
    VERSION,
};
pub use registration::{
    key_registration_message, registrable_key, sign_key_registration, verify_key_registration,
    RegistrationError, CHALLENGE_LEN, MAX_REGISTRATION_FIELD, REGISTRATION_DOMAIN,
};
pub use sign::{SignError, Signer};
pub use verify::{
    decode_verified, verify_stream, Report, Verdict, VerifiedReplay, Verifier, MAX_UNCHECKED,
};

/// Is this chunk type byte one of the signing chunks (key, checkpoint, final)?
pub fn is_integrity_chunk(kind: u8) -> bool {
    matches!(kind, KEY_CHUNK | CHECKPOINT_CHUNK | FINAL_CHUNK)
}

/// A fresh signing key from the operating system's randomness.
pub fn generate_key() -> Result<SigningKey, getrandom::Error> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A fresh recording nonce from the operating system's randomness.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], getrandom::Error> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut nonce)?;
    Ok(nonce)
}

/// Lower-case hex of some bytes (keys and hashes in reports).
pub fn hex(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// The bytes of a hex string (either case, surrounding white space ignored), or `None` if
/// it is not one.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    ::hex::decode(s.trim()).ok()
}
