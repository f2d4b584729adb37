"""Decide, once at start-up, which isolation layers this host gives and whether to serve.

Full isolation needs bubblewrap (that actually starts a sandbox here: user namespaces on,
not blocked by a container's seccomp profile) and a seccomp filter. Anything less is weak
isolation, which the service refuses unless ``SANDBOX_ALLOW_WEAK_ISOLATION=1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.isolation.bwrap import BwrapOptions, bwrap_command, find_bwrap
from sandbox.isolation.cgroup import PidsCgroups
from sandbox.isolation.identity import SandboxIdentity, preexec, sandbox_identity
from sandbox.isolation.seccomp import SeccompProgram, SeccompUnavailable, build_seccomp_program
from sandbox.settings import SandboxSettings
from shared.errors import ConfigurationError
from shared.logging import is_secret_key
from shared.sandbox.schemas import IsolationLayer, IsolationMode

INSIDE_SOURCE = Path(__file__).resolve().parent.parent / "inside"
INSIDE_FILES = ("zygote.py", "harness.py")
STAGING_PREFIX = "crosscheck-sandbox-inside-"
MIB = 1024 * 1024


class IsolationUnavailable(ConfigurationError):
    """The host cannot give full isolation and weak isolation was not allowed."""


@dataclass
class IsolationPlan:
    mode: IsolationMode
    weak_allowed: bool
    identity: SandboxIdentity
    python: str
    inside_dir: Path
    bwrap: str | None
    seccomp: SeccompProgram | None
    cgroups: PidsCgroups | None
    layers: list[IsolationLayer] = field(default_factory=list)

    def bwrap_options(self, seccomp_fd: int | None, settings: SandboxSettings) -> BwrapOptions:
        assert self.bwrap is not None
        return BwrapOptions(
            bwrap=self.bwrap,
            python=self.python,
            inside_dir=self.inside_dir,
            tmp_bytes=settings.tmp_mb * MIB,
            shm_bytes=settings.shm_mb * MIB,
            seccomp_fd=seccomp_fd,
            drop_caps=self.identity.uid == 0,
        )

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.remove()
        shutil.rmtree(self.inside_dir, ignore_errors=True)


def stage_inside_files() -> Path:
    """Copy the zygote and harness to a fresh world-readable folder to bind read-only.

    The installed package may sit where the sandbox's uid cannot read (``/root/...``), and a
    copy cannot change under a running sandbox.
    """
    _remove_stale_staging()
    folder = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
    folder.chmod(0o755)
    for name in INSIDE_FILES:
        target = folder / name
        shutil.copyfile(INSIDE_SOURCE / name, target)
        target.chmod(0o644)
    return folder


def _remove_stale_staging() -> None:
    """Folders staged by a service that was killed before it could clean up."""
    for folder in Path(tempfile.gettempdir()).glob(f"{STAGING_PREFIX}*"):
        owner = folder.name.removeprefix(STAGING_PREFIX).split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def _trial_bwrap(
    settings: SandboxSettings,
    plan: IsolationPlan,
    seccomp: SeccompProgram | None,
) -> str | None:
    """Start one throw-away sandbox; None when it works, else bubblewrap's complaint."""
    seccomp_fd = seccomp.memfd() if seccomp is not None else None
    try:
        cmd = bwrap_command(
            plan.bwrap_options(seccomp_fd, settings),
            [plan.python, "-I", "-c", "import sys; sys.exit(0)"],
        )
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            pass_fds=(seccomp_fd,) if seccomp_fd is not None else (),
            preexec_fn=preexec(plan.identity, None),
            timeout=30,
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[-500:] or f"exit {done.returncode}"
    return None


def _secret_variables() -> list[str]:
    return sorted(name for name in os.environ if is_secret_key(name))


