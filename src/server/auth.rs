//! Who may upload and delete: the token file's `player:PLAYERID:TOKEN` lines (uploads as
//! PLAYERID, deletes of PLAYERID's replays) and `admin:TOKEN` lines (deletes of any replay,
//! the review list). Other lines are the relay's publishers' and are skipped here.
//!
//! Tokens are compared in constant time against every line (the `subtle` crate), as the
//! relay compares its publishers' tokens.

use std::fmt;

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

/// The upload and admin tokens. Its `Debug` shows counts, never a token.
#[derive(Clone, Default)]
pub struct Uploaders {
    lines: Vec<(Grant, Vec<u8>)>,
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
            lines.push((grant, token.as_bytes().to_vec()));
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

    /// What `token` may do: every line is compared, in constant time per line.
    pub fn grant(&self, token: &str) -> Option<Grant> {
        let t = token.as_bytes();
        if t.is_empty() || t.len() > MAX_TOKEN {
            return None;
        }
        let mut found = None;
        for (grant, secret) in &self.lines {
            // `ct_eq` on slices of different lengths is false without comparing bytes;
            // lengths are not secret enough to matter next to the line count.
            if bool::from(secret.as_slice().ct_eq(t)) && found.is_none() {
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
}
