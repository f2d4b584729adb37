"""replicas: one row per orchestrator process sharing the database, with its heartbeat

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("executor_id", sa.String(length=100), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=300), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("leader", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("recovered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("recovered_workflows", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("executor_id"),
    )


def downgrade() -> None:
    op.drop_table("replicas")
