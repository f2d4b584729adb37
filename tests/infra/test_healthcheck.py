"""infra/docker/healthcheck.py, the images' HEALTHCHECK, run against a real local HTTP server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.infra._support import DOCKER_DIR

SCRIPT = DOCKER_DIR / "healthcheck.py"


class _Handler(BaseHTTPRequestHandler):
    status = 200
    body = b'{"status": "ok"}'
    paths: list[str] = []

    def do_GET(self):
        type(self).paths.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format, *args):  # keep the test output quiet
        pass


@pytest.fixture
def server():
    handler = type("Handler", (_Handler,), {"paths": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # Proxies set to a dead address prove the probe ignores them.
    env = {"HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", **env}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _port(server) -> str:
    return str(server.server_address[1])


def test_healthy_service_exits_zero(server):
    result = _run({"ACTOR_PORT": _port(server)}, "ACTOR_PORT")
    assert result.returncode == 0, result.stderr
    assert server.RequestHandlerClass.paths == ["/healthz"]


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, b'{"status": "ok"}'),
        (500, b"oops"),
        (200, b'{"status": "starting"}'),
        (200, b"not json"),
        (200, json.dumps(["ok"]).encode()),
    ],
)
def test_unhealthy_answers_exit_one(server, status, body):
    server.RequestHandlerClass.status = status
    server.RequestHandlerClass.body = body
    result = _run({"SANDBOX_PORT": _port(server)}, "SANDBOX_PORT")
    assert result.returncode == 1
    assert "unhealthy" in result.stderr


def test_nothing_listening_exits_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _run({"CRITIC_PORT": str(port)}, "CRITIC_PORT")
    assert result.returncode == 1
    assert "unhealthy" in result.stderr


@pytest.mark.parametrize("value", [None, "", "eighty", "0", "70000"])
def test_a_missing_or_bad_port_variable_is_unhealthy(value):
    env = {} if value is None else {"ACTOR_PORT": value}
    result = _run(env, "ACTOR_PORT")
    assert result.returncode == 1
    assert "ACTOR_PORT" in result.stderr


def test_a_streamlit_health_endpoint_is_probed_on_its_path(server):
    """The console: ``healthcheck.py CONSOLE_PORT /_stcore/health``, which answers plain ok."""
    server.RequestHandlerClass.body = b"ok"
    result = _run({"CONSOLE_PORT": _port(server)}, "CONSOLE_PORT", "/_stcore/health")
    assert result.returncode == 0, result.stderr
    assert server.RequestHandlerClass.paths == ["/_stcore/health"]


@pytest.mark.parametrize(("status", "body"), [(503, b"ok"), (200, b"ko"), (200, b'"ok"')])
def test_a_streamlit_health_endpoint_that_is_not_ready_is_unhealthy(server, status, body):
    server.RequestHandlerClass.status = status
    server.RequestHandlerClass.body = body
    result = _run({"CONSOLE_PORT": _port(server)}, "CONSOLE_PORT", "/_stcore/health")
    assert result.returncode == 1
    assert "unhealthy" in result.stderr


@pytest.mark.parametrize(
    "args",
    [(), ("ACTOR_PORT", "healthz"), ("ACTOR_PORT", "/healthz", "extra")],
    ids=["no arguments", "relative path", "too many"],
)
def test_usage_error_exits_two(args):
    assert _run({"ACTOR_PORT": "8001"}, *args).returncode == 2
