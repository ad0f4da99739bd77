-- The key registry (proto-spec/http.md §8.13): Ed25519 public keys bound to players. A
-- revoked key keeps its row and gains its revocation time, so that replays signed before
-- it can still be judged.
CREATE TABLE keys (
    key TEXT PRIMARY KEY,
    player TEXT NOT NULL,
    registered BIGINT NOT NULL,
    revoked BIGINT
);
CREATE INDEX keys_player ON keys (player, registered, key);
