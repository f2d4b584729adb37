"""critic_judgements: a reviewer's agree / dismiss on each issue of the Critic, for the
human-vs-Critic agreement per profile and error type and for the critique dataset

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 12:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "critic_judgements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("review_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("issue", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=300), nullable=True),
        sa.Column("dimension", sa.String(length=200), nullable=False),
        sa.Column("error_type", sa.String(length=200), nullable=False),
        sa.Column("by", sa.String(length=64), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["review_id"], ["review_items.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("review_id", "issue"),
    )
    with op.batch_alter_table("critic_judgements", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_critic_judgements_review_id"), ["review_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_critic_judgements_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("critic_judgements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_critic_judgements_run_id"))
        batch_op.drop_index(batch_op.f("ix_critic_judgements_review_id"))
    op.drop_table("critic_judgements")
