"""a knowledge entry has an owner (knowledge_entries.owner): a lesson reaches only the runs
of the token that started its source run, unless an admin shares it (shared); existing
lessons take the owner of their source run

Revision ID: 0019
Revises: 0017
Create Date: 2026-12-02 08:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_index(batch_op.f("ix_knowledge_entries_owner"), ["owner"], unique=False)
    # Until now a lesson reached every tenant's runs; from here it stays with its own.
    op.execute(
        "UPDATE knowledge_entries SET owner = "
        "(SELECT runs.created_by FROM runs WHERE runs.id = knowledge_entries.source_run_id) "
        "WHERE kind = 'lesson' AND source_run_id IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_knowledge_entries_owner"))
        batch_op.drop_column("shared")
        batch_op.drop_column("owner")
