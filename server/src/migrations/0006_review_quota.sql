-- The review copies of one player, counted for its quota (http.md §8.2.2).
CREATE INDEX reviews_player ON reviews (player, state);
