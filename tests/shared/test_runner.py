"""The runner freezes what a service holds once it has started, so that a full garbage
collection no longer walks the whole startup heap while every request waits (about 100 ms
in the Orchestrator, seen as one slow request in the first burst of runs after start-up)."""

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from shared.runner import freeze_after_startup


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's heap goes back under the collector


def app_with(lifespan: Any) -> FastAPI:
    app = FastAPI(lifespan=lifespan)

    @app.get("/state")
    async def state(request: Request) -> dict[str, str]:
        return {"engine": request.state.engine}

    return freeze_after_startup(app)


def test_the_heap_is_frozen_once_the_apps_own_startup_has_run(unfrozen):
    seen: list[tuple[str, int]] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        seen.append(("startup", gc.get_freeze_count()))
        yield {"engine": "ready"}
        seen.append(("shutdown", gc.get_freeze_count()))

    with TestClient(app_with(lifespan)) as client:
        frozen = gc.get_freeze_count()
        assert client.get("/state").json() == {"engine": "ready"}  # the app's state kept
    assert seen[0] == ("startup", 0)  # the app started before anything was frozen
    assert frozen > 10_000  # modules, classes, functions: the heap alive after startup
    assert seen[1][0] == "shutdown"  # and shutdown still ran


def test_garbage_left_by_the_startup_is_collected_not_frozen(unfrozen):
    left: list[weakref.ref[Node]] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        node = Node()
        left.append(weakref.ref(node))
        del node  # garbage now, but only a collection finds it
        yield {"engine": "ready"}

    with TestClient(app_with(lifespan)):
        gc.collect()  # a frozen cycle would survive this
        assert left[0]() is None
