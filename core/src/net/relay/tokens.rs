//! Who may publish: the relay's credentials, read from a token file.
//!
//! The relay keeps each token as its SHA-256 digest only, and a presented token is hashed
//! the same way: digests of one length are compared in constant time (the `subtle` crate)
//! against every candidate, with no early exit, so the time a check takes depends on the
//! number of lines in the token file only, not on how much of a token matched nor on its
//! length. (A token over [`MAX_TOKEN`] bytes cannot come over the wire; one in the file
//! never matches, and one presented through the API is refused at once: neither is a
//! secret's length.)
//!
//! A `player:PLAYERID:TOKEN` line (the replay server's upload line, http.md §8.1) publishes
//! any session too, and grants its sessions' player: a session it publishes is stored as
//! PLAYERID's replay when it finishes, if its header names PLAYERID (http.md §8.12).

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

use crate::net::wire::MAX_TOKEN;

/// One token's SHA-256 digest.
#[derive(Clone)]
struct Secret([u8; 32]);

impl Secret {
    fn new(token: &str) -> Option<Secret> {
        let b = token.as_bytes();
        if b.is_empty() || b.len() > MAX_TOKEN {
            return None;
        }
        Some(Secret(Sha256::digest(b).into()))
    }

    /// Equal, in a time that depends on neither value.
    fn matches(&self, other: &Secret) -> Choice {
        self.0.ct_eq(&other.0)
    }
}

/// What a presented token grants a publisher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publisher {
    /// The player whose replays its sessions may be stored as (a `player:` line), if any.
    pub player: Option<String>,
}

/// Who may publish: the token file's lines, `TOKEN` for any session, `SESSION:TOKEN` for
/// one (split at the first `:`), `player:PLAYERID:TOKEN` for any session as PLAYERID. Its
/// `Debug` shows how many tokens there are, never them.
#[derive(Clone, Default)]
pub struct Tokens {
    any: Vec<Secret>,
    per_session: Vec<(String, Secret)>,
    players: Vec<(String, Secret)>,
    /// Lines that can never match (a token over [`MAX_TOKEN`] bytes, or an empty one).
    unusable: usize,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("any", &self.any.len())
            .field("per_session", &self.per_session.len())
            .field("players", &self.players.len())
            .field("unusable", &self.unusable)
            .finish()
    }
}

impl Tokens {
    /// Parses a token file (blank lines and lines starting with `#` are skipped).
    pub fn parse(text: &str) -> Tokens {
        let mut t = Tokens::default();
        for line in text.lines().map(str::trim) {
            // The replay server's admin lines (http.md §8.1) publish nothing.
            if line.is_empty() || line.starts_with('#') || line.starts_with("admin:") {
                continue;
            }
            if let Some(rest) = line.strip_prefix("player:") {
                match rest.split_once(':') {
                    Some((id, token)) if !id.is_empty() => match Secret::new(token) {
                        Some(secret) => t.players.push((id.to_string(), secret)),
                        None => t.unusable += 1,
                    },
                    _ => t.unusable += 1,
                }
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
        self.any.len() + self.per_session.len() + self.players.len()
    }

    /// No token opens any session: every publisher is refused.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lines that can never match: a token over [`MAX_TOKEN`] bytes, or an empty one.
    pub fn unusable(&self) -> usize {
        self.unusable
    }

    /// True when `token` may publish `session`.
    pub fn allows(&self, session: &str, token: &str) -> bool {
        self.grant(session, token).is_some()
    }

    /// What `token` grants for publishing `session`: `None` when it may not. Every
    /// candidate is compared, in constant time, whichever matches; a `player:` line that
    /// matches names its player (the first such line, when several do).
    pub fn grant(&self, session: &str, token: &str) -> Option<Publisher> {
        let presented = Secret::new(token)?;
        let mut ok = Choice::from(0);
        for t in &self.any {
            ok |= t.matches(&presented);
        }
        for (s, t) in &self.per_session {
            // The session name is not secret; the token comparison runs either way.
            ok |= t.matches(&presented) & Choice::from(u8::from(s == session));
        }
        // The first matching player line, chosen without a branch on the comparison.
        let mut found = Choice::from(0);
        let mut which = 0u32;
        for (i, (_, t)) in self.players.iter().enumerate() {
            let hit = t.matches(&presented) & !found;
            which = u32::conditional_select(&which, &(i as u32), hit);
            found |= hit;
        }
        if bool::from(found) {
            let player = self.players.get(which as usize).map(|(p, _)| p.clone());
            return Some(Publisher { player });
        }
        bool::from(ok).then_some(Publisher { player: None })
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
        assert_eq!(t.len(), 1);
        assert!(!t.allows("player", "765:up") && !t.allows("admin", "root"));
    }

    #[test]
    fn a_player_line_publishes_any_session_as_its_player() {
        let t = Tokens::parse("all\nsong:one\nplayer:765:up\nplayer:42:two\nplayer::x\n");
        let grant = |s: &str, tok: &str| t.grant(s, tok).map(|p| p.player);
        assert_eq!(grant("any", "up"), Some(Some("765".into())));
        assert_eq!(grant("song", "two"), Some(Some("42".into())));
        assert_eq!(grant("song", "one"), Some(None));
        assert_eq!(grant("x", "all"), Some(None));
        assert_eq!(grant("x", "one"), None);
        assert_eq!(grant("x", "x"), None);
        assert_eq!((t.len(), t.unusable()), (4, 1));
        assert!(!format!("{t:?}").contains("up"));
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
