"""Every scope holds: an open websocket ends with its token, events follow run visibility,
lessons stay with their owner's runs, stats and evaluations are the caller's, and a revoked
reviewer's claims go back to the queue (SQLite and Postgres)."""

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
import websockets
from sqlmodel import Session

from orchestrator.tables import ApiToken, utcnow
from shared.orchestration import Role
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, wait_for
from tests.support.apps import uvicorn_serving


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def minted(api, role: str) -> tuple[str, dict]:
    """A new token's id and its Authorization header."""
    response = await api.post("/v1/tokens", json={"name": f"{role} for scopes", "role": role})
    assert response.status_code == 201, response.text
    body = response.json()
    return body["id"], bearer(body["token"])


async def drain(ws) -> None:
    while True:
        await ws.recv()


async def close_of(ws) -> tuple[int, str]:
    """The close code and reason the server ends ``ws`` with (whatever it sends before)."""
    with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
        await asyncio.wait_for(drain(ws), 15)  # generous: the server closes within a second
    assert closed.value.rcvd is not None, "the connection dropped without a close frame"
    return closed.value.rcvd.code, closed.value.rcvd.reason


class TestWebsocketEndsWithItsToken:
    async def test_revoking_the_token_closes_its_open_websocket(self, orchestrator_app):
        async with uvicorn_serving(orchestrator_app) as url:
            async with httpx.AsyncClient(
                base_url=url, headers=bearer(ADMIN_TOKEN), timeout=30
            ) as admin:
                token_id, headers = await minted(admin, "reviewer")
                ws_url = url.replace("http", "ws") + "/v1/events"
                async with websockets.connect(ws_url, additional_headers=headers) as ws:
                    assert (await admin.delete(f"/v1/tokens/{token_id}")).status_code == 204
                    code, reason = await close_of(ws)
                assert code == 4401
                assert "revoked" in reason
                # and it cannot come back
                with pytest.raises(websockets.exceptions.InvalidStatus):
                    async with websockets.connect(ws_url, additional_headers=headers):
                        pass

    async def test_a_service_websocket_on_its_run_closes_on_revocation(
        self, orchestrator_app, fake_model
    ):
        fake_model.latency(300)
        async with uvicorn_serving(orchestrator_app) as url:
            async with httpx.AsyncClient(
                base_url=url, headers=bearer(ADMIN_TOKEN), timeout=30
            ) as admin:
                token_id, headers = await minted(admin, "service")
                created = await admin.post("/v1/runs", json={"task": "Why?"}, headers=headers)
                run_id = created.json()["id"]
                ws_url = url.replace("http", "ws") + f"/v1/events?run_id={run_id}"
                async with websockets.connect(ws_url, additional_headers=headers) as ws:
                    json.loads(await ws.recv())  # streaming
                    assert (await admin.delete(f"/v1/tokens/{token_id}")).status_code == 204
                    code, _ = await close_of(ws)
                assert code == 4401
                fake_model.latency(None)
                await wait_for(admin, run_id)

    async def test_an_expiring_session_closes_its_websocket(self, orchestrator_app):
        async with uvicorn_serving(orchestrator_app) as url:
            async with httpx.AsyncClient(
                base_url=url, headers=bearer(ADMIN_TOKEN), timeout=30
            ) as admin:
                token_id, headers = await minted(admin, "reviewer")
                with Session(orchestrator_app.state.engine) as session:
                    row = session.get(ApiToken, token_id)
                    assert row is not None
                    row.expires_at = utcnow() + timedelta(seconds=1)  # a session near its end
                    session.add(row)
                    session.commit()
                ws_url = url.replace("http", "ws") + "/v1/events"
                async with websockets.connect(ws_url, additional_headers=headers) as ws:
                    code, reason = await close_of(ws)
                assert code == 4401
                assert "expired" in reason
                assert (await admin.get("/v1/auth/me", headers=headers)).status_code == 401


