"""research in the loop: each round keeps the Actor's search queries, the research step
before its critique and the citation check of its revision

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("search_queries", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("research", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("citations", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("citations")
        batch_op.drop_column("research")
        batch_op.drop_column("search_queries")
