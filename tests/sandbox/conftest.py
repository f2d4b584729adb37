"""Fixtures for the sandbox: real apps with real bubblewrap sandboxes, and host-side probes.

Real isolation is the point, so these tests need bubblewrap: without it they skip on a
developer machine and fail in CI (``CI`` set), where ``.ci/run`` must install it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sandbox.app import create_app
from sandbox.service import SandboxService
from sandbox.settings import SandboxSettings

TOKEN = "test-service-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "sk-test-parent-secret-0123456789abcdef"
NOBODY = 65534


def require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail(
                "bubblewrap is missing: CI must test real isolation (apt-get install bubblewrap)"
            )
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    if os.geteuid() != 0:
        pytest.skip("these tests create pids cgroups and drop to uid 65534: run them as root")


def sandbox_settings(**overrides: Any) -> SandboxSettings:
    """Settings from keywords only: no developer SANDBOX_* variable leaks in."""
    values: dict[str, Any] = {"CROSSCHECK_SERVICE_TOKEN": TOKEN, "workers": 2, **overrides}
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(("SANDBOX_", "CROSSCHECK_")):
                patch.delenv(name)
        return SandboxSettings(**values)


def _host_processes() -> dict[int, tuple[int, int, str]]:
    """Every live host process: pid -> (uid, parent pid, command name)."""
    found: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip()[:1] in ("Z", "X"):
            continue  # already dead, waiting to be reaped
        uid = int(fields.get("Uid", "-1 0").split()[0])
        found[int(entry)] = (uid, int(fields["PPid"].strip()), fields["Name"].strip())
    return found


def processes_of(uid: int) -> dict[int, tuple[int, str]]:
    """This test process's processes running as ``uid``: pid -> (parent pid, command name).

    Only what descends from this process, or was orphaned to the host's init: sandboxes that
    other test processes run at the same time (parallel workers, another checkout) are theirs.
    """
    everything = _host_processes()
    me = os.getpid()

    def ours(pid: int) -> bool:
        seen = set()
        while pid not in seen and pid in everything:
            seen.add(pid)
            parent = everything[pid][1]
            if parent == me:
                return True
            pid = parent
        return False

    return {
        pid: (parent, name)
        for pid, (owner, parent, name) in everything.items()
        if owner == uid and (parent == 1 or ours(pid))
    }


class Sandbox:
    """A running sandbox app and helpers to check what the host saw."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        # whatever already ran as the sandbox uid on this host (a daemon as nobody) is not ours
        self.baseline = set(processes_of(NOBODY)) - self.outer_pids() - self.zygote_pids()

    @property
    def service(self) -> SandboxService:
        executor = self.client.app.state.executor  # type: ignore[attr-defined]
        assert isinstance(executor, SandboxService)
        return executor

    def run(self, code: str, tests: str = "", **fields: Any) -> dict[str, Any]:
        response = self.client.post("/v1/execute", json={"code": code, "tests": tests, **fields})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def settle(self) -> None:
        """Wait until sandboxes being replaced are back."""
        portal = self.client.portal
        assert portal is not None
        portal.call(self.service.pool.settle)

    def outer_pids(self) -> set[int]:
        """The outer bubblewrap process of every live sandbox."""
        return {
            w.process.pid
            for w in self.service.pool._workers.values()
            if w.process is not None and w.process.poll() is None
        }

    def zygote_pids(self) -> set[int]:
        outer = self.outer_pids()
        return {pid for pid, (parent, _) in processes_of(NOBODY).items() if parent in outer}

    def strays(self) -> dict[int, tuple[int, str]]:
        """Sandbox-uid processes on the host other than each sandbox's bwrap and zygote."""
        self.settle()
        outer = self.outer_pids()
        found = processes_of(NOBODY)

        def inside_ours(pid: int) -> bool:  # under one of this app's sandboxes
            seen = set()
            while pid in found and pid not in seen:
                seen.add(pid)
                pid = found[pid][0]
                if pid in outer:
                    return True
            return False

        return {
            pid: (parent, name)
            for pid, (parent, name) in found.items()
            if pid not in outer
            and parent not in outer
            and pid not in self.baseline
            and (parent == 1 or inside_ours(pid))
        }

    def cgroup_counts(self) -> list[int]:
        return [
            len(w.cgroup.pids())
            for w in self.service.pool._workers.values()
            if w.cgroup is not None
        ]

    def assert_still_serves(self) -> None:
        """The host has no leftover process and the next benign job passes."""
        result = self.run(
            "def add(a, b):\n    return a + b\n",
            "def check(candidate):\n    assert candidate(2, 3) == 5\n",
            entry_point="add",
        )
        assert result["status"] == "passed", result
        assert result["error_class"] == "none"
        assert self.strays() == {}
        assert all(count == 2 for count in self.cgroup_counts()), self.cgroup_counts()


@contextmanager
def running_sandbox(**overrides: Any) -> Iterator[Sandbox]:
    require_bwrap()
    settings = sandbox_settings(**overrides)
    with pytest.MonkeyPatch.context() as patch:
        # the parent process holds a provider key: nothing of it may reach a job
        patch.setenv("OPENAI_API_KEY", SECRET)
        app = create_app(settings)
        with TestClient(app, headers=AUTH) as client:
            yield Sandbox(client)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """One real sandbox app (two warm sandboxes) for a whole test module."""
    with running_sandbox() as box:
        yield box


@pytest.fixture
def world_readable_dir() -> Iterator[Path]:
    """A host folder the sandbox uid could read and write, were the host visible."""
    folder = Path(tempfile.mkdtemp(prefix="crosscheck-test-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def loopback_listener() -> Iterator[socket.socket]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    try:
        yield listener
    finally:
        listener.close()