@pytest.mark.postgres
async def test_a_revocation_on_another_replica_wakes_this_replicas_websockets(
    database_url,
):
    """The token channel's notification (another replica's commit) bumps this replica's
    token generation, which every open websocket checks before it sends more."""
    if not database_url.startswith("postgres"):
        pytest.skip("replicas share a Postgres database")
    from orchestrator.app import tokens_revoked
    from orchestrator.auth.service import TOKENS_CHANNEL, PrincipalCache, TokenService
    from orchestrator.db import create_db_engine, migrate, session_scope
    from orchestrator.events.hub import EventHub
    from orchestrator.events.listener import EventListener

    engine = create_db_engine(database_url)
    migrate(engine)
    with session_scope(engine) as session:
        token, _ = TokenService().create(session, name="r", role=Role.reviewer, created_by="x")
        token_id = token.id
    hub = EventHub()
    hub.bind(asyncio.get_running_loop())
    cache = PrincipalCache(trusted=lambda: hub.listening)
    listener = EventListener(
        database_url, hub, channels={TOKENS_CHANNEL: lambda: tokens_revoked(cache, hub)}
    )
    task = asyncio.create_task(listener.run_forever())
    try:
        await asyncio.wait_for(listener.connected.wait(), timeout=10)
        before = hub.tokens_generation
        waiter = hub.subscribe(["run.finished"])
        with session_scope(engine) as session:
            assert TokenService().revoke(session, token_id)
        await asyncio.wait_for(waiter.wait(), timeout=10)
        assert hub.tokens_generation > before
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        engine.dispose()


async def paused_and_plain(api, owner: dict) -> tuple[str, str]:
    """Two finished-or-paused runs of ``owner``: one waiting for review, one never in it."""
    paused = await api.post(
        "/v1/runs",
        json={"task": "Reviewed.", "policy": {"review": "before_critique"}},
        headers=owner,
    )
    plain = await api.post("/v1/runs", json={"task": "Not reviewed."}, headers=owner)
    await wait_for(api, paused.json()["id"], statuses={"awaiting_review"})
    await wait_for(api, plain.json()["id"])
    return paused.json()["id"], plain.json()["id"]


class TestEventsFollowRunScope:
    async def test_a_reviewer_reads_only_events_of_runs_in_review(self, api):
        alice = bearer(await mint(api, "service"))
        reviewer = bearer(await mint(api, "reviewer"))
        paused, plain = await paused_and_plain(api, alice)
        seen = {e["run_id"] for e in (await api.get("/v1/events", headers=reviewer)).json()}
        assert seen == {paused}
        typed = await api.get("/v1/events", params={"type": "run.created"}, headers=reviewer)
        assert {e["run_id"] for e in typed.json()} == {paused}
        one = await api.get("/v1/events", params={"run_id": plain}, headers=reviewer)
        assert one.status_code == 404
        assert (await api.get("/v1/events", params={"run_id": paused}, headers=reviewer)).json()
        # the admin reads both
        assert {e["run_id"] for e in (await api.get("/v1/events")).json()} >= {paused, plain}

    @pytest.mark.parametrize("types", [None, "run.created,review.claimed"])
    async def test_a_reviewers_websocket_streams_only_runs_in_review(self, orchestrator_app, types):
        async with uvicorn_serving(orchestrator_app) as url:
            async with httpx.AsyncClient(
                base_url=url, headers=bearer(ADMIN_TOKEN), timeout=30
            ) as api:
                alice = bearer(await mint(api, "service"))
                reviewer = bearer(await mint(api, "reviewer"))
                paused, _ = await paused_and_plain(api, alice)
                query = f"?type={types}" if types else ""
                ws_url = url.replace("http", "ws") + "/v1/events" + query
                received: list[dict] = []
                async with websockets.connect(ws_url, additional_headers=reviewer) as ws:
                    [item] = (await api.get("/v1/reviews", params={"run_id": paused})).json()[
                        "items"
                    ]
                    claim = await api.post(f"/v1/reviews/{item['id']}/claim", headers=reviewer)
                    assert claim.status_code == 200
                    async with asyncio.timeout(15):
                        while not received or received[-1]["type"] != "review.claimed":
                            received.append(json.loads(await ws.recv()))
        assert {e["run_id"] for e in received} == {paused}


TIDES = "Explain how the Moon causes ocean tides."
SIMILAR = "Explain ocean tides and the Moon to a child."
LESSON = "Always mention the spring and neap tides."


