"""Settings from the environment and the ``crosscheck-fakemodel`` entry point."""

import asyncio
from typing import Any

import httpx2
import openai
import pytest
import uvicorn
from pydantic import ValidationError

from fakemodel import __main__ as entry
from fakemodel.app import create_app
from fakemodel.settings import FakeModelSettings


def test_settings_defaults():
    settings = FakeModelSettings()
    assert (settings.host, settings.port, settings.latency_ms, settings.log_limit) == (
        "127.0.0.1",
        8009,
        0,
        10_000,
    )


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("FAKEMODEL_PORT", "9100")
    monkeypatch.setenv("FAKEMODEL_LATENCY_MS", "25")
    monkeypatch.setenv("FAKEMODEL_LOG_LIMIT", "5")
    settings = FakeModelSettings()
    assert (settings.port, settings.latency_ms, settings.log_limit) == (9100, 25, 5)
    monkeypatch.setenv("FAKEMODEL_LATENCY_MS", "-1")
    with pytest.raises(ValidationError):
        FakeModelSettings()


def test_main_runs_uvicorn_quietly(monkeypatch):
    monkeypatch.setenv("FAKEMODEL_PORT", "9101")
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options, app=app))
    entry.main()
    assert seen["port"] == 9101
    assert seen["host"] == "127.0.0.1"
    assert seen["log_level"] == "warning"
    assert seen["access_log"] is False
    assert seen["app"].state.fakemodel.settings.port == 9101


async def test_serves_the_sdk_over_a_real_socket():
    app = create_app(FakeModelSettings(port=0))
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        access_log=False,
        ws="none",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx2.AsyncClient() as http:
            client = openai.AsyncOpenAI(
                api_key="sk-test-socket",
                base_url=f"http://127.0.0.1:{port}/v1",
                max_retries=0,
                http_client=http,
            )
            completion = await client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "<task>hi</task>"}]
            )
        assert completion.id.startswith("scripted-")
    finally:
        server.should_exit = True
        await task


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_the_fake_model_refuses_to_listen_beyond_loopback(monkeypatch, host):
    monkeypatch.setenv("FAKEMODEL_HOST", host)
    with pytest.raises(ValidationError, match="not a loopback address"):
        FakeModelSettings()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_are_fine(monkeypatch, host):
    monkeypatch.setenv("FAKEMODEL_HOST", host)
    assert FakeModelSettings().host == host


def test_an_isolated_network_can_allow_it_explicitly(monkeypatch):
    monkeypatch.setenv("FAKEMODEL_HOST", "0.0.0.0")
    monkeypatch.setenv("FAKEMODEL_ALLOW_NON_LOOPBACK", "1")
    assert FakeModelSettings().host == "0.0.0.0"


def test_the_entry_point_exits_before_listening_beyond_loopback(monkeypatch):
    monkeypatch.setenv("FAKEMODEL_HOST", "0.0.0.0")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn was started"))
    with pytest.raises(ValidationError):
        entry.main()
