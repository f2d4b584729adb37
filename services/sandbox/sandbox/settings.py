"""Sandbox settings: ``SANDBOX_*`` variables (plus the shared ``CROSSCHECK_*`` ones)."""

from __future__ import annotations

import math
import os

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.settings import ServiceSettings

NOBODY = 65534


def usable_cpus() -> int:
    """CPUs this process may use: its affinity, capped by a cgroup CPU quota (containers)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = cpus or 1
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),  # v2: "<quota|max> <period>"
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ):
        try:
            with open(quota_file) as handle:
                fields = handle.read().split()
            if period_file is not None:
                with open(period_file) as handle:
                    fields.append(handle.read().strip())
        except OSError:
            continue
        if len(fields) >= 2 and fields[0].lstrip("-").isdigit() and int(fields[0]) > 0:
            count = min(count, max(1, math.ceil(int(fields[0]) / int(fields[1]))))
        break
    return count


def _default_workers() -> int:
    return max(1, min(usable_cpus(), 16))


class SandboxSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="SANDBOX_", extra="ignore", env_file=None)

    port: int = Field(default=8003, ge=1, le=65535)
    workers: int = Field(
        default_factory=_default_workers,
        ge=1,
        le=64,
        description="Warm sandboxes, one job at a time each (default: usable CPUs, quota-aware).",
    )
    allow_weak_isolation: bool = Field(
        default=False,
        description="Serve without bubblewrap (or without seccomp); reported on every result.",
    )
    bwrap_path: str = Field(default="bwrap", description="bubblewrap executable (name or path).")
    python_path: str = Field(
        default="/usr/bin/python3",
        description="Interpreter for jobs; must live under /usr (the only host tree mounted).",
    )
    uid: int = Field(default=NOBODY, ge=1, description="uid the sandboxes run as (when root).")
    gid: int = Field(default=NOBODY, ge=1, description="gid the sandboxes run as (when root).")
    tmp_mb: int = Field(default=64, ge=1, le=4096, description="Size of each sandbox's /tmp.")
    shm_mb: int = Field(default=16, ge=1, le=1024, description="Size of each sandbox's /dev/shm.")
    max_processes: int = Field(
        default=32, ge=1, le=4096, description="Processes and threads one job may run."
    )
    max_open_files: int = Field(default=64, ge=16, le=65536)
    max_file_mb: int = Field(default=16, ge=1, le=4096, description="Largest file a job may write.")
    stdout_cap_bytes: int = Field(
        default=64 * 1024, ge=1024, le=8 * 1024 * 1024, description="stdout kept per job."
    )
    stderr_cap_bytes: int = Field(
        default=64 * 1024, ge=1024, le=8 * 1024 * 1024, description="stderr kept per job."
    )
    output_kill_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=4096,
        le=1024 * 1024 * 1024,
        description="A job writing more than this to stdout+stderr is killed.",
    )
    results_cap_bytes: int = Field(default=4 * 1024 * 1024, ge=65536, le=256 * 1024 * 1024)
    jobs_per_worker: int = Field(
        default=2000, ge=1, description="Replace a sandbox after this many jobs."
    )
    queue_timeout_s: float = Field(
        default=120.0, gt=0, description="How long a job may wait for a free sandbox."
    )
    worker_start_timeout_s: float = Field(default=20.0, gt=0)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