async def taught(api, owner: dict, reviewer: dict) -> dict:
    """A reviewer's ``global`` lesson on one of ``owner``'s runs, as the admin lists it."""
    run = await api.post(
        "/v1/runs", json={"task": TIDES, "policy": {"review": "first_round"}}, headers=owner
    )
    run_id = run.json()["id"]
    await wait_for(api, run_id)
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=reviewer)).status_code == 200
    decided = await api.post(
        f"/v1/reviews/{item['id']}/decision",
        json={"action": "comment", "comment": LESSON, "lesson": True, "lesson_scope": "global"},
        headers=reviewer,
    )
    assert decided.status_code == 200, decided.text
    await wait_for(api, run_id, statuses={"succeeded", "escalated", "failed"})
    [lesson] = (await api.get("/v1/lessons")).json()
    assert lesson["source_run_id"] == run_id
    return lesson


async def similar_run(api, owner: dict) -> dict:
    run = await api.post(
        "/v1/runs", json={"task": SIMILAR, "policy": {"max_rounds": 1}}, headers=owner
    )
    return await wait_for(api, run.json()["id"])


class TestLessonsStayWithTheirOwner:
    async def test_another_service_neither_reads_nor_receives_a_lesson(self, api, fake_model):
        alice, bob = bearer(await mint(api, "service")), bearer(await mint(api, "service"))
        reviewer = bearer(await mint(api, "reviewer"))
        lesson = await taught(api, alice, reviewer)
        # bob: not listed, not found, not searched, not in his Actor's prompt
        assert (await api.get("/v1/lessons", headers=bob)).json() == []
        knowledge = await api.get("/v1/knowledge", params={"kind": "lesson"}, headers=bob)
        assert knowledge.json() == []
        assert (await api.get(f"/v1/knowledge/{lesson['id']}", headers=bob)).status_code == 404
        found = await api.get("/v1/knowledge/search", params={"q": SIMILAR}, headers=bob)
        assert lesson["id"] not in {m["entry"]["id"] for m in found.json()}
        bobs = await similar_run(api, bob)
        assert bobs["lessons_used"] == []
        prompts = [str(c) for c in fake_model.requests()]  # the Actor's and the Critic's
        assert any(SIMILAR in p for p in prompts)
        assert not any(LESSON in p and SIMILAR in p for p in prompts)
        # alice: hers, with its run, and her similar run gets it
        [own] = (await api.get("/v1/lessons", headers=alice)).json()
        assert (own["id"], own["source_run_id"]) == (lesson["id"], lesson["source_run_id"])
        assert own["owner"] is not None
        assert (await similar_run(api, alice))["lessons_used"] == [lesson["id"]]
        # reviewers and admins see every lesson
        assert [x["id"] for x in (await api.get("/v1/lessons", headers=reviewer)).json()] == [
            lesson["id"]
        ]

    async def test_only_an_admin_shares_a_lesson_with_every_tenant(self, api):
        alice, bob = bearer(await mint(api, "service")), bearer(await mint(api, "service"))
        reviewer = bearer(await mint(api, "reviewer"))
        lesson = await taught(api, alice, reviewer)
        for caller in (reviewer, alice):
            refused = await api.post(f"/v1/lessons/{lesson['id']}/share", headers=caller)
            assert refused.status_code == 403
            assert refused.json()["error"] == "Forbidden"
        assert (await api.post("/v1/lessons/les_nope/share")).status_code == 404
        shared = await api.post(f"/v1/lessons/{lesson['id']}/share")
        assert shared.status_code == 200
        assert shared.json()["shared"] is True
        assert shared.json()["owner"] == lesson["owner"]  # still hers
        assert (await similar_run(api, bob))["lessons_used"] == [lesson["id"]]
        # bob reads its text now, not the run of another tenant it came from
        entry = (await api.get(f"/v1/knowledge/{lesson['id']}", headers=bob)).json()
        assert (entry["body"], entry["source_run_id"]) == (LESSON, None)
        [listed] = (await api.get("/v1/lessons", headers=bob)).json()
        assert (listed["id"], listed["source_run_id"], listed["owner"]) == (
            lesson["id"],
            None,
            None,
        )
        [own] = (await api.get("/v1/lessons", headers=alice)).json()
        assert own["source_run_id"] == lesson["source_run_id"]


