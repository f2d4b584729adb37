"""`make run`: it installs no dev tool, and scripts/up.py hands each SIGTERM to `crosscheck up`
once, whether the operator signals the process group, make alone or up.py alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "scripts" / "up.py"

# Stands in for `crosscheck up`: counts the SIGTERMs it gets, and exits a second after the first
# (time for a duplicate to arrive).
COUNTER = """
import os, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
received = []
signal.signal(signal.SIGTERM, lambda *_: received.append(time.monotonic()))
out.write_text(f"ready {os.getppid()}")
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not (received and time.monotonic() > received[0] + 1):
    time.sleep(0.02)
out.write_text(f"done {len(received)}")
"""


def test_make_run_installs_no_dev_tools_and_starts_the_venv_entry_point():
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    # `uv run` would sync the dev group (pytest, mypy, playwright ...) into .venv
    assert dry_run.stdout.splitlines() == [
        "scripts/bootstrap.sh",
        "exec .venv/bin/python scripts/up.py",
    ]
    syncs = [
        line.strip()
        for line in (REPO / "scripts" / "bootstrap.sh").read_text().splitlines()
        if line.strip().startswith("uv sync")
    ]
    assert len(syncs) == 2  # with --dev, and without
    assert sum("--group dev" in line for line in syncs) == 1
    # and a bare `uv run` (the README's hints) syncs no group either
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["default-groups"] == []


def wait_for(path: Path, prefix: str, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.startswith(prefix):
            return text
        time.sleep(0.02)
    raise AssertionError(f"{path} never said {prefix!r}")


# Passes SIGTERM on to its child and exits, as GNU make does, but 0.2 s late: with real make the
# duplicate often merges with the group's own signal while still pending, which would let a
# regression pass unseen here.
SLOW_MAKE = """
import os, signal, subprocess, sys, time
child = subprocess.Popen(sys.argv[1:])
def pass_on(*_):
    time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    os._exit(143)
signal.signal(signal.SIGTERM, pass_on)
child.wait()
"""


@pytest.mark.parametrize(
    "target", ["process group", "make alone", "up.py alone", "process group, kill -9"]
)
@pytest.mark.parametrize("make", ["GNU make", "slow make"])
def test_a_sigterm_reaches_the_command_once(tmp_path, make, target):
    (tmp_path / "counter.py").write_text(COUNTER)
    out = tmp_path / "out"
    command = [sys.executable, str(UP), sys.executable, "counter.py", str(out)]
    if make == "GNU make":
        (tmp_path / "Makefile").write_text(f"run:\n\texec {' '.join(command)}\n")
        launcher = ["make", "-s", "run"]
    else:
        (tmp_path / "make.py").write_text(SLOW_MAKE)
        launcher = [sys.executable, "make.py", *command]
    parent = subprocess.Popen(launcher, cwd=tmp_path, start_new_session=True)
    try:
        up = int(wait_for(out, "ready").split()[1])  # the command's parent: scripts/up.py
        if target == "process group":
            os.killpg(parent.pid, signal.SIGTERM)  # it leads its own group (new session)
        elif target == "process group, kill -9":  # make and up.py die; the command stops
            os.killpg(parent.pid, signal.SIGKILL)
        elif target == "make alone":
            os.kill(parent.pid, signal.SIGTERM)
        else:  # `kill <pid of scripts/up.py>` from anyone, here this test
            os.kill(up, signal.SIGTERM)
        assert wait_for(out, "done") == "done 1"
    finally:
        parent.kill()
        parent.wait(timeout=10)
