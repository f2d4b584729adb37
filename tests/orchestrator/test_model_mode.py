"""ORCHESTRATOR_MODELS: which models answer the platform's calls, as ``GET /v1/info`` says it
(the console reads it before anyone logs in, so it needs no token and holds no secret)."""

import pytest
from pydantic import ValidationError

from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.apps import serving


def settings(tmp_path, service_token: str) -> OrchestratorSettings:
    return OrchestratorSettings(
        service_token=service_token,
        database_url=f"sqlite:///{tmp_path}/crosscheck.sqlite",
        admin_token=ADMIN_TOKEN,
        dbos_poll_s=0.05,
    )


class TestInfo:
    async def test_a_standalone_orchestrator_says_providers(self, tmp_path, service_token):
        async with serving(create_app(settings(tmp_path, service_token))) as api:
            response = await api.get("/v1/info")  # no token
        assert response.status_code == 200
        assert response.json()["model_mode"] == "providers"
        assert response.json()["demo"] is False

    @pytest.mark.parametrize("given", ["demo", "local", " Demo "])
    async def test_the_mode_set_in_the_environment_is_the_one_reported(
        self, tmp_path, service_token, monkeypatch, given
    ):
        monkeypatch.setenv("ORCHESTRATOR_MODELS", given)
        async with serving(create_app(settings(tmp_path, service_token))) as api:
            body = (await api.get("/v1/info")).json()
        wanted = given.strip().lower()
        assert body["model_mode"] == wanted
        assert body["demo"] is (wanted == "demo")
        assert ADMIN_TOKEN not in str(body)
        assert service_token not in str(body)


class TestSetting:
    @pytest.mark.parametrize("bad", ["gpu", "", "real", "demo,local"])
    def test_an_unknown_mode_is_a_startup_error_naming_the_variable_and_the_choices(
        self, tmp_path, service_token, monkeypatch, bad
    ):
        monkeypatch.setenv("ORCHESTRATOR_MODELS", bad)
        with pytest.raises(ValidationError) as raised:
            settings(tmp_path, service_token)
        message = str(raised.value)
        assert "ORCHESTRATOR_MODELS must be one of demo, local, providers" in message
        assert f"got {bad!r}" in message
