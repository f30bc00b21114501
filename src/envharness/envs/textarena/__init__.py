"""TextArena games (Wordle-v0 and the other single-player games) as an envharness environment."""
