"""The runs API contract: auth and roles, idempotency, bad input, events, trajectory, metrics."""

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
import websockets

from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for
from tests.support.apps import uvicorn_serving
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY


class TestAuth:
    async def test_no_token_is_401(self, api):
        response = await api.get("/v1/runs", headers={"Authorization": ""})
        assert response.status_code == 401
        assert response.json()["error"] == "Unauthorized"

    async def test_unknown_token_is_401(self, api):
        response = await api.get("/v1/runs", headers={"Authorization": "Bearer cc_nope"})
        assert response.status_code == 401

    async def test_reviewer_cannot_create_runs_or_tokens(self, api):
        reviewer = await mint(api, "reviewer")
        headers = {"Authorization": f"Bearer {reviewer}"}
        response = await api.post("/v1/runs", json={"task": "t"}, headers=headers)
        assert response.status_code == 403
        assert "service" in response.json()["detail"]
        response = await api.post(
            "/v1/tokens", json={"name": "x", "role": "admin"}, headers=headers
        )
        assert response.status_code == 403
        assert (await api.get("/v1/runs", headers=headers)).status_code == 200

    async def test_service_token_creates_runs_and_revoked_tokens_stop_working(self, api):
        token = await mint(api, "service")
        headers = {"Authorization": f"Bearer {token}"}
        response = await api.post(
            "/v1/runs", json={"task": "t", "policy": {"max_rounds": 1}}, headers=headers
        )
        assert response.status_code == 201
        await wait_for(api, response.json()["id"])
        tokens = await api.post("/v1/tokens", json={"name": "tmp", "role": "service"})
        tmp = tokens.json()
        assert (await api.delete(f"/v1/tokens/{tmp['id']}")).status_code == 204
        again = await api.get("/v1/runs", headers={"Authorization": f"Bearer {tmp['token']}"})
        assert again.status_code == 401

    async def test_tokens_are_stored_hashed(self, api, orchestrator_app):
        token = await mint(api, "service")
        from sqlmodel import Session, select

        from orchestrator.tables import ApiToken

        with Session(orchestrator_app.state.engine) as session:
            hashes = [t.token_hash for t in session.exec(select(ApiToken))]
        assert token not in hashes
        assert ADMIN_TOKEN not in hashes


class TestIdempotency:
    async def test_same_key_same_body_returns_the_same_run(self, api):
        body = {"task": "Explain tides.", "policy": {"max_rounds": 1}}
        headers = {"Idempotency-Key": "order-42"}
        first = await api.post("/v1/runs", json=body, headers=headers)
        second = await api.post("/v1/runs", json=body, headers=headers)
        assert first.status_code == 201
        assert second.status_code == 200
        assert first.json()["id"] == second.json()["id"]
        await wait_for(api, first.json()["id"])
        page = (await api.get("/v1/runs")).json()
        assert len(page["items"]) == 1

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("key", ["", "has space", "x" * 201])
    async def test_malformed_keys_are_422(self, api, key):
        response = await api.post("/v1/runs", json={"task": "a"}, headers={"Idempotency-Key": key})
        assert response.status_code == 422

    async def test_same_key_other_body_is_409(self, api):
        headers = {"Idempotency-Key": "order-43"}
        first = await api.post(
            "/v1/runs", json={"task": "a", "policy": {"max_rounds": 1}}, headers=headers
        )
        second = await api.post("/v1/runs", json={"task": "b"}, headers=headers)
        assert second.status_code == 409
        await wait_for(api, first.json()["id"])


class TestBadInput:
    @pytest.mark.parametrize(
        ("body", "where"),
        [
            ({}, "task"),
            ({"task": "x", "kind": "poem"}, "kind"),
            ({"task": "x", "policy": {"max_rounds": 0}}, "max_rounds"),
            ({"task": "x", "policy": {"review": "sometimes"}}, "review"),
            ({"task": "x", "evaluator": "python_tests"}, None),
            ({"task": "x", "evaluator": "json_schema"}, None),
            ({"task": "x", "entry_point": "not valid!"}, "entry_point"),
            ({"task": "x", "surprise": True}, "surprise"),
        ],
    )
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_invalid_run_requests_are_422(self, api, body, where):
        response = await api.post("/v1/runs", json=body)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        if where:
            assert where in detail[0]["loc"]
        else:
            assert "needs" in detail[0]["msg"]

    async def test_unknown_run_is_404(self, api):
        for path in ("/v1/runs/run_missing", "/v1/runs/run_missing/trajectory"):
            response = await api.get(path)
            assert response.status_code == 404
            assert response.json()["error"] == "NotFound"
        assert (await api.post("/v1/runs/run_missing/cancel")).status_code == 404

    async def test_bad_cursor_and_status_are_4xx(self, api):
        assert (await api.get("/v1/runs", params={"cursor": "abc"})).status_code == 400
        assert (await api.get("/v1/runs", params={"status": "nope"})).status_code == 422
        assert (await api.get("/v1/runs", params={"limit": 0})).status_code == 422


