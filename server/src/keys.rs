//! The key registry (`proto-spec/http.md` §8.13): Ed25519 public keys bound to players by
//! their upload tokens, listed with their history, revoked by their player or an admin; and
//! what a stored replay's signature says once the registry is asked who holds its key
//! (§8.14). A valid signature proves who held the key; the registry says whose key it is.

use serde::Serialize;

use super::index::{Issued, KeyRow, Registered, Spent};
use super::{now_ms, Cause, Grant, Record, Refusal, ReplayServer};
use bsor_stream_core::integrity::{self, hex, Report, Verdict};

/// The most keys a player may register, revoked ones included (so that a list is bounded).
pub const MAX_KEYS: i64 = 100;

/// The most unexpired key registration challenges a player holds at once.
pub const MAX_CHALLENGES: i64 = 8;

/// A challenge handed out by `POST /keys/challenge` (`http.md` §8.13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    /// 32 random bytes, 64 lower-case hex digits.
    pub challenge: String,
    /// The player it is issued to (the token's), which the proof names.
    pub player: String,
    /// The server's name, which the proof names.
    pub server_name: String,
    /// When it expires (Unix milliseconds).
    pub expires: i64,
}

/// A key registration as a client sends it: the key, a challenge and the key's signature
/// over the registration message (`integrity::key_registration_message`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The key, as [`parse_key`] gives it.
    pub key: String,
    /// The challenge's 32 bytes.
    pub challenge: [u8; 32],
    /// The signature's 64 bytes.
    pub signature: [u8; 64],
}

impl Proof {
    /// The three fields of `POST /keys`, each checked: a key the registry takes (not weak,
    /// no torsion), a challenge of 64 hex digits, a signature of 128.
    pub fn parse(key: &str, challenge: &str, signature: &str) -> Result<Proof, Refusal> {
        let key = parse_key(key)?;
        let challenge = integrity::from_hex(challenge)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .filter(|_| challenge.len() == 64)
            .ok_or_else(|| {
                Refusal::new(
                    Cause::Invalid,
                    "bad-challenge",
                    "a challenge is 64 hex digits (32 bytes)",
                )
            })?;
        let signature = integrity::from_hex(signature)
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .filter(|_| signature.len() == 128)
            .ok_or_else(|| {
                Refusal::new(
                    Cause::Invalid,
                    "bad-signature",
                    "a signature is 128 hex digits (64 bytes)",
                )
            })?;
        Ok(Proof {
            key,
            challenge,
            signature,
        })
    }
}

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
    /// Whether the key's row was registered with a proof of possession (`None` without a
    /// row): a row from before proofs may be anyone's squat.
    pub key_proven: Option<bool>,
}

/// The registry's word on `signer` (the verified key of a replay of `player` uploaded at
/// `uploaded`), given the registry's row of that key.
pub fn judge(
    signer: Option<[u8; 32]>,
    row: Option<&KeyRow>,
    player: &str,
    uploaded: i64,
) -> Ownership {
    let key_proven = row.map(|r| r.proven).filter(|_| signer.is_some());
    let plain = |key_owner| Ownership {
        key_owner,
        key_revoked: None,
        uploaded_before_revocation: None,
        key_proven,
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
            key_proven,
        },
        Some(_) => plain(KeyOwner::Registered),
    }
}

/// A public key as the registry keeps it (64 lower-case hex digits), from a client's hex:
/// 64 hex digits of either case that are an Ed25519 public key.
pub fn parse_key(text: &str) -> Result<String, Refusal> {
    let bad = |why: &str| Refusal::new(Cause::Invalid, "bad-key", why.to_string());
    if text.len() != 64 {
        return Err(bad("a public key is 64 hex digits (32 bytes)"));
    }
    let bytes = integrity::from_hex(text).ok_or_else(|| bad("the key is not hex"))?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|_| bad("a public key is 64 hex digits (32 bytes)"))?;
    match integrity::registrable_key(&key) {
        Ok(_) => Ok(hex(&key)),
        Err(integrity::RegistrationError::SmallOrder) => Err(Refusal::new(
            Cause::Invalid,
            "small-order-key",
            "the key is a point of small order: anyone can sign for it",
        )),
        Err(integrity::RegistrationError::Torsion) => Err(Refusal::new(
            Cause::Invalid,
            "mixed-order-key",
            "the key has a torsion component (not in the prime-order subgroup): \
             verifiers may disagree on its signatures",
        )),
        Err(_) => Err(bad(
            "the 32 bytes are not the canonical encoding of an Ed25519 public key",
        )),
    }
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
    // memchr's searcher: a byte-by-byte window compare took 3.4 ms on a 2 MB BSOR.
    memchr::memmem::find(body, integrity::ENTRY_KEY.as_bytes()).is_some()
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
        "keyProven": owner.key_proven,
    })
}

