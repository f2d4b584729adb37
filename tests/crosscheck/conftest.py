"""A real Orchestrator on SQLite with real Actor and Critic apps on the fake model server,
served on loopback: what `crosscheck run`/`show` and the Python client talk to."""

import httpx
import pytest

from tests.orchestrator import conftest as orchestrator_fixtures
from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.apps import uvicorn_serving
from tests.support.servers import free_port

# The Orchestrator's own fixtures, reused here; `database_url` below narrows them to SQLite.
peers = orchestrator_fixtures.peers
orchestrator_settings = orchestrator_fixtures.orchestrator_settings
orchestrator_app = orchestrator_fixtures.orchestrator_app


@pytest.fixture
def database_url(tmp_path):
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


@pytest.fixture
def sandbox_url():
    """These runs have no tests to execute: no sandbox is started (nothing listens here)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def peer_overrides():
    """Both roles report the scripted demo model, as under `crosscheck up` without keys."""
    return {
        "actor": {"model_max_attempts": 2, "demo": True},
        "critic": {"model_max_attempts": 2, "demo": True},
    }


@pytest.fixture
async def url(orchestrator_app):
    async with uvicorn_serving(orchestrator_app) as served:
        yield served


@pytest.fixture
async def api(url):
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        yield http
