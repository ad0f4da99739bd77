//! Who may publish: the relay's credentials, read from a token file.
//!
//! Tokens are compared in constant time (the `subtle` crate) against every candidate, with
//! no early exit: each token is kept padded to [`MAX_TOKEN`] bytes with its length beside
//! it, and a presented token is padded the same way, so the time a check takes depends on
//! the number of lines in the token file only, not on how much of a token matched nor on
//! its length. (A token over [`MAX_TOKEN`] bytes cannot come over the wire; one in the file
//! never matches, and one presented through the API is refused at once: neither is a
//! secret's length.)

use std::fmt;

use subtle::{Choice, ConstantTimeEq};

use crate::net::wire::MAX_TOKEN;

/// One token, padded with zeros to a fixed length.
#[derive(Clone)]
struct Secret {
    bytes: [u8; MAX_TOKEN],
    len: u16,
}

impl Secret {
    fn new(token: &str) -> Option<Secret> {
        let b = token.as_bytes();
        if b.is_empty() || b.len() > MAX_TOKEN {
            return None;
        }
        let mut bytes = [0; MAX_TOKEN];
        bytes[..b.len()].copy_from_slice(b);
        Some(Secret {
            bytes,
            len: b.len() as u16,
        })
    }

    /// Equal, in a time that depends on neither value.
    fn matches(&self, other: &Secret) -> Choice {
        self.bytes.ct_eq(&other.bytes) & self.len.ct_eq(&other.len)
    }
}

/// Who may publish: the token file's lines, `TOKEN` for any session or `SESSION:TOKEN` for
/// one (split at the first `:`). Its `Debug` shows how many tokens there are, never them.
#[derive(Clone, Default)]
pub struct Tokens {
    any: Vec<Secret>,
    per_session: Vec<(String, Secret)>,
    /// Lines that can never match (a token over [`MAX_TOKEN`] bytes, or an empty one).
    unusable: usize,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("any", &self.any.len())
            .field("per_session", &self.per_session.len())
            .field("unusable", &self.unusable)
            .finish()
    }
}

impl Tokens {
    /// Parses a token file (blank lines and lines starting with `#` are skipped).
    pub fn parse(text: &str) -> Tokens {
        let mut t = Tokens::default();
        for line in text.lines().map(str::trim) {
            // The replay server's upload and admin lines (http.md §8.1) publish nothing.
            if line.is_empty()
                || line.starts_with('#')
                || line.starts_with("player:")
                || line.starts_with("admin:")
            {
                continue;
            }
            let (session, token) = match line.split_once(':') {
                Some((session, token)) => (Some(session), token),
                None => (None, line),
            };
            match (session, Secret::new(token)) {
                (_, None) => t.unusable += 1,
                (Some(s), Some(secret)) => t.per_session.push((s.to_string(), secret)),
                (None, Some(secret)) => t.any.push(secret),
            }
        }
        t
    }

    /// Tokens that can open a session (lines over [`MAX_TOKEN`] bytes or with an empty
    /// token are not counted).
    pub fn len(&self) -> usize {
        self.any.len() + self.per_session.len()
    }

    /// No token opens any session: every publisher is refused.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lines that can never match: a token over [`MAX_TOKEN`] bytes, or an empty one.
    pub fn unusable(&self) -> usize {
        self.unusable
    }

    /// True when `token` may publish `session`. Every candidate is compared, in constant
    /// time, whichever matches.
    pub fn allows(&self, session: &str, token: &str) -> bool {
        let Some(presented) = Secret::new(token) else {
            return false;
        };
        let mut ok = Choice::from(0);
        for t in &self.any {
            ok |= t.matches(&presented);
        }
        for (s, t) in &self.per_session {
            // The session name is not secret; the token comparison runs either way.
            ok |= t.matches(&presented) & Choice::from(u8::from(s == session));
        }
        ok.into()
    }
}

#[cfg(test)]
mod tests {
    use super::Tokens;
    use crate::net::wire::MAX_TOKEN;

