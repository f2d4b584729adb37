"""the traceparent of the request that created a run (runs.traceparent), so its workflow's
step spans join the caller's trace wherever the workflow runs

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-10 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("traceparent", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("traceparent")
