"""a reviewer's points bind the next revisions; human rounds and edits are kept as rounds

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 17:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("binding_points", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("binding_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("human_rounds", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("provenance", sa.String(length=16), nullable=False, server_default="actor")
        )
        batch_op.add_column(sa.Column("responses", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("responses")
        batch_op.drop_column("provenance")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("human_rounds")
        batch_op.drop_column("binding_attempts")
        batch_op.drop_column("binding_points")
