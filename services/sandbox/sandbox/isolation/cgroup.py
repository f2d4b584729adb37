"""A pids cgroup per sandbox, where the service may create one (root, cgroup v1 or v2).

It caps every process the sandbox ever has, including ``setsid`` orphans, and lets the
service kill them all without knowing their pids. Without one, ``RLIMIT_NPROC`` (inside each
sandbox's user namespace) and the zygote's ``kill(-1)`` still hold.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/pids")
V2_ROOT = Path("/sys/fs/cgroup")
PREFIX = "crosscheck-sandbox-"


@dataclass(frozen=True)
class WorkerCgroup:
    path: Path

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout_s: float = 2.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty; False if it would not empty."""
        deadline = time.monotonic() + timeout_s
        while pids := self.pids():
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


class PidsCgroups:
    """The service's own pids cgroup folder, one child per sandbox."""

    def __init__(self, root: Path, version: int) -> None:
        self.root = root
        self.version = version

    @classmethod
    def create(cls, base: Path | None = None) -> tuple[PidsCgroups | None, str]:
        """The folder for this process, or None and why not."""
        if os.geteuid() != 0:
            return None, "not root: cannot create cgroups (rely on the container's pids limit)"
        candidates: list[tuple[Path, int]] = []
        if base is not None:
            candidates.append((base, 1 if (base / "pids.max").exists() or base == V1_ROOT else 2))
        elif V1_ROOT.is_dir():
            candidates.append((V1_ROOT, 1))
        elif "pids" in _read(V2_ROOT / "cgroup.subtree_control").split():
            candidates.append((V2_ROOT, 2))
        if not candidates:
            return None, "no pids cgroup controller available"
        parent, version = candidates[0]
        _remove_stale(parent)
        root = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            root.mkdir(exist_ok=True)
            if version == 2:
                (root / "cgroup.subtree_control").write_text("+pids")
        except OSError as exc:
            return None, f"cannot create {root}: {exc}"
        return cls(root, version), f"cgroup v{version} pids controller at {root}"

    def worker(self, name: str, max_pids: int) -> WorkerCgroup:
        path = self.root / name
        path.mkdir(exist_ok=True)
        (path / "pids.max").write_text(str(max_pids))
        return WorkerCgroup(path)

    def remove(self) -> None:
        for child in self.root.iterdir() if self.root.is_dir() else []:
            if child.is_dir():
                WorkerCgroup(child).kill_all(timeout_s=1.0)
                WorkerCgroup(child).remove()
        with contextlib.suppress(OSError):
            self.root.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove_stale(parent: Path) -> None:
    """Folders left by a service that died without cleaning up (its pid no longer runs)."""
    with contextlib.suppress(OSError):
        for folder in parent.glob(f"{PREFIX}*"):
            owner = folder.name.removeprefix(PREFIX).split("-")[0]
            if owner.isdigit() and Path(f"/proc/{owner}").exists():
                continue
            for child in folder.iterdir():
                if child.is_dir():
                    WorkerCgroup(child).kill_all(timeout_s=0.5)
                    WorkerCgroup(child).remove()
            with contextlib.suppress(OSError):
                folder.rmdir()
