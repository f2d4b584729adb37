"""The warm fork server inside one sandbox: a fresh, rlimited child per job, one job at a time.

Stdlib only. The service starts it as ``/usr/bin/python3 -I -B /sandbox/zygote.py`` inside
bubblewrap, where it is pid 1 of its own pid namespace (``--as-pid-1``) under the seccomp
filter bubblewrap loaded. It imports the harness and common modules once; each job is then a
``fork()`` (about a millisecond) instead of a new bubblewrap and interpreter (150 ms or more).

Why the warm process does not weaken isolation between jobs:

- the job's code and output never enter this process: the service sends the job's pipes as
  file descriptors (``SCM_RIGHTS``) and the child reads the payload itself, so no earlier job
  is left in the memory the next child inherits;
- it is not dumpable, so a job cannot open its ``/proc/1/mem``, ``fd`` or ``environ``; as the
  namespace's init it ignores every signal sent from inside (it installs no handlers);
- after every job it kills every other process in the namespace (``kill(-1)`` from pid 1, which
  also reaches ``setsid`` orphans), reaps them and empties ``/tmp`` and ``/dev/shm``; if that
  cannot be finished quickly it says so and the service replaces the whole sandbox.

Protocol on the control socket (``SOCK_SEQPACKET``, one JSON object per message):
service -> zygote ``{"op": "run", "id", "timeout_s", "rlimits"}`` + 4 fds (payload reader,
stdout, stderr, results writers); ``{"op": "kill", "id", "reason"}``; ``{"op": "ping"}``.
zygote -> service ``{"event": "ready"}``, ``{"event": "started", "id"}``,
``{"event": "exited", "id", "outcome", ...}``, ``{"event": "pong"}``.
EOF on the socket means the service is gone: kill everything and exit.

Weak mode (no bubblewrap, explicitly allowed): the zygote loads the seccomp filter itself,
becomes a child subreaper and kills its descendants instead of the whole namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
import time
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# Imported once here so a job's child gets them for free (copy-on-write after fork).
PRELOAD = (
    "abc",
    "array",
    "ast",
    "bisect",
    "collections",
    "contextlib",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "inspect",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "traceback",
    "typing",
    "unittest",
)
MAX_MESSAGE = 65536
CLEANUP_ENTRY_BUDGET = 20000
CLEANUP_KILL_ROUNDS = 400
JOB_NICENESS = 10


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int = 0) -> None:
    if _libc().prctl(option, arg, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}) failed: {os.strerror(errno)}")


def load_seccomp(fd: int) -> None:
    """Install the BPF program read from ``fd`` on this process (weak mode only)."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    program = b"".join(chunks)
    if not program or len(program) % 8:
        raise ValueError("the seccomp program is empty or malformed")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    libc = _libc()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"loading the seccomp filter failed: {os.strerror(errno)}")


def _vm_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class CleanupIncomplete(Exception):
    pass


def remove_tree(top: str, budget: list[int]) -> None:
    """Remove ``top`` without following symlinks, fixing permissions the job took away."""
    stack = [top]
    while stack:
        path = stack[-1]
        budget[0] -= 1
        if budget[0] < 0:
            raise CleanupIncomplete("too many files to remove")
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            stack.pop()
            continue
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(path)
            stack.pop()
            continue
        if info.st_mode & 0o700 != 0o700:
            os.chmod(path, 0o700)
        with os.scandir(path) as entries:
            children = []
            for entry in entries:
                children.append(entry.path)
                if len(children) > budget[0]:
                    raise CleanupIncomplete("too many files to remove")
        if children:
            stack.extend(children)
            continue
        os.rmdir(path)
        stack.pop()