class TestListing:
    async def test_status_filter_and_cursor_pagination(self, api):
        ids = [await start(api, task=f"Task {i}", policy={"max_rounds": 1}) for i in range(3)]
        for run_id in ids:
            await wait_for(api, run_id)
        first = (await api.get("/v1/runs", params={"limit": 2})).json()
        assert [r["id"] for r in first["items"]] == ids[::-1][:2]
        second = (
            await api.get("/v1/runs", params={"limit": 2, "cursor": first["next_cursor"]})
        ).json()
        assert [r["id"] for r in second["items"]] == [ids[0]]
        assert second["next_cursor"] is None
        escalated = (await api.get("/v1/runs", params={"status": "escalated"})).json()
        assert len(escalated["items"]) == 3
        assert (await api.get("/v1/runs", params={"status": "succeeded"})).json()["items"] == []

    async def test_search_by_task_text_any_case_or_by_exact_id(self, api):
        tides, report, poem = [
            await start(api, task=task, policy={"max_rounds": 1})
            for task in (
                "Explain TIDES to a sailor.",
                "Summarise 100% of report_x.",
                "Write a poem about rain.",
            )
        ]
        for run_id in (tides, report, poem):
            await wait_for(api, run_id)

        async def found(**params) -> list[str]:
            response = await api.get("/v1/runs", params=params)
            assert response.status_code == 200, response.text
            return [r["id"] for r in response.json()["items"]]

        assert await found(q="tides") == [tides]
        assert await found(q="  Tides To ") == [tides]  # trimmed, any case
        assert await found(q=report) == [report]
        assert await found(q=report[:-1]) == []  # ids match exactly, not by prefix
        # LIKE wildcards are literal characters
        assert await found(q="%") == [report]
        assert await found(q="t_x") == [report]
        assert await found(q="a_") == []
        assert await found(q="nothing like it") == []
        assert await found(q="") == [poem, report, tides]
        assert await found(q="rain", status="escalated") == [poem]
        assert await found(q="rain", status="succeeded") == []
        first = (await api.get("/v1/runs", params={"q": "e", "limit": 2})).json()
        assert [r["id"] for r in first["items"]] == [poem, report]
        rest = await found(q="e", limit=2, cursor=first["next_cursor"])
        assert rest == [tides]

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_bad_search_is_422_with_a_message(self, api):
        response = await api.get("/v1/runs", params={"q": "x" * 201})
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "ValidationError"
        assert body["detail"][0]["loc"] == ["query", "q"]
        assert "200" in body["detail"][0]["msg"]
        response = await api.get("/v1/runs", params={"q": "nul\x00byte"})
        assert response.status_code == 422
        assert (await api.get("/v1/runs", params={"q": "x" * 200})).status_code == 200


class TestTimestamps:
    async def test_times_carry_their_utc_offset_on_every_database(self, api):
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        listed = (await api.get("/v1/runs", params={"q": run_id})).json()["items"][0]
        for moment in (run["created_at"], run["updated_at"], listed["created_at"]):
            parsed = datetime.fromisoformat(moment)
            assert parsed.utcoffset() == timedelta(0), moment
            assert abs((datetime.now(UTC) - parsed).total_seconds()) < 120


class TestTrajectory:
    async def test_every_model_request_and_response_without_keys(self, api):
        run_id = await start(api, task="Explain why the sky is blue.")
        await wait_for(api, run_id)
        trajectory = (await api.get(f"/v1/runs/{run_id}/trajectory")).json()
        assert [(c["round"], c["role"], c["stage"]) for c in trajectory["calls"]] == [
            (1, "actor", "draft"),
            (1, "critic", "critique"),
            (2, "actor", "revise"),
            (2, "critic", "critique"),
        ]
        first = trajectory["calls"][0]["exchanges"][0]
        assert first["request"]["messages"][1]["content"].startswith("Write the first version")
        assert first["response"]["choices"][0]["message"]["content"]
        text = json.dumps(trajectory)
        assert OPENAI_KEY not in text
        assert ANTHROPIC_KEY not in text


