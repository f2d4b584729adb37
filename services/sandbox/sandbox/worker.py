"""One warm sandbox as the service sees it: bubblewrap with the zygote inside, one job at a time.

For each job the service makes four pipes (payload, stdout, stderr, results), hands the
sandbox ends to the zygote over the control socket (``SCM_RIGHTS``) and reads the other ends
itself, keeping at most the configured bytes and asking the zygote to kill the job when the
output passes the kill limit. The zygote enforces the wall timeout; the service keeps a
backstop a few seconds later and replaces a sandbox that misses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.isolation.bwrap import SANDBOX_DIR, SANDBOX_ENV, bwrap_command
from sandbox.isolation.cgroup import WorkerCgroup
from sandbox.isolation.identity import preexec
from sandbox.isolation.plan import IsolationPlan
from sandbox.isolation.rlimits import ResourcePolicy, job_rlimits
from sandbox.settings import SandboxSettings
from shared.logging import get_logger

log = get_logger("crosscheck.sandbox.worker")

BACKSTOP_GRACE_S = 5.0
DRAIN_TIMEOUT_S = 2.0
MIB = 1024 * 1024


class WorkerDied(Exception):
    """The sandbox went away (or never came up)."""

    def __init__(self, message: str, *, started: bool = False) -> None:
        super().__init__(message)
        self.started = started


@dataclass(frozen=True)
class JobSpec:
    id: str
    payload: bytes
    timeout_s: float
    memory_mb: int


@dataclass
class RawOutcome:
    """What came back from one job, before interpretation."""

    exited: dict[str, Any] | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_total: int = 0
    stderr_total: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    results_truncated: bool = False
    worker_error: str | None = None
    started: bool = False
    duration_ms: float = 0.0


class CappedReader:
    """Reads a non-blocking pipe into memory up to ``cap`` bytes, counting the rest."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        cap: int,
        on_data: Callable[[], None] | None = None,
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.cap = cap
        self.on_data = on_data
        self.buffer = bytearray()
        self.total = 0
        self.closed = False
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.total += len(chunk)
        room = self.cap - len(self.buffer)
        if room > 0:
            self.buffer += chunk[:room]
        if self.on_data is not None:
            self.on_data()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        os.close(self.fd)
        if not self.done.done():
            self.done.set_result(None)


