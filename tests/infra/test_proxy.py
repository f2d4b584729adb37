"""The reverse proxy's nginx.conf (infra/proxy/nginx.conf), checked three ways:

- statically (tests/infra/_nginx.py): load balancing with passive health over every replica,
  names re-resolved, retries that never resend a POST, websockets upgraded with a long
  timeout, X-Forwarded-* passed, a body limit above the API's, non-root paths in /tmp; and
  deliberately broken copies of the file are caught;
- `nginx -t` loads it (Debian's nginx; scripts/bootstrap.sh --dev installs it);
- a real nginx runs it in front of two stand-in replicas on this machine: requests are spread
  over both, a refused connection is retried on the other (GET and POST), the forwarded
  headers arrive, a 1.5 MiB body reaches the API, and a websocket on /v1/events goes through.

The local nginx differs from the container in what only Docker provides: the replicas' names
and the `resolve` flag (see _nginx.for_nginx_test), the listen address and the /tmp prefix.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.sync.client import connect as websocket_connect

from shared.contracts import MAX_BODY_BYTES
from tests.infra import _nginx
from tests.infra._support import REPO

NGINX_CONF = REPO / "infra" / "proxy" / "nginx.conf"
REPLICA_PORTS = {"orchestrator-1": 8000, "orchestrator-2": 8000}
NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
)
NO_NGINX = (
    "no nginx binary on this machine: `scripts/bootstrap.sh --dev` installs Debian's nginx "
    "(as root or with sudo), which these tests run the proxy's config with"
)


def text() -> str:
    return NGINX_CONF.read_text()


def problems(config_text: str) -> list[str]:
    return _nginx.config_problems(_nginx.parse(config_text), replicas=REPLICA_PORTS)


# ------------------------------------------------------------------------------ the reader
def test_the_reader_understands_nginx_syntax():
    config = _nginx.parse(
        'a 1;  # comment ; { }\nb "x y" \'z;\' {\n  c;\n  d e { f g; }\n}\nlog_format m "#1";\n'
    )
    assert [(d.name, d.args) for d in config.directives] == [
        ("a", ["1"]),
        ("b", ["x y", "z;"]),
        ("log_format", ["m", "#1"]),
    ]
    block = config.first("b")
    assert block is not None
    assert [d.name for d in block.block or []] == ["c", "d"]
    assert [d.name for d in config.walk()] == ["a", "b", "log_format", "c", "d", "f"]
    for broken in ("a", "a {", "}", "a { b; } }", "{ a; }"):
        with pytest.raises(ValueError, match=r"line \d+|unterminated"):
            _nginx.parse(broken)


def test_times_and_sizes():
    assert _nginx.seconds("1h") == 3600
    assert _nginx.seconds("1h30m") == 5400
    assert _nginx.seconds("75") == 75
    assert _nginx.seconds("500ms") == 0.5
    assert _nginx.size_bytes("2m") == 2 * 1024 * 1024
    assert _nginx.size_bytes("64k") == 65536
    assert _nginx.size_bytes("0") == 0
    for bad in ("1x", "", "h"):
        with pytest.raises(ValueError, match="not an nginx time"):
            _nginx.seconds(bad)


# ------------------------------------------------------------------------ static checks
def test_the_proxy_config_has_no_problems():
    assert problems(text()) == []


def test_the_config_proxies_to_every_replica_with_passive_health():
    config = _nginx.parse(text())
    (members,) = _nginx.upstreams(config).values()
    assert {(s.host, s.port) for s in members} == set(REPLICA_PORTS.items())
    for server in members:
        assert int(server.params["max_fails"]) >= 1
        assert _nginx.seconds(server.params["fail_timeout"]) >= 1
        assert "resolve" in server.params


def test_the_websocket_location_upgrades():
    config = _nginx.parse(text())
    http = _nginx.http_block(config)
    (server,) = _nginx.servers(config)
    location = _nginx.locations(server)["= /v1/events"]
    headers = _nginx.effective_headers(http, server, location)
    assert headers["upgrade"] == "$http_upgrade"
    assert headers["connection"] in _nginx.connection_upgrade_maps(config)
    assert _nginx.effective_value("proxy_http_version", http, server, location) == ["1.1"]
    timeout = _nginx.effective_value("proxy_read_timeout", http, server, location)
    assert timeout is not None
    assert _nginx.seconds(timeout[0]) >= 3600


def _replace(old: str, new: str) -> Callable[[str], str]:
    def mutate(config_text: str) -> str:
        assert old in config_text, f"{old!r} is not in nginx.conf any more: update this test"
        return config_text.replace(old, new, 1)

    return mutate


def _sub(pattern: str, new: str) -> Callable[[str], str]:
    def mutate(config_text: str) -> str:
        changed, count = re.subn(pattern, new, config_text, count=1, flags=re.MULTILINE)
        assert count == 1, f"{pattern!r} does not match nginx.conf any more: update this test"
        return changed

    return mutate


BROKEN: dict[str, Callable[[str], str]] = {
    "runs a user directive": _replace("worker_processes 1;", "user nginx;\nworker_processes 1;"),
    "pid on the read-only root": _replace("pid /tmp/nginx.pid;", "pid /run/nginx.pid;"),
    "no pid directive": _replace("pid /tmp/nginx.pid;", ""),
    "temp files on the read-only root": _replace(
        "proxy_temp_path /tmp/proxy_temp;", "proxy_temp_path /var/cache/nginx/proxy_temp;"
    ),
    "a temp path left at its default": _replace("scgi_temp_path /tmp/scgi_temp;", ""),
    "one replica missing": _sub(r"^\s*server orchestrator-2:.*\n", ""),
    "an unknown replica": _replace("server orchestrator-2:8000", "server orchestrator-3:8000"),
    "a replica on another port": _replace(
        "server orchestrator-1:8000", "server orchestrator-1:8001"
    ),
    "no max_fails": _replace(
        "orchestrator-1:8000 resolve max_fails=2", "orchestrator-1:8000 resolve"
    ),
    "max_fails=0": _replace("resolve max_fails=2", "resolve max_fails=0"),
    "no fail_timeout": _sub(r"(orchestrator-2:8000 resolve max_fails=2) fail_timeout=\w+", r"\1"),
    "resolved once at start": _replace("orchestrator-2:8000 resolve ", "orchestrator-2:8000 "),
    "no zone": _sub(r"^\s*zone orchestrator 64k;\n", ""),
    "no resolver": _sub(r"^\s*resolver 127\.0\.0\.11.*\n", ""),
    "a public resolver": _replace("resolver 127.0.0.11", "resolver 8.8.8.8"),
    "listens on loopback": _replace("listen 8080;", "listen 127.0.0.1:8080;"),
    "body limit at nginx's default": _sub(r"^\s*client_max_body_size 2m;\n", ""),
    "body limit equal to the API's": _replace(
        "client_max_body_size 2m;", "client_max_body_size 1m;"
    ),
    "no X-Forwarded-For": _sub(r"^\s*proxy_set_header X-Forwarded-For .*\n", ""),
    "no X-Forwarded-Proto": _sub(r"^\s*proxy_set_header X-Forwarded-Proto .*\n", ""),
    "a location's own header drops the forwarded ones": _replace(
        "proxy_read_timeout 1h;", 'proxy_read_timeout 1h;\n            proxy_set_header X-Ws "1";'
    ),
    "websocket without Upgrade": _sub(r"^\s*proxy_set_header Upgrade .*\n", ""),
    "websocket with Connection: close": _replace(
        "proxy_set_header Connection $connection_upgrade;", 'proxy_set_header Connection "close";'
    ),
    "websocket without Connection": _sub(r"^\s*proxy_set_header Connection .*\n", ""),
    "websocket at HTTP/1.0": _sub(r"^\s*proxy_http_version 1\.1;\n", ""),
    "websocket cut after a minute": _replace("proxy_read_timeout 1h;", "proxy_read_timeout 60s;"),
    "no websocket location": _replace("location = /v1/events {", "location = /v1/other {"),
    "no retry on a refused connection": _replace(
        "proxy_next_upstream error timeout", "proxy_next_upstream timeout"
    ),
    "retries switched off": _replace(
        "proxy_next_upstream error timeout http_502 http_504;", "proxy_next_upstream off;"
    ),
    "POST resent": _replace("http_502 http_504;", "http_502 http_504 non_idempotent;"),
    "a location that bypasses the replicas": _replace(
        "location / {\n            proxy_pass http://orchestrator;",
        "location / {\n            proxy_pass http://orchestrator-1:8000;",
    ),
    "no catch-all location": _replace("location / {", "location /v1/ {"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_proxy_config_is_caught(name: str):
    assert problems(text()) == [], "the check fails on the real file already"
    assert problems(BROKEN[name](text())) != [], name


# ------------------------------------------------------------------------------ nginx -t
@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A directory for nginx's prefix, pid and temporary files. World-readable: when the tests
    run as root, nginx's workers run as `nobody` and must reach the temporary files."""
    path = Path(tempfile.mkdtemp(prefix="crosscheck-nginx-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _nginx_command(directory: Path, *args: str) -> list[str]:
    assert NGINX is not None, NO_NGINX
    return [
        NGINX,
        "-p",
        f"{directory}/",
        "-c",
        str(directory / "nginx.conf"),
        "-e",
        "stderr",
        *args,
    ]


def test_nginx_accepts_the_config():
    assert NGINX is not None, NO_NGINX
    with scratch() as directory:
        (directory / "nginx.conf").write_text(_nginx.for_nginx_test(text(), str(directory)))
        result = subprocess.run(
            _nginx_command(directory, "-t"), capture_output=True, text=True, timeout=30, check=False
        )
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr
    assert "[warn]" not in result.stderr, result.stderr


def test_nginx_refuses_a_broken_copy():
    """The `nginx -t` above would catch a syntax error: it is not a no-op."""
    assert NGINX is not None, NO_NGINX
    broken = text().replace("proxy_read_timeout 1h;", "proxy_read_timeout;", 1)
    with scratch() as directory:
        (directory / "nginx.conf").write_text(_nginx.for_nginx_test(broken, str(directory)))
        result = subprocess.run(
            _nginx_command(directory, "-t"), capture_output=True, text=True, timeout=30, check=False
        )
    assert result.returncode != 0
    assert "proxy_read_timeout" in result.stderr


# ------------------------------------------------------------ a real nginx, real traffic
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"nginx exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _replica_app(name: str) -> Starlette:
    """Stands in for one orchestrator replica: says who it is and what reached it."""

    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse(
            {
                "replica": name,
                "method": request.method,
                "path": request.url.path,
                "headers": dict(request.headers),
                "body_bytes": len(body),
            }
        )

    async def events(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(json.dumps({"replica": name, "headers": dict(websocket.headers)}))
        await websocket.close()

    return Starlette(
        routes=[
            WebSocketRoute("/v1/events", events),
            Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
    )


@contextlib.contextmanager
def replica(name: str) -> Iterator[int]:
    port = _free_port()
    config = uvicorn.Config(
        _replica_app(name), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_for_port(port)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def proxy(backends: dict[str, int]) -> Iterator[str]:
    """The real config under a local nginx, in front of ``backends`` (replica -> port)."""
    assert NGINX is not None, NO_NGINX
    port = _free_port()
    with scratch() as directory:
        (directory / "nginx.conf").write_text(
            _nginx.for_nginx_test(
                text(),
                str(directory),
                backends={name: f"127.0.0.1:{p}" for name, p in backends.items()},
                listen=f"127.0.0.1:{port}",
            )
        )
        log = (directory / "error.log").open("wb")
        process = subprocess.Popen(
            _nginx_command(directory, "-g", "daemon off;"),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            _wait_for_port(port, process)
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            log.close()


def test_the_proxy_spreads_requests_and_forwards_the_client():
    with replica("orchestrator-1") as one, replica("orchestrator-2") as two:
        with proxy({"orchestrator-1": one, "orchestrator-2": two}) as address:
            with httpx.Client(base_url=f"http://{address}", timeout=10) as client:
                answers = [client.get("/v1/runs", params={"n": i}).json() for i in range(8)]
    assert {a["replica"] for a in answers} == {"orchestrator-1", "orchestrator-2"}
    headers = answers[0]["headers"]
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-host"] == address.split(":")[0]
    assert headers["host"] == address
    assert "upgrade" not in headers  # plain requests are not upgraded


def test_a_refused_connection_is_retried_on_the_other_replica():
    """orchestrator-2 is down (nothing listens on its port): no request fails, POST included
    (nginx never reached a replica with it, so resending it is safe)."""
    dead = _free_port()
    with replica("orchestrator-1") as one:
        with proxy({"orchestrator-1": one, "orchestrator-2": dead}) as address:
            with httpx.Client(base_url=f"http://{address}", timeout=10) as client:
                responses = [client.get("/v1/runs") for _ in range(4)]
                responses += [client.post("/v1/runs", json={"n": i}) for i in range(4)]
    assert [r.status_code for r in responses] == [200] * 8
    assert {r.json()["replica"] for r in responses} == {"orchestrator-1"}
    assert {r.json()["method"] for r in responses} == {"GET", "POST"}


def test_a_body_up_to_the_apis_limit_reaches_the_api():
    """nginx passes on what the API's own limit judges (the API answers 413 itself)."""
    size = MAX_BODY_BYTES + MAX_BODY_BYTES // 2
    with replica("orchestrator-1") as one, replica("orchestrator-2") as two:
        with proxy({"orchestrator-1": one, "orchestrator-2": two}) as address:
            with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
                response = client.post("/v1/runs", content=b"x" * size)
    assert response.status_code == 200, response.text
    assert response.json()["body_bytes"] == size


def test_the_events_websocket_goes_through():
    with replica("orchestrator-1") as one, replica("orchestrator-2") as two:
        with proxy({"orchestrator-1": one, "orchestrator-2": two}) as address:
            seen = set()
            for _ in range(4):
                with websocket_connect(f"ws://{address}/v1/events?since=0", open_timeout=10) as ws:
                    message = json.loads(ws.recv(timeout=10))
                seen.add(message["replica"])
                assert message["headers"]["upgrade"].lower() == "websocket"
                assert "upgrade" in message["headers"]["connection"].lower()
                assert message["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert seen == {"orchestrator-1", "orchestrator-2"}
