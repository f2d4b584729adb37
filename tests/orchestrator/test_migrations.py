"""The alembic migrations build exactly the schema the table models describe."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import orchestrator.tables  # noqa: F401  (registers every table on SQLModel.metadata)
from orchestrator.db import create_db_engine, migrate


def test_migrations_match_the_table_models(database_url):
    engine = create_db_engine(database_url)
    try:
        migrate(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "render_as_batch": True}
            )
            differences = compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()
    assert differences == [], "a table model changed without a migration (alembic revision)"


def test_migrating_twice_changes_nothing(database_url):
    engine = create_db_engine(database_url)
    try:
        migrate(engine)
        migrate(engine)  # every start runs it: the second run must be a no-op, not an error
    finally:
        engine.dispose()
