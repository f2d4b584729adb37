"""scripts/test-services.py: the Postgres and Redis of `make test`. When the configured URLs do
not answer it starts throwaway servers on free ports, and `stop` leaves nothing behind."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-services.py"
POSTGRES_ENV = "CROSSCHECK_TEST_POSTGRES_URL"
REDIS_ENV = "CROSSCHECK_TEST_REDIS_URL"
STATE_ENV = "CROSSCHECK_TEST_SERVICES_DIR"
# Port 1 (tcpmux) is closed on any machine this runs on: nothing answers there.
CLOSED = {
    POSTGRES_ENV: "postgresql://postgres@127.0.0.1:1/postgres",
    REDIS_ENV: "redis://127.0.0.1:1/15",
}

pytestmark = pytest.mark.skipif(
    not glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("redis-server") is None,
    reason="no local Postgres or Redis binaries: `make test` installs them when it needs them",
)


def services(command: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the script (its owner, by default, is this process)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSCHECK_TEST_")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), command, *args],
        env={**child_env, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def exports(stdout: str) -> dict[str, str]:
    """The `export NAME=value` lines, as the shell would read them."""
    pairs = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        name, value = words[1].split("=", 1)
        pairs[name] = value
    return pairs


def port(url: str) -> int:
    return int(urlsplit(url).port or 0)


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no port, and only its parent can reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def refused(port_number: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port_number), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def throwaway():
    """Throwaway servers from `start` with closed ports configured; stopped after the test."""
    started = services("start", CLOSED)
    assert started.returncode == 0, started.stderr
    urls = exports(started.stdout)
    yield urls, started.stderr
    services("stop", {STATE_ENV: urls[STATE_ENV]})  # a no-op once the test has stopped them


def test_closed_ports_get_throwaway_servers_that_stop_without_a_trace(throwaway):
    urls, said = throwaway
    state = Path(urls[STATE_ENV])
    assert set(urls) == {POSTGRES_ENV, REDIS_ENV, STATE_ENV}
    assert port(urls[POSTGRES_ENV]) not in {1, 5432}
    assert urlsplit(urls[POSTGRES_ENV]).path == "/postgres"
    assert port(urls[REDIS_ENV]) not in {1, 6379}
    assert urlsplit(urls[REDIS_ENV]).path == "/15"
    pg_port, redis_port = port(urls[POSTGRES_ENV]), port(urls[REDIS_ENV])
    assert f"started a throwaway Postgres on 127.0.0.1:{pg_port} under {state}" in said
    assert f"started a throwaway Redis on 127.0.0.1:{redis_port} under {state}" in said

    with psycopg.connect(urls[POSTGRES_ENV], connect_timeout=3) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert superuser.fetchone() == (True,)
    client = redis.Redis.from_url(urls[REDIS_ENV], socket_timeout=3)
    assert client.ping() is True
    client.close()

    postgres_pid = int((state / "postgres" / "postmaster.pid").read_text().split()[0])
    redis_pid = int((state / "redis" / "redis.pid").read_text().split()[0])
    assert running(postgres_pid)
    assert running(redis_pid)

    stopped = services("stop", {STATE_ENV: str(state)})
    assert stopped.returncode == 0, stopped.stderr
    assert not running(postgres_pid)
    assert not running(redis_pid)
    assert refused(pg_port)
    assert refused(redis_port)
    assert not state.exists()


def test_servers_that_answer_are_used_as_they_are(throwaway):
    urls, _ = throwaway
    again = services("start", {POSTGRES_ENV: urls[POSTGRES_ENV], REDIS_ENV: urls[REDIS_ENV]})
    assert again.returncode == 0, again.stderr
    assert exports(again.stdout) == {
        POSTGRES_ENV: urls[POSTGRES_ENV],
        REDIS_ENV: urls[REDIS_ENV],
        STATE_ENV: "",  # nothing started, nothing to stop
    }
    assert f"using the running Postgres at {urls[POSTGRES_ENV]}" in again.stderr
    assert f"using the running Redis at {urls[REDIS_ENV]}" in again.stderr


def test_servers_whose_owner_died_are_stopped_by_the_next_run():
    owner = subprocess.Popen(["sleep", "60"])
    started = services("start", CLOSED, "--owner", str(owner.pid))
    assert started.returncode == 0, started.stderr
    state = Path(exports(started.stdout)[STATE_ENV])
    try:
        postgres_pid = int((state / "postgres" / "postmaster.pid").read_text().split()[0])
        owner.kill()  # the test command, killed before it could stop its servers
        owner.wait()
        assert running(postgres_pid)

        swept = services("stop", {})  # the next run's `stop` (or `start`) finds them
        assert swept.returncode == 0, swept.stderr
        assert f"stopped the throwaway servers left by an interrupted run under {state}" in (
            swept.stderr
        )
        assert not running(postgres_pid)
        assert not state.exists()
    finally:
        owner.kill()
        owner.wait()
        services("stop", {STATE_ENV: str(state)})


def test_stop_removes_only_a_directory_that_start_made(tmp_path):
    (tmp_path / "keep.txt").write_text("not a test server")
    stopped = services("stop", {STATE_ENV: str(tmp_path)})
    assert stopped.returncode == 0, stopped.stderr
    assert (tmp_path / "keep.txt").exists()
