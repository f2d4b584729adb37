"""Database engine, sessions and migrations for the read model (SQLModel + alembic)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlmodel import Session

MIGRATIONS = Path(__file__).parent / "migrations"
T = TypeVar("T")
# Replicas starting together on one Postgres take turns migrating (the first does the work).
MIGRATION_LOCK_KEY = 7_261_002


def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
    # WAL + NORMAL: durable across process crashes, far fewer fsyncs than the default.
    # Registered on every Engine, so DBOS's own system database gets it too (DBOS sets
    # only busy_timeout and IMMEDIATE transactions itself).
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def tune_sqlite() -> None:
    """Apply the SQLite pragmas to every engine in the process, once."""
    if not event.contains(sa.engine.Engine, "connect", _sqlite_pragmas):
        event.listen(sa.engine.Engine, "connect", _sqlite_pragmas)


def private_sqlite_file(url: str) -> None:
    """Create a SQLite URL's file readable by its owner only (0600), and tighten an existing
    one; SQLite gives its -wal and -shm files the same mode."""
    if not url.startswith("sqlite:///"):
        return
    path = url.removeprefix("sqlite:///")
    if not path or path == ":memory:":
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    with contextlib.suppress(PermissionError):  # not ours: leave it as its owner set it
        os.chmod(path, 0o600)


def create_db_engine(
    url: str, *, pool_size: int = 10, max_overflow: int = 20, **kwargs: Any
) -> sa.Engine:
    """An engine for the read model; ``pool_size``/``max_overflow`` apply to Postgres."""
    if url.startswith("sqlite"):
        tune_sqlite()
        private_sqlite_file(url)
        return sa.create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=20,
            max_overflow=40,
            **kwargs,
        )
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return sa.create_engine(
        url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True, **kwargs
    )


def lock_startup(connection: sa.Connection | Session) -> None:
    """Replicas starting together take turns (Postgres) for the rest of this transaction:
    migrations, the bootstrap admin token."""
    bind = connection.get_bind() if isinstance(connection, Session) else connection
    if bind.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})


def migrate(engine: sa.Engine) -> None:
    """Bring the schema to the newest alembic revision."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        lock_startup(connection)
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


def libpq_url(url: str) -> str:
    """A SQLAlchemy Postgres URL (any driver suffix) as the plain URL psycopg connects to."""
    parsed = sa.make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class Database:
    """Runs units of work off the event loop, on threads of its own.

    On SQLite one thread does every write, so writers never wait in SQLite's busy handler
    and a slow write never blocks the event loop; on Postgres a few threads share the pool.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        workers = 1 if engine.dialect.name == "sqlite" else 8
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="db-write")
        self._readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="db-read")

    async def run(self, work: Callable[[Session], T]) -> T:
        """``work(session)`` in one transaction, committed when it returns."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._unit, work)

    async def read(self, work: Callable[[Session], T]) -> T:
        """``work(session)`` for reads: beside the writer, never waiting behind it (WAL)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._unit, work)

    def _unit(self, work: Callable[[Session], T]) -> T:
        with session_scope(self.engine) as session:
            return work(session)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        self.engine.dispose()
