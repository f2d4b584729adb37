"""Where the tests find Postgres and Redis.

`make test` (scripts/test.sh) exports CROSSCHECK_TEST_POSTGRES_URL and CROSSCHECK_TEST_REDIS_URL:
the running servers if they answer, else throwaway ones scripts/test-services.py started. Plain
`uv run pytest` falls back to the defaults below. tests/conftest.py keeps these two variables
when it clears the CROSSCHECK_ environment for each test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def fresh_postgres_database(prefix: str = "cc_test") -> Iterator[str]:
    """A new, empty database on the test server for one test; dropped afterwards."""
    admin_url = require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_database_url(name, admin_url)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
