"""Alembic environment: runs on the connection the application hands it (SQLite or Postgres)."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import orchestrator.tables  # noqa: F401  (registers the tables on the metadata)

target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through orchestrator.db.migrate(engine)")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
