"""The service frame: request ids, the access log, health routes and the body limit."""

import io
import json

import httpx
import pytest
from fastapi import FastAPI

from shared.contracts import ServiceInfo
from shared.logging import configure_logging
from shared.service import build_service_app


@pytest.fixture
def logs():
    stream = io.StringIO()
    configure_logging("test", level="INFO", json=True, secrets=[], stream=stream)

    def read() -> list[dict]:
        lines = stream.getvalue().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    return read


@pytest.fixture
def app() -> FastAPI:
    app = build_service_app(
        title="t", info=lambda: ServiceInfo(service="t", role="test", version="0"), body_limit=64
    )

    @app.post("/echo")
    async def echo(body: dict[str, str]) -> dict[str, str]:
        return body

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("unexpected")

    return app


@pytest.fixture
async def client(app):
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client


async def test_a_callers_request_id_is_echoed_and_logged(client, logs):
    response = await client.post("/echo", json={"a": "b"}, headers={"x-request-id": "req-42"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-42"
    [line] = [e for e in logs() if e["event"] == "request"]
    assert line["request_id"] == "req-42"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/echo", 200)
    assert line["duration_ms"] >= 0


@pytest.mark.parametrize("given", [None, "x" * 129, "bad\tid"])
async def test_a_missing_or_odd_request_id_is_replaced(client, given):
    headers = {"x-request-id": given} if given is not None else {}
    response = await client.get("/v1/info", headers=headers)
    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    assert echoed != given
    assert len(echoed) == 32


async def test_errors_are_logged_with_their_status(client, logs):
    assert (await client.get("/nowhere")).status_code == 404
    assert (await client.get("/boom")).status_code == 500
    statuses = {e["path"]: e["status"] for e in logs() if e["event"] == "request"}
    assert statuses == {"/nowhere": 404, "/boom": 500}


async def test_health_checks_stay_out_of_the_access_log(client, logs):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ready"}
    assert [e for e in logs() if e["event"] == "request"] == []


async def test_bodies_over_the_limit_are_413_and_logged(client, logs):
    response = await client.post("/echo", json={"a": "x" * 100})
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"
    assert [e["status"] for e in logs() if e["event"] == "request"] == [413]


async def test_at_warning_no_access_line_yet_the_request_id_is_echoed_and_bound(app):
    stream = io.StringIO()
    configure_logging("test", level="WARNING", json=True, secrets=[], stream=stream)
    from shared.logging import get_logger

    warn = get_logger("test.route")

    @app.get("/warn")  # type: ignore[untyped-decorator]
    async def warns() -> dict[str, str]:
        warn.info("below the level")
        warn.warning("worth a line")
        return {"ok": "yes"}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/warn", headers={"x-request-id": "req-7"})
    assert response.headers["x-request-id"] == "req-7"
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    assert [(e["event"], e["request_id"]) for e in lines] == [("worth a line", "req-7")]
