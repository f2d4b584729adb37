"""Console accounts: argon2-hashed passwords exchanged for expiring session tokens."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session, select

from orchestrator.tables import Account, ApiToken
from tests.orchestrator.conftest import ADMIN_TOKEN, mint
from tests.support.apps import uvicorn_serving

PASSWORD = "correct horse battery staple"


@pytest.fixture
def database_url(tmp_path):
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


async def create(api, username="ana", password=PASSWORD, **extra):
    return await api.post(
        "/v1/accounts", json={"username": username, "password": password, **extra}
    )


class TestAccounts:
    async def test_a_reviewer_logs_in_and_works_the_queue(self, api):
        assert (await create(api)).status_code == 201
        login = await api.post("/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        assert login.status_code == 200
        body = login.json()
        assert body["role"] == "reviewer"
        headers = {"Authorization": f"Bearer {body['token']}"}
        assert (await api.get("/v1/reviews", headers=headers)).status_code == 200
        assert (await api.post("/v1/runs", json={"task": "t"}, headers=headers)).status_code == 403

    async def test_me_names_the_caller_for_every_kind_of_token(self, api):
        admin = (await api.get("/v1/auth/me")).json()
        assert admin["role"] == "admin"
        assert ADMIN_TOKEN not in str(admin)
        service = {"Authorization": f"Bearer {await mint(api, 'service')}"}
        assert (await api.get("/v1/auth/me", headers=service)).json()["role"] == "service"
        await create(api)
        login = await api.post("/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        session = {"Authorization": f"Bearer {login.json()['token']}"}
        me = (await api.get("/v1/auth/me", headers=session)).json()
        assert (me["name"], me["role"]) == ("ana", "reviewer")
        nobody = await api.get("/v1/auth/me", headers={"Authorization": "Bearer wrong-token"})
        assert nobody.status_code == 401

    async def test_passwords_are_stored_as_argon2_hashes(self, api, orchestrator_app):
        await create(api)
        with Session(orchestrator_app.state.engine) as session:
            account = session.exec(select(Account)).one()
        assert account.password_hash.startswith("$argon2")
        assert PASSWORD not in account.password_hash

    @pytest.mark.parametrize(
        ("username", "password"), [("ana", "wrong password!!"), ("nobody", PASSWORD)]
    )
    async def test_bad_logins_are_401_and_alike(self, api, username, password):
        await create(api)
        response = await api.post(
            "/v1/auth/login", json={"username": username, "password": password}
        )
        assert response.status_code == 401
        assert response.json()["detail"] == "unknown username or wrong password"

    async def test_session_tokens_expire(self, api, orchestrator_app):
        await create(api)
        token = (
            await api.post("/v1/auth/login", json={"username": "ana", "password": PASSWORD})
        ).json()["token"]
        with Session(orchestrator_app.state.engine) as session:
            row = session.exec(select(ApiToken).where(ApiToken.name == "ana")).one()
            row.expires_at = datetime.now(UTC) - timedelta(seconds=1)
            session.add(row)
            session.commit()
        response = await api.get("/v1/reviews", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401

    @pytest.mark.parametrize(
        "body",
        [
            {"username": "a", "password": PASSWORD},
            {"username": "ana ana", "password": PASSWORD},
            {"username": "ana", "password": "short"},
            {"username": "ana", "password": PASSWORD, "role": "service"},
        ],
    )
    async def test_invalid_accounts_are_422(self, api, body):
        assert (await api.post("/v1/accounts", json=body)).status_code == 422

    async def test_duplicates_are_409_and_only_admins_create(self, api):
        await create(api)
        assert (await create(api)).status_code == 409
        reviewer = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        response = await api.post(
            "/v1/accounts", json={"username": "bo", "password": PASSWORD}, headers=reviewer
        )
        assert response.status_code == 403


async def test_the_cli_creates_reviewer_accounts(orchestrator_app, tmp_path):
    async with uvicorn_serving(orchestrator_app) as url:
        env = {
            **os.environ,
            "CROSSCHECK_URL": url,
            "CROSSCHECK_TOKEN": ADMIN_TOKEN,
            "CROSSCHECK_NEW_PASSWORD": PASSWORD,
        }
        import asyncio

        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "crosscheck", "reviewer", "add", "maria"],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "created reviewer account maria" in result.stdout
        import httpx

        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            login = await client.post(
                "/v1/auth/login", json={"username": "maria", "password": PASSWORD}
            )
        assert login.status_code == 200