def plan_isolation(settings: SandboxSettings) -> IsolationPlan:
    """Probe the host (about 0.1 s) and decide; raises IsolationUnavailable to refuse."""
    problems: list[str] = []
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable("the sandbox needs Linux (namespaces, seccomp, pidfd)")
    python = settings.python_path
    if not python.startswith("/usr/") or not os.access(python, os.X_OK):
        raise IsolationUnavailable(
            f"SANDBOX_PYTHON_PATH={python!r} must be an executable under /usr "
            "(the only host folder mounted in the sandbox)"
        )
    identity = sandbox_identity(settings.uid, settings.gid)

    seccomp: SeccompProgram | None
    try:
        seccomp = build_seccomp_program()
        seccomp_detail = (
            f"{len(seccomp.denied)} system calls denied; sockets AF_UNIX only; no namespace "
            "creation (unshare/setns/clone flags, clone3 -> ENOSYS)"
        )
    except SeccompUnavailable as exc:
        seccomp = None
        seccomp_detail = str(exc)
        problems.append(seccomp_detail)

    cgroups, cgroup_detail = PidsCgroups.create()
    plan = IsolationPlan(
        mode=IsolationMode.weak,
        weak_allowed=settings.allow_weak_isolation,
        identity=identity,
        python=python,
        inside_dir=stage_inside_files(),
        bwrap=find_bwrap(settings.bwrap_path),
        seccomp=seccomp,
        cgroups=cgroups,
    )
    if plan.bwrap is None:
        bwrap_detail = f"{settings.bwrap_path!r} not found (Debian: apt-get install bubblewrap)"
        problems.append(bwrap_detail)
    else:
        failure = _trial_bwrap(settings, plan, seccomp)
        if failure is None:
            bwrap_detail = (
                f"{plan.bwrap}: new user/mount/pid/net/ipc/uts/cgroup namespaces, read-only "
                f"/usr only, {settings.tmp_mb} MB /tmp, no user namespaces inside"
            )
        else:
            bwrap_detail = f"{plan.bwrap} cannot start a sandbox here: {failure}"
            problems.append(bwrap_detail)
            plan.bwrap = None

    full = plan.bwrap is not None and seccomp is not None
    plan.mode = IsolationMode.full if full else IsolationMode.weak
    secrets_seen = _secret_variables()
    plan.layers = [
        IsolationLayer(name="non_root_uid", active=identity.uid != 0, detail=identity.detail),
        IsolationLayer(name="bubblewrap", active=plan.bwrap is not None, detail=bwrap_detail),
        IsolationLayer(name="seccomp", active=seccomp is not None, detail=seccomp_detail),
        IsolationLayer(
            name="rlimits",
            active=True,
            detail=(
                f"address space (memory_mb over the interpreter), CPU, "
                f"{settings.max_processes} processes, {settings.max_file_mb} MB files, "
                f"{settings.max_open_files} open files, no core dumps"
            ),
        ),
        IsolationLayer(name="pids_cgroup", active=cgroups is not None, detail=cgroup_detail),
        IsolationLayer(
            name="wall_timeout",
            active=True,
            detail=(
                "kills every process of the job, setsid orphans included"
                if plan.bwrap is not None
                else "kills the job's process tree (orphans re-parent to the zygote)"
            ),
        ),
        IsolationLayer(
            name="output_caps",
            active=True,
            detail=(
                f"stdout {settings.stdout_cap_bytes} B and stderr {settings.stderr_cap_bytes} B "
                f"kept; killed past {settings.output_kill_bytes} B"
            ),
        ),
        IsolationLayer(
            name="clean_environment",
            active=not secrets_seen,
            detail=(
                "sandboxes get only PATH, HOME, TMPDIR, LANG; the service's environment holds "
                + (
                    f"secret-looking variables: {', '.join(secrets_seen)}"
                    if secrets_seen
                    else "no secret-looking variables"
                )
            ),
        ),
    ]
    if not full and not settings.allow_weak_isolation:
        plan.close()
        raise IsolationUnavailable(
            "refusing to run generated code without full isolation ("
            + "; ".join(problems)
            + "). Install bubblewrap (and libseccomp), or set SANDBOX_ALLOW_WEAK_ISOLATION=1 "
            "to accept weaker isolation (reported on every result)."
        )
    return plan


def close_quietly(plan: IsolationPlan | None) -> None:
    if plan is not None:
        with contextlib.suppress(OSError):
            plan.close()
