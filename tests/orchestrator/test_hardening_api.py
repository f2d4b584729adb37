"""What a client or an attacker can do through the API and must not get away with: answers
before the commit, schemas that wedge or freeze a run, runs that cannot be cancelled, other
services' runs, replayed decisions (SQLite and Postgres)."""

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session
from structlog.testing import capture_logs

from orchestrator.tables import ApiToken
from tests.orchestrator.conftest import mint, start, wait_for
from tests.orchestrator.test_loop import actor_reply, critique

PASSWORD = "correct horse battery staple"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


class TestCommitBeforeAnswer:
    async def test_50_parallel_account_creations_with_10_names(self, api):
        names = [f"user{i % 10}" for i in range(50)]
        answers = await asyncio.gather(
            *(api.post("/v1/accounts", json={"username": n, "password": PASSWORD}) for n in names)
        )
        codes = sorted(a.status_code for a in answers)
        assert codes.count(201) == 10, [a.text for a in answers if a.status_code not in (201, 409)]
        assert codes.count(409) == 40
        created = {a.json()["username"] for a in answers if a.status_code == 201}
        assert created == set(names)
        # every account that was answered 201 exists and logs in
        for name in sorted(created)[:3]:
            login = await api.post("/v1/auth/login", json={"username": name, "password": PASSWORD})
            assert login.status_code == 200

    async def test_every_token_works_the_moment_it_is_returned(self, api):
        async def mint_and_use() -> int:
            minted = await api.post("/v1/tokens", json={"name": "svc", "role": "service"})
            assert minted.status_code == 201
            return (
                await api.get("/v1/auth/me", headers=bearer(minted.json()["token"]))
            ).status_code

        assert await asyncio.gather(*(mint_and_use() for _ in range(50))) == [200] * 50
        await api.post("/v1/accounts", json={"username": "ana", "password": PASSWORD})

        async def login_and_use() -> int:
            login = await api.post("/v1/auth/login", json={"username": "ana", "password": PASSWORD})
            assert login.status_code == 200, login.text
            return (await api.get("/v1/reviews", headers=bearer(login.json()["token"]))).status_code

        # an account keeps 10 sessions: 10 logins at once, each token used at once
        assert await asyncio.gather(*(login_and_use() for _ in range(10))) == [200] * 10


class TestRevocation:
    async def test_a_revoked_token_is_refused_as_soon_as_the_204_arrives(self, api):
        for _ in range(10):
            minted = (await api.post("/v1/tokens", json={"name": "s", "role": "service"})).json()
            headers = bearer(minted["token"])
            assert (await api.get("/v1/runs", headers=headers)).status_code == 200  # cached
            # requests with the token keep coming while it is revoked
            flood = [api.get("/v1/runs", headers=headers) for _ in range(20)]
            revoke = api.delete(f"/v1/tokens/{minted['id']}")
            results = await asyncio.gather(revoke, *flood)
            assert results[0].status_code == 204
            after = await api.get("/v1/runs", headers=headers)
            assert after.status_code == 401, after.text

    async def test_a_request_during_the_revocation_cannot_cache_the_token_again(self, api):
        """The window the old order left open, made certain: while the revoking transaction
        is about to commit, a request with the token authenticates (the row still says it is
        valid) and caches it. The cache must be emptied after the commit, not before."""
        minted = (await api.post("/v1/tokens", json={"name": "s", "role": "service"})).json()
        headers = bearer(minted["token"])
        loop = asyncio.get_running_loop()
        during: list[int] = []

        def before_commit(session: Session) -> None:
            if during:
                return
            row = session.get(ApiToken, minted["id"])
            revoking = row is not None and row.revoked_at is not None
            if revoking:
                call = asyncio.run_coroutine_threadsafe(api.get("/v1/runs", headers=headers), loop)
                during.append(call.result(timeout=10).status_code)

        sa.event.listen(Session, "before_commit", before_commit)
        try:
            assert (await api.delete(f"/v1/tokens/{minted['id']}")).status_code == 204
        finally:
            sa.event.remove(Session, "before_commit", before_commit)
        assert during == [200]  # the request in the window was let in, and cached the token
        after = await api.get("/v1/runs", headers=headers)
        assert after.status_code == 401, after.text


BAD_SCHEMAS = [
    ({"type": 12}, "/type"),
    ({"type": "string", "pattern": "("}, "is not a 'regex'"),
    ({"$ref": "https://example.com/schema.json"}, "points outside the schema"),
    ({"$ref": "#/$defs/missing"}, "points to nothing"),
    ({"$ref": "#"}, "circle"),
    (
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a",
        },
        "circle",
    ),
    ({"patternProperties": {"[": {"type": "string"}}}, "/patternProperties"),
]


