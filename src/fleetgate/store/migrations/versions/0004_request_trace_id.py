"""Request log: the request's trace id (W3C, 32 hex digits), when telemetry is on, so a row
links to its trace in the operator's tracing backend."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("trace_id", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:  # SQLite drops a column by copying
        batch.drop_column("trace_id")
