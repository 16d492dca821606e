"""The request log keeps each request's notes (estimate, exact count, tier, preferences),
as the in-memory record does."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("notes", sa.JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("requests", "notes")