class TestRevokedClaims:
    async def test_revoking_a_reviewers_token_gives_its_claims_back(self, api):
        owner = bearer(await mint(api, "service"))
        paused, _ = await paused_and_plain(api, owner)
        [item] = (await api.get("/v1/reviews", params={"run_id": paused})).json()["items"]
        token_id, rita = await minted(api, "reviewer")
        url = f"/v1/reviews/{item['id']}"
        assert (await api.post(f"{url}/claim", headers=rita)).status_code == 200
        assert (await api.delete(f"/v1/tokens/{token_id}")).status_code == 204
        assert (await api.get(url)).json()["status"] == "pending"
        bo = bearer(await mint(api, "reviewer"))
        assert (await api.post(f"{url}/claim", headers=bo)).status_code == 200
        released = [
            e["data"]
            for e in (await api.get("/v1/events", params={"run_id": paused})).json()
            if e["type"] == "review.released"
        ]
        assert released == [
            {"review_id": item["id"], "holder": token_id, "by": None, "reason": "token revoked"}
        ]

    async def test_an_admin_releases_anyones_claim_and_a_reviewer_only_its_own(self, api):
        owner = bearer(await mint(api, "service"))
        paused, _ = await paused_and_plain(api, owner)
        [item] = (await api.get("/v1/reviews", params={"run_id": paused})).json()["items"]
        url = f"/v1/reviews/{item['id']}"
        rita, bo = bearer(await mint(api, "reviewer")), bearer(await mint(api, "reviewer"))
        assert (await api.post(f"{url}/claim", headers=rita)).status_code == 200
        refused = await api.post(f"{url}/release", headers=bo)
        assert refused.status_code == 409
        assert "only they or an admin" in refused.json()["detail"]
        assert (await api.post(f"{url}/release", headers=owner)).status_code == 403
        released = await api.post(f"{url}/release")  # the admin
        assert released.status_code == 200
        assert released.json()["status"] == "pending"
        again = await api.post(f"{url}/release")
        assert again.status_code == 409
        assert again.json()["error"] == "Conflict"


class TestScopeMatrix:
    async def test_each_role_gets_what_its_scope_allows(self, api):
        """One row per (endpoint, caller): the status each role gets on the scoped routes."""
        alice, bob = bearer(await mint(api, "service")), bearer(await mint(api, "service"))
        rita_id, rita = await minted(api, "reviewer")
        bo = bearer(await mint(api, "reviewer"))
        admin: dict = {}
        lesson = await taught(api, alice, rita)
        paused, plain = await paused_and_plain(api, alice)
        [item] = (await api.get("/v1/reviews", params={"run_id": paused})).json()["items"]
        assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=rita)).status_code == 200
        rows = [
            ("GET", "/v1/events", admin, 200),
            ("GET", "/v1/events", rita, 200),
            ("GET", "/v1/events", alice, 403),
            ("GET", f"/v1/events?run_id={plain}", alice, 200),
            ("GET", f"/v1/events?run_id={plain}", bob, 404),
            ("GET", f"/v1/events?run_id={plain}", rita, 404),
            ("GET", f"/v1/events?run_id={paused}", rita, 200),
            ("GET", f"/v1/events?run_id={plain}", admin, 200),
            ("GET", "/v1/stats", alice, 200),
            ("GET", "/v1/stats", rita, 200),
            ("GET", "/v1/evaluations", bob, 200),
            ("GET", "/v1/evaluations", rita, 200),
            ("GET", f"/v1/knowledge/{lesson['id']}", bob, 404),
            ("GET", f"/v1/knowledge/{lesson['id']}", alice, 200),
            ("GET", f"/v1/knowledge/{lesson['id']}", rita, 200),
            ("POST", f"/v1/lessons/{lesson['id']}/share", alice, 403),
            ("POST", f"/v1/lessons/{lesson['id']}/share", rita, 403),
            ("POST", f"/v1/reviews/{item['id']}/release", alice, 403),
            ("POST", f"/v1/reviews/{item['id']}/release", bo, 409),
            ("DELETE", f"/v1/tokens/{rita_id}", rita, 403),
            ("DELETE", f"/v1/tokens/{rita_id}", alice, 403),
            ("POST", f"/v1/reviews/{item['id']}/release", admin, 200),
            ("POST", f"/v1/lessons/{lesson['id']}/share", admin, 200),
            ("DELETE", f"/v1/tokens/{rita_id}", admin, 204),
        ]
        got = [
            (method, path, (await api.request(method, path, headers=headers)).status_code)
            for method, path, headers, _ in rows
        ]
        assert got == [(method, path, status) for method, path, _, status in rows]
