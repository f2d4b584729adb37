"""The bubblewrap command line that builds one sandbox.

Inside: a read-only ``/usr`` (with the merged-usr symlinks) and nothing else of the host; a
fresh ``/proc`` for the sandbox's own pid namespace; a minimal read-only ``/dev``; size-capped
tmpfs ``/tmp`` and ``/dev/shm``; the zygote and harness read-only at ``/sandbox``; a read-only
root. Every namespace is new (user, mount, pid, net, ipc, uts, cgroup), creating more user
namespaces is disabled, the environment is cleared, the process group is a new session and the
sandbox dies with the service. The zygote runs as pid 1 (``--as-pid-1``), so it reaps and can
kill every process a job leaves behind.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

SANDBOX_DIR = "/sandbox"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_ENV = {
    "PATH": SANDBOX_PATH,
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MB of address space per arena otherwise
}


@dataclass(frozen=True)
class BwrapOptions:
    bwrap: str
    python: str
    inside_dir: Path  # host folder bound read-only at /sandbox
    tmp_bytes: int
    shm_bytes: int
    seccomp_fd: int | None
    drop_caps: bool = False  # only meaningful when bwrap itself runs as root


def find_bwrap(name: str) -> str | None:
    found = shutil.which(name)
    return found if found else None


def bwrap_command(options: BwrapOptions, program: list[str]) -> list[str]:
    """``bwrap ... <program>``; ``program`` runs as pid 1 of the new pid namespace."""
    cmd = [
        options.bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(options.shm_bytes),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(options.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        str(options.inside_dir),
        SANDBOX_DIR,
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--clearenv",
    ]
    for key, value in SANDBOX_ENV.items():
        cmd += ["--setenv", key, value]
    if options.drop_caps:
        cmd += ["--cap-drop", "ALL"]
    if options.seccomp_fd is not None:
        cmd += ["--seccomp", str(options.seccomp_fd)]
    return [*cmd, "--", *program]
