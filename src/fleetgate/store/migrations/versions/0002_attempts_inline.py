"""Request log: one row per request with its attempts inline (JSON), keyed by an integer.

The attempts table, its composite text key and its foreign key cost the log writer about
as much as the request rows themselves; attempts are only ever read with their request.
Existing rows are carried over both ways.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# the request columns both versions share, in table order: (name, type, required)
_REQUEST_FIELDS: tuple[tuple[str, sa.types.TypeEngine, bool], ...] = (
    ("request_id", sa.String(128), True),
    ("time", sa.Float(), True),
    ("client_key_id", sa.String(64), False),
    ("endpoint", sa.String(64), True),
    ("requested_model", sa.String(255), True),
    ("resolution", sa.String(64), True),
    ("virtual_model", sa.String(255), False),
    ("tier", sa.String(255), False),
    ("context_tier", sa.String(255), False),
    ("deployment_id", sa.String(255), False),
    ("provider_id", sa.String(255), False),
    ("upstream_model", sa.String(255), False),
    ("stream", sa.Boolean(), True),
    ("status", sa.Integer(), True),
    ("error_code", sa.String(64), False),
    ("error_class", sa.String(64), False),
    ("latency", sa.Float(), True),
    ("ttft", sa.Float(), False),
    ("overhead", sa.Float(), False),
    ("prompt_tokens", sa.Integer(), False),
    ("completion_tokens", sa.Integer(), False),
    ("tokens_estimated", sa.Boolean(), True),
    ("context_estimate", sa.Integer(), False),
    ("context_exact", sa.Boolean(), False),
    ("fallback_count", sa.Integer(), True),
    ("dropped", sa.JSON(), False),
)
_SHARED = [name for name, _, _ in _REQUEST_FIELDS]

# the attempt fields, as columns of 0001 and as keys of 0002's JSON objects
_ATTEMPT_FIELDS: tuple[tuple[str, sa.types.TypeEngine, bool], ...] = (
    ("idx", sa.Integer(), True),
    ("deployment_id", sa.String(255), True),
    ("provider_id", sa.String(255), True),
    ("upstream_model", sa.String(255), True),
    ("scope", sa.String(64), True),
    ("status", sa.Integer(), False),
    ("error_class", sa.String(64), False),
    ("latency", sa.Float(), True),
    ("ttft", sa.Float(), False),
    ("retry_after", sa.Float(), False),
    ("prompt_tokens", sa.Integer(), False),
    ("completion_tokens", sa.Integer(), False),
    ("params", sa.JSON(), False),
    ("key_label", sa.String(255), False),
    ("virtual_model", sa.String(255), False),
    ("tier", sa.String(255), False),
    ("quantization", sa.String(64), False),
    ("dropped_params", sa.JSON(), False),
    ("preferences", sa.JSON(), False),
)


def _request_columns(key: sa.Column, extra: list[sa.Column]) -> list[sa.Column]:
    shared = [sa.Column(n, kind, nullable=not required) for n, kind, required in _REQUEST_FIELDS]
    return [key, *shared, *extra]


def _create_indexes() -> None:
    op.create_index("ix_requests_time", "requests", ["time"])
    op.create_index("ix_requests_request_id", "requests", ["request_id"])
    op.create_index("ix_requests_model_time", "requests", ["requested_model", "time"])


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    seq = sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True)
    attempts_json = sa.Column("attempts", sa.JSON(), nullable=False)
    op.create_table("requests_new", *_request_columns(seq, [attempts_json]))
    shared = ", ".join(f"r.{name}" for name in _SHARED)
    names = [name for name, _, _ in _ATTEMPT_FIELDS]
    if _postgres():
        pairs = ", ".join(f"'{n}', a.{n}" for n in names)
        inline = (
            f"(SELECT coalesce(json_agg(json_build_object({pairs}) ORDER BY a.idx), '[]'::json)"
            " FROM attempts a WHERE a.request_uid = r.uid)"
        )
    else:
        json_cols = {name for name, kind, _ in _ATTEMPT_FIELDS if isinstance(kind, sa.JSON)}
        pairs = ", ".join(
            f"'{n}', json(a.{n})" if n in json_cols else f"'{n}', a.{n}" for n in names
        )
        inline = (
            f"(SELECT json_group_array(json(o)) FROM (SELECT json_object({pairs}) AS o"
            " FROM attempts a WHERE a.request_uid = r.uid ORDER BY a.idx))"
        )
    op.execute(
        f"INSERT INTO requests_new ({', '.join(_SHARED)}, attempts) "
        f"SELECT {shared}, {inline} FROM requests r ORDER BY r.time, r.uid"
    )
    op.drop_table("attempts")
    op.drop_table("requests")
    op.rename_table("requests_new", "requests")
    _create_indexes()


def downgrade() -> None:
    uid = sa.Column("uid", sa.String(32), primary_key=True)
    op.create_table("requests_old", *_request_columns(uid, []))
    key = "lpad(r.seq::text, 32, '0')" if _postgres() else "printf('%032d', r.seq)"
    shared = ", ".join(f"r.{name}" for name in _SHARED)
    op.execute(
        f"INSERT INTO requests_old (uid, {', '.join(_SHARED)}) SELECT {key}, {shared} "
        "FROM requests r"
    )
    op.create_table(
        "attempts",
        sa.Column(
            "request_uid",
            sa.String(32),
            sa.ForeignKey("requests_old.uid", ondelete="CASCADE"),
            primary_key=True,
        ),
        *[
            sa.Column(name, kind, primary_key=name == "idx", nullable=not required)
            for name, kind, required in _ATTEMPT_FIELDS
        ],
    )
    names = [name for name, _, _ in _ATTEMPT_FIELDS]
    if _postgres():
        values = ", ".join(
            f"(e->'{n}')" if isinstance(kind, sa.JSON) else f"(e->>'{n}')::{_pg_type(kind)}"
            for n, kind, _ in _ATTEMPT_FIELDS
        )
        source = "requests r, json_array_elements(r.attempts) AS e"
    else:
        values = ", ".join(
            f"json_extract(e.value, '$.{n}')"
            if not isinstance(kind, sa.JSON)
            else f"json(json_extract(e.value, '$.{n}'))"
            for n, kind, _ in _ATTEMPT_FIELDS
        )
        source = "requests r, json_each(r.attempts) AS e"
    op.execute(
        f"INSERT INTO attempts (request_uid, {', '.join(names)}) "
        f"SELECT {key}, {values} FROM {source}"
    )
    op.drop_table("requests")
    op.rename_table("requests_old", "requests")
    _create_indexes()


def _pg_type(kind: sa.types.TypeEngine) -> str:
    if isinstance(kind, sa.Integer):
        return "integer"
    if isinstance(kind, sa.Float):
        return "double precision"
    return "text"
