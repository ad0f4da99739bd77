//! The replay server's index: one set of parameterised queries through `sqlx::Any`, run on
//! SQLite (the embedded default, `STORE/index.sqlite`) or PostgreSQL (`postgres://…`), with
//! the schema's migrations embedded in the binary.

use std::borrow::Cow;

use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, Row};

/// An index failure: what was being done and why.
#[derive(Debug, thiserror::Error)]
#[error("index: {what}: {source}")]
pub struct IndexError {
    what: &'static str,
    #[source]
    source: sqlx::Error,
}

/// Ends a commit whose row `inserted` tried to write: a unique violation is a
/// [`Committed::Conflict`] (and the transaction rolls back); otherwise the blob's lease goes
/// in the same transaction as the row.
async fn end_lease(
    mut tx: sqlx::Transaction<'static, sqlx::Any>,
    inserted: Result<sqlx::any::AnyQueryResult, sqlx::Error>,
    blob: &str,
    (writing, committing): (&'static str, &'static str),
) -> Result<Committed, IndexError> {
    match inserted {
        Ok(_) => {}
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Ok(Committed::Conflict);
        }
        Err(e) => return Err(err(writing)(e)),
    }
    sqlx::query("DELETE FROM leases WHERE blob = $1")
        .bind(blob)
        .execute(&mut *tx)
        .await
        .map_err(err("ending a lease"))?;
    tx.commit().await.map_err(err(committing))?;
    Ok(Committed::Done)
}

/// Writes the row of `r` in `tx`.
async fn insert_replay(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    r: &Record,
) -> Result<sqlx::any::AnyQueryResult, sqlx::Error> {
    let q = format!(
        "INSERT INTO replays ({COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
    );
    sqlx::query(&q)
        .bind(&r.id)
        .bind(&r.blob)
        .bind(&r.player)
        .bind(&r.player_name)
        .bind(&r.map_hash)
        .bind(&r.song)
        .bind(&r.difficulty)
        .bind(&r.mode)
        .bind(r.score)
        .bind(r.played)
        .bind(r.uploaded)
        .bind(r.duration)
        .bind(&r.format)
        .bind(r.stored_bytes)
        .bind(r.bsor_bytes)
        .bind(r.header_bytes)
        .bind(&r.fingerprint)
        .bind(i64::from(r.signed))
        .bind(i64::from(r.countersigned))
        .bind(r.existed_by)
        .execute(&mut **tx)
        .await
}

/// Writes the play keys and motion signature of replay `id` in `tx`.
async fn insert_play(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: &str,
    play: &Play,
) -> Result<(), sqlx::Error> {
    if !play.keys.is_empty() {
        let values: Vec<String> = (0..play.keys.len())
            .map(|i| format!("(${}, $1)", i + 2))
            .collect();
        let q = format!(
            "INSERT INTO play_keys (key, replay) VALUES {}",
            values.join(", ")
        );
        let mut query = sqlx::query(&q).bind(id);
        for k in &play.keys {
            query = query.bind(*k);
        }
        query.execute(&mut **tx).await?;
    }
    sqlx::query("INSERT INTO play_signatures (replay, signature) VALUES ($1, $2)")
        .bind(id)
        .bind(&play.signature)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Removes the play keys and signature of replay `id` in `tx`.
async fn remove_play(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: &str,
) -> Result<(), IndexError> {
    for q in [
        "DELETE FROM play_keys WHERE replay = $1",
        "DELETE FROM play_signatures WHERE replay = $1",
    ] {
        sqlx::query(q)
            .bind(id)
            .execute(&mut **tx)
            .await
            .map_err(err("removing a play's keys"))?;
    }
    Ok(())
}

/// A replay's play keys and motion signature as the index keeps them (`integrity.md`
/// §11.4): the keys deduplicated, the signature's byte form in standard base64.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Play {
    /// The play keys.
    pub keys: Vec<i64>,
    /// The motion signature, base64.
    pub signature: String,
}

