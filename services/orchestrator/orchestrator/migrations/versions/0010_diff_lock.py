"""diff lock and over-correction guard: locked texts, reverted hunks, over-corrections

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-01 02:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("locked", sa.JSON(), nullable=True))
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reverted_hunks", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("over_correction", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("over_correction")
        batch_op.drop_column("reverted_hunks")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("locked")
