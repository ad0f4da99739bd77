//! `keys register`: registers a player's public key with a replay server's key registry
//! (`proto-spec/http.md` §8.13), proving possession: a challenge from the server, signed
//! with the secret key over the registration message the library builds.

use std::path::Path;
use std::time::Duration;

use bsor_stream::integrity;
use bsor_stream::server::client::Method;
use bytes::Bytes;

use super::live::{read_token, TokenSource};
use super::{Failure, Outcome};
use bsor_stream::server::client::Conn;

/// How long each request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where the server is: `http://HOST[:PORT][/]` or `https://…`.
struct Url {
    /// `HOST:PORT` to connect to.
    addr: String,
    /// The host, without brackets.
    host: String,
    /// Over TLS.
    tls: bool,
}

fn parse_url(url: &str) -> Result<Url, Failure> {
    let bad = |why: &str| Failure(format!("--server {url}: {why}"));
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(bad("not an http:// or https:// URL"));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err(bad("only a scheme, a host and a port (no path)"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') || !h.contains(':')) => {
            let port: u16 = p.parse().map_err(|_| bad("the port is not a number"))?;
            (h, port)
        }
        _ => (authority, if tls { 443 } else { 80 }),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.is_empty() {
        return Err(bad("no host"));
    }
    Ok(Url {
        addr: format!("{host}:{port}"),
        host: bare.to_string(),
        tls,
    })
}

/// A refusal's one line: the status, and the server's `error` and `reason` when it sent
/// them.
fn refused(what: &str, status: u16, body: &[u8]) -> Failure {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    match (v["error"].as_str(), v["reason"].as_str()) {
        (Some(e), Some(r)) => Failure(format!("{what}: {status} {e}: {r}")),
        _ => Failure(format!("{what}: status {status}")),
    }
}

/// `keys register --key KEYFILE --server URL --token-file F [--server-name NAME]
/// [--ca-file PEM]`: asks the server for a challenge, signs it with the key, registers the
/// key, and prints the result. The proof names the server: `--server-name`, by default the
/// URL's host; a server that names itself otherwise is refused, so that a proof made here
/// is worth nothing on another server.
pub fn register(
    key_file: &Path,
    server: &str,
    token_file: &Path,
    server_name: Option<&str>,
    ca_file: Option<&Path>,
) -> Result<Outcome, Failure> {
    let secret = super::integrity::load_key(key_file)?;
    let token = read_token(TokenSource::File(token_file.to_path_buf()))?;
    let url = parse_url(server)?;
    let expected = server_name.unwrap_or(&url.host).to_string();
    let mut conn = Conn::new(url.addr.clone(), TIMEOUT);
    match (url.tls, ca_file) {
        (true, Some(ca)) => conn = conn.with_ca_file(ca).map_err(|e| Failure(e.to_string()))?,
        (true, None) => {
            return Err(Failure(format!(
                "--server {server}: https needs --ca-file PEM (the certificates to trust)"
            )))
        }
        (false, Some(_)) => {
            return Err(Failure(
                "--ca-file goes with an https:// --server".to_string(),
            ))
        }
        (false, None) => {}
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("starting the runtime: {e}")))?;
    runtime.block_on(async {
        let r = conn
            .request(
                Method::POST,
                "/keys/challenge",
                Some(&token),
                "application/json",
                Bytes::new(),
            )
            .await
            .map_err(|e| Failure(e.to_string()))?;
        if r.status != 201 {
            return Err(refused("POST /keys/challenge", r.status, &r.body));
        }
        let c: serde_json::Value = serde_json::from_slice(&r.body)
            .map_err(|e| Failure(format!("POST /keys/challenge: not JSON: {e}")))?;
        let field = |name: &str| {
            c[name]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| Failure(format!("POST /keys/challenge: the reply has no {name}")))
        };
        let (challenge_hex, player, named) =
            (field("challenge")?, field("player")?, field("serverName")?);
        if named != expected {
            return Err(Failure(format!(
                "the server names itself {named:?}, not {expected:?}: pass --server-name \
                 {named:?} if it is the server you mean"
            )));
        }
        let challenge: [u8; 32] = integrity::from_hex(&challenge_hex)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Failure("POST /keys/challenge: the challenge is not 32 bytes".into()))?;
        let signature = integrity::sign_key_registration(&secret, &player, &expected, &challenge)
            .map_err(|e| Failure(format!("signing: {e}")))?;
        let key = integrity::hex(secret.verifying_key().as_bytes());
        let body = serde_json::json!({
            "key": key,
            "challenge": challenge_hex,
            "signature": integrity::hex(&signature),
        })
        .to_string();
        let r = conn
            .request(
                Method::POST,
                "/keys",
                Some(&token),
                "application/json",
                Bytes::from(body),
            )
            .await
            .map_err(|e| Failure(e.to_string()))?;
        match r.status {
            201 => println!("registered {key} to player {player} on {expected}"),
            200 => println!("{key} was registered to player {player} on {expected} already"),
            s => return Err(refused("POST /keys", s, &r.body)),
        }
        Ok(Outcome::Done)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_an_address_and_a_host() {
        let u = parse_url("http://127.0.0.1:8080/").ok().unwrap();
        assert_eq!(
            (u.addr.as_str(), u.host.as_str(), u.tls),
            ("127.0.0.1:8080", "127.0.0.1", false)
        );
        let u = parse_url("https://replays.example").ok().unwrap();
        assert_eq!(
            (u.addr.as_str(), u.host.as_str(), u.tls),
            ("replays.example:443", "replays.example", true)
        );
        let u = parse_url("http://[::1]:9").ok().unwrap();
        assert_eq!((u.addr.as_str(), u.host.as_str()), ("[::1]:9", "::1"));
        for bad in [
            "ftp://x",
            "127.0.0.1:80",
            "http://",
            "http://h/keys",
            "http://h:x",
            "http://u@h",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
