"""How `make run` starts `crosscheck up`, so that each SIGTERM reaches it exactly once.

    .venv/bin/python scripts/up.py [command ...]   # default: .venv/bin/crosscheck up

GNU make passes a SIGTERM it receives on to the recipe it runs, then exits. When an operator
sends SIGTERM to the whole process group, make's direct child therefore gets it twice, and a
second signal tells `crosscheck up` to skip its grace period and kill the services at once.
So make's direct child is this small process, and `crosscheck up` runs below it in a process
group of its own: every signal this process gets (from make, from the group: kill -- -PGID,
Ctrl-C, terminal hangup; or sent to its own pid by anyone: `kill <pid of up.py>`) is passed on,
except make's echo of a group signal (one from make within ``ECHO_WINDOW_S`` of one from
elsewhere). A second signal the operator sends is passed on too: it means "stop now". It exits
with the command's status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
# A signal from make this soon after one from elsewhere is make passing on a group signal.
ECHO_WINDOW_S = 1.0
DEFAULT_COMMAND = [str(Path(__file__).resolve().parent.parent / ".venv/bin/crosscheck"), "up"]


_PR_SET_PDEATHSIG = 1


def _prepare() -> None:
    """In the child, before exec: unblock the signals (the blocked mask would be inherited),
    and ask for a SIGTERM should this process die, even by ``kill -9`` of the whole group
    (the command is in a group of its own, so it would outlive it). Linux only."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(command: list[str]) -> int:
    make = os.getppid()
    # Blocked, then collected with sigtimedwait, which tells who sent each one.
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    # Its own group: a group signal reaches it through this process only, once.
    child = subprocess.Popen(command, preexec_fn=_prepare, process_group=0)
    last_other_signal = -ECHO_WINDOW_S
    while child.poll() is None:
        info = signal.sigtimedwait(SIGNALS, 0.2)
        if info is None:
            continue
        if info.si_pid != make:
            last_other_signal = time.monotonic()
            child.send_signal(info.si_signo)  # the group's, the terminal's, or to this pid
        elif time.monotonic() - last_other_signal > ECHO_WINDOW_S:
            child.send_signal(info.si_signo)  # make alone was signalled
    code = child.returncode
    return 128 - code if code < 0 else code  # killed by signal N: exit 128 + N, as shells do


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_COMMAND))
