-- Plays found under small edits (proto-spec/integrity.md §11.4): each accepted replay's play
-- keys, one row each, and its motion signature (§11.2.2, standard base64), so that an upload
-- finds the stored plays it may be a copy of by the key index and scores them without
-- decoding any blob. Replays accepted before this migration have no keys: only their exact
-- digest finds them.
CREATE TABLE play_keys (
    key BIGINT NOT NULL,
    replay TEXT NOT NULL,
    PRIMARY KEY (key, replay)
);
CREATE INDEX play_keys_replay ON play_keys (replay);
CREATE TABLE play_signatures (
    replay TEXT PRIMARY KEY,
    signature TEXT NOT NULL
);