/// Writes the review row `r` in `tx`.
async fn insert_review(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    r: &Review,
) -> Result<sqlx::any::AnyQueryResult, sqlx::Error> {
    sqlx::query(
        "INSERT INTO reviews (id, blob, player, owner, fingerprint, uploaded, state, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&r.id)
    .bind(&r.blob)
    .bind(&r.player)
    .bind(&r.owner)
    .bind(&r.fingerprint)
    .bind(r.uploaded)
    .bind(&r.state)
    .bind(&r.reason)
    .execute(&mut **tx)
    .await
}

fn err(what: &'static str) -> impl FnOnce(sqlx::Error) -> IndexError {
    move |source| IndexError { what, source }
}

/// One stored replay as the index has it (and as `http.md` §7 shows it in JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The replay's ID.
    pub id: String,
    /// The blob that holds its stream (not shown).
    #[serde(skip)]
    pub blob: String,
    /// The player's ID (the info's `playerID`).
    pub player: String,
    /// The player's name.
    pub player_name: String,
    /// The map's hash.
    pub map_hash: String,
    /// The song's name.
    pub song: String,
    /// The difficulty.
    pub difficulty: String,
    /// The game mode.
    pub mode: String,
    /// The score the info states.
    pub score: i64,
    /// When it was played (the info's timestamp, Unix seconds; 0 when unknown).
    pub played: i64,
    /// When the server accepted it (Unix milliseconds).
    pub uploaded: i64,
    /// Song seconds of its last frame.
    pub duration: f64,
    /// How it is stored: the profile, `lossless`, `fine`, `compact` or `custom`.
    pub format: String,
    /// Bytes of the stored stream.
    pub stored_bytes: i64,
    /// Bytes of its BSOR.
    pub bsor_bytes: i64,
    /// Bytes of the stored stream's header (the range `/events` reads first).
    #[serde(skip)]
    pub header_bytes: i64,
    /// The event digest (`integrity.md` §11.1), hex.
    pub fingerprint: String,
    /// The upload carried its recorder's signature chunks (kept in the stored stream).
    pub signed: bool,
    /// The server countersigned it (a statement beside the blob).
    pub countersigned: bool,
    /// When it is known to have existed (Unix milliseconds): the earliest of `uploaded` and
    /// the receive time of a trusted witness's statement that checked against it
    /// (`http.md` §8.2.2).
    pub existed_by: i64,
}

/// An upload refused as another player's play, or a replay whose play went to another
/// player's upload with an earlier existed-by time (`http.md` §8.2.2), kept for review.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    /// The refused upload's replay ID.
    pub id: String,
    /// Its blob.
    #[serde(skip)]
    pub blob: String,
    /// The player it claims.
    pub player: String,
    /// The ID of the accepted replay of the same play (its owner's).
    pub owner: String,
    /// The shared event digest.
    pub fingerprint: String,
    /// When it was refused, or lost its play (Unix milliseconds).
    pub uploaded: i64,
    /// `pending` until an admin decides.
    pub state: String,
    /// Why it was refused or lost its play.
    pub reason: String,
}

/// What a search selects (every field optional; `http.md` §7.6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The player's ID.
    pub player: Option<String>,
    /// The map's hash.
    pub map: Option<String>,
    /// The difficulty.
    pub difficulty: Option<String>,
    /// The game mode.
    pub mode: Option<String>,
    /// Uploaded at or after (Unix milliseconds).
    pub since: Option<i64>,
    /// Uploaded before (Unix milliseconds).
    pub until: Option<i64>,
    /// After this (uploaded, id), newest first.
    pub after: Option<(i64, String)>,
}

/// How a commit of a new row ended.
#[derive(Debug)]
pub enum Committed {
    /// The row is in.
    Done,
    /// A row with its ID or fingerprint was committed first.
    Conflict,
}

/// A public key in the registry (`http.md` §8.13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRow {
    /// The Ed25519 public key, 64 lower-case hex digits.
    pub key: String,
    /// The player it is bound to.
    pub player: String,
    /// When it was registered (Unix milliseconds).
    pub registered: i64,
    /// When it was revoked (Unix milliseconds), or `None` while it stands.
    pub revoked: Option<i64>,
    /// Registered with a proof of possession (a signature by the key over a challenge);
    /// `false` for rows from before proofs were asked for.
    pub proven: bool,
}

