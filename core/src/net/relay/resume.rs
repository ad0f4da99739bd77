//! The key file beside a session's archive (`wire.md` §4.1): what lets a session's publisher,
//! and only it, resume the session after the relay restarts. Bytes only; the shell reads
//! and writes the file.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The key file's first 8 bytes.
pub const KEY_FILE_MAGIC: &[u8; 8] = b"bsorkey1";
/// The longest player ID a key file holds, in bytes (a longer one is written as none).
pub const KEY_FILE_PLAYER_MAX: usize = 1024;
/// The most bytes a key file has: a shell reads at most one more, to tell a longer file.
pub const KEY_FILE_MAX: usize = 8 + 32 + 2 + KEY_FILE_PLAYER_MAX;

/// What a session's key file holds: the SHA-256 digest of its publisher's key (never the
/// key) and the player its publisher's token grants.
#[derive(Clone, PartialEq, Eq)]
pub struct ResumeKey {
    /// SHA-256 of the 16-byte `publisher_key`.
    pub digest: [u8; 32],
    /// The player the publisher's token grants (`http.md` §8.12), if any.
    pub player: Option<String>,
}

impl std::fmt::Debug for ResumeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeKey")
            .field("player", &self.player)
            .finish_non_exhaustive()
    }
}

impl ResumeKey {
    /// The key file of a publisher with this key, granted this player.
    pub fn new(key: &[u8; 16], player: Option<String>) -> Self {
        ResumeKey {
            digest: digest(key),
            player: player.filter(|p| p.len() <= KEY_FILE_PLAYER_MAX),
        }
    }

    /// Whether `key` is the publisher's key (its digest compared in constant time).
    pub fn proves(&self, key: &[u8; 16]) -> bool {
        proves(&self.digest, key)
    }

    /// The file's bytes (`wire.md` §4.1).
    pub fn to_bytes(&self) -> Vec<u8> {
        let player = self
            .player
            .as_deref()
            .filter(|p| p.len() <= KEY_FILE_PLAYER_MAX)
            .unwrap_or("");
        let mut out = Vec::with_capacity(42 + player.len());
        out.extend_from_slice(KEY_FILE_MAGIC);
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&(player.len() as u16).to_le_bytes());
        out.extend_from_slice(player.as_bytes());
        out
    }

    /// Parses a whole key file; `None` when the bytes are not one.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let rest = bytes.strip_prefix(KEY_FILE_MAGIC)?;
        let (digest, rest) = rest.split_first_chunk::<32>()?;
        let (len, player) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_le_bytes(*len));
        if len > KEY_FILE_PLAYER_MAX || player.len() != len {
            return None;
        }
        let player = std::str::from_utf8(player).ok()?;
        Some(ResumeKey {
            digest: *digest,
            player: (!player.is_empty()).then(|| player.to_string()),
        })
    }
}

/// The SHA-256 digest of a publisher key.
pub(super) fn digest(key: &[u8; 16]) -> [u8; 32] {
    Sha256::digest(key).into()
}

/// Whether `key` hashes to `digest` (compared in constant time).
pub(super) fn proves(digest_of: &[u8; 32], key: &[u8; 16]) -> bool {
    bool::from(digest_of.ct_eq(&digest(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_round_trips_and_anything_else_is_none() {
        let k = ResumeKey::new(&[7; 16], Some("76561190000000000".into()));
        let bytes = k.to_bytes();
        assert_eq!(bytes.len(), 42 + 17);
        assert_eq!(ResumeKey::parse(&bytes), Some(k.clone()));
        assert!(k.proves(&[7; 16]));
        assert!(!k.proves(&[8; 16]));
        // The digest's bytes are not the key.
        let mut head = [0u8; 16];
        head.copy_from_slice(&k.digest[..16]);
        assert!(!k.proves(&head));
        let none = ResumeKey::new(&[7; 16], None);
        assert_eq!(ResumeKey::parse(&none.to_bytes()), Some(none));
        for bad in [
            &bytes[..bytes.len() - 1],
            &[&bytes[..], b"x"].concat()[..],
            &bytes[1..],
            b"",
        ] {
            assert_eq!(ResumeKey::parse(bad), None);
        }
        let long = ResumeKey::new(&[7; 16], Some("p".repeat(KEY_FILE_PLAYER_MAX + 1)));
        assert_eq!(long.player, None);
        let mut not_utf8 = ResumeKey::new(&[1; 16], Some("ab".into())).to_bytes();
        not_utf8[42] = 0xFF;
        assert_eq!(ResumeKey::parse(&not_utf8), None);
    }
}