async def write_all(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
    """Write ``data`` to a pipe without blocking the loop; a closed reader ends it quietly."""
    view = memoryview(data)
    os.set_blocking(fd, False)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                writable: asyncio.Future[None] = loop.create_future()
                loop.add_writer(fd, _resolve, writable)
                try:
                    await writable
                finally:
                    loop.remove_writer(fd)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        os.close(fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Worker:
    def __init__(
        self,
        index: int,
        generation: int,
        *,
        plan: IsolationPlan,
        settings: SandboxSettings,
    ) -> None:
        self.index = index
        self.generation = generation
        self.name = f"w{index}g{generation}"
        self.plan = plan
        self.settings = settings
        self.policy = ResourcePolicy(
            max_processes=settings.max_processes,
            max_open_files=settings.max_open_files,
            max_file_bytes=settings.max_file_mb * MIB,
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.cgroup: WorkerCgroup | None = None
        self.workdir: Path | None = None
        self.baseline_vm_bytes = 0
        self.jobs = 0
        self.dirty = False  # True when the sandbox must be replaced before another job
        self.startup_stderr = bytearray()
        self._stderr_reader: CappedReader | None = None

    def usable(self) -> bool:
        return self.process is not None and self.process.poll() is None and not self.dirty

    # ------------------------------------------------------------------ start / stop
    def _command(self, control_fd: int, seccomp_fd: int | None) -> tuple[list[str], dict[str, str]]:
        plan = self.plan
        if plan.bwrap is not None:
            program = [
                plan.python,
                "-I",
                "-B",
                f"{SANDBOX_DIR}/zygote.py",
                "--control-fd",
                str(control_fd),
                "--scratch",
                "/tmp",
                "--scratch",
                "/dev/shm",
                "--workdir",
                "/tmp",
            ]
            options = plan.bwrap_options(seccomp_fd, self.settings)
            return bwrap_command(options, program), {"PATH": "/usr/bin:/bin"}
        # weak isolation: no namespaces; a private work folder, seccomp loaded by the zygote
        self.workdir = Path(tempfile.mkdtemp(prefix=f"crosscheck-sandbox-{self.name}-"))
        if plan.identity.switch:
            os.chown(self.workdir, plan.identity.uid, plan.identity.gid)
        self.workdir.chmod(0o700)
        program = [
            plan.python,
            "-I",
            "-B",
            str(plan.inside_dir / "zygote.py"),
            "--control-fd",
            str(control_fd),
            "--weak",
            "--scratch",
            str(self.workdir),
            "--workdir",
            str(self.workdir),
        ]
        if seccomp_fd is not None:
            program += ["--seccomp-fd", str(seccomp_fd)]
        env = {**SANDBOX_ENV, "HOME": str(self.workdir), "TMPDIR": str(self.workdir)}
        return program, env

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        seccomp_fd = self.plan.seccomp.memfd() if self.plan.seccomp is not None else None
        try:
            if self.plan.cgroups is not None:
                # the zygote + outer bwrap + the job's own processes and threads
                self.cgroup = self.plan.cgroups.worker(self.name, self.settings.max_processes + 4)
            cmd, env = self._command(child.fileno(), seccomp_fd)
            pass_fds = [child.fileno()] + ([seccomp_fd] if seccomp_fd is not None else [])
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=preexec(
                    self.plan.identity, self.cgroup.procs_file if self.cgroup else None
                ),
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        parent.setblocking(False)
        self.control = parent
        assert self.process.stderr is not None
        self._stderr_reader = CappedReader(
            loop, os.dup(self.process.stderr.fileno()), 8192, self._keep_stderr
        )
        self.process.stderr.close()
        try:
            ready = await asyncio.wait_for(
                self._receive(), timeout=self.settings.worker_start_timeout_s
            )
        except (TimeoutError, WorkerDied) as exc:
            await self.stop(force=True)
            raise WorkerDied(f"sandbox {self.name} did not start: {self._why(exc)}") from exc
        except asyncio.CancelledError:
            await self.stop(force=True)
            raise
        if ready.get("event") != "ready":
            await self.stop(force=True)
            raise WorkerDied(f"sandbox {self.name} sent {ready!r} instead of ready")
        self.baseline_vm_bytes = int(ready.get("vm_bytes") or 0)
        log.debug(
            "sandbox ready",
            worker=self.name,
            pid=ready.get("pid"),
            python=ready.get("python"),
            vm_bytes=self.baseline_vm_bytes,
        )

    def _keep_stderr(self) -> None:
        assert self._stderr_reader is not None
        self.startup_stderr = self._stderr_reader.buffer

    def _why(self, exc: BaseException) -> str:
        detail = bytes(self.startup_stderr).decode(errors="replace").strip()
        return detail[-500:] or str(exc) or type(exc).__name__

    async def stop(self, *, force: bool = False) -> None:
        """Close the control socket (the zygote cleans up and exits) or kill the sandbox."""
        self.dirty = True
        if self.control is not None:
            self.control.close()
            self.control = None
        process = self.process
        if process is not None and process.poll() is None:
            if not force:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(process.wait, 2.0)
            if process.poll() is None:
                self._kill_tree(process)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(process.wait, 5.0)
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.kill_all)
            self.cgroup.remove()
        if self._stderr_reader is not None:
            self._stderr_reader.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill_tree(self, process: subprocess.Popen[bytes]) -> None:
        """Kill the sandbox from the inside out: its processes first, so the outer bubblewrap
        reaps them and exits by itself (no zombies left for init), then bubblewrap."""
        if self.cgroup is not None:
            for pid in self.cgroup.pids():
                if pid != process.pid:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.5)
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            process.kill()

    # ------------------------------------------------------------------ messages
    async def _receive(self) -> dict[str, Any]:
        if self.control is None:
            raise WorkerDied("control socket closed")
        loop = asyncio.get_running_loop()
        try:
            data = await loop.sock_recv(self.control, 65536)
        except OSError as exc:
            raise WorkerDied(f"control socket: {exc}") from exc
        if not data:
            raise WorkerDied("the sandbox exited")
        message = json.loads(data)
        if not isinstance(message, dict):
            raise WorkerDied(f"unexpected message {message!r}")
        return message

    def _send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        if self.control is None:
            raise WorkerDied("control socket closed")
        data = json.dumps(message).encode()
        try:
            if fds:
                socket.send_fds(self.control, [data], fds)
            else:
                self.control.send(data)
        except OSError as exc:
            raise WorkerDied(f"control socket: {exc}") from exc

    # ------------------------------------------------------------------ one job
    def rlimits(self, job: JobSpec) -> dict[str, tuple[int, int]]:
        weak = self.plan.bwrap is None
        nproc_base = 1 if not weak else self.settings.workers * (self.settings.max_processes + 2)
        return job_rlimits(
            timeout_s=job.timeout_s,
            memory_mb=job.memory_mb,
            baseline_vm_bytes=self.baseline_vm_bytes,
            policy=self.policy,
            nproc_base=nproc_base,
        )

    async def run(self, job: JobSpec) -> RawOutcome:
        """Run one job. Raises WorkerDied only when the job never started (safe to retry)."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        outcome = RawOutcome()
        started_at = time.perf_counter()
        payload_r, payload_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        res_r, res_w = os.pipe2(os.O_CLOEXEC)
        header = {
            "op": "run",
            "id": job.id,
            "timeout_s": job.timeout_s,
            "rlimits": self.rlimits(job),
        }
        try:
            self._send(header, [payload_r, out_w, err_w, res_w])
        except WorkerDied:
            for fd in (payload_w, out_r, err_r, res_r):
                os.close(fd)
            self.dirty = True
            raise
        finally:
            for fd in (payload_r, out_w, err_w, res_w):
                os.close(fd)
        self.jobs += 1
        kill_sent = False

        def request_kill(reason: str) -> None:
            nonlocal kill_sent
            if kill_sent:
                return
            kill_sent = True
            with contextlib.suppress(WorkerDied):
                self._send({"op": "kill", "id": job.id, "reason": reason})

        def watch_output() -> None:
            if stdout.total + stderr.total > settings.output_kill_bytes:
                request_kill("output")

        def watch_results() -> None:
            if results.total > settings.results_cap_bytes:
                request_kill("results")

        stdout = CappedReader(loop, out_r, settings.stdout_cap_bytes, watch_output)
        stderr = CappedReader(loop, err_r, settings.stderr_cap_bytes, watch_output)
        results = CappedReader(loop, res_r, settings.results_cap_bytes, watch_results)
        writer = asyncio.ensure_future(write_all(loop, payload_w, job.payload))
        try:
            outcome.exited = await asyncio.wait_for(
                self._await_exit(job.id, outcome), timeout=job.timeout_s + BACKSTOP_GRACE_S
            )
            if outcome.exited.get("outcome") == "error":
                outcome.worker_error = str(outcome.exited.get("detail") or "sandbox error")
            if not outcome.exited.get("clean", False):
                self.dirty = True
                log.warning(
                    "sandbox not clean after a job; replacing it",
                    worker=self.name,
                    detail=outcome.exited.get("detail"),
                )
        except TimeoutError:
            outcome.worker_error = "the sandbox did not report the end of the job in time"
            self.dirty = True
            self._kill_now()
        except WorkerDied as exc:
            outcome.worker_error = f"the sandbox died: {self._why(exc)}"
            self.dirty = True
            self._kill_now()
        except BaseException:  # cancelled: the job may still run; this sandbox is done
            self.dirty = True
            self._kill_now()
            raise
        finally:
            # every job process is gone by now, so EOF is imminent (asyncio.wait cancels nothing)
            await asyncio.wait([stdout.done, stderr.done, results.done], timeout=DRAIN_TIMEOUT_S)
            for reader in (stdout, stderr, results):
                reader.close()
            writer.cancel()
            with contextlib.suppress(BaseException):
                await writer
        outcome.stdout, outcome.stdout_total = bytes(stdout.buffer), stdout.total
        outcome.stderr, outcome.stderr_total = bytes(stderr.buffer), stderr.total
        outcome.records, outcome.results_truncated = _parse_records(results)
        outcome.duration_ms = (time.perf_counter() - started_at) * 1000
        if outcome.worker_error and not outcome.started:
            raise WorkerDied(outcome.worker_error, started=False)
        if self.jobs >= settings.jobs_per_worker:
            self.dirty = True
        return outcome

    async def _await_exit(self, job_id: str, outcome: RawOutcome) -> dict[str, Any]:
        while True:
            message = await self._receive()
            event = message.get("event")
            if event == "started" and message.get("id") == job_id:
                outcome.started = True
            elif event == "exited" and message.get("id") == job_id:
                if message.get("outcome") != "error":
                    outcome.started = True
                return message

    def _kill_now(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self._kill_tree(self.process)


def _parse_records(reader: CappedReader) -> tuple[list[dict[str, Any]], bool]:
    records: list[dict[str, Any]] = []
    for line in bytes(reader.buffer).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a partial last line (killed mid-write) or noise the job wrote
        if isinstance(record, dict):
            records.append(record)
    return records, reader.total > len(reader.buffer)
