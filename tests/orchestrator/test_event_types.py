"""Following only some event types: ``?type=run.finished`` on the feed and the catch-up."""

import asyncio
import json

import httpx
import pytest
import websockets

from tests.orchestrator.conftest import ADMIN_TOKEN, start, wait_for
from tests.support.apps import uvicorn_serving

HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_http_events_of_one_type_are_those_and_only_those(api):
    run_id = await start(api, task="Explain why the sky is blue.")
    await wait_for(api, run_id)
    every = (await api.get("/v1/events", params={"run_id": run_id})).json()
    wanted = {"run_id": run_id, "type": "round.critique,run.finished"}
    some = (await api.get("/v1/events", params=wanted)).json()
    assert [e["seq"] for e in some] == [
        e["seq"] for e in every if e["type"] in {"round.critique", "run.finished"}
    ]
    assert some[-1]["type"] == "run.finished"
    assert len(some) < len(every)


@pytest.mark.sqlite_only  # a validation: the database plays no part
async def test_too_many_event_types_is_a_clear_400(api):
    types = ",".join(f"t{i}" for i in range(21))
    response = await api.get("/v1/events", params={"type": types})
    assert response.status_code == 400
    assert "at most 20 event types" in response.json()["detail"]


async def test_websocket_of_run_finished_sees_each_finished_run_once_and_nothing_else(
    orchestrator_app, fake_model
):
    fake_model.latency(20)
    async with uvicorn_serving(orchestrator_app) as url:
        ws_url = url.replace("http", "ws") + "/v1/events?type=run.finished"
        async with (
            httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=60) as client,
            websockets.connect(ws_url, additional_headers=HEADERS, open_timeout=60) as ws,
        ):
            run_ids = [await start(client, task=f"Explain tides, part {i}.") for i in range(3)]
            received: list[dict] = []
            while len(received) < 3:
                received.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
            # nothing else arrives: a fourth run's events are all skipped until it finishes
            late = await start(client, task="Explain tides, part 4.")
            received.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
            stored = (await client.get("/v1/events", params={"type": "run.finished"})).json()
    assert {e["type"] for e in received} == {"run.finished"}
    assert sorted(e["run_id"] for e in received) == sorted([*run_ids, late])
    assert [e["seq"] for e in received] == [e["seq"] for e in stored]


async def test_websocket_resumed_with_since_and_a_type_misses_nothing(orchestrator_app, fake_model):
    """Events of other types committed while away are skipped, the wanted ones are not."""
    async with uvicorn_serving(orchestrator_app) as url:
        ws_base = url.replace("http", "ws") + "/v1/events?type=round.output"
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=60) as client:
            first = await start(client, task="Explain why the sky is blue.")
            await wait_for(client, first)
            async with websockets.connect(
                ws_base, additional_headers=HEADERS, open_timeout=60
            ) as ws:
                seen = [json.loads(await asyncio.wait_for(ws.recv(), 60)) for _ in range(2)]
            second = await start(client, task="Explain why the sea is salty.")
            await wait_for(client, second)
            async with websockets.connect(
                f"{ws_base}&since={seen[-1]['seq']}", additional_headers=HEADERS
            ) as ws:
                seen += [json.loads(await asyncio.wait_for(ws.recv(), 60)) for _ in range(2)]
            stored = (await client.get("/v1/events", params={"type": "round.output"})).json()
    assert [e["seq"] for e in seen] == [e["seq"] for e in stored]
    assert [e["run_id"] for e in seen] == [first, first, second, second]


async def test_the_hub_wakes_a_follower_only_for_its_types_or_when_unsure():
    from orchestrator.events.hub import EventHub

    hub = EventHub()
    hub.bind(asyncio.get_running_loop())
    finished = hub.subscribe(["run.finished"])
    everything = hub.subscribe()
    hub.notify({"round.output", "run.status"})
    assert not finished.is_set()
    assert everything.is_set()
    everything.clear()
    hub.notify(set())  # a commit that appended no event wakes nobody
    assert not finished.is_set()
    assert not everything.is_set()
    hub.notify({"run.finished"})
    assert finished.is_set()
    finished.clear()
    hub.notify()  # a writer that does not say what it wrote wakes everyone
    assert finished.is_set()
    assert everything.is_set()
