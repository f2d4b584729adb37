"""Per-job resource limits, applied by the zygote's child before the job's code runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class ResourcePolicy:
    max_processes: int
    max_open_files: int
    max_file_bytes: int


def job_rlimits(
    *,
    timeout_s: float,
    memory_mb: int,
    baseline_vm_bytes: int,
    policy: ResourcePolicy,
    nproc_base: int,
) -> dict[str, tuple[int, int]]:
    """Resource names (as in :mod:`resource`) to ``(soft, hard)``.

    ``RLIMIT_AS`` is the interpreter's own address space at fork plus ``memory_mb``, so the
    figure a caller gives is what the job can allocate. ``RLIMIT_CPU`` backs the wall timeout
    up for a job that forks CPU burners. ``RLIMIT_NPROC`` counts per user inside the sandbox's
    user namespace, so ``nproc_base`` adds the processes already there (the zygote).
    """
    address_space = baseline_vm_bytes + memory_mb * MIB
    cpu = math.ceil(timeout_s) + 1
    nproc = nproc_base + policy.max_processes
    return {
        "RLIMIT_AS": (address_space, address_space),
        "RLIMIT_CPU": (cpu, cpu + 1),
        "RLIMIT_NPROC": (nproc, nproc),
        "RLIMIT_FSIZE": (policy.max_file_bytes, policy.max_file_bytes),
        "RLIMIT_NOFILE": (policy.max_open_files, policy.max_open_files),
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_MEMLOCK": (0, 0),
        "RLIMIT_MSGQUEUE": (0, 0),
    }