class TestSchemas:
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize(("schema", "named"), BAD_SCHEMAS)
    async def test_a_bad_schema_is_refused_at_creation_naming_the_problem(self, api, schema, named):
        response = await api.post("/v1/runs", json={"task": "JSON please.", "json_schema": schema})
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "InvalidSchema"
        assert named in response.json()["detail"]
        assert (await api.get("/v1/runs")).json()["items"] == []

    async def test_recursive_schemas_that_descend_into_the_value_are_fine(self, api, fake_model):
        tree = {
            "type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        }
        fake_model.script(
            {"stage": "draft", "response": actor_reply('{"children": [{"children": []}]}')},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, task="A tree as JSON.", json_schema=tree)
        run = await wait_for(api, run_id)
        assert run["rounds"][0]["evaluation"]["passed"] is True
        assert run["status"] == "succeeded"

    async def test_a_backtracking_pattern_cannot_hold_the_run(self, api, fake_model):
        # ^(a|aa)+$ on 60 a's and a b backtracks for hours in Python's re; RE2 answers in
        # linear time that it does not match.
        schema = {"type": "string", "pattern": "^(a|aa)+$"}
        fake_model.script(
            {"stage": "draft", "response": actor_reply('"' + "a" * 60 + 'b"')},
            {"stage": "critique", "response": critique("pass")},
            {"stage": "revise", "response": actor_reply('"' + "a" * 70 + '"')},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, task="Some a's.", json_schema=schema)
        health = await api.get("/healthz")
        assert health.status_code == 200
        run = await wait_for(api, run_id)
        first, second = run["rounds"]
        assert first["evaluation"]["passed"] is False
        assert "does not match '^(a|aa)+$'" in first["evaluation"]["summary"]
        assert second["evaluation"]["passed"] is True, (second["output"], second["evaluation"])
        assert run["status"] == "succeeded"


class TestUnexpectedErrors:
    async def test_an_unexpected_error_fails_the_run_opens_an_escalation_and_logs(
        self, api, fake_model, orchestrator_app
    ):
        # A schema stored before schemas were checked at creation: jsonschema raises
        # a TypeError on it in the middle of the evaluation step.
        fake_model.script({"stage": "draft", "response": actor_reply('{"a": 1}')})
        fake_model.latency(1500)
        run_id = await start(api, task="JSON please.", json_schema={"type": "object"})
        with orchestrator_app.state.engine.begin() as connection:
            connection.execute(
                sa.text("UPDATE runs SET json_schema = :s WHERE id = :id"),
                {"s": '{"type": 12}', "id": run_id},
            )
        fake_model.latency(None)
        with capture_logs() as logs:
            run = await wait_for(api, run_id, timeout=60)
        assert run["status"] == "failed", (run["stop_reason"], run["detail"], run["rounds"])
        assert run["stop_reason"] == "internal_error"
        assert run["error_class"] == "TypeError"
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        assert (item["kind"], item["status"], item["reason"]) == (
            "escalation",
            "pending",
            "internal_error",
        )
        [logged] = [entry for entry in logs if entry.get("run_id") == run_id]
        assert (logged["log_level"], logged["error_class"]) == ("error", "TypeError")


class TestCancel:
    async def test_cancelling_a_paused_run_leaves_nothing_to_claim(self, api):
        run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
        await wait_for(api, run_id, statuses={"awaiting_review"})
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        reviewer = bearer(await mint(api, "reviewer"))
        assert (
            await api.post(f"/v1/reviews/{item['id']}/claim", headers=reviewer)
        ).status_code == 200
        cancelled = await api.post(f"/v1/runs/{run_id}/cancel")
        assert cancelled.status_code == 202
        assert cancelled.json()["status"] == "cancelled"
        closed = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert closed["status"] == "resolved"
        assert closed["decision"]["action"] == "cancelled"
        other = bearer(await mint(api, "reviewer"))
        claim = await api.post(f"/v1/reviews/{item['id']}/claim", headers=other)
        assert claim.status_code == 409
        decide = await api.post(
            f"/v1/reviews/{item['id']}/decision", json={"action": "approve"}, headers=reviewer
        )
        assert decide.status_code == 409
        pending = (await api.get("/v1/reviews", params={"status": "pending"})).json()["items"]
        assert item["id"] not in {i["id"] for i in pending}


class TestOwnerScoping:
    async def test_a_service_sees_and_cancels_only_its_own_runs(self, api, fake_model):
        fake_model.latency(300)
        alice, bob = bearer(await mint(api, "service")), bearer(await mint(api, "service"))
        created = await api.post("/v1/runs", json={"task": "Alice's secret task."}, headers=alice)
        run_id = created.json()["id"]
        assert [r["id"] for r in (await api.get("/v1/runs", headers=alice)).json()["items"]] == [
            run_id
        ]
        assert (await api.get("/v1/runs", headers=bob)).json()["items"] == []
        found = await api.get("/v1/runs", params={"q": "secret"}, headers=bob)
        assert found.json()["items"] == []
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/trajectory"):
            assert (await api.get(path, headers=bob)).status_code == 404
            assert (await api.get(path, headers=alice)).status_code == 200
        assert (await api.post(f"/v1/runs/{run_id}/cancel", headers=bob)).status_code == 404
        events = await api.get("/v1/events", params={"run_id": run_id}, headers=bob)
        assert events.status_code == 404
        assert (await api.get("/v1/events", headers=bob)).status_code == 403
        mine = await api.get("/v1/events", params={"run_id": run_id}, headers=alice)
        assert mine.status_code == 200
        assert mine.json()
        # the admin sees every run
        assert run_id in {r["id"] for r in (await api.get("/v1/runs")).json()["items"]}
        fake_model.latency(None)
        assert (await api.post(f"/v1/runs/{run_id}/cancel", headers=alice)).status_code == 202

    async def test_review_items_follow_the_runs_owner_and_reviewers_see_what_is_in_review(
        self, api
    ):
        alice, bob = bearer(await mint(api, "service")), bearer(await mint(api, "service"))
        reviewer = bearer(await mint(api, "reviewer"))
        paused = (
            await api.post(
                "/v1/runs",
                json={"task": "Reviewed.", "policy": {"review": "before_critique"}},
                headers=alice,
            )
        ).json()["id"]
        plain = (await api.post("/v1/runs", json={"task": "Not reviewed."}, headers=alice)).json()[
            "id"
        ]
        await wait_for(api, paused, statuses={"awaiting_review"})
        await wait_for(api, plain)
        [item] = (await api.get("/v1/reviews", headers=alice)).json()["items"]
        assert (await api.get("/v1/reviews", headers=bob)).json()["items"] == []
        assert (await api.get(f"/v1/reviews/{item['id']}", headers=bob)).status_code == 404
        assert (await api.get(f"/v1/reviews/{item['id']}", headers=alice)).status_code == 200
        # a reviewer sees the run in review, not the other one
        listed = {r["id"] for r in (await api.get("/v1/runs", headers=reviewer)).json()["items"]}
        assert paused in listed
        assert plain not in listed
        assert (await api.get(f"/v1/runs/{paused}", headers=reviewer)).status_code == 200
        assert (await api.get(f"/v1/runs/{plain}", headers=reviewer)).status_code == 404


class TestSmaller:
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("path", ["/v1/runs", "/v1/reviews"])
    @pytest.mark.parametrize("cursor", ["²", "١٢", "-1", "1e3", "99999999999999999999"])
    async def test_a_cursor_that_is_not_ascii_digits_is_a_400(self, api, path, cursor):
        response = await api.get(path, params={"cursor": cursor})
        assert response.status_code == 400, response.text
        assert "cursor" in response.json()["detail"]

    async def test_a_repeated_decision_key_must_match_its_body_and_caller(self, api):
        run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
        await wait_for(api, run_id, statuses={"awaiting_review"})
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        ana, bo = bearer(await mint(api, "reviewer")), bearer(await mint(api, "reviewer"))
        url = f"/v1/reviews/{item['id']}/decision"
        await api.post(f"/v1/reviews/{item['id']}/claim", headers=ana)
        body = {"action": "comment", "comment": "Mention the Moon."}
        key = {"Idempotency-Key": "decision-1"}
        first = await api.post(url, json=body, headers={**ana, **key})
        assert first.status_code == 200, first.text
        again = await api.post(url, json=body, headers={**ana, **key})
        assert again.status_code == 200
        assert again.json()["action"] == "comment"
        other_body = await api.post(url, json={"action": "approve"}, headers={**ana, **key})
        assert other_body.status_code == 409
        assert "different decision" in other_body.json()["detail"]
        other_caller = await api.post(url, json=body, headers={**bo, **key})
        assert other_caller.status_code == 403