class Zygote:
    def __init__(
        self,
        control: socket.socket,
        *,
        pid_namespace: bool,
        scratch: list[str],
        workdir: str,
    ) -> None:
        self.control = control
        self.pid_namespace = pid_namespace
        self.scratch = scratch
        self.workdir = workdir
        self.harness: Any = None

    # -- messages
    def send(self, message: dict[str, Any]) -> None:
        self.control.send(json.dumps(message).encode())

    def receive(self) -> tuple[dict[str, Any] | None, list[int]]:
        data, fds, _flags, _addr = socket.recv_fds(self.control, MAX_MESSAGE, 8)
        if not data:
            return None, list(fds)
        try:
            message = json.loads(data)
        except ValueError:
            message = {"op": "invalid"}
        return (message if isinstance(message, dict) else {"op": "invalid"}), list(fds)

    # -- life cycle
    def start(self) -> None:
        for name in PRELOAD:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        self.harness = importlib.import_module("harness")
        gc.collect()
        gc.freeze()  # keep the collector from touching (and copying) inherited pages
        self.send(
            {
                "event": "ready",
                "pid": os.getpid(),
                "uid": os.getuid(),
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "vm_bytes": _vm_bytes(),
                "pid_namespace": self.pid_namespace,
            }
        )

    def serve(self) -> None:
        self.start()
        while True:
            message, fds = self.receive()
            if message is None:
                self.cleanup()
                return
            op = message.get("op")
            if op == "run" and len(fds) == 4:
                self.run_job(message, fds)
                continue
            for fd in fds:
                os.close(fd)
            if op == "ping":
                self.send({"event": "pong"})
            elif op == "run":
                self.send(
                    {
                        "event": "exited",
                        "id": message.get("id"),
                        "outcome": "error",
                        "detail": f"expected 4 file descriptors, got {len(fds)}",
                    }
                )

    # -- one job
    def run_job(self, message: dict[str, Any], fds: list[int]) -> None:
        job_id = message.get("id")
        timeout_s = float(message.get("timeout_s", 10.0))
        rlimits = message.get("rlimits", {})
        started = time.monotonic()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self.send(
                {
                    "event": "exited",
                    "id": job_id,
                    "outcome": "error",
                    "detail": f"fork failed: {exc}",
                }
            )
            return
        if pid == 0:
            self.child(fds, rlimits)  # never returns
        for fd in fds:
            os.close(fd)
        self.send({"event": "started", "id": job_id})
        pidfd = os.pidfd_open(pid)
        outcome, reason = "exited", None
        deadline = started + timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    outcome, reason = "timeout", "wall_time"
                    break
                control_fd = self.control.fileno()
                ready, _, _ = select.select([pidfd, control_fd], [], [], remaining)
                if pidfd in ready:
                    break
                if control_fd in ready:
                    control, extra = self.receive()
                    for fd in extra:
                        os.close(fd)
                    if control is None:  # the service is gone
                        with contextlib.suppress(Exception):
                            self.kill_everything()
                        os._exit(0)
                    if control.get("op") == "kill" and control.get("id") == job_id:
                        outcome, reason = "killed", str(control.get("reason") or "killed")
                        break
                    if control.get("op") == "ping":
                        self.send({"event": "pong"})
        finally:
            os.close(pidfd)
        if outcome != "exited":
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        wall_ms = (time.monotonic() - started) * 1000
        strays, clean, detail = self.cleanup()
        self.send(
            {
                "event": "exited",
                "id": job_id,
                "outcome": outcome,
                "reason": reason,
                "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
                "maxrss_kb": usage.ru_maxrss,
                "wall_ms": round(wall_ms, 3),
                "strays": strays,
                "clean": clean,
                "detail": detail,
            }
        )

    def child(self, fds: list[int], rlimits: dict[str, list[int]]) -> None:
        code = 70
        try:
            os.setsid()
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if not self.pid_namespace:
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]  # clear of 0-3
            for target, fd in enumerate(high):
                os.dup2(fd, target)
            os.closerange(4, 65536)  # the control socket and everything else
            payload = read_all(0)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.chdir(self.workdir)
            os.environ["HOME"] = self.workdir
            os.environ["TMPDIR"] = self.workdir
            sys.stdout = open(
                1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False
            )
            sys.stderr = open(
                2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False
            )
            sys.argv = ["solution.py"]
            os.nice(JOB_NICENESS)  # the service answering its API beats a job burning CPU
            for name, (soft, hard) in rlimits.items():
                resource.setrlimit(getattr(resource, name), (soft, hard))
            code = self.harness.run(json.loads(payload), 3)
        except MemoryError:
            code = 71
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                os.write(2, f"sandbox runner failed: {type(exc).__name__}: {exc}\n".encode())
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    # -- between jobs
    def kill_everything(self) -> int:
        """Kill every process but this one; returns how many were found."""
        seen: set[int] = set()
        for attempt in range(CLEANUP_KILL_ROUNDS):
            self.reap()
            others = self.descendants()
            if not others:
                return len(seen)
            seen.update(others)
            if self.pid_namespace:
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)
            else:
                for other in others:
                    with contextlib.suppress(OSError):
                        os.kill(other, signal.SIGKILL)
            if attempt > 2:
                time.sleep(0.002)
        raise CleanupIncomplete(f"processes still alive after {CLEANUP_KILL_ROUNDS} rounds")

    def descendants(self) -> list[int]:
        me = os.getpid()
        found: list[int] = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            if self.pid_namespace:
                found.append(int(name))
                continue
            try:  # weak mode: orphans are re-parented to us (we are a child subreaper)
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                if int(fields[1]) == me:
                    found.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
        return found

    @staticmethod
    def reap() -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def cleanup(self) -> tuple[int, bool, str]:
        strays = 0
        try:
            strays = self.kill_everything()
            budget = [CLEANUP_ENTRY_BUDGET]
            for root in self.scratch:
                for name in os.listdir(root):
                    remove_tree(os.path.join(root, name), budget)
            leftover = [root for root in self.scratch if os.listdir(root)]
            if leftover:
                return strays, False, f"could not empty {', '.join(leftover)}"
        except (CleanupIncomplete, OSError, RecursionError) as exc:
            return strays, False, f"{type(exc).__name__}: {exc}"
        return strays, True, ""


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zygote")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--seccomp-fd", type=int, default=None)
    parser.add_argument("--weak", action="store_true")
    parser.add_argument("--scratch", action="append", default=[])
    parser.add_argument("--workdir", default="/tmp")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as init, ignore what the jobs send
    _prctl(PR_SET_DUMPABLE, 0)
    if args.weak:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if args.seccomp_fd is not None:
        load_seccomp(args.seccomp_fd)
    control = socket.socket(fileno=args.control_fd)
    pid_namespace = os.getpid() == 1 and not args.weak
    zygote = Zygote(
        control, pid_namespace=pid_namespace, scratch=args.scratch, workdir=args.workdir
    )
    try:
        zygote.serve()
    except (BrokenPipeError, ConnectionResetError):
        zygote.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
