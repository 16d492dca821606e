"""Storage: config entities, the request log and client keys, in SQLite or PostgreSQL."""
