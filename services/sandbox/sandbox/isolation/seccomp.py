"""The seccomp filter every process in a sandbox runs under.

Built with libseccomp (through ``pyseccomp``) as a BPF program that bubblewrap loads with
``--seccomp FD`` (or the zygote loads itself in weak mode). Default: allow; then deny what
generated code never needs and an escape would: sockets other than ``AF_UNIX``, namespace
creation (``unshare``, ``setns``, ``clone`` with namespace flags; ``clone3`` answers ENOSYS so
glibc falls back to ``clone``, whose flags the filter can read), ``ptrace`` and cross-process
memory access, ``mount`` and the new mount API, ``bpf``, ``perf_event_open``, keyrings,
``io_uring``, kernel modules and ``kexec``, SysV IPC and POSIX message queues (they would
outlive a job), and terminal injection (``TIOCSTI``). Other architectures' system calls kill
the process (libseccomp's default for a foreign architecture).
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

DENIED_SYSCALLS: tuple[str, ...] = (
    # debugging other processes, reading their memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    # namespaces and mounts
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # kernel attack surface
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "fanotify_init",
    "iopl",
    "ioperm",
    "uselib",
    "vhangup",
    # the host's clock, identity and power
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    # state that would outlive a job in a warm sandbox
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
)

NAMESPACE_CLONE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
TIOCSTI = 0x5412


class SeccompUnavailable(Exception):
    """libseccomp (or its Python binding) is missing or cannot build the filter."""


@dataclass(frozen=True)
class SeccompProgram:
    bpf: bytes
    denied: tuple[str, ...]
    unknown: tuple[str, ...]  # names this libseccomp does not know (older kernels/libraries)

    def memfd(self) -> int:
        """A fresh file descriptor holding the program, positioned at its start."""
        fd = os.memfd_create("crosscheck-seccomp", 0)
        view = memoryview(self.bpf)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd


def build_seccomp_program() -> SeccompProgram:
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except (ImportError, OSError, RuntimeError) as exc:
        raise SeccompUnavailable(f"pyseccomp/libseccomp unavailable: {exc}") from exc

    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for flag in NAMESPACE_CLONE_FLAGS:
            flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        flt.add_rule(deny, "ioctl", sc.Arg(1, sc.EQ, TIOCSTI))
        denied: list[str] = []
        unknown: list[str] = []
        for name in DENIED_SYSCALLS:
            try:
                flt.add_rule(deny, name)
            except (OSError, ValueError, RuntimeError):
                unknown.append(name)
            else:
                denied.append(name)
        with os.fdopen(os.memfd_create("crosscheck-seccomp-build", 0), "w+b") as buffer:
            flt.export_bpf(buffer)
            buffer.seek(0)
            bpf = buffer.read()
    except (OSError, ValueError, RuntimeError) as exc:
        raise SeccompUnavailable(f"could not build the seccomp filter: {exc}") from exc
    if not bpf or len(bpf) % 8:
        raise SeccompUnavailable("libseccomp produced an empty or malformed program")
    return SeccompProgram(bpf=bpf, denied=tuple(denied), unknown=tuple(unknown))
