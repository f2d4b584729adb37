"""The alembic migrations build exactly the schema the table models describe."""

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import Session, SQLModel, select

import orchestrator.tables  # noqa: F401  (registers every table on SQLModel.metadata)
from orchestrator.db import create_db_engine, migrate
from orchestrator.tables import ApiToken, KnowledgeEntry, UTCDateTime
from tests.support.databases import fresh_postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path):
    """Empty databases: these tests run the migrations themselves (the other Orchestrator
    tests start from a migrated copy)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/crosscheck.sqlite"
        return
    with fresh_postgres_database() as url:
        yield url


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
            session.add(
                KnowledgeEntry(id="les_kept", kind="lesson", title="Cite", body="Cite the source.")
            )
            session.commit()
        before = (schema(engine), contents(engine))
        migrate(engine)  # every start runs it: the second run must be a no-op, not an error
        after = (schema(engine), contents(engine))
    finally:
        engine.dispose()
    assert after == before
    tables, rows = after
    assert {"runs", "api_tokens", "knowledge_entries", "alembic_version"} <= set(tables)
    assert len(rows["alembic_version"]) == 1
    assert [row[0] for row in rows["api_tokens"]] == ["'tok_kept'"]
    assert [row[0] for row in rows["knowledge_entries"]] == ["'les_kept'"]


def _alembic(engine, action: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from orchestrator.db import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)


LESSON_ROWS: list[dict[str, Any]] = [
    {
        "id": "les_0001",
        "content": "Always mention the spring and neap tides.\nAnd cite NOAA.",
        "scope": "global",
        "source_task": "Explain how the Moon causes ocean tides.",
        "source_run_id": "run_kept",
        "author": "Ada",
        "uses": 4,
        "retired": False,
    },
    {
        "id": "les_0002",
        "content": "Cite NOAA for tide data.",
        "scope": "oceanography",
        "source_task": "Explain tides.",
        "source_run_id": None,
        "author": "Grace",
        "uses": 0,
        "retired": True,
    },
]


def test_lessons_move_into_knowledge_entries_and_back(database_url):
    """0009 moves every lesson into ``knowledge_entries`` (kind ``lesson``, same id), and its
    downgrade puts them back as they were."""
    engine = create_db_engine(database_url)
    created = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    try:
        _alembic(engine, "upgrade", "0008")
        lessons = sa.table(
            "lessons",
            *(sa.column(name) for name in LESSON_ROWS[0]),
            sa.column("created_at", UTCDateTime()),
        )
        with engine.begin() as connection:  # as the service wrote them (UTC timestamps)
            connection.execute(
                lessons.insert(), [{**row, "created_at": created} for row in LESSON_ROWS]
            )
        before = contents(engine)["lessons"]

        _alembic(engine, "upgrade", "head")
        assert "lessons" not in sa.inspect(engine).get_table_names()
        with Session(engine) as session:
            entries = {e.id: e for e in session.exec(select(KnowledgeEntry))}
        assert set(entries) == {"les_0001", "les_0002"}
        first, second = entries["les_0001"], entries["les_0002"]
        assert (first.kind, first.title, first.body) == (
            "lesson",
            "Always mention the spring and neap tides.",
            LESSON_ROWS[0]["content"],
        )
        assert (first.scope, first.source_run_id, first.author, first.uses) == (
            "global",
            "run_kept",
            "Ada",
            4,
        )
        assert first.source_task == LESSON_ROWS[0]["source_task"]
        assert (second.scope, second.retired, second.profiles) == ("oceanography", True, [])

        _alembic(engine, "downgrade", "0008")
        assert contents(engine)["lessons"] == before
        with engine.connect() as connection:
            left = connection.execute(sa.text("SELECT count(*) FROM knowledge_entries")).scalar()
        assert left == 0
    finally:
        engine.dispose()


def test_existing_lessons_take_the_owner_of_their_source_run(database_url):
    """0019 gives every lesson the token that started its source run (until then a lesson
    reached every tenant); a lesson without one stays unowned."""
    from orchestrator.tables import Run

    engine = create_db_engine(database_url)
    try:
        migrate(engine)
        with Session(engine) as session:
            session.add(
                Run(
                    id="run_alice",
                    status="succeeded",
                    kind="text",
                    task="Tides.",
                    evaluator="none",
                    created_by="tok_alice",
                    policy={},
                )
            )
            for id_, run_id in (("les_alice", "run_alice"), ("les_loose", None)):
                session.add(
                    KnowledgeEntry(id=id_, kind="lesson", title="t", body="b", source_run_id=run_id)
                )
            session.commit()
        _alembic(engine, "downgrade", "0017")  # the lessons as an older release left them
        _alembic(engine, "upgrade", "head")
        with Session(engine) as session:
            owners = {e.id: e.owner for e in session.exec(select(KnowledgeEntry))}
        assert owners == {"les_alice": "tok_alice", "les_loose": None}
    finally:
        engine.dispose()
