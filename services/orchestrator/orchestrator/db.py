"""Database engine, sessions and migrations for the read model (SQLModel + alembic)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlmodel import Session

MIGRATIONS = Path(__file__).parent / "migrations"


def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
    # WAL + NORMAL: durable across process crashes, far fewer fsyncs than the default.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_db_engine(url: str, **kwargs: Any) -> sa.Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return sa.create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True, **kwargs)


def migrate(engine: sa.Engine) -> None:
    """Bring the schema to the newest alembic revision."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@contextmanager
def session_scope(engine: sa.Engine) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def system_database_url(url: str) -> str:
    """Where DBOS keeps its tables: beside the SQLite file, or the same Postgres database."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        stem = path[: -len(".sqlite")] if path.endswith(".sqlite") else path
        return f"sqlite:///{stem}.dbos.sqlite"
    return url
