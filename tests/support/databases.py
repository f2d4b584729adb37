"""Where the tests find Postgres and Redis.

`make test` (scripts/test.sh) exports CROSSCHECK_TEST_POSTGRES_URL and CROSSCHECK_TEST_REDIS_URL:
the running servers if they answer, else throwaway ones scripts/test-services.py started. Plain
`uv run pytest` falls back to the defaults below. tests/conftest.py keeps these two variables
when it clears the CROSSCHECK_ environment for each test.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis

POSTGRES_ENV = "CROSSCHECK_TEST_POSTGRES_URL"
REDIS_ENV = "CROSSCHECK_TEST_REDIS_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"


def postgres_admin_url() -> str:
    """A superuser on the server's `postgres` database (it creates and drops test databases)."""
    return os.environ.get(POSTGRES_ENV) or DEFAULT_POSTGRES_URL


def redis_url() -> str:
    return os.environ.get(REDIS_ENV) or DEFAULT_REDIS_URL


def postgres_database_url(name: str, admin_url: str | None = None) -> str:
    """The admin URL with its database replaced by `name` (same server, user and options)."""
    return urlunsplit(urlsplit(admin_url or postgres_admin_url())._replace(path=f"/{name}"))


def _fail_unreachable(what: str, url: str, variable: str, error: Exception) -> None:
    __tracebackhide__ = True
    shown = urlsplit(url)
    where = f"{shown.hostname}:{shown.port}" if shown.port else str(shown.hostname)
    pytest.fail(
        f"{what} is not reachable at {where} ({variable}; {type(error).__name__}): run "
        f"`make test`, which uses the running {what} or starts a throwaway one and sets {variable}"
    )


def require_postgres() -> str:
    """The admin URL, after checking that the server answers; else fail and say what to do."""
    __tracebackhide__ = True
    url = postgres_admin_url()
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        failure: Exception | None = error
    else:
        failure = None
    if failure is not None:  # outside `except`, so that pytest shows one line, not the chain
        _fail_unreachable("PostgreSQL", url, POSTGRES_ENV, failure)
    return url


def require_redis() -> str:
    """The Redis URL, after checking that the server answers PING; else fail and say what to do."""
    __tracebackhide__ = True
    url = redis_url()
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    failure: Exception | None = None
    try:
        client.ping()
    except redis.RedisError as error:
        failure = error
    finally:
        client.close()
    if failure is not None:
        _fail_unreachable("Redis", url, REDIS_ENV, failure)
    return url


async def redis_keys_under(url: str, prefix: str) -> list[str]:
    """The keys a test wrote under its own ``prefix`` of the test Redis."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        return [key async for key in client.scan_iter(match=f"{prefix}*")]
    finally:
        await client.aclose()


async def drop_redis_prefix(url: str, prefix: str) -> None:
    """Delete a test's keys: only its ``prefix``, never the whole (shared) database."""
    import redis.asyncio as aioredis

    keys = await redis_keys_under(url, prefix)
    if keys:
        client = aioredis.Redis.from_url(url)
        try:
            await client.delete(*keys)
        finally:
            await client.aclose()


@contextmanager
def fresh_postgres_database(prefix: str = "cc_test", *, migrated: bool = False) -> Iterator[str]:
    """A new database on the test server for one test, dropped afterwards: empty, or
    (``migrated``) a copy of the Orchestrator's schema at its newest revision with DBOS's
    tables, as the Orchestrator's first start leaves it but without any row it writes."""
    admin_url = require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    # a file copy of a template is about 60 ms; an empty database and the migrations, 0.7 s
    source = ""
    if migrated:
        source = f' TEMPLATE "{orchestrator_template(admin_url)}" STRATEGY FILE_COPY'
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{source}')
    try:
        yield postgres_database_url(name, admin_url)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- migrated templates: the Orchestrator's schema built once, copied for each test


def _schema_key() -> str:
    """Changes with any migration or with the DBOS release (whose tables are in the copy)."""
    from importlib.metadata import version

    from orchestrator.db import MIGRATIONS

    digest = hashlib.sha256(version("dbos").encode())
    for path in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _migrate(url: str) -> None:
    from dbos import DBOS

    from orchestrator.db import create_db_engine, migrate, system_database_url

    engine = create_db_engine(url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    DBOS.migrate(system_database_url(url))


_templates: dict[str, str] = {}
TEMPLATE_PREFIX = "cc_template_"
TEMPLATE_LOCK = 0x63635F746D706C  # one builder at a time across xdist workers and runs


def orchestrator_template(admin_url: str) -> str:
    """The name of a migrated template database on the test server, built on first use and
    kept between runs while the migrations stay the same (older ones are dropped)."""
    name = TEMPLATE_PREFIX + _schema_key()
    if _templates.get(admin_url) == name:
        return name
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK,))
        try:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if found.fetchone() is None:
                building = f"{name}_building"  # renamed once whole: no half-built template
                conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{building}"')
                _migrate(postgres_database_url(building, admin_url))
                conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
                stale = conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    (TEMPLATE_PREFIX + "%", name),
                ).fetchall()
                for (old,) in stale:
                    try:  # in use by another run of another checkout: leave it
                        conn.execute(f'DROP DATABASE IF EXISTS "{old}"')
                    except psycopg.Error:
                        pass
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))
    _templates[admin_url] = name
    return name


_sqlite_template: Path | None = None


def migrated_sqlite_url(directory: Path) -> str:
    """A SQLite URL in ``directory`` whose files (the Orchestrator's and DBOS's) are copies
    of ones migrated once per process: a copy is about 1 ms, the migrations about 0.15 s."""
    global _sqlite_template
    if _sqlite_template is None:
        built = Path(tempfile.mkdtemp(prefix="cc-sqlite-template-"))
        atexit.register(shutil.rmtree, built, ignore_errors=True)
        _migrate(f"sqlite:///{built}/crosscheck.sqlite")
        _sqlite_template = built
    for source in _sqlite_template.iterdir():  # nothing holds them open: a consistent copy
        shutil.copyfile(source, directory / source.name)
    return f"sqlite:///{directory}/crosscheck.sqlite"
