"""Who the sandboxes run as: never root. As root we drop to an unprivileged uid (nobody)."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxIdentity:
    uid: int
    gid: int
    switch: bool  # True when the service is root and must drop to uid/gid before exec

    @property
    def detail(self) -> str:
        how = "dropped from root" if self.switch else "the service's own"
        return f"uid {self.uid}, gid {self.gid} ({how})"


def sandbox_identity(uid: int, gid: int) -> SandboxIdentity:
    if os.geteuid() == 0:
        return SandboxIdentity(uid=uid, gid=gid, switch=True)
    return SandboxIdentity(uid=os.geteuid(), gid=os.getegid(), switch=False)


def preexec(identity: SandboxIdentity, cgroup_procs: str | None) -> Callable[[], None] | None:
    """Runs in the forked child before exec: join the pids cgroup, then drop privileges.

    Only plain system calls (no locks, little allocation); None when there is nothing to do,
    so a non-root service spawns without a ``preexec_fn`` at all.
    """
    if cgroup_procs is None and not identity.switch:
        return None

    def setup() -> None:
        if cgroup_procs is not None:
            fd = os.open(cgroup_procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        if identity.switch:
            os.setgroups([])
            os.setresgid(identity.gid, identity.gid, identity.gid)
            os.setresuid(identity.uid, identity.uid, identity.uid)

    return setup


def make_undumpable() -> bool:
    """Keep processes of our own uid out of this one's memory and ``/proc/<pid>/environ``.

    Matters when the service is not root and weak isolation runs jobs under its uid.
    """
    if not sys.platform.startswith("linux"):
        return False
    pr_set_dumpable = 4
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(pr_set_dumpable, 0, 0, 0, 0) == 0)
