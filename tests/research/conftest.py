"""A Research service served in-process, its corpus on disk, its model the fake model server
(through the real SDK), its web backends the wire-compatible fakes over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from research.app import create_app
from research.corpus import CorpusIndex, Document
from research.settings import ResearchSettings
from tests.research.fakesearch import FakeSearchState, create_fake_search
from tests.support.apps import serving, uvicorn_serving
from tests.support.factories import provider_env

GOLDEN_GATE = (
    "# Golden Gate Bridge\n\n"
    "The Golden Gate Bridge opened to traffic on May 27, 1937. "
    "Its main span is 1,280 metres long.\n\n"
    "The bridge is painted in a colour called International Orange."
)
EIFFEL = (
    "# Eiffel Tower\n\n"
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair. "
    "It is 330 metres tall."
)
TIDES = "Tides are caused mainly by the gravitational pull of the Moon on the oceans."


class Clock:
    """An injectable clock: ``clock.now += 3600`` steps an hour ahead."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_redis(monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture
def clock() -> Clock:
    return Clock()


SEED = (
    Document("https://example.org/golden-gate", "Golden Gate Bridge", "markdown", GOLDEN_GATE),
    Document("https://example.org/eiffel", "Eiffel Tower", "markdown", EIFFEL),
    Document("https://example.org/tides", "Tides", "text", TIDES),
)


@pytest.fixture
def corpus_db(tmp_path) -> Path:
    """A corpus of three small documents with stable test URLs."""
    path = tmp_path / "corpus.sqlite"
    index = CorpusIndex(path)
    index.add_many(list(SEED))
    index.close()
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def corpus_target(request, tmp_path) -> Iterator[str]:
    """An empty corpus on each store: a SQLite file, and a fresh database on the test
    Postgres server (CROSSCHECK_TEST_POSTGRES_URL), dropped afterwards."""
    if request.param == "sqlite":
        yield str(tmp_path / "corpus.sqlite")
        return
    from tests.support.databases import fresh_postgres_database

    with fresh_postgres_database("cc_corpus") as url:
        yield url


def research_settings(fake_model, token: str, tmp_path: Path, **overrides: Any) -> ResearchSettings:
    values: dict[str, Any] = {
        "service_token": token,
        "cache_db": tmp_path / "research-cache.sqlite",
        "corpus_db": tmp_path / "corpus.sqlite",
        **provider_env(fake_model),
        **overrides,
    }
    return ResearchSettings(**values)


@pytest.fixture
def research_with(
    fake_model, service_token, tmp_path, corpus_db, clock
) -> Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]:
    """``async with research_with(distill=False) as client``: a service with those settings."""

    def start(
        *, search_client: httpx.AsyncClient | None = None, **overrides: Any
    ) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        settings = research_settings(fake_model, service_token, tmp_path, **overrides)
        app = create_app(settings, search_client=search_client, clock=clock)
        return serving(app, service_token)

    return start


@pytest.fixture
async def research(research_with) -> AsyncIterator[httpx.AsyncClient]:
    async with research_with() as client:
        yield client


@pytest.fixture
async def fake_search() -> AsyncIterator[tuple[str, FakeSearchState]]:
    """The web search fakes on a loopback port: (base URL, state)."""
    app, state = create_fake_search()
    async with uvicorn_serving(app) as url:
        yield url, state


def corpus_settings(token: str, corpus: str | Path, **overrides: Any) -> ResearchSettings:
    """A service on the corpus at ``corpus`` (a SQLite file or a Postgres URL) that makes no
    model call and keeps no cache: what the corpus API and ``crosscheck corpus`` need."""
    target: dict[str, Any] = (
        {"corpus_url": corpus} if isinstance(corpus, str) and "://" in corpus else {}
    )
    values: dict[str, Any] = {
        "service_token": token,
        "corpus_db": Path(corpus) if not target else Path("unused.sqlite"),
        "cache": False,
        "distill": False,
        **target,
        **overrides,
    }
    return ResearchSettings(**values)
