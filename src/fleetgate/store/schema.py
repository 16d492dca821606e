"""The store's tables as the serving process creates them in a new, empty store: plain
DDL, one list for both dialects, and which columns hold JSON and Booleans (`db.Conn.rows`
reads them back as such).

`tables.py` describes the same tables to SQLAlchemy for the migrations, which upgrade an
older store; a test keeps the two equal, statement by statement, as SQLAlchemy compiles
`tables.py` for each dialect.
"""

from __future__ import annotations

# the integer key of the request log: a 64-bit sequence on PostgreSQL, SQLite's rowid
_SEQ = {"sqlite": "INTEGER", "postgresql": "BIGSERIAL"}

_TABLES = (
    "CREATE TABLE client_keys (id VARCHAR(64) NOT NULL, name VARCHAR(255) NOT NULL, "
    "key_hash VARCHAR(64) NOT NULL, prefix VARCHAR(16) NOT NULL, allowed_models JSON, "
    "rpm INTEGER, tpm INTEGER, budget FLOAT, spent FLOAT NOT NULL, "
    "disabled BOOLEAN NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (id), "
    "UNIQUE (key_hash))",
    "CREATE TABLE config_entities (kind VARCHAR(64) NOT NULL, id VARCHAR(255) NOT NULL, "
    "position INTEGER NOT NULL, body JSON NOT NULL, updated_at FLOAT NOT NULL, "
    "PRIMARY KEY (kind, id))",
    "CREATE TABLE config_history (version INTEGER NOT NULL, time FLOAT NOT NULL, "
    "summary TEXT NOT NULL, changes JSON NOT NULL, events JSON NOT NULL, "
    "PRIMARY KEY (version))",
    "CREATE TABLE requests (seq {seq} NOT NULL, request_id VARCHAR(128) NOT NULL, "
    "time FLOAT NOT NULL, client_key_id VARCHAR(64), endpoint VARCHAR(64) NOT NULL, "
    "requested_model VARCHAR(255) NOT NULL, resolution VARCHAR(64) NOT NULL, "
    "virtual_model VARCHAR(255), tier VARCHAR(255), context_tier VARCHAR(255), "
    "deployment_id VARCHAR(255), provider_id VARCHAR(255), upstream_model VARCHAR(255), "
    "stream BOOLEAN NOT NULL, status INTEGER NOT NULL, error_code VARCHAR(64), "
    "error_class VARCHAR(64), latency FLOAT NOT NULL, ttft FLOAT, overhead FLOAT, "
    "prompt_tokens INTEGER, completion_tokens INTEGER, tokens_estimated BOOLEAN NOT NULL, "
    "context_estimate INTEGER, context_exact BOOLEAN, fallback_count INTEGER NOT NULL, "
    "dropped JSON, attempts JSON NOT NULL, trace_id VARCHAR(32), notes JSON, "
    "PRIMARY KEY (seq))",
    "CREATE INDEX ix_requests_model_time ON requests (requested_model, time)",
    "CREATE INDEX ix_requests_request_id ON requests (request_id)",
    "CREATE INDEX ix_requests_time ON requests (time)",
    'CREATE TABLE store_meta ("key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, '
    'PRIMARY KEY ("key"))',
)

# the revision `tables.py` and these tables are at: a new store is stamped with it, and a
# store already there skips Alembic entirely (a test keeps it equal to Alembic's head)
SCHEMA_HEAD = "0005"
VERSION_TABLE = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
)

JSON_COLUMNS = frozenset(
    ("allowed_models", "body", "changes", "events", "dropped", "attempts", "notes")
)
BOOLEAN_COLUMNS = frozenset(("disabled", "stream", "tokens_estimated", "context_exact"))


def create_statements(dialect: str) -> list[str]:
    """What creates every table and index of the store, in order, for `dialect`
    ("sqlite" or "postgresql")."""
    return [sql.replace("{seq}", _SEQ[dialect]) for sql in _TABLES]
