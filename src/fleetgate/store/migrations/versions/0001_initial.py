"""Initial tables: config entities, store meta, request log, attempts, client keys."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "config_entities",
        sa.Column("kind", sa.String(64), primary_key=True),
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "requests",
        sa.Column("uid", sa.String(32), primary_key=True),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("client_key_id", sa.String(64)),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("requested_model", sa.String(255), nullable=False),
        sa.Column("resolution", sa.String(64), nullable=False),
        sa.Column("virtual_model", sa.String(255)),
        sa.Column("tier", sa.String(255)),
        sa.Column("context_tier", sa.String(255)),
        sa.Column("deployment_id", sa.String(255)),
        sa.Column("provider_id", sa.String(255)),
        sa.Column("upstream_model", sa.String(255)),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_class", sa.String(64)),
        sa.Column("latency", sa.Float, nullable=False),
        sa.Column("ttft", sa.Float),
        sa.Column("overhead", sa.Float),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("completion_tokens", sa.Integer),
        sa.Column("tokens_estimated", sa.Boolean, nullable=False),
        sa.Column("context_estimate", sa.Integer),
        sa.Column("context_exact", sa.Boolean),
        sa.Column("fallback_count", sa.Integer, nullable=False),
        sa.Column("dropped", sa.JSON),
    )
    op.create_index("ix_requests_time", "requests", ["time"])
    op.create_index("ix_requests_request_id", "requests", ["request_id"])
    op.create_index("ix_requests_model_time", "requests", ["requested_model", "time"])
    op.create_table(
        "attempts",
        sa.Column(
            "request_uid",
            sa.String(32),
            sa.ForeignKey("requests.uid", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("deployment_id", sa.String(255), nullable=False),
        sa.Column("provider_id", sa.String(255), nullable=False),
        sa.Column("upstream_model", sa.String(255), nullable=False),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("error_class", sa.String(64)),
        sa.Column("latency", sa.Float, nullable=False),
        sa.Column("ttft", sa.Float),
        sa.Column("retry_after", sa.Float),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("completion_tokens", sa.Integer),
        sa.Column("params", sa.JSON),
        sa.Column("key_label", sa.String(255)),
        sa.Column("virtual_model", sa.String(255)),
        sa.Column("tier", sa.String(255)),
        sa.Column("quantization", sa.String(64)),
        sa.Column("dropped_params", sa.JSON),
        sa.Column("preferences", sa.JSON),
    )
    op.create_table(
        "client_keys",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("allowed_models", sa.JSON),
        sa.Column("rpm", sa.Integer),
        sa.Column("tpm", sa.Integer),
        sa.Column("budget", sa.Float),
        sa.Column("spent", sa.Float, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("client_keys")
    op.drop_table("attempts")
    op.drop_table("requests")
    op.drop_table("store_meta")
    op.drop_table("config_entities")
