-- Keys bound by proof of possession (proto-spec/http.md §8.13). A row registered before
-- proofs were asked for is unproven (0): anyone could have bound the key, so it does not
-- hold against a proven registration of the same key. Rows registered since are proven (1).
ALTER TABLE keys ADD COLUMN proven BIGINT NOT NULL DEFAULT 0;
-- The challenges handed out by POST /keys/challenge, each single-use (deleted when it is
-- presented), for one player, until it expires (Unix milliseconds). In the index, so that
-- servers sharing it honour each other's challenges, and a DELETE decides which request
-- spends one.
CREATE TABLE key_challenges (
    challenge TEXT PRIMARY KEY,
    player TEXT NOT NULL,
    expires BIGINT NOT NULL
);
CREATE INDEX key_challenges_player ON key_challenges (player, expires);
CREATE INDEX key_challenges_expires ON key_challenges (expires);
