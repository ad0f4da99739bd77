-- Ownership by the earliest existed-by time (proto-spec/http.md §8.2.2): when a replay is
-- known to have existed, the earliest of its acceptance and of the trusted witness
-- statements that checked against it (Unix milliseconds). Rows accepted before this column
-- existed had no witness counted: their upload time.
ALTER TABLE replays ADD COLUMN existed_by BIGINT NOT NULL DEFAULT 0;
UPDATE replays SET existed_by = uploaded;
