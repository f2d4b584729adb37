"""`Prefer: wait=N` on POST /v1/runs (RFC 7240): the outcome in the create call, or a 202."""

import time

import pytest

from orchestrator.runs.router import MAX_WAIT_S, prefer_wait
from tests.orchestrator.conftest import wait_for

SKY = "Explain why the sky is blue."


def waiting(seconds: int | str, key: str | None = None) -> dict[str, str]:
    headers = {"Prefer": f"wait={seconds}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


class TestTheHeader:
    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            (["wait=5"], 5),
            (["WAIT = 7"], 7),
            (['wait="3"'], 3),
            (["respond-async, wait=10"], 10),
            (["respond-async", "wait=2;foo=bar"], 2),
            (["wait=1, wait=9"], 1),  # the first one counts
            (["wait=61"], MAX_WAIT_S),
            (["wait=99999999999999999999"], None),  # not a sane delta-seconds
            (["wait=0"], None),
            (["wait=-1"], None),
            (["wait=1.5"], None),
            (["wait=soon"], None),
            (["wait="], None),
            (["wait"], None),
            (["return=minimal"], None),
            ([], None),
        ],
    )
    def test_parsing(self, values, expected):
        assert prefer_wait(values) == expected


class TestPreferWait:
    async def test_a_run_that_succeeds_within_the_wait_is_200_with_its_output(self, api):
        response = await api.post("/v1/runs", json={"task": SKY}, headers=waiting(30))
        assert response.status_code == 200, response.text
        assert response.headers["preference-applied"] == "wait=30"
        run = response.json()
        assert run["status"] == "succeeded"
        assert run["stop_reason"] == "critic_pass"
        assert run["final_output"]
        assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "pass"]
        assert run == (await api.get(f"/v1/runs/{run['id']}")).json()

    async def test_a_run_paused_for_review_is_200_awaiting_review(self, api):
        body = {"task": "Explain tides.", "policy": {"review": "first_round"}}
        response = await api.post("/v1/runs", json=body, headers=waiting(30))
        assert response.status_code == 200, response.text
        run = response.json()
        assert run["status"] == "awaiting_review"
        assert run["rounds"][0]["output"]
        reviews = (await api.get("/v1/reviews", params={"run_id": run["id"]})).json()
        assert [item["status"] for item in reviews["items"]] == ["pending"]

    async def test_a_slow_run_is_202_with_location_after_the_wait(self, api, fake_model):
        fake_model.latency(3000)
        started = time.monotonic()
        response = await api.post("/v1/runs", json={"task": SKY}, headers=waiting(1))
        elapsed = time.monotonic() - started
        assert response.status_code == 202, response.text
        # it waited the second asked for, and answered before the run's own 6 s of model
        # latency (draft and critique) were over: a 202 then, not the finished run
        assert 1.0 <= elapsed < 6.0
        assert response.headers["preference-applied"] == "wait=1"
        created = response.json()
        assert set(created) == {"id", "status"}
        assert created["status"] in {"drafting", "queued"}
        assert response.headers["location"] == f"/v1/runs/{created['id']}"
        assert (await api.get(response.headers["location"])).json()["id"] == created["id"]
        fake_model.latency(None)
        await api.post(f"/v1/runs/{created['id']}/cancel")
        await wait_for(api, created["id"])

    async def test_without_the_preference_nothing_changes(self, api):
        response = await api.post("/v1/runs", json={"task": SKY})
        assert response.status_code == 201
        assert set(response.json()) == {"id", "status"}
        assert "preference-applied" not in response.headers
        assert "location" not in response.headers
        await wait_for(api, response.json()["id"])

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("value", ["wait=soon", "wait=0", "wait=-3", "wait=2.5", "wait"])
    async def test_a_malformed_wait_is_ignored(self, api, value):
        response = await api.post(
            "/v1/runs", json={"task": SKY, "policy": {"max_rounds": 1}}, headers={"Prefer": value}
        )
        assert response.status_code == 201, response.text
        assert set(response.json()) == {"id", "status"}
        assert "preference-applied" not in response.headers
        await wait_for(api, response.json()["id"])

    async def test_a_wait_over_60_s_is_capped(self, api):
        response = await api.post(
            "/v1/runs", json={"task": SKY, "policy": {"max_rounds": 1}}, headers=waiting(3600)
        )
        assert response.status_code == 200, response.text
        assert response.headers["preference-applied"] == f"wait={MAX_WAIT_S}"
        assert response.json()["status"] == "escalated"

    async def test_an_idempotent_repeat_waits_too(self, api, fake_model):
        body = {"task": SKY}
        fake_model.latency(1500)
        first = await api.post("/v1/runs", json=body, headers=waiting(1, key="k-wait"))
        assert first.status_code == 202, first.text
        run_id = first.json()["id"]
        fake_model.latency(None)
        again = await api.post("/v1/runs", json=body, headers=waiting(30, key="k-wait"))
        assert again.status_code == 200, again.text
        assert again.headers["preference-applied"] == "wait=30"
        assert again.json()["id"] == run_id
        assert again.json()["status"] == "succeeded"
        replay = await api.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-wait"})
        assert replay.status_code == 200
        assert replay.json() == {"id": run_id, "status": "succeeded"}

    async def test_a_finished_run_answers_at_once(self, api):
        body = {"task": SKY, "policy": {"max_rounds": 1}}
        run_id = (await api.post("/v1/runs", json=body, headers={"Idempotency-Key": "k2"})).json()[
            "id"
        ]
        await wait_for(api, run_id)
        started = time.monotonic()
        response = await api.post("/v1/runs", json=body, headers=waiting(30, key="k2"))
        assert response.status_code == 200
        assert response.json()["status"] == "escalated"
        # answered from the finished run, not after waiting out the 30 s asked for
        assert time.monotonic() - started < 10.0
