-- The replay server's index (proto-spec/http.md §7). Portable SQL: SQLite and PostgreSQL
-- run the same statements.
CREATE TABLE replays (
    id TEXT PRIMARY KEY,
    blob TEXT NOT NULL,
    player TEXT NOT NULL,
    player_name TEXT NOT NULL,
    map_hash TEXT NOT NULL,
    song TEXT NOT NULL,
    difficulty TEXT NOT NULL,
    mode TEXT NOT NULL,
    score BIGINT NOT NULL,
    played BIGINT NOT NULL,
    uploaded BIGINT NOT NULL,
    duration DOUBLE PRECISION NOT NULL,
    format TEXT NOT NULL,
    stored_bytes BIGINT NOT NULL,
    bsor_bytes BIGINT NOT NULL,
    header_bytes BIGINT NOT NULL,
    fingerprint TEXT NOT NULL,
    signed BIGINT NOT NULL,
    countersigned BIGINT NOT NULL
);
CREATE INDEX replays_uploaded ON replays (uploaded, id);
CREATE INDEX replays_player ON replays (player, uploaded, id);
CREATE INDEX replays_map ON replays (map_hash, uploaded, id);
-- One accepted owner per play: the first accepted upload of an event digest.
CREATE UNIQUE INDEX replays_fingerprint ON replays (fingerprint);
-- A blob written and not yet committed with its row (or a row deleted and its blob not yet
-- removed): the sweeper removes the blob once the lease expires.
CREATE TABLE leases (
    blob TEXT PRIMARY KEY,
    expires BIGINT NOT NULL
);
CREATE INDEX leases_expires ON leases (expires);
-- Uploads refused as the same play as another player's accepted replay, kept for review.
CREATE TABLE reviews (
    id TEXT PRIMARY KEY,
    blob TEXT NOT NULL,
    player TEXT NOT NULL,
    owner TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    uploaded BIGINT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL
);
