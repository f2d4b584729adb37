"""evaluations: the summaries `crosscheck eval` publishes, for the console's Metrics page

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("dataset", sa.String(length=50), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("item_limit", sa.Integer(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("modes", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_by", sa.String(length=200), nullable=False),
        sa.Column("published_by_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_evaluations_dataset_finished", ["dataset", "finished_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_evaluations_finished_at"), ["finished_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evaluations_finished_at"))
        batch_op.drop_index("ix_evaluations_dataset_finished")
    op.drop_table("evaluations")
