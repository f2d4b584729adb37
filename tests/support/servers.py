"""Real service processes for tests: started on free loopback ports, stopped afterwards."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def _listen_range() -> tuple[int, int] | None:
    """Ports below the kernel's ephemeral range (where outgoing connections get theirs)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (10_000, low - 1) if low > 12_000 else None


# ports this process has handed out: one drawn for a server that has not bound it yet is free
# when checked again, so without this list a test that draws several at once (a platform's
# five services) could get the same one twice (seen: "address already in use" in CI)
_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port for a server a test starts. Not from the ephemeral range: such a
    port, free when checked, can be taken before the server binds it by any outgoing
    connection (the services' clients open thousands); each xdist worker draws from its own
    slice of the range, so two workers do not pick the same port either, and one worker
    hands out no port twice (until a long run has used half its slice)."""
    span = _listen_range()
    if span is not None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        slices = 8
        width = (span[1] - span[0]) // slices
        start = span[0] + (int(worker) % slices if worker.isdigit() else 0) * width
        if len(_handed_out) > width // 2:  # a long run: forget the oldest servers' ports
            _handed_out.clear()
        for _ in range(100):
            port = random.randrange(start, start + width)
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                _handed_out.add(port)
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Until `/healthz` answers 200: generous, as a Python service can take long to start on a
    loaded machine (this guards against a hang, it measures nothing)."""
    deadline = time.monotonic() + timeout_s
    # one client for the whole wait: a new one per try would load the CA bundle each time,
    # CPU taken from the service that is starting
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url} exited early with code {process.returncode}")
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy in {timeout_s} s")


@contextmanager
def service_process(
    module: str, env_prefix: str, *, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[str]:
    """Run ``python -m module`` on a free port; yield its base URL."""
    port = free_port()
    child_env = {**os.environ, **(env or {})}
    child_env[f"{env_prefix}HOST"] = "127.0.0.1"
    child_env[f"{env_prefix}PORT"] = str(port)
    out = log.open("wb") if log else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", module], env=child_env, stdout=out, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            out.close()  # type: ignore[union-attr]
