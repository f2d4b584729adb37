"""which gate let a run's version out (runs.shipped_by); a round keeps the revision as the
Actor wrote it when the diff lock changed it (rounds.unlocked_output)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("shipped_by", sa.String(length=32), nullable=True))
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unlocked_output", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("unlocked_output")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("shipped_by")
