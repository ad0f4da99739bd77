//! The key registry (`proto-spec/http.md` §8.13): Ed25519 public keys bound to players by
//! their upload tokens, listed with their history, revoked by their player or an admin; and
//! what a stored replay's signature says once the registry is asked who holds its key
//! (§8.14). A valid signature proves who held the key; the registry says whose key it is.

use serde::Serialize;

use super::index::{KeyRow, Registered};
use super::{now_ms, Grant, Record, Refusal, ReplayServer};
use crate::integrity::{self, hex, Report, Verdict};

/// The most keys a player may register, revoked ones included (so that a list is bounded).
pub const MAX_KEYS: i64 = 100;

/// Whose key signed a replay, as the registry says (`http.md` §8.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyOwner {
    /// The key is registered to the replay's player and stands.
    Registered,
    /// No one registered the key.
    Unregistered,
    /// The key is registered to another player.
    OtherPlayer,
    /// The key is the replay's player's, and was revoked.
    Revoked,
    /// The replay carries no signature whose key chunk verified.
    Unsigned,
}

/// The registry's word on a replay's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    /// Whose key it is.
    pub key_owner: KeyOwner,
    /// When the key was revoked (Unix milliseconds), for [`KeyOwner::Revoked`].
    pub key_revoked: Option<i64>,
    /// Whether the replay was uploaded before the revocation, for [`KeyOwner::Revoked`].
    pub uploaded_before_revocation: Option<bool>,
}

/// The registry's word on `signer` (the verified key of a replay of `player` uploaded at
/// `uploaded`), given the registry's row of that key.
pub fn judge(
    signer: Option<[u8; 32]>,
    row: Option<&KeyRow>,
    player: &str,
    uploaded: i64,
) -> Ownership {
    let plain = |key_owner| Ownership {
        key_owner,
        key_revoked: None,
        uploaded_before_revocation: None,
    };
    if signer.is_none() {
        return plain(KeyOwner::Unsigned);
    }
    match row {
        None => plain(KeyOwner::Unregistered),
        Some(r) if r.player != player => plain(KeyOwner::OtherPlayer),
        Some(KeyRow {
            revoked: Some(t), ..
        }) => Ownership {
            key_owner: KeyOwner::Revoked,
            key_revoked: Some(*t),
            uploaded_before_revocation: Some(uploaded < *t),
        },
        Some(_) => plain(KeyOwner::Registered),
    }
}

/// A public key as the registry keeps it (64 lower-case hex digits), from a client's hex:
/// 64 hex digits of either case that are an Ed25519 public key.
pub fn parse_key(text: &str) -> Result<String, Refusal> {
    let bad = |why: &str| Refusal::new(400, "bad-key", why.to_string());
    if text.len() != 64 {
        return Err(bad("a public key is 64 hex digits (32 bytes)"));
    }
    let bytes = integrity::from_hex(text).ok_or_else(|| bad("the key is not hex"))?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|_| bad("a public key is 64 hex digits (32 bytes)"))?;
    integrity::VerifyingKey::from_bytes(&key)
        .map_err(|_| bad("the 32 bytes are not an Ed25519 public key"))?;
    Ok(hex(&key))
}

/// The signer's key of an upload, verified (`None` when it is unsigned or its key chunk does
/// not verify): a `.bsors` with signing chunks is verified as it is, a BSOR only when its
/// user data names the signature entry (so that an unsigned BSOR costs no second parse).
pub fn upload_signer(body: &[u8], is_bsor: bool, stream_signed: bool) -> Option<[u8; 32]> {
    if is_bsor {
        if !names_signature(body) {
            return None;
        }
        valid_signer(integrity::verify_bsor(body))
    } else if stream_signed {
        valid_signer(integrity::verify_stream(body))
    } else {
        None
    }
}

/// Whether a BSOR's bytes name the signature entry's key anywhere (a cheap test before a
/// second parse).
pub fn names_signature(body: &[u8]) -> bool {
    let needle = integrity::ENTRY_KEY.as_bytes();
    body.windows(needle.len()).any(|w| w == needle)
}

/// The signer of a `valid` verification: a key chunk whose signature holds proves nothing
/// of records that do not verify.
fn valid_signer(r: Report) -> Option<[u8; 32]> {
    r.signer_key.filter(|_| r.verdict == Verdict::Valid)
}

/// The JSON of a stored replay's verification: the fields `verify --signatures --json`
/// prints (no witness file is kept beside a stored replay, so none are judged), the
/// replay's ID and player, and the registry's [`Ownership`].
pub fn verify_json(r: &Report, record: &Record, owner: &Ownership) -> serde_json::Value {
    serde_json::json!({
        "id": record.id,
        "player": record.player,
        "signed": r.signed,
        "signerKey": r.signer_key.map(|k| hex(&k)),
        "playerId": r.player_id,
        "chainValidToChunk": r.chain_valid_to_chunk,
        "chainValidToSeconds": r.chain_valid_to_seconds,
        "checkpoints": r.checkpoints,
        "witnesses": [],
        "witnessStatementsRejected": [],
        "existedBy": null,
        "fingerprint": record.fingerprint,
        "verdict": r.verdict.name(),
        "reason": r.reason,
        "keyOwner": owner.key_owner,
        "keyRevoked": owner.key_revoked,
        "uploadedBeforeRevocation": owner.uploaded_before_revocation,
    })
}