/// How a registration ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// The key is now the player's.
    New(KeyRow),
    /// The key was registered already; the row says to whom and whether it stands.
    Existing(KeyRow),
    /// The player holds as many keys as allowed (revoked ones count).
    TooMany,
}

/// How asking for a key registration challenge ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Issued {
    /// The challenge is the player's until it expires.
    Issued,
    /// The player holds as many unexpired challenges as allowed.
    TooMany,
}

/// What spending a challenge found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spent {
    /// It was the player's, unexpired, and is spent now.
    Fresh,
    /// It was the player's but had expired (spent now too).
    Expired,
    /// No such challenge for the player: never issued to them, or spent already.
    Unknown,
}

const COLUMNS: &str = "id, blob, player, player_name, map_hash, song, difficulty, mode, score, \
played, uploaded, duration, format, stored_bytes, bsor_bytes, header_bytes, fingerprint, \
signed, countersigned, existed_by";

/// The embedded migrations.
#[derive(Debug)]
struct Embedded;

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>>
    {
        Box::pin(async {
            Ok(vec![
                Migration::new(
                    1,
                    Cow::Borrowed("replays"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0001_replays.sql")),
                    false,
                ),
                Migration::new(
                    2,
                    Cow::Borrowed("keys"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0002_keys.sql")),
                    false,
                ),
                Migration::new(
                    3,
                    Cow::Borrowed("existed_by"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0003_existed_by.sql")),
                    false,
                ),
                Migration::new(
                    4,
                    Cow::Borrowed("key_proofs"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0004_key_proofs.sql")),
                    false,
                ),
                Migration::new(
                    5,
                    Cow::Borrowed("play_keys"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0005_play_keys.sql")),
                    false,
                ),
                Migration::new(
                    6,
                    Cow::Borrowed("review_quota"),
                    MigrationType::Simple,
                    Cow::Borrowed(include_str!("migrations/0006_review_quota.sql")),
                    false,
                ),
            ])
        })
    }
}

/// The index of a replay server.
#[derive(Clone, Debug)]
pub struct Index {
    pool: AnyPool,
    url: String,
}

impl Index {
    /// Opens (creating a SQLite file if needed) and migrates the index at `url`
    /// (`sqlite://PATH` or `postgres://…`).
    pub async fn open(url: &str) -> Result<Index, IndexError> {
        sqlx::any::install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let url_full = if sqlite && !url.contains('?') {
            format!("{url}?mode=rwc")
        } else {
            url.to_string()
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if sqlite { 4 } else { 8 })
            .acquire_timeout(std::time::Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        // A commit is on disk when it returns, WAL or not (http.md §8.3):
                        // the setting is a connection's, so each one gets it.
                        sqlx::query("PRAGMA synchronous=FULL")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&url_full)
            .await
            .map_err(err("connecting"))?;
        if sqlite {
            // Readers do not wait for the writer; the setting stays with the file.
            sqlx::query("PRAGMA journal_mode=WAL")
                .execute(&pool)
                .await
                .map_err(err("setting WAL"))?;
        }
        let migrator = Migrator::new(Embedded).await.map_err(|e| IndexError {
            what: "loading migrations",
            source: sqlx::Error::Migrate(Box::new(e)),
        })?;
        migrator.run(&pool).await.map_err(|e| IndexError {
            what: "migrating",
            source: sqlx::Error::Migrate(Box::new(e)),
        })?;
        Ok(Index {
            pool,
            url: redact(url),
        })
    }

    /// The index's URL, without a password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The replay `id`.
    pub async fn get(&self, id: &str) -> Result<Option<Record>, IndexError> {
        let q = format!("SELECT {COLUMNS} FROM replays WHERE id = $1");
        let row = sqlx::query(&q)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(err("reading a replay"))?;
        row.map(|r| record(&r)).transpose()
    }

    /// The accepted replay of the play with event digest `fingerprint`.
    pub async fn by_fingerprint(&self, fingerprint: &str) -> Result<Option<Record>, IndexError> {
        let q = format!("SELECT {COLUMNS} FROM replays WHERE fingerprint = $1");
        let row = sqlx::query(&q)
            .bind(fingerprint)
            .fetch_optional(&self.pool)
            .await
            .map_err(err("reading a fingerprint"))?;
        row.map(|r| record(&r)).transpose()
    }

    /// The accepted replays that share a play key with `keys` (`integrity.md` §11.4), at
    /// most `limit`, those sharing the most keys first, each with its motion signature
    /// (base64): one indexed lookup, no blob read.
    pub async fn similar_candidates(
        &self,
        keys: &[i64],
        limit: i64,
    ) -> Result<Vec<(Record, String)>, IndexError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = (0..keys.len()).map(|i| format!("${}", i + 2)).collect();
        let q = format!(
            "SELECT {COLUMNS}, signature FROM replays \
             JOIN play_signatures ON play_signatures.replay = replays.id \
             WHERE replays.id IN (SELECT replay FROM play_keys WHERE key IN ({}) \
             GROUP BY replay ORDER BY COUNT(*) DESC, replay LIMIT $1)",
            list.join(", ")
        );
        let mut query = sqlx::query(&q).bind(limit);
        for k in keys {
            query = query.bind(*k);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(err("reading play keys"))?;
        rows.iter()
            .map(|row| {
                let sig: String = row
                    .try_get("signature")
                    .map_err(err("reading a signature"))?;
                Ok((record(row)?, sig))
            })
            .collect()
    }

    /// Writes a lease on `blob` until `expires` (Unix milliseconds), before the blob.
    pub async fn lease(&self, blob: &str, expires: i64) -> Result<(), IndexError> {
        sqlx::query("INSERT INTO leases (blob, expires) VALUES ($1, $2)")
            .bind(blob)
            .bind(expires)
            .execute(&self.pool)
            .await
            .map_err(err("writing a lease"))?;
        Ok(())
    }

    /// Commits `r` and ends its blob's lease, in one transaction. A row of the same ID or
    /// fingerprint committed first is a [`Committed::Conflict`] (nothing is written; the
    /// lease stays for the sweeper).
    pub async fn commit(&self, r: &Record, play: &Play) -> Result<Committed, IndexError> {
        let mut tx = self.pool.begin().await.map_err(err("starting a commit"))?;
        let inserted = match insert_replay(&mut tx, r).await {
            Ok(done) => insert_play(&mut tx, &r.id, play).await.map(|()| done),
            Err(e) => Err(e),
        };
        end_lease(
            tx,
            inserted,
            &r.blob,
            ("writing a replay", "committing a replay"),
        )
        .await
    }

    /// Commits `r` as the new owner of `former`'s play (`http.md` §8.2.2), in one
    /// transaction: `former`'s row leaves the replays and becomes the review entry `review`
    /// (its blob stays), the play's other review entries name `r` as their owner, `r`'s row
    /// is written and its blob's lease ends. A review entry already under `r`'s or
    /// `former`'s ID (the same upload refused before) is replaced, its blob leased for the
    /// sweeper at `now`. When `former` is no longer the owner, or a row of `r`'s ID or
    /// fingerprint was committed first: [`Committed::Conflict`] (nothing is written).
    pub async fn transfer(
        &self,
        r: &Record,
        play: &Play,
        former: &Record,
        review: &Review,
        now: i64,
    ) -> Result<Committed, IndexError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(err("starting a transfer"))?;
        // The write comes first, so that SQLite takes its write lock before any read.
        let gone = sqlx::query("DELETE FROM replays WHERE id = $1 AND blob = $2")
            .bind(&former.id)
            .bind(&former.blob)
            .execute(&mut *tx)
            .await
            .map_err(err("removing the former owner's row"))?;
        if gone.rows_affected() != 1 {
            return Ok(Committed::Conflict);
        }
        remove_play(&mut tx, &former.id).await?;
        for id in [&r.id, &former.id] {
            let stale: Option<String> = sqlx::query("SELECT blob FROM reviews WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(err("reading a review"))?
                .map(|row| row.try_get("blob"))
                .transpose()
                .map_err(err("reading a review"))?;
            let Some(stale) = stale else { continue };
            sqlx::query("INSERT INTO leases (blob, expires) VALUES ($1, $2)")
                .bind(&stale)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(err("leasing a replaced review's blob"))?;
            sqlx::query("DELETE FROM reviews WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(err("removing a replaced review"))?;
        }
        insert_review(&mut tx, review)
            .await
            .map_err(err("writing the former owner's review"))?;
        sqlx::query("UPDATE reviews SET owner = $1 WHERE fingerprint = $2")
            .bind(&r.id)
            .bind(&r.fingerprint)
            .execute(&mut *tx)
            .await
            .map_err(err("naming the new owner in reviews"))?;
        let inserted = match insert_replay(&mut tx, r).await {
            Ok(done) => insert_play(&mut tx, &r.id, play).await.map(|()| done),
            Err(e) => Err(e),
        };
        end_lease(
            tx,
            inserted,
            &r.blob,
            ("writing a replay", "committing a transfer"),
        )
        .await
    }

    /// Commits a review row and ends its blob's lease, in one transaction. One already
    /// there (the same upload again) is kept as it is.
    pub async fn commit_review(&self, r: &Review) -> Result<Committed, IndexError> {
        let mut tx = self.pool.begin().await.map_err(err("starting a review"))?;
        let inserted = insert_review(&mut tx, r).await;
        end_lease(
            tx,
            inserted,
            &r.blob,
            ("writing a review", "committing a review"),
        )
        .await
    }

    /// How many review copies of `player`'s uploads are pending.
    pub async fn pending_reviews(&self, player: &str) -> Result<i64, IndexError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM reviews WHERE player = $1 AND state = 'pending'",
        )
        .bind(player)
        .fetch_one(&self.pool)
        .await
        .map_err(err("counting reviews"))?;
        row.try_get::<i64, _>("n").map_err(err("counting reviews"))
    }

    /// The uploads kept for review, oldest first (at most `limit`).
    pub async fn reviews(&self, limit: i64) -> Result<Vec<Review>, IndexError> {
        let rows = sqlx::query(
            "SELECT id, blob, player, owner, fingerprint, uploaded, state, reason FROM reviews \
             ORDER BY uploaded, id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(err("reading reviews"))?;
        rows.iter()
            .map(|r| {
                Ok(Review {
                    id: r.try_get("id").map_err(err("reading a review"))?,
                    blob: r.try_get("blob").map_err(err("reading a review"))?,
                    player: r.try_get("player").map_err(err("reading a review"))?,
                    owner: r.try_get("owner").map_err(err("reading a review"))?,
                    fingerprint: r.try_get("fingerprint").map_err(err("reading a review"))?,
                    uploaded: r.try_get("uploaded").map_err(err("reading a review"))?,
                    state: r.try_get("state").map_err(err("reading a review"))?,
                    reason: r.try_get("reason").map_err(err("reading a review"))?,
                })
            })
            .collect()
    }

    /// Removes the row of `id` and leases its blob for removal at once, in one transaction:
    /// the blob's key, or `None` when there was no such row.
    pub async fn delete(&self, id: &str, now: i64) -> Result<Option<String>, IndexError> {
        let mut tx = self.pool.begin().await.map_err(err("starting a delete"))?;
        let blob: Option<String> = sqlx::query("SELECT blob FROM replays WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(err("reading a replay"))?
            .map(|r| r.try_get("blob"))
            .transpose()
            .map_err(err("reading a replay"))?;
        let Some(blob) = blob else {
            return Ok(None);
        };
        sqlx::query("INSERT INTO leases (blob, expires) VALUES ($1, $2)")
            .bind(&blob)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(err("leasing a deleted blob"))?;
        sqlx::query("DELETE FROM replays WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(err("deleting a replay"))?;
        remove_play(&mut tx, id).await?;
        tx.commit().await.map_err(err("committing a delete"))?;
        Ok(Some(blob))
    }

    /// Blobs whose lease expired before `now`, oldest first (at most `limit`).
    pub async fn expired(&self, now: i64, limit: i64) -> Result<Vec<String>, IndexError> {
        let rows =
            sqlx::query("SELECT blob FROM leases WHERE expires < $1 ORDER BY expires LIMIT $2")
                .bind(now)
                .bind(limit)
                .fetch_all(&self.pool)
                .await
                .map_err(err("reading leases"))?;
        rows.iter()
            .map(|r| r.try_get("blob").map_err(err("reading leases")))
            .collect()
    }

    /// Ends the lease on `blob` (its blob is gone), unless a committed row points at it
    /// (then the blob was not removed either: see the sweeper).
    pub async fn end_lease(&self, blob: &str) -> Result<(), IndexError> {
        sqlx::query("DELETE FROM leases WHERE blob = $1")
            .bind(blob)
            .execute(&self.pool)
            .await
            .map_err(err("ending a lease"))?;
        Ok(())
    }

    /// Whether a committed row (a replay or a review) points at `blob`.
    pub async fn referenced(&self, blob: &str) -> Result<bool, IndexError> {
        let row = sqlx::query(
            "SELECT 1 AS one FROM replays WHERE blob = $1 \
             UNION ALL SELECT 1 AS one FROM reviews WHERE blob = $2",
        )
        .bind(blob)
        .bind(blob)
        .fetch_optional(&self.pool)
        .await
        .map_err(err("looking up a blob"))?;
        Ok(row.is_some())
    }

    /// Every blob a committed row points at (for tests and checks; bounded by `limit`).
    pub async fn blobs(&self, limit: i64) -> Result<Vec<String>, IndexError> {
        let rows = sqlx::query(
            "SELECT blob FROM replays UNION ALL SELECT blob FROM reviews ORDER BY blob LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(err("listing blobs"))?;
        rows.iter()
            .map(|r| r.try_get("blob").map_err(err("listing blobs")))
            .collect()
    }

    /// Replays that `f` selects, newest upload first, at most `limit`.
    pub async fn search(&self, f: &Filter, limit: i64) -> Result<Vec<Record>, IndexError> {
        // Only the clauses vary, never a value: every value is a parameter, numbered in
        // the order it is bound.
        let mut clauses: Vec<String> = Vec::new();
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        let texts = [
            ("player", &f.player),
            ("map_hash", &f.map),
            ("difficulty", &f.difficulty),
            ("mode", &f.mode),
        ];
        for (col, v) in texts {
            if v.is_some() {
                clauses.push(format!("{col} = {}", next()));
            }
        }
        if f.since.is_some() {
            clauses.push(format!("uploaded >= {}", next()));
        }
        if f.until.is_some() {
            clauses.push(format!("uploaded < {}", next()));
        }
        if f.after.is_some() {
            let (a, b, c) = (next(), next(), next());
            clauses.push(format!("(uploaded < {a} OR (uploaded = {b} AND id < {c}))"));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let q = format!(
            "SELECT {COLUMNS} FROM replays {filter} ORDER BY uploaded DESC, id DESC LIMIT {}",
            next()
        );
        let mut query = sqlx::query(&q);
        for (_, v) in texts {
            if let Some(v) = v {
                query = query.bind(v.as_str());
            }
        }
        if let Some(s) = f.since {
            query = query.bind(s);
        }
        if let Some(u) = f.until {
            query = query.bind(u);
        }
        if let Some((t, id)) = &f.after {
            query = query.bind(*t).bind(*t).bind(id.as_str());
        }
        let rows = query
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(err("searching"))?;
        rows.iter().map(record).collect()
    }

    /// Registers `key` to `player` at `now` as proven (its holder signed a challenge),
    /// unless the player holds `max` keys already. A key registered before by proof (to
    /// anyone), or by `player` itself, is left as it is and returned (the player's own
    /// unproven row becomes proven); another player's unproven row is replaced, so that a
    /// squat from before proofs does not hold against the key's holder.
    pub async fn register_key(
        &self,
        key: &str,
        player: &str,
        now: i64,
        max: i64,
    ) -> Result<Registered, IndexError> {
        // The count and the insert are one statement, so that the cap holds without a lock.
        let inserted = sqlx::query(
            "INSERT INTO keys (key, player, registered, proven) SELECT $1, $2, $3, 1 \
             WHERE (SELECT COUNT(*) FROM keys WHERE player = $4) < $5",
        )
        .bind(key)
        .bind(player)
        .bind(now)
        .bind(player)
        .bind(max)
        .execute(&self.pool)
        .await;
        let existing = match inserted {
            Ok(done) if done.rows_affected() == 1 => {
                return Ok(Registered::New(KeyRow {
                    key: key.to_string(),
                    player: player.to_string(),
                    registered: now,
                    revoked: None,
                    proven: true,
                }))
            }
            // Registered since the count was taken, or over the cap.
            Ok(_) => match self.key(key).await? {
                Some(row) => row,
                None => return Ok(Registered::TooMany),
            },
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                self.key(key).await?.ok_or_else(|| IndexError {
                    what: "registering a key",
                    source: sqlx::Error::RowNotFound,
                })?
            }
            Err(e) => return Err(err("registering a key")(e)),
        };
        if existing.proven {
            return Ok(Registered::Existing(existing));
        }
        if existing.player == player {
            // The player's own row from before proofs: proven now, its history kept.
            sqlx::query("UPDATE keys SET proven = 1 WHERE key = $1 AND player = $2")
                .bind(key)
                .bind(player)
                .execute(&self.pool)
                .await
                .map_err(err("registering a key"))?;
            return Ok(Registered::Existing(KeyRow {
                proven: true,
                ..existing
            }));
        }
        // Another player's unproven row: taken over, in one statement that checks it is
        // still unproven and still that player's, and the cap.
        let taken = sqlx::query(
            "UPDATE keys SET player = $1, registered = $2, revoked = NULL, proven = 1 \
             WHERE key = $3 AND proven = 0 AND player = $4 \
             AND (SELECT COUNT(*) FROM keys WHERE player = $5) < $6",
        )
        .bind(player)
        .bind(now)
        .bind(key)
        .bind(&existing.player)
        .bind(player)
        .bind(max)
        .execute(&self.pool)
        .await
        .map_err(err("registering a key"))?;
        if taken.rows_affected() == 1 {
            return Ok(Registered::New(KeyRow {
                key: key.to_string(),
                player: player.to_string(),
                registered: now,
                revoked: None,
                proven: true,
            }));
        }
        Ok(match self.key(key).await? {
            Some(row) if row.proven || row.player == player => Registered::Existing(row),
            _ => Registered::TooMany,
        })
    }

    /// Removes the row of `key` whatever it says (an admin's purge): the row removed, or
    /// `None` when there was none.
    pub async fn purge_key(&self, key: &str) -> Result<Option<KeyRow>, IndexError> {
        let row = sqlx::query(
            "DELETE FROM keys WHERE key = $1 RETURNING key, player, registered, revoked, proven",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(err("purging a key"))?;
        row.map(|r| key_row(&r)).transpose()
    }

    /// Issues `challenge` (hex) to `player` until `expires`, unless the player holds `max`
    /// unexpired challenges at `now`. Expired challenges (anyone's) are removed first.
    pub async fn issue_challenge(
        &self,
        challenge: &str,
        player: &str,
        now: i64,
        expires: i64,
        max: i64,
    ) -> Result<Issued, IndexError> {
        sqlx::query("DELETE FROM key_challenges WHERE expires <= $1")
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(err("removing expired challenges"))?;
        let done = sqlx::query(
            "INSERT INTO key_challenges (challenge, player, expires) SELECT $1, $2, $3 \
             WHERE (SELECT COUNT(*) FROM key_challenges WHERE player = $4 AND expires > $5) < $6",
        )
        .bind(challenge)
        .bind(player)
        .bind(expires)
        .bind(player)
        .bind(now)
        .bind(max)
        .execute(&self.pool)
        .await
        .map_err(err("issuing a challenge"))?;
        Ok(if done.rows_affected() == 1 {
            Issued::Issued
        } else {
            Issued::TooMany
        })
    }

    /// Spends `challenge` of `player` at `now`: one `DELETE … RETURNING`, so that of two
    /// requests (on any servers sharing the index) one at most finds it.
    pub async fn spend_challenge(
        &self,
        challenge: &str,
        player: &str,
        now: i64,
    ) -> Result<Spent, IndexError> {
        let row = sqlx::query(
            "DELETE FROM key_challenges WHERE challenge = $1 AND player = $2 RETURNING expires",
        )
        .bind(challenge)
        .bind(player)
        .fetch_optional(&self.pool)
        .await
        .map_err(err("spending a challenge"))?;
        let Some(row) = row else {
            return Ok(Spent::Unknown);
        };
        let expires: i64 = row
            .try_get("expires")
            .map_err(err("spending a challenge"))?;
        Ok(if expires > now {
            Spent::Fresh
        } else {
            Spent::Expired
        })
    }

    /// The registry's row of `key` (lower-case hex).
    pub async fn key(&self, key: &str) -> Result<Option<KeyRow>, IndexError> {
        let row =
            sqlx::query("SELECT key, player, registered, revoked, proven FROM keys WHERE key = $1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(err("reading a key"))?;
        row.map(|r| key_row(&r)).transpose()
    }

    /// The keys of `player`, oldest first (at most `limit`).
    pub async fn keys(&self, player: &str, limit: i64) -> Result<Vec<KeyRow>, IndexError> {
        let rows = sqlx::query(
            "SELECT key, player, registered, revoked, proven FROM keys WHERE player = $1 \
             ORDER BY registered, key LIMIT $2",
        )
        .bind(player)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(err("reading keys"))?;
        rows.iter().map(key_row).collect()
    }

    /// Revokes `key` at `now` unless it was revoked before (the first time stays): its row
    /// after, or `None` when it is not registered.
    pub async fn revoke_key(&self, key: &str, now: i64) -> Result<Option<KeyRow>, IndexError> {
        sqlx::query("UPDATE keys SET revoked = $1 WHERE key = $2 AND revoked IS NULL")
            .bind(now)
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(err("revoking a key"))?;
        self.key(key).await
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn record(r: &AnyRow) -> Result<Record, IndexError> {
    let e = err("reading a replay");
    let get_s = |c: &str| r.try_get::<String, _>(c);
    let get_i = |c: &str| r.try_get::<i64, _>(c);
    (|| {
        Ok(Record {
            id: get_s("id")?,
            blob: get_s("blob")?,
            player: get_s("player")?,
            player_name: get_s("player_name")?,
            map_hash: get_s("map_hash")?,
            song: get_s("song")?,
            difficulty: get_s("difficulty")?,
            mode: get_s("mode")?,
            score: get_i("score")?,
            played: get_i("played")?,
            uploaded: get_i("uploaded")?,
            duration: r.try_get::<f64, _>("duration")?,
            format: get_s("format")?,
            stored_bytes: get_i("stored_bytes")?,
            bsor_bytes: get_i("bsor_bytes")?,
            header_bytes: get_i("header_bytes")?,
            fingerprint: get_s("fingerprint")?,
            signed: get_i("signed")? != 0,
            countersigned: get_i("countersigned")? != 0,
            existed_by: get_i("existed_by")?,
        })
    })()
    .map_err(e)
}

fn key_row(r: &AnyRow) -> Result<KeyRow, IndexError> {
    (|| {
        Ok(KeyRow {
            key: r.try_get("key")?,
            player: r.try_get("player")?,
            registered: r.try_get("registered")?,
            revoked: r.try_get::<Option<i64>, _>("revoked")?,
            proven: r.try_get::<i64, _>("proven")? != 0,
        })
    })()
    .map_err(err("reading a key"))
}

/// `url` without the password of its user part.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            super::redact("postgres://bs:secret@127.0.0.1/db"),
            "postgres://bs:***@127.0.0.1/db"
        );
        assert_eq!(
            super::redact("sqlite:///tmp/x.sqlite"),
            "sqlite:///tmp/x.sqlite"
        );
    }
}
