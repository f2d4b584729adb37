"""Logins an attacker floods, sessions that pile up, and the ops endpoints that can require a
token (SQLite and Postgres)."""

import asyncio

import pytest
from sqlmodel import Session, select

from orchestrator.app import create_app
from orchestrator.tables import ApiToken
from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.apps import serving

PASSWORD = "correct horse battery staple"


async def login(api, username="ana", password=PASSWORD):
    return await api.post("/v1/auth/login", json={"username": username, "password": password})


@pytest.fixture
async def ana(api):
    created = await api.post("/v1/accounts", json={"username": "ana", "password": PASSWORD})
    assert created.status_code == 201


class TestLoginThrottling:
    async def test_failures_on_one_account_back_off_with_retry_after(self, api, ana):
        for _ in range(5):  # a few typos are free
            assert (await login(api, password="wrong password!!")).status_code == 401
        assert (await login(api, password="wrong password!!")).status_code == 401
        held = await login(api)  # even the right password waits now
        assert held.status_code == 429
        assert held.json()["error"] == "TooManyRequests"
        assert held.headers["Retry-After"] == "1"
        await asyncio.sleep(1.1)
        assert (await login(api, password="wrong password!!")).status_code == 401
        doubled = await login(api)
        assert doubled.status_code == 429
        assert doubled.headers["Retry-After"] == "2"
        await asyncio.sleep(2.1)
        assert (await login(api)).status_code == 200  # and a success clears the count
        assert (await login(api, password="wrong password!!")).status_code == 401
        assert (await login(api)).status_code == 200

    async def test_a_client_guessing_across_accounts_is_held_too(self, api, ana):
        for i in range(20):
            response = await login(api, username=f"nobody{i}", password="wrong password!!")
            assert response.status_code == 401
        assert (await login(api, username="nobody-else", password="x" * 12)).status_code == 401
        held = await login(api)
        assert held.status_code == 429
        assert "client" in held.json()["detail"]

    async def test_a_flood_of_wrong_passwords_is_mostly_turned_away_before_hashing(self, api, ana):
        answers = await asyncio.gather(
            *(login(api, password="wrong password!!") for _ in range(40))
        )
        codes = [a.status_code for a in answers]
        assert set(codes) == {401, 429}
        # six failures are answered; the two hashing slots may each finish one more
        assert 6 <= codes.count(401) <= 8, codes


class TestSessions:
    async def test_an_account_keeps_its_ten_newest_sessions(self, api, ana, orchestrator_app):
        tokens = [(await login(api)).json()["token"] for _ in range(11)]
        oldest, *rest = tokens
        me = "/v1/auth/me"
        assert (await api.get(me, headers={"Authorization": f"Bearer {oldest}"})).status_code == 401
        for token in rest:
            assert (
                await api.get(me, headers={"Authorization": f"Bearer {token}"})
            ).status_code == 200
        with Session(orchestrator_app.state.engine) as session:
            rows = session.exec(select(ApiToken).where(ApiToken.name == "ana")).all()
        assert all(row.expires_at is not None for row in rows)
        assert sum(row.revoked_at is None for row in rows) == 10


class TestOpsEndpoints:
    async def test_metrics_and_docs_are_open_by_default(self, orchestrator_settings, peers):
        app = create_app(orchestrator_settings, peer_transports=peers)
        async with serving(app) as anonymous:
            for path in ("/metrics", "/openapi.json", "/docs"):
                assert (await anonymous.get(path)).status_code == 200, path

    async def test_metrics_and_docs_can_require_a_token(self, orchestrator_settings, peers):
        settings = orchestrator_settings.model_copy(
            update={"metrics_auth": True, "docs_auth": True}
        )
        app = create_app(settings, peer_transports=peers)
        async with serving(app) as anonymous:
            for path in ("/metrics", "/openapi.json", "/docs", "/redoc"):
                refused = await anonymous.get(path)
                assert refused.status_code == 401, path
                assert refused.json()["error"] == "Unauthorized"
                wrong = await anonymous.get(path, headers={"Authorization": "Bearer nope-nope"})
                assert wrong.status_code == 401
            assert (await anonymous.get("/healthz")).status_code == 200
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            for path in ("/metrics", "/openapi.json", "/docs"):
                assert (await anonymous.get(path, headers=admin)).status_code == 200, path


class TestFiles:
    async def test_the_sqlite_files_are_the_owners_only(
        self, tmp_path, orchestrator_settings, peers
    ):
        path = tmp_path / "private" / "crosscheck.sqlite"
        settings = orchestrator_settings.model_copy(update={"database_url": f"sqlite:///{path}"})
        app = create_app(settings, peer_transports=peers)
        async with serving(app, ADMIN_TOKEN) as api:
            assert (await api.post("/v1/runs", json={"task": "Explain tides."})).status_code == 201
            files = sorted(path.parent.glob("crosscheck*.sqlite*"))
            modes = {f.name: oct(f.stat().st_mode & 0o777) for f in files}
        assert {"crosscheck.sqlite", "crosscheck.dbos.sqlite", "crosscheck.sqlite-wal"} <= set(
            modes
        )
        assert set(modes.values()) == {"0o600"}, modes
