//! Who may upload and delete: the token file's `player:PLAYERID:TOKEN` lines (uploads as
//! PLAYERID, deletes of PLAYERID's replays) and `admin:TOKEN` lines (deletes of any replay,
//! the review list). Other lines are the relay's publishers' and are skipped here.
//!
//! Only the SHA-256 digest of each token is kept. A presented token is digested and its
//! digest compared with every line's in constant time (the `subtle` crate): digests are all
//! 32 bytes, so neither a token's content nor its length shows in the time taken.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Upload as this player ID, and delete its replays.
    Player(String),
    /// Delete any replay, read the review list.
    Admin,
}

/// The most bytes of a token compared.
const MAX_TOKEN: usize = 256;

/// The SHA-256 digest of a token.
fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The upload and admin tokens, as digests. Its `Debug` shows counts, never a digest.
#[derive(Clone, Default)]
pub struct Uploaders {
    lines: Vec<(Grant, [u8; 32])>,
}

impl fmt::Debug for Uploaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let admins = self
            .lines
            .iter()
            .filter(|(g, _)| *g == Grant::Admin)
            .count();
        f.debug_struct("Uploaders")
            .field("players", &(self.lines.len() - admins))
            .field("admins", &admins)
            .finish()
    }
}

impl Uploaders {
    /// The `player:` and `admin:` lines of a token file (blank lines, `#` comments and
    /// other lines skipped; a line with an empty player or token, or a token over 256
    /// bytes, is skipped too).
    pub fn parse(text: &str) -> Uploaders {
        let mut lines = Vec::new();
        for line in text.lines().map(str::trim) {
            let (grant, token) = if let Some(rest) = line.strip_prefix("player:") {
                match rest.split_once(':') {
                    Some((id, token)) if !id.is_empty() => (Grant::Player(id.to_string()), token),
                    _ => continue,
                }
            } else if let Some(token) = line.strip_prefix("admin:") {
                (Grant::Admin, token)
            } else {
                continue;
            };
            if token.is_empty() || token.len() > MAX_TOKEN {
                continue;
            }
            lines.push((grant, digest(token.as_bytes())));
        }
        Uploaders { lines }
    }

    /// Lines that grant something.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// No line grants anything.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// What `token` may do: its digest is compared with every line's, in constant time,
    /// digest to digest (32 bytes each).
    pub fn grant(&self, token: &str) -> Option<Grant> {
        let t = token.as_bytes();
        if t.is_empty() || t.len() > MAX_TOKEN {
            return None;
        }
        let presented = digest(t);
        let mut found = None;
        for (grant, kept) in &self.lines {
            if bool::from(kept.ct_eq(&presented)) && found.is_none() {
                found = Some(grant.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn player_and_admin_lines_grant_what_they_say() {
        let u = Uploaders::parse(
            "# c\npublisher-token\nsong:one\nplayer:765611:tok-a\nplayer:42:tok:b\nadmin:root\nplayer::x\nadmin:\n",
        );
        assert_eq!(u.len(), 3);
        assert_eq!(u.grant("tok-a"), Some(Grant::Player("765611".into())));
        assert_eq!(u.grant("tok:b"), Some(Grant::Player("42".into())));
        assert_eq!(u.grant("root"), Some(Grant::Admin));
        for no in ["", "publisher-token", "one", "tok", "tok-a ", "x"] {
            assert_eq!(u.grant(no), None, "{no}");
        }
        assert!(!format!("{u:?}").contains("tok"));
    }

    #[test]
    fn only_the_whole_token_matches_its_digest() {
        let u = Uploaders::parse("player:p:secret-token\nadmin:admintoken\n");
        assert_eq!(u.grant("secret-token"), Some(Grant::Player("p".into())));
        assert_eq!(u.grant("admintoken"), Some(Grant::Admin));
        for no in [
            "s",
            "secret",
            "secret-toke",
            "secret-tokenX",
            "secret-token\0",
            "Secret-token",
            "admin",
            "admintoke",
            "admintokenadmintoken",
            &"x".repeat(256),
            &"x".repeat(257),
        ] {
            assert_eq!(u.grant(no), None, "{no:?}");
        }
        // Kept as digests: the lines hold no byte string of the tokens.
        assert!(u.lines.iter().all(|(_, d)| d.len() == 32));
        assert_eq!(u.lines[0].1, digest(b"secret-token"));
        assert!(!u.lines[0].1.windows(6).any(|w| w == b"secret"));
    }
}
