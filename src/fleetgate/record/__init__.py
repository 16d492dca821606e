"""Record: one row per request and per attempt, written off the hot path."""
