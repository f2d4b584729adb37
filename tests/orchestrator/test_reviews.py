"""The review queue API: what waits, what it shows, and claims as leases (SQLite and Postgres)."""

import asyncio

import pytest

from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for


async def escalated_review(api) -> dict:
    run_id = await start(api, task="Explain tides.\nSecond line.", policy={"max_rounds": 1})
    await wait_for(api, run_id)
    page = (await api.get("/v1/reviews", params={"run_id": run_id})).json()
    [item] = page["items"]
    return item


async def bearer(api, role: str) -> dict:
    return {"Authorization": f"Bearer {await mint(api, role)}"}


class TestQueue:
    async def test_an_escalation_waits_with_its_whole_context(self, api):
        item = await escalated_review(api)
        assert item["kind"] == "escalation"
        assert item["status"] == "pending"
        assert item["reason"] == "max_rounds"
        assert item["task"] == "Explain tides."
        full = (await api.get(f"/v1/reviews/{item['id']}")).json()
        context = full["context"]
        assert context["stop_reason"] == "max_rounds"
        assert context["output"] == context["rounds"][0]["output"]
        assert context["critiques"][0]["verdict"] == "revise"
        assert context["reflections"][0]["source"] == "critic"

    async def test_a_paused_run_shows_as_pre_critique_with_the_output(self, api):
        run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
        run = await wait_for(api, run_id)
        page = (await api.get("/v1/reviews", params={"kind": "pre_critique"})).json()
        [item] = page["items"]
        full = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert full["context"]["output"] == run["rounds"][0]["output"]
        assert full["context"]["previous_output"] is None

    async def test_the_list_shows_the_critics_confidence(self, api):
        # an escalation: the Critic judged its round
        item = await escalated_review(api)
        run = (await api.get(f"/v1/runs/{item['run_id']}")).json()
        expected = run["rounds"][0]["critique"]["confidence"]
        assert isinstance(expected, float)
        assert item["confidence"] == expected
        assert (await api.get(f"/v1/reviews/{item['id']}")).json()["confidence"] == expected
        # a low-confidence pause comes after the critique of its round
        low = await start(
            api,
            task="Explain tides.",
            policy={"review": "on_low_confidence", "review_confidence_threshold": 1.0},
        )
        await wait_for(api, low, statuses={"awaiting_review"})
        [paused] = (await api.get("/v1/reviews", params={"run_id": low})).json()["items"]
        assert paused["reason"] == "low_confidence"
        low_run = (await api.get(f"/v1/runs/{low}")).json()
        assert paused["confidence"] == low_run["rounds"][0]["critique"]["confidence"]
        # before the critique of the first round there is no confidence yet
        first = await start(api, task="Explain tides.", policy={"review": "before_critique"})
        await wait_for(api, first, statuses={"awaiting_review"})
        [fresh] = (await api.get("/v1/reviews", params={"run_id": first})).json()["items"]
        assert fresh["kind"] == "pre_critique"
        assert fresh["confidence"] is None
        # the page lists all three, each with its own
        page = (await api.get("/v1/reviews")).json()["items"]
        by_id = {i["id"]: i["confidence"] for i in page}
        assert by_id == {
            item["id"]: expected,
            paused["id"]: paused["confidence"],
            fresh["id"]: None,
        }

    async def test_filters_and_paging(self, api):
        for _ in range(3):
            await escalated_review(api)
        first = (await api.get("/v1/reviews", params={"limit": 2, "status": "pending"})).json()
        assert len(first["items"]) == 2
        rest = (await api.get("/v1/reviews", params={"cursor": first["next_cursor"]})).json()
        assert len(rest["items"]) == 1
        assert rest["next_cursor"] is None
        assert (await api.get("/v1/reviews", params={"status": "resolved"})).json()["items"] == []
        assert (await api.get("/v1/reviews", params={"kind": "nope"})).status_code == 422
        assert (await api.get("/v1/reviews/rev_missing")).status_code == 404