class TestMetrics:
    async def test_prometheus_exposition(self, api):
        run_id = await start(api, task="Explain why the sky is blue.")
        await wait_for(api, run_id)
        text = (await api.get("/metrics")).text
        assert (
            'crosscheck_runs_finished_total{status="succeeded",stop_reason="critic_pass"} 1.0'
            in text
        )
        assert (
            'crosscheck_model_calls_total{model="gpt-5-mini",provider="openai",role="actor"} 2.0'
            in text
        )
        assert "crosscheck_rounds_per_run_bucket" in text
        assert "crosscheck_reflection_issues_adopted_total 1.0" in text
        assert (
            'crosscheck_tokens_total{direction="input",provider="anthropic",role="critic"}' in text
        )


class TestEvents:
    async def test_http_events_are_ordered_and_complete(self, api):
        run_id = await start(api, task="Explain why the sky is blue.")
        await wait_for(api, run_id)
        events = (await api.get("/v1/events", params={"run_id": run_id})).json()
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(seqs)
        types = [e["type"] for e in events]
        assert types[0] == "run.created"
        assert types[-1] == "run.finished"
        assert types.count("round.output") == 2
        assert types.count("round.critique") == 2

    async def test_websocket_reconnect_with_since_sees_every_event_once_in_order(
        self, orchestrator_app, fake_model
    ):
        fake_model.latency(40)
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with uvicorn_serving(orchestrator_app) as url:
            ws_url = url.replace("http", "ws") + "/v1/events"
            import httpx

            # generous connect and open timeouts: the server shares this loop with the run,
            # and on a busy machine a connect can wait well past httpx's 5 s default
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
                run_id = await start(client, task="Explain why the sky is blue.")
                received: list[dict] = []
                async with websockets.connect(
                    f"{ws_url}?run_id={run_id}", additional_headers=headers, open_timeout=60
                ) as ws:
                    for _ in range(3):
                        received.append(json.loads(await ws.recv()))
                # disconnected mid-run; events keep coming while we are away
                await asyncio.sleep(0.2)
                since = received[-1]["seq"]
                async with websockets.connect(
                    f"{ws_url}?run_id={run_id}&since={since}",
                    additional_headers=headers,
                    open_timeout=60,
                ) as ws:
                    while received[-1]["type"] != "run.finished":
                        received.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
                stored = (await client.get("/v1/events", params={"run_id": run_id})).json()
        assert [e["seq"] for e in received] == [e["seq"] for e in stored]

    async def test_websocket_without_a_token_is_refused(self, orchestrator_app):
        async with uvicorn_serving(orchestrator_app) as url:
            with pytest.raises(websockets.exceptions.InvalidStatus):
                async with websockets.connect(url.replace("http", "ws") + "/v1/events"):
                    pass


class TestHugeNumbers:
    async def test_sequence_and_cursor_beyond_64_bits_are_4xx(self, api):
        assert (await api.get("/v1/events", params={"since": 2**63})).status_code == 422
        assert (await api.get("/v1/runs", params={"cursor": str(2**63)})).status_code == 400


class TestInterruptedShutdown:
    async def test_an_app_whose_shutdown_never_ran_does_not_lend_its_database(
        self, orchestrator_settings, peers, tmp_path
    ):
        """A second app in the same process after the first one's lifespan was cut short
        (its DBOS still launched) runs its workflows on its own database."""
        from orchestrator.app import create_app
        from tests.support.apps import serving

        first = create_app(orchestrator_settings, peer_transports=peers)
        abandoned = serving(first, ADMIN_TOKEN)
        api = await abandoned.__aenter__()  # never exited: as when a shutdown was interrupted
        assert (await api.get("/healthz")).status_code == 200

        second_settings = orchestrator_settings.model_copy(
            update={"database_url": f"sqlite:///{tmp_path}/second.sqlite"}
        )
        second = create_app(second_settings, peer_transports=peers)
        try:
            async with serving(second, ADMIN_TOKEN) as api2:
                run_id = await start(api2, task="Explain tides.")
                run = await wait_for(api2, run_id)
                assert run["status"] in {"succeeded", "escalated"}
        finally:
            await abandoned.__aexit__(None, None, None)  # its other resources, closed late
        import sqlite3

        system = sqlite3.connect(tmp_path / "second.dbos.sqlite")  # the second app's DBOS tables
        try:
            ids = [r[0] for r in system.execute("SELECT workflow_uuid FROM workflow_status")]
        finally:
            system.close()
        assert run_id in ids
