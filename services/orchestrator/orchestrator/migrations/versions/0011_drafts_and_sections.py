"""best of N drafts and sectioned long outputs: both kept on the round

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-01 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("drafts", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("sections", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("sections")
        batch_op.drop_column("drafts")
