"""The store's tables (SQLAlchemy Core); migrations in `migrations/` create them."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

# One table for every kind of fleet entity (providers, deployments, models, and whatever
# kinds later features add): the row body is the entity's config block as JSON, so a new
# kind needs no migration.
config_entities = Table(
    "config_entities",
    metadata,
    Column("kind", String(64), primary_key=True),
    Column("id", String(255), primary_key=True),
    Column("position", Integer, nullable=False),  # declared order, kept across edits
    Column("body", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# Small facts about the store: whether the YAML seeded it, the config version.
store_meta = Table(
    "store_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# One row per config change, keyed by the config version it made: when, what it touched
# (kinds and ids, never bodies or secrets) and what else it did (e.g. routes following a
# key label's rename).
config_history = Table(
    "config_history",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("time", Float, nullable=False),
    Column("summary", Text, nullable=False),
    Column("changes", JSON, nullable=False),  # [{kind, id, action}]
    Column("events", JSON, nullable=False),  # [{type, message, ...}]
)

# The request log: one row per request, its attempts inline as a JSON list (read only with
# their request). The integer key appends to its index; no foreign key to check per row.
requests = Table(
    "requests",
    metadata,
    # ours, increasing; request ids may come from clients and repeat
    Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("request_id", String(128), nullable=False),
    Column("time", Float, nullable=False),
    Column("client_key_id", String(64)),
    Column("endpoint", String(64), nullable=False),
    Column("requested_model", String(255), nullable=False),
    Column("resolution", String(64), nullable=False),
    Column("virtual_model", String(255)),
    Column("tier", String(255)),  # the named routing tier (header or auto)
    Column("context_tier", String(255)),  # the capacity tier that served it (e.g. long)
    Column("deployment_id", String(255)),
    Column("provider_id", String(255)),
    Column("upstream_model", String(255)),
    Column("stream", Boolean, nullable=False),
    Column("status", Integer, nullable=False),
    Column("error_code", String(64)),
    Column("error_class", String(64)),
    Column("latency", Float, nullable=False),
    Column("ttft", Float),
    Column("overhead", Float),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("tokens_estimated", Boolean, nullable=False),
    Column("context_estimate", Integer),
    Column("context_exact", Boolean),
    Column("fallback_count", Integer, nullable=False),
    Column("dropped", JSON),
    Column("attempts", JSON, nullable=False),  # [{idx, deployment_id, status, ...}, ...]
    Column("trace_id", String(32)),  # with telemetry on: its trace (trace_context.py)
)
Index("ix_requests_time", requests.c.time)
Index("ix_requests_request_id", requests.c.request_id)
Index("ix_requests_model_time", requests.c.requested_model, requests.c.time)

client_keys = Table(
    "client_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),  # shown in listings to tell keys apart
    Column("allowed_models", JSON),  # null: every model
    Column("rpm", Integer),
    Column("tpm", Integer),
    Column("budget", Float),  # in the fleet's price unit; null: no budget
    Column("spent", Float, nullable=False),
    Column("disabled", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
)
