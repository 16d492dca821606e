"""Config history: one row per config change (its version, time, what it touched)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "config_history",
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("changes", sa.JSON, nullable=False),
        sa.Column("events", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("config_history")