impl ReplayServer {
    /// A fresh key registration challenge for `player` (`201`), unless it holds
    /// [`MAX_CHALLENGES`] unexpired ones (`429`).
    pub async fn issue_challenge(&self, player: &str) -> Result<Challenge, Refusal> {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes)
            .map_err(|e| Refusal::new(Cause::Internal, "internal", format!("randomness: {e}")))?;
        let now = now_ms();
        let ttl = i64::try_from(self.config.challenge_ttl.as_millis()).unwrap_or(i64::MAX);
        let expires = now.saturating_add(ttl);
        let challenge = hex(&bytes);
        match self
            .index
            .issue_challenge(&challenge, player, now, expires, MAX_CHALLENGES)
            .await?
        {
            Issued::Issued => Ok(Challenge {
                challenge,
                player: player.to_string(),
                server_name: self.config.server_name.clone(),
                expires,
            }),
            Issued::TooMany => Err(Refusal::new(
                Cause::RateLimited,
                "too-many-challenges",
                format!(
                    "a player holds at most {MAX_CHALLENGES} unexpired challenges; use one or \
                     wait for one to expire"
                ),
            )),
        }
    }

    /// Registers the key of `proof` to the token's `player` once the proof holds: its
    /// challenge is spent (whatever follows), then its signature is checked over the
    /// registration message. `201` with the row when new (or when it replaces another
    /// player's unproven row), `200` when it is the player's already; refused `403` for a
    /// challenge that is not the player's, spent or expired, or a signature that does not
    /// verify; `409` when the key is another player's by proof, revoked, or the player holds
    /// [`MAX_KEYS`].
    pub async fn register_key(
        &self,
        proof: &Proof,
        player: &str,
    ) -> Result<(u16, KeyRow), Refusal> {
        match self
            .index
            .spend_challenge(&hex(&proof.challenge), player, now_ms())
            .await?
        {
            Spent::Fresh => {}
            Spent::Expired => {
                return Err(Refusal::new(
                    Cause::Forbidden,
                    "expired-challenge",
                    "the challenge expired; ask for another",
                ))
            }
            Spent::Unknown => {
                return Err(Refusal::new(
                    Cause::Forbidden,
                    "unknown-challenge",
                    "no such challenge for this player: never issued to it, or used already",
                ))
            }
        }
        let key: [u8; 32] = integrity::from_hex(&proof.key)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                Refusal::new(Cause::Invalid, "bad-key", "a public key is 64 hex digits")
            })?;
        integrity::verify_key_registration(
            &key,
            player,
            &self.config.server_name,
            &proof.challenge,
            &proof.signature,
        )
        .map_err(|e| {
            Refusal::new(
                Cause::Forbidden,
                "bad-proof",
                format!(
                    "{e} (player {player:?}, server {:?})",
                    self.config.server_name
                ),
            )
        })?;
        let key = proof.key.as_str();
        match self
            .index
            .register_key(key, player, now_ms(), MAX_KEYS)
            .await?
        {
            Registered::New(row) => Ok((201, row)),
            Registered::Existing(row) if row.player != player => Err(Refusal::new(
                Cause::Conflict,
                "key-taken",
                "the key is registered to another player",
            )),
            Registered::Existing(row) if row.revoked.is_some() => Err(Refusal::new(
                Cause::Conflict,
                "key-revoked",
                "the key was revoked; a revoked key is not registered again",
            )),
            Registered::Existing(row) => Ok((200, row)),
            Registered::TooMany => Err(Refusal::new(
                Cause::Conflict,
                "too-many-keys",
                format!("a player registers at most {MAX_KEYS} keys, revoked ones included"),
            )),
        }
    }

    /// Revokes `key` for the holder of `grant` (its player, or an admin): the row after.
    /// Revoking a revoked key again keeps the first time.
    pub async fn revoke_key(&self, key: &str, grant: &Grant) -> Result<KeyRow, Refusal> {
        let not_found = || Refusal::new(Cause::NotFound, "not-found", "no such key");
        let row = self.index.key(key).await?.ok_or_else(not_found)?;
        if let Grant::Player(p) = grant {
            if *p != row.player {
                return Err(Refusal::new(
                    Cause::Forbidden,
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

    /// Removes the row of `key` entirely (an admin's purge, which undoes a squat): the row
    /// removed.
    pub async fn purge_key(&self, key: &str, grant: &Grant) -> Result<KeyRow, Refusal> {
        if *grant != Grant::Admin {
            return Err(Refusal::new(
                Cause::Forbidden,
                "not-admin",
                "only an admin purges a key",
            ));
        }
        self.index
            .purge_key(key)
            .await?
            .ok_or_else(|| Refusal::new(Cause::NotFound, "not-found", "no such key"))
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
        .map_err(|e| Refusal::new(Cause::Internal, "internal", e.to_string()))??;
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
            proven: true,
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