class TestClaims:
    async def test_the_claimer_is_named_and_named_in_conflicts(self, api):
        item = await escalated_review(api)
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        body = {"username": "rita", "password": "correct horse battery", "role": "reviewer"}
        assert (await api.post("/v1/accounts", json=body, headers=admin)).status_code == 201
        login = await api.post(
            "/v1/auth/login", json={"username": "rita", "password": body["password"]}
        )
        rita = {"Authorization": f"Bearer {login.json()['token']}"}
        url = f"/v1/reviews/{item['id']}"
        claimed = (await api.post(f"{url}/claim", headers=rita)).json()
        assert claimed["claimed_by_name"] == "rita"
        assert claimed["claimed_by"].startswith("tok_")
        listed = (await api.get("/v1/reviews", params={"status": "claimed"})).json()["items"]
        assert [i["claimed_by_name"] for i in listed] == ["rita"]
        other = await api.post(f"{url}/claim", headers=await bearer(api, "reviewer"))
        assert other.status_code == 409
        assert "claimed by rita until" in other.json()["detail"]
        await api.post(f"{url}/release", headers=rita)
        assert (await api.get(url)).json()["claimed_by_name"] is None

    async def test_one_claim_at_a_time_and_the_holder_renews(self, api):
        item = await escalated_review(api)
        ana, bo = await bearer(api, "reviewer"), await bearer(api, "reviewer")
        url = f"/v1/reviews/{item['id']}"
        claimed = await api.post(f"{url}/claim", headers=ana)
        assert claimed.status_code == 200
        assert claimed.json()["status"] == "claimed"
        other = await api.post(f"{url}/claim", headers=bo)
        assert other.status_code == 409
        assert "claimed by" in other.json()["detail"]
        renewed = await api.post(f"{url}/claim", json={"lease_s": 900}, headers=ana)
        assert renewed.status_code == 200
        assert renewed.json()["lease_expires_at"] > claimed.json()["lease_expires_at"]
        listed = (await api.get("/v1/reviews", params={"status": "claimed"})).json()["items"]
        assert [i["id"] for i in listed] == [item["id"]]

    async def test_racing_reviewers_one_wins(self, api):
        item = await escalated_review(api)
        headers = [await bearer(api, "reviewer") for _ in range(4)]
        url = f"/v1/reviews/{item['id']}/claim"
        results = await asyncio.gather(*[api.post(url, headers=h) for h in headers])
        assert sorted(r.status_code for r in results) == [200, 409, 409, 409]

    async def test_a_lapsed_lease_frees_the_item(self, api):
        item = await escalated_review(api)
        ana, bo = await bearer(api, "reviewer"), await bearer(api, "reviewer")
        url = f"/v1/reviews/{item['id']}"
        await api.post(f"{url}/claim", json={"lease_s": 1}, headers=ana)
        await asyncio.sleep(1.2)
        assert (await api.get(url)).json()["status"] == "pending"
        assert (await api.post(f"{url}/claim", headers=bo)).status_code == 200

    async def test_release_gives_it_back_and_only_the_holder_can(self, api):
        item = await escalated_review(api)
        ana, bo = await bearer(api, "reviewer"), await bearer(api, "reviewer")
        url = f"/v1/reviews/{item['id']}"
        await api.post(f"{url}/claim", headers=ana)
        assert (await api.post(f"{url}/release", headers=bo)).status_code == 409
        released = await api.post(f"{url}/release", headers=ana)
        assert released.json()["status"] == "pending"
        assert (await api.post(f"{url}/claim", headers=bo)).status_code == 200

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("lease_s", [0, 3601, "long"])
    async def test_bad_leases_are_422(self, api, lease_s):
        item = await escalated_review(api)
        response = await api.post(
            f"/v1/reviews/{item['id']}/claim",
            json={"lease_s": lease_s},
            headers=await bearer(api, "reviewer"),
        )
        assert response.status_code == 422

    async def test_service_tokens_cannot_claim(self, api):
        item = await escalated_review(api)
        response = await api.post(
            f"/v1/reviews/{item['id']}/claim", headers=await bearer(api, "service")
        )
        assert response.status_code == 403