    #[test]
    fn a_token_for_one_session_does_not_open_another() {
        let t = Tokens::parse("# comment\n\nall\nsong-1:one\n");
        assert!(t.allows("anything", "all"));
        assert!(t.allows("song-1", "one"));
        assert!(!t.allows("song-2", "one"));
        assert!(!t.allows("song-1", ""));
        assert_eq!(t.len(), 2);
        let t = Tokens::parse("player:765:up\nadmin:root\n");
        assert!(t.is_empty());
        assert!(!t.allows("player", "765:up") && !t.allows("admin", "root"));
    }

    #[test]
    fn a_prefix_an_extension_or_padding_of_a_token_is_refused() {
        let t = Tokens::parse("secret\n");
        for wrong in ["secre", "secrets", "secret\0", "Secret", "", "\0"] {
            assert!(!t.allows("s", wrong), "{wrong:?}");
        }
        assert!(t.allows("s", "secret"));
    }

    #[test]
    fn tokens_of_the_longest_length_match_and_longer_ones_never_do() {
        let longest = "k".repeat(MAX_TOKEN);
        let longer = "k".repeat(MAX_TOKEN + 1);
        let t = Tokens::parse(&format!("{longest}\ns:{longer}\nonly-session:\n"));
        assert!(t.allows("s", &longest));
        assert!(!t.allows("s", &longer));
        assert_eq!((t.len(), t.unusable()), (1, 2));
    }

    #[test]
    fn debug_never_shows_a_token() {
        let t = Tokens::parse("hunter2\nsong:swordfish\n");
        let shown = format!("{t:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("swordfish"),
            "{shown}"
        );
        assert!(Tokens::parse("# nothing\n").is_empty());
    }
}

#[cfg(test)]
mod relay_tests {
    use super::Tokens;
    use crate::net::relay::{ConnId, Relay, RelayAction, RelayConfig};
    use crate::net::wire::{ErrorCode, Message, Role};

    fn publish(r: &mut Relay, session: &str, token: &str, now: u64) -> ConnId {
        let c = r.connect(now);
        let hello = Message::Hello {
            min_version: 1,
            max_version: 1,
            role: Role::Publisher,
            agent: "test".into(),
        };
        r.receive(c, hello, now);
        let publish = Message::Publish {
            session: session.into(),
            token: token.into(),
            resume: false,
            publisher_key: [1; 16],
        };
        r.receive(c, publish, now);
        c
    }

    fn actions(r: &mut Relay) -> Vec<RelayAction> {
        std::iter::from_fn(|| r.poll_action()).collect()
    }

    #[test]
    fn a_refused_publisher_is_reported_without_its_token_and_new_tokens_apply_at_once() {
        let mut r = Relay::new(RelayConfig::default(), Tokens::parse("old\nsong-1:one\n"));
        let wrong = publish(&mut r, "song-2", "one", 1);
        let refused = RelayAction::Refused {
            conn: wrong,
            session: "song-2".into(),
            code: ErrorCode::Unauthorized,
        };
        let got = actions(&mut r);
        assert!(got.contains(&refused), "{got:?}");
        assert!(got.contains(&RelayAction::Close(wrong)));
        assert!(!format!("{got:?}").contains("one\""), "{got:?}");
        let ok = publish(&mut r, "song-1", "old", 2);
        assert!(!actions(&mut r)
            .iter()
            .any(|a| matches!(a, RelayAction::Refused { .. } | RelayAction::Close(_))));

        // Reloaded: the old token is refused, the new one opens a session, and the
        // publisher already in stays.
        r.set_tokens(Tokens::parse("new\n"));
        let stale = publish(&mut r, "song-3", "old", 3);
        assert!(actions(&mut r).contains(&RelayAction::Refused {
            conn: stale,
            session: "song-3".into(),
            code: ErrorCode::Unauthorized,
        }));
        let fresh = publish(&mut r, "song-3", "new", 4);
        assert!(!actions(&mut r).contains(&RelayAction::Close(fresh)));
        assert_eq!(r.sessions(), 2);
        assert!(!actions(&mut r).contains(&RelayAction::Close(ok)));

        // Someone else's session: refused as busy, and reported.
        let busy = publish(&mut r, "song-3", "new", 5);
        assert!(actions(&mut r).contains(&RelayAction::Refused {
            conn: busy,
            session: "song-3".into(),
            code: ErrorCode::SessionBusy,
        }));
    }
}
