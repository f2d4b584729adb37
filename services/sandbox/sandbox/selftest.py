"""The start-up self-test: a benign control must pass and a few escapes must fail.

Each probe is an ordinary job through the real pool. Where the host can see the effect, the
host checks it (a file that must not appear, a listener that must get no connection) rather
than trusting the job's own report. A probe is required when a layer that should stop it is
active: in weak isolation nothing hides the host's files, so those probes are reported but
do not block start-up (the weakness is already on every result).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox.executor import CodeExecutor
from sandbox.isolation.plan import IsolationPlan
from shared.sandbox.schemas import ExecuteRequest, ExecuteResult, ExecutionStatus, SelfTestCheck

SERVICE_SOURCE = Path(__file__).resolve()


@dataclass
class Canaries:
    folder: Path
    secret_file: Path
    secret: str
    write_target: Path
    port: int
    listener: socket.socket

    def connections(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, OSError):
                return count
            conn.close()
            count += 1


@contextlib.asynccontextmanager
async def canaries() -> AsyncIterator[Canaries]:
    folder = Path(tempfile.mkdtemp(prefix="crosscheck-selftest-"))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        folder.chmod(0o777)  # if the sandbox could see it, it could write here
        secret = secrets.token_hex(16)
        secret_file = folder / "canary.txt"
        secret_file.write_text(secret)
        secret_file.chmod(0o644)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield Canaries(
            folder=folder,
            secret_file=secret_file,
            secret=secret,
            write_target=folder / "written-by-sandbox.txt",
            port=listener.getsockname()[1],
            listener=listener,
        )
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Probe:
    name: str
    request: ExecuteRequest
    # None when contained, else what leaked
    verdict: Callable[[ExecuteResult, Canaries], str | None]
    stopped_by: tuple[str, ...] = ()  # layers that stop it; () = every mode must stop it


def _passed(result: ExecuteResult, _: Canaries) -> str | None:
    if result.status is ExecutionStatus.passed:
        return None
    return f"{result.status.value}: {result.message}"


def probes(c: Canaries) -> list[Probe]:
    def job(code: str, tests: str, *, timeout_s: float = 5.0) -> ExecuteRequest:
        return ExecuteRequest(code=code, tests=tests, timeout_s=timeout_s, memory_mb=128)

    def host_files(result: ExecuteResult, canary: Canaries) -> str | None:
        if canary.secret in result.stdout or canary.secret in result.stderr:
            return "read a host file"
        return _passed(result, canary)

    def host_write(result: ExecuteResult, canary: Canaries) -> str | None:
        if canary.write_target.exists():
            return f"created {canary.write_target} on the host"
        return None

    def network(result: ExecuteResult, canary: Canaries) -> str | None:
        if canary.connections():
            return "connected to a loopback listener on the host"
        return _passed(result, canary)

    def timeout(result: ExecuteResult, _: Canaries) -> str | None:
        if result.status is ExecutionStatus.timeout:
            return None
        return f"an endless loop ended as {result.status.value}: {result.message}"

    return [
        Probe(
            "control",
            job(
                "def add(a, b):\n    return a + b\nprint('control-ok')\n",
                "def check(candidate):\n    assert candidate(2, 3) == 5\n",
            ).model_copy(update={"entry_point": "add"}),
            lambda r, k: _passed(r, k) or (None if "control-ok" in r.stdout else "no stdout"),
        ),
        Probe(
            "host_files",
            job(
                f"PATHS = ({str(c.secret_file)!r}, {str(SERVICE_SOURCE)!r}, '/etc/shadow')\n"
                "def attempt():\n"
                "    seen = []\n"
                "    for path in PATHS:\n"
                "        try:\n"
                "            with open(path) as f:\n"
                "                seen.append(f.read())\n"
                "        except OSError:\n"
                "            pass\n"
                "    print(*seen)\n"
                "    return seen\n",
                "assert attempt() == []\n",
            ),
            host_files,
            ("bubblewrap",),
        ),
        Probe(
            "host_write",
            job(
                f"TARGET = {str(c.write_target)!r}\n"
                "try:\n    open(TARGET, 'w').write('x')\nexcept OSError:\n    pass\n",
                "",
            ),
            host_write,
            ("bubblewrap",),
        ),
        Probe(
            "network",
            job(
                "import socket\n"
                "def attempt():\n"
                "    try:\n"
                f"        socket.create_connection(('127.0.0.1', {c.port}), timeout=1).close()\n"
                "        return True\n"
                "    except OSError:\n"
                "        return False\n",
                "assert attempt() is False\n",
            ),
            network,
            ("bubblewrap", "seccomp"),
        ),
        Probe(
            "namespaces",
            job(
                "import ctypes\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000\n",
                "assert libc.unshare(CLONE_NEWUSER) == -1\n"
                "assert libc.unshare(CLONE_NEWNS) == -1\n",
            ),
            _passed,
            ("bubblewrap", "seccomp"),
        ),
        Probe(
            "processes",
            job(
                "import os\nvisible = [p for p in os.listdir('/proc') if p.isdigit()]\n",
                "assert len(visible) <= 3, visible\n",
            ),
            _passed,
            ("bubblewrap",),
        ),
        Probe(
            "privileges",
            job(
                "import os\n"
                "status = open('/proc/self/status').read()\n"
                "cap_eff = [l for l in status.splitlines() if l.startswith('CapEff')][0]\n",
                "assert os.getuid() != 0 and os.geteuid() != 0\n"
                "assert int(cap_eff.split()[1], 16) == 0, cap_eff\n",
            ),
            _passed,
        ),
        Probe(
            "environment",
            job(
                "import os\n"
                "ALLOWED = {'PATH', 'HOME', 'TMPDIR', 'LANG', 'PWD', 'LC_CTYPE',\n"
                "           'PYTHONDONTWRITEBYTECODE', 'PYTHONIOENCODING', 'MALLOC_ARENA_MAX'}\n",
                "assert set(os.environ) <= ALLOWED, sorted(set(os.environ) - ALLOWED)\n",
            ),
            _passed,
        ),
        Probe(
            "timeout",
            job("while True:\n    pass\n", "", timeout_s=0.3),
            timeout,
        ),
    ]


async def run_selftest(executor: CodeExecutor, plan: IsolationPlan) -> list[SelfTestCheck]:
    active = {layer.name for layer in plan.layers if layer.active}
    checks: list[SelfTestCheck] = []
    async with canaries() as canary:
        batch = probes(canary)
        results = await asyncio.gather(*(executor.execute(p.request) for p in batch))
        for probe, result in zip(batch, results, strict=True):
            leak = probe.verdict(result, canary)
            required = not probe.stopped_by or bool(active.intersection(probe.stopped_by))
            if leak is None:
                detail = "passed" if probe.name == "control" else "contained"
            else:
                detail = leak
            if leak and not required:
                detail = f"not contained without {' or '.join(probe.stopped_by)}: {leak}"
            checks.append(
                SelfTestCheck(
                    name=probe.name, passed=leak is None, required=required, detail=detail
                )
            )
    return checks
