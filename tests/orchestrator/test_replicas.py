"""Replica settings, ``GET /v1/cluster`` and the executor-id claim, in-process (the failover
itself, with real processes, is in test_cluster.py)."""

import asyncio

import pytest
from pydantic import ValidationError

from orchestrator.app import create_app
from orchestrator.cluster.replicas import ClusterError
from orchestrator.settings import OrchestratorSettings
from tests.orchestrator.conftest import ADMIN_TOKEN, mint
from tests.support.apps import serving


def settings_for(database_url: str, service_token: str, **overrides) -> OrchestratorSettings:
    return OrchestratorSettings(
        service_token=service_token,
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        dbos_poll_s=0.05,
        **overrides,
    )


def test_timeout_must_cover_two_heartbeats(service_token):
    with pytest.raises(ValidationError, match="ORCHESTRATOR_REPLICA_TIMEOUT_S"):
        OrchestratorSettings(service_token=service_token, heartbeat_s=3, replica_timeout_s=5)


@pytest.mark.parametrize("bad", ["", "-leading-dash", "has space", "semi;colon", "x" * 101])
def test_executor_ids_are_plain(service_token, bad):
    with pytest.raises(ValidationError, match="(?i)executor"):
        OrchestratorSettings(service_token=service_token, executor_id=bad)


async def test_cluster_lists_this_replica_as_leader(database_url, service_token):
    app = create_app(settings_for(database_url, service_token, executor_id="r-1", heartbeat_s=0.2))
    async with serving(app, ADMIN_TOKEN) as api:
        for _ in range(50):
            view = (await api.get("/v1/cluster")).json()
            if view["leader"] is not None:
                break
            await asyncio.sleep(0.05)
        reviewer = await mint(api, "reviewer")
        refused = await api.get("/v1/cluster", headers={"Authorization": f"Bearer {reviewer}"})
    assert refused.status_code == 403
    assert view["database"] == ("sqlite" if database_url.startswith("sqlite") else "postgresql")
    assert view["leader"] == view["replica"] == "r-1"
    [replica] = view["replicas"]
    assert replica["executor_id"] == "r-1"
    assert replica["alive"]
    assert replica["leader"]
    assert replica["this"]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_second_replica_with_the_same_executor_id_is_refused(database_url, service_token):
    settings = settings_for(
        database_url, service_token, executor_id="twin", heartbeat_s=0.2, replica_timeout_s=0.5
    )
    first = create_app(settings)
    async with serving(first, ADMIN_TOKEN):
        second = create_app(settings)
        with pytest.raises(ClusterError, match="held by another live replica"):
            async with serving(second, ADMIN_TOKEN):
                pass
