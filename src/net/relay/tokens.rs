//! Who may publish: the relay's credentials, read from a token file.

/// Who may publish: the token file's lines, `TOKEN` for any session or `SESSION:TOKEN` for
/// one (split at the first `:`).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    any: Vec<String>,
    per_session: Vec<(String, String)>,
}

impl Tokens {
    /// Parses a token file (blank lines and lines starting with `#` are skipped).
    pub fn parse(text: &str) -> Tokens {
        let mut t = Tokens::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once(':') {
                Some((session, token)) => {
                    t.per_session.push((session.to_string(), token.to_string()))
                }
                None => t.any.push(line.to_string()),
            }
        }
        t
    }

    /// True when `token` may publish `session`.
    pub fn allows(&self, session: &str, token: &str) -> bool {
        !token.is_empty()
            && (self.any.iter().any(|t| t == token)
                || self
                    .per_session
                    .iter()
                    .any(|(s, t)| s == session && t == token))
    }
}

#[cfg(test)]
mod tests {
    use super::Tokens;

    #[test]
    fn a_token_for_one_session_does_not_open_another() {
        let t = Tokens::parse("# comment\n\nall\nsong-1:one\n");
        assert!(t.allows("anything", "all"));
        assert!(t.allows("song-1", "one"));
        assert!(!t.allows("song-2", "one"));
        assert!(!t.allows("song-1", ""));
    }
}
