"""Fixtures every test shares: a clean environment, so no developer setting leaks in.

The suite runs on parallel workers (pytest-xdist, ``scripts/test.sh``). Everything a test
starts is its own: free loopback ports, ``tmp_path`` folders, a fresh Postgres database per
test, Redis keys under a per-test prefix, and session fixtures (the fake model, the sandbox
service) once per worker. The few tests that share something outside the test run with each
other go to one worker together (tests/support/parallel.py).
"""

import os

import pytest

ISOLATED_PREFIXES = (
    "OPENAI_",
    "ANTHROPIC_",
    "ACTOR_",
    "CRITIC_",
    "SANDBOX_",
    "FAKEMODEL_",
    "CROSSCHECK_",
    "ORCHESTRATOR_",
    "DATABASE_URL",
    "POSTGRES_",
    "ACTOR_URL",
    "CRITIC_URL",
    "SANDBOX_URL",
    "REDIS_URL",
    "OTEL_",  # a developer's own collector must not receive the tests' traces
)

# Kept: where the test servers are (`make test` sets them; see tests/support/databases.py).
TEST_SERVER_VARIABLES = ("CROSSCHECK_TEST_POSTGRES_URL", "CROSSCHECK_TEST_REDIS_URL")

SERVICE_TOKEN = "test-service-token-0123456789"


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: absent when it is not loaded
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: each test on any free worker, the groups of
    tests/support/parallel.py each on one worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.parallel import GroupScheduling

    return GroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(ISOLATED_PREFIXES) and name not in TEST_SERVER_VARIABLES:
            monkeypatch.delenv(name)
    # the Actor's and Critic's replay files: per test, never var/ of the checkout
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "replays" / "actor.sqlite"))
    monkeypatch.setenv("CRITIC_REPLAY_DB", str(tmp_path / "replays" / "critic.sqlite"))


@pytest.fixture(scope="session")
def service_token() -> str:
    return SERVICE_TOKEN


@pytest.fixture(scope="session")
def fake_model_server(tmp_path_factory):
    """One real fake model server (uvicorn, loopback) for the whole session."""
    from tests.support.fakemodel import FakeModel
    from tests.support.servers import service_process

    log = tmp_path_factory.mktemp("fakemodel") / "fakemodel.log"
    with service_process("fakemodel", "FAKEMODEL_", log=log) as url:
        fake = FakeModel(url)
        yield fake
        fake.close()


@pytest.fixture
def fake_model(fake_model_server):
    """The session's fake model server, with script, faults and request log cleared."""
    fake_model_server.reset()
    yield fake_model_server
    fake_model_server.reset()
