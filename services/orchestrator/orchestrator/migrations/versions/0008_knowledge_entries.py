"""knowledge entries: hand-written domain knowledge for the Critic (packs and the API)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "knowledge_entries",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("body", sa.String(), nullable=False),
        sa.Column("profiles", sa.JSON(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("pack", sa.String(length=100), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_knowledge_entries_kind"), ["kind"], unique=False)
        batch_op.create_index(batch_op.f("ix_knowledge_entries_pack"), ["pack"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_knowledge_entries_pack"))
        batch_op.drop_index(batch_op.f("ix_knowledge_entries_kind"))
    op.drop_table("knowledge_entries")
