"""lessons are knowledge entries of kind `lesson`; what the Actor received; optional vectors

The rows of ``lessons`` move into ``knowledge_entries`` with their ids, so the ids kept in
``runs.lessons_used`` still resolve. The downgrade moves them back.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 03:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TITLE_CHARS = 200


def lesson_title(content: str) -> str:
    """A lesson's title: the first line of the reviewer's comment, cut to fit."""
    first = next((line.strip() for line in content.splitlines() if line.strip()), "Lesson")
    return first if len(first) <= TITLE_CHARS else first[: TITLE_CHARS - 1] + "…"


def _lessons_table() -> sa.TableClause:
    return sa.table(
        "lessons",
        sa.column("id", sa.String()),
        sa.column("content", sa.String()),
        sa.column("scope", sa.String()),
        sa.column("source_task", sa.String()),
        sa.column("source_run_id", sa.String()),
        sa.column("author", sa.String()),
        sa.column("uses", sa.Integer()),
        sa.column("retired", sa.Boolean()),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )


def _entries_table() -> sa.TableClause:
    return sa.table(
        "knowledge_entries",
        sa.column("id", sa.String()),
        sa.column("kind", sa.String()),
        sa.column("title", sa.String()),
        sa.column("body", sa.String()),
        sa.column("profiles", sa.JSON()),
        sa.column("weight", sa.Float()),
        sa.column("pack", sa.String()),
        sa.column("author", sa.String()),
        sa.column("retired", sa.Boolean()),
        sa.column("scope", sa.String()),
        sa.column("source_task", sa.String()),
        sa.column("source_run_id", sa.String()),
        sa.column("uses", sa.Integer()),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )


def upgrade() -> None:
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("scope", sa.String(length=100), nullable=False, server_default="global")
        )
        batch_op.add_column(
            sa.Column("source_task", sa.String(), nullable=False, server_default="")
        )
        batch_op.add_column(sa.Column("source_run_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("uses", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("embedding", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("embedding_key", sa.String(length=64), nullable=True))
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.alter_column("scope", server_default=None)
        batch_op.alter_column("source_task", server_default=None)
        batch_op.alter_column("uses", server_default=None)
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor_knowledge", sa.JSON(), nullable=True))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor_knowledge", sa.JSON(), nullable=True))

    bind = op.get_bind()
    lessons = _lessons_table()
    rows = bind.execute(sa.select(lessons)).mappings().all()
    if rows:
        op.bulk_insert(
            _entries_table(),
            [
                {
                    "id": row["id"],
                    "kind": "lesson",
                    "title": lesson_title(row["content"]),
                    "body": row["content"],
                    "profiles": [],
                    "weight": 1.0,
                    "pack": "review",
                    "author": row["author"],
                    "retired": row["retired"],
                    "scope": row["scope"],
                    "source_task": row["source_task"],
                    "source_run_id": row["source_run_id"],
                    "uses": row["uses"],
                    "created_at": row["created_at"],
                    "updated_at": row["created_at"],
                }
                for row in rows
            ],
        )
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lessons_scope"))
    op.drop_table("lessons")


def downgrade() -> None:
    op.create_table(
        "lessons",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("content", sa.String(), nullable=False),
        sa.Column("scope", sa.String(length=100), nullable=False),
        sa.Column("source_task", sa.String(), nullable=False),
        sa.Column("source_run_id", sa.String(length=64), nullable=True),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lessons_scope"), ["scope"], unique=False)

    bind = op.get_bind()
    entries = _entries_table()
    rows = bind.execute(sa.select(entries).where(entries.c.kind == "lesson")).mappings().all()
    if rows:
        op.bulk_insert(
            _lessons_table(),
            [
                {
                    "id": row["id"][:64],
                    "content": row["body"],
                    "scope": row["scope"],
                    "source_task": row["source_task"],
                    "source_run_id": row["source_run_id"],
                    "author": row["author"],
                    "uses": row["uses"],
                    "retired": row["retired"],
                    "created_at": row["created_at"] or datetime.now(UTC),
                }
                for row in rows
            ],
        )
        bind.execute(sa.delete(entries).where(entries.c.kind == "lesson"))

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("actor_knowledge")
    with op.batch_alter_table("rounds", schema=None) as batch_op:
        batch_op.drop_column("actor_knowledge")
    with op.batch_alter_table("knowledge_entries", schema=None) as batch_op:
        batch_op.drop_column("embedding_key")
        batch_op.drop_column("embedding")
        batch_op.drop_column("uses")
        batch_op.drop_column("source_run_id")
        batch_op.drop_column("source_task")
        batch_op.drop_column("scope")
