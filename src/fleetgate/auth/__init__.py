"""Client keys: lookup by hash, allow-lists, rate limits and budgets on the hot path."""
