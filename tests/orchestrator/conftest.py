"""An Orchestrator on SQLite and on the test Postgres (tests/support/databases.py), with real
Actor and Critic apps in-process (their SDKs reach the fake model server over HTTP)."""

import asyncio
import time
from contextlib import AsyncExitStack

import httpx
import pytest

from actor.app import create_app as create_actor
from critic.app import create_app as create_critic
from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from tests.support.apps import serving
from tests.support.databases import fresh_postgres_database, migrated_sqlite_url
from tests.support.factories import actor_settings, critic_settings
from tests.support.servers import service_process

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
FINAL = {"succeeded", "escalated", "failed", "cancelled", "awaiting_review"}


def pytest_collection_modifyitems(config, items):
    """A test marked ``sqlite_only`` checks behaviour that does not depend on the database
    (a rule, a prompt, a validation): its Postgres case is deselected, since each costs a
    fresh database. Storage behaviour keeps running on both."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.get_closest_marker("sqlite_only") and params.get("database_url") == "postgres":
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def database_url(request, tmp_path):
    """A database as the Orchestrator's first start leaves it (migrated, DBOS's tables made,
    no rows), copied from a template: the migrations themselves are tested on empty ones
    (tests/orchestrator/test_migrations.py)."""
    if request.param == "sqlite":
        yield migrated_sqlite_url(tmp_path)
        return
    with fresh_postgres_database(migrated=True) as url:
        yield url


@pytest.fixture
def peer_overrides():
    """Per-test overrides for the Actor and Critic settings."""
    return {"actor": {"model_max_attempts": 2}, "critic": {"model_max_attempts": 2}}


@pytest.fixture
async def peers(fake_model, service_token, peer_overrides):
    actor_app = create_actor(
        actor_settings(fake=fake_model, token=service_token, **peer_overrides["actor"])
    )
    critic_app = create_critic(
        critic_settings(fake=fake_model, token=service_token, **peer_overrides["critic"])
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actor_app.router.lifespan_context(actor_app))
        await stack.enter_async_context(critic_app.router.lifespan_context(critic_app))
        yield {
            "actor": httpx.ASGITransport(app=actor_app),
            "critic": httpx.ASGITransport(app=critic_app),
        }


@pytest.fixture(scope="session")
def sandbox_url(service_token, tmp_path_factory):
    """One real sandbox service (bubblewrap) for the session, as its own process."""
    from tests.sandbox.conftest import require_bwrap

    require_bwrap()
    log = tmp_path_factory.mktemp("sandbox") / "sandbox.log"
    env = {"CROSSCHECK_SERVICE_TOKEN": service_token, "SANDBOX_WORKERS": "2"}
    with service_process("sandbox", "SANDBOX_", env=env, log=log) as url:
        yield url


@pytest.fixture
def orchestrator_settings(database_url, service_token, sandbox_url):
    return OrchestratorSettings(
        service_token=service_token,
        sandbox_url=sandbox_url,
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        peer_max_attempts=3,
        peer_retry_initial_s=0.01,
        review_sweep_s=0.2,
        dbos_poll_s=0.05,  # shutting the app down waits one poll: 1 s by default, per test
    )


@pytest.fixture
async def orchestrator_app(orchestrator_settings, peers):
    return create_app(orchestrator_settings, peer_transports=peers)


@pytest.fixture
async def api(orchestrator_app):
    async with serving(orchestrator_app, ADMIN_TOKEN) as client:
        yield client


async def wait_for(api, run_id: str, statuses=FINAL, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        if run["status"] in statuses:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} stayed {run['status']} for {timeout} s")


async def start(api, **body) -> str:
    response = await api.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def mint(api, role: str) -> str:
    response = await api.post("/v1/tokens", json={"name": f"{role} for tests", "role": role})
    assert response.status_code == 201, response.text
    return response.json()["token"]
