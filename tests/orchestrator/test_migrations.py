"""The alembic migrations build exactly the schema the table models describe."""

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import Session, SQLModel

import orchestrator.tables  # noqa: F401  (registers every table on SQLModel.metadata)
from orchestrator.db import create_db_engine, migrate
from orchestrator.tables import ApiToken, Lesson


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


def schema(engine) -> dict:
    """Every table with its columns, keys, indexes and constraints, as the database reports."""
    inspector = sa.inspect(engine)
    return {
        table: {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in inspector.get_columns(table)
            ],
            "primary_key": inspector.get_pk_constraint(table)["constrained_columns"],
            "foreign_keys": sorted(
                (tuple(k["constrained_columns"]), k["referred_table"])
                for k in inspector.get_foreign_keys(table)
            ),
            "indexes": sorted(
                (i["name"] or "", tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            "unique": sorted(
                tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
            ),
        }
        for table in sorted(inspector.get_table_names())
    }


def contents(engine) -> dict:
    """Every row of every table (the alembic version included), in a stable order."""
    with engine.connect() as connection:
        metadata = sa.MetaData()
        metadata.reflect(connection)
        return {
            name: sorted(tuple(map(repr, row)) for row in connection.execute(table.select()))
            for name, table in metadata.tables.items()
        }


def test_migrating_twice_changes_nothing(database_url):
    engine = create_db_engine(database_url)
    try:
        migrate(engine)
        with Session(engine) as session:  # data a running service wrote before a restart
            session.add(ApiToken(id="tok_kept", name="kept", role="admin", token_hash="h" * 64))
            session.add(Lesson(id="les_kept", content="Cite the source."))
            session.commit()
        before = (schema(engine), contents(engine))
        migrate(engine)  # every start runs it: the second run must be a no-op, not an error
        after = (schema(engine), contents(engine))
    finally:
        engine.dispose()
    assert after == before
    tables, rows = after
    assert {"runs", "api_tokens", "lessons", "alembic_version"} <= set(tables)
    assert len(rows["alembic_version"]) == 1
    assert [row[0] for row in rows["api_tokens"]] == ["'tok_kept'"]
    assert [row[0] for row in rows["lessons"]] == ["'les_kept'"]
