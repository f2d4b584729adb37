"""each run keeps the knowledge its Actor's and Critic's calls received, content included

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor_notes", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("critic_notes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("critic_notes")
        batch_op.drop_column("actor_notes")