impl ReplayServer {
    /// Registers `key` (as [`parse_key`] gives it) to the token's `player`: `201` with the
    /// row when new, `200` when it is the player's already; refused `409` when it is another
    /// player's, revoked, or the player holds [`MAX_KEYS`].
    pub async fn register_key(&self, key: &str, player: &str) -> Result<(u16, KeyRow), Refusal> {
        match self
            .index
            .register_key(key, player, now_ms(), MAX_KEYS)
            .await?
        {
            Registered::New(row) => Ok((201, row)),
            Registered::Existing(row) if row.player != player => Err(Refusal::new(
                409,
                "key-taken",
                "the key is registered to another player",
            )),
            Registered::Existing(row) if row.revoked.is_some() => Err(Refusal::new(
                409,
                "key-revoked",
                "the key was revoked; a revoked key is not registered again",
            )),
            Registered::Existing(row) => Ok((200, row)),
            Registered::TooMany => Err(Refusal::new(
                409,
                "too-many-keys",
                format!("a player registers at most {MAX_KEYS} keys, revoked ones included"),
            )),
        }
    }

    /// Revokes `key` for the holder of `grant` (its player, or an admin): the row after.
    /// Revoking a revoked key again keeps the first time.
    pub async fn revoke_key(&self, key: &str, grant: &Grant) -> Result<KeyRow, Refusal> {
        let not_found = || Refusal::new(404, "not-found", "no such key");
        let row = self.index.key(key).await?.ok_or_else(not_found)?;
        if let Grant::Player(p) = grant {
            if *p != row.player {
                return Err(Refusal::new(
                    403,
                    "not-owner",
                    "only the key's player or an admin revokes it",
                ));
            }
        }
        self.index
            .revoke_key(key, now_ms())
            .await?
            .ok_or_else(not_found)
    }

    /// The registry's word on `signer` for a replay of `player` uploaded at `uploaded`.
    pub async fn ownership(
        &self,
        signer: Option<[u8; 32]>,
        player: &str,
        uploaded: i64,
    ) -> Result<Ownership, Refusal> {
        let row = match signer {
            Some(k) => self.index.key(&hex(&k)).await?,
            None => None,
        };
        Ok(judge(signer, row.as_ref(), player, uploaded))
    }

    /// Verifies the stored replay `r`: its stream's signing chunks, or, when it has none,
    /// the signature entry of its rebuilt BSOR; and asks the registry whose key it is.
    pub async fn verify(&self, r: &Record) -> Result<(Report, Ownership), Refusal> {
        let stream = self.stream(r).await?;
        let report = tokio::task::spawn_blocking(move || {
            let report = integrity::verify_stream(&stream);
            if report.verdict != Verdict::Unsigned {
                return Ok(report);
            }
            let bsor = super::rebuild(&stream)?;
            Ok::<_, Refusal>(integrity::verify_bsor(&bsor))
        })
        .await
        .map_err(|e| Refusal::new(500, "internal", e.to_string()))??;
        let signer = report
            .signer_key
            .filter(|_| report.verdict == Verdict::Valid);
        let owner = self.ownership(signer, &r.player, r.uploaded).await?;
        Ok((report, owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(player: &str, revoked: Option<i64>) -> KeyRow {
        KeyRow {
            key: "00".repeat(32),
            player: player.into(),
            registered: 10,
            revoked,
        }
    }

    #[test]
    fn the_registry_judges_each_case() {
        let k = Some([1u8; 32]);
        assert_eq!(judge(None, None, "p", 5).key_owner, KeyOwner::Unsigned);
        assert_eq!(judge(k, None, "p", 5).key_owner, KeyOwner::Unregistered);
        let p = row("p", None);
        assert_eq!(judge(k, Some(&p), "p", 5).key_owner, KeyOwner::Registered);
        assert_eq!(judge(k, Some(&p), "q", 5).key_owner, KeyOwner::OtherPlayer);
        let r = row("p", Some(100));
        let before = judge(k, Some(&r), "p", 99);
        assert_eq!(before.key_owner, KeyOwner::Revoked);
        assert_eq!(before.key_revoked, Some(100));
        assert_eq!(before.uploaded_before_revocation, Some(true));
        assert_eq!(
            judge(k, Some(&r), "p", 100).uploaded_before_revocation,
            Some(false)
        );
        assert_eq!(
            serde_json::to_value(KeyOwner::OtherPlayer).unwrap(),
            "other-player"
        );
    }

    #[test]
    fn keys_are_64_hex_digits_of_a_point() {
        let k = integrity::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
        let lower = hex(k.as_bytes());
        assert_eq!(parse_key(&lower.to_uppercase()).unwrap(), lower);
        for bad in [
            "",
            "zz",
            &lower[..62],
            &format!("{lower}00"),
            &format!("{}g", &lower[..63]),
            // y = 2 is not on the curve.
            &format!("02{}", "00".repeat(31)),
        ] {
            assert_eq!(parse_key(bad).unwrap_err().code, "bad-key", "{bad}");
        }
    }
}
