"""Start and stop the platform again and again, as an operator would, and prove that every
stop leaves no process and no bound port behind.

Each cycle starts the command (``make run`` by default) in its own process group, waits
until every service is healthy, records every process of the tree (the services, the
sandbox's bubblewrap workers, Streamlit), then stops it the way a terminal or a process
manager does: SIGTERM to the process group, SIGINT to the group (Ctrl-C), or two SIGTERMs
a second apart (an impatient operator: the second skips the grace period). It prints the
start and stop time of each cycle and what was left behind, and exits 1 if anything was.

  uv run python -m bench.start_stop --cycles 20
  uv run python -m bench.start_stop --cycles 2 --command "crosscheck up --no-console"
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crosscheck.launcher import PORT_PREFIXES

console = Console()
REPO = Path(__file__).resolve().parents[1]
PREFIXES = PORT_PREFIXES
STOPS = ("SIGTERM to the group", "SIGINT to the group", "SIGTERM twice")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_bound(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def parents() -> dict[int, int]:
    """pid -> parent pid for every live, non-zombie process (from /proc)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            found[int(entry.name)] = int(fields[1])
    return found


def descendants(root: int) -> set[int]:
    tree = parents()
    found = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in tree.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def alive(pids: set[int]) -> set[int]:
    return pids & set(parents())


@dataclass
class Cycle:
    stop: str
    start_s: float = 0.0
    stop_s: float = 0.0
    processes: int = 0
    left_processes: set[int] = field(default_factory=set)
    left_ports: list[int] = field(default_factory=list)
    problem: str | None = None


def signal_group(pgid: int, signum: int) -> None:
    """Signal a process group that may already be gone (a start that failed stops itself)."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


PORT_TAKEN = "the port is in use"


def one_cycle(
    command: list[str], env: dict[str, str], cwd: Path, stop: str, timeout_s: float
) -> Cycle:
    cycle = Cycle(stop)
    ports = [int(env[f"{p}_PORT"]) for p in PREFIXES]
    log = cwd / "var" / "start_stop.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with log.open("wb") as out:
        top = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = began + timeout_s
    while time.monotonic() < deadline and top.poll() is None:
        if b"Press Ctrl-C" in log.read_bytes():
            break
        time.sleep(0.1)
    cycle.start_s = time.monotonic() - began
    if top.poll() is not None or b"Press Ctrl-C" not in log.read_bytes():
        cycle.problem = "did not start: " + log.read_text(errors="replace")[-400:]
    tree = descendants(top.pid)
    cycle.processes = len(tree)
    stopped_at = time.monotonic()
    if stop == "SIGINT to the group":
        signal_group(top.pid, signal.SIGINT)
    else:
        signal_group(top.pid, signal.SIGTERM)
        if stop == "SIGTERM twice":
            time.sleep(1.0)  # sooner would count as one signal passed on twice
            signal_group(top.pid, signal.SIGTERM)
    try:
        top.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cycle.problem = "still running 30 s after the signal"
        signal_group(top.pid, signal.SIGKILL)
        top.wait()
    cycle.stop_s = time.monotonic() - stopped_at
    # a child reparented to init is reaped there: give it a moment
    settle = time.monotonic() + 2
    while alive(tree) and time.monotonic() < settle:
        time.sleep(0.05)
    cycle.left_processes = alive(tree)
    cycle.left_ports = [p for p in ports if port_bound(p)]
    for pid in cycle.left_processes:  # do not let one bad cycle spoil the next
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return cycle


def run_cycles(
    cycles: int, command: list[str], cwd: Path, *, timeout_s: float = 120.0
) -> list[Cycle]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.setdefault("CROSSCHECK_LOG_LEVEL", "WARNING")
    results = []
    for i in range(cycles):
        for _attempt in range(3):
            env.update({f"{p}_PORT": str(free_port()) for p in PREFIXES})
            cycle = one_cycle(command, env, cwd, STOPS[i % len(STOPS)], timeout_s)
            # a free port picked here can be taken by another program before the service
            # binds it; that start says so and stops cleanly: try again on other ports
            if not (cycle.problem and PORT_TAKEN in cycle.problem):
                break
        results.append(cycle)
    return results


def report(results: list[Cycle]) -> bool:
    table = Table(title="start/stop cycles")
    for column in ("#", "stopped by", "start s", "stop s", "processes", "left", "ports left"):
        table.add_column(column)
    clean = True
    for i, c in enumerate(results, 1):
        bad = bool(c.left_processes or c.left_ports or c.problem)
        clean &= not bad
        table.add_row(
            str(i),
            c.stop,
            f"{c.start_s:.1f}",
            f"{c.stop_s:.2f}",
            str(c.processes),
            str(len(c.left_processes)),
            ",".join(map(str, c.left_ports)) or "-",
            style="red" if bad else None,
        )
    console.print(table)
    for c in results:
        if c.problem:
            console.print(f"[red]{c.stop}: {c.problem}[/]")
    console.print("clean: nothing left behind" if clean else "[red]something was left behind[/]")
    return clean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--command", default="make run", help="what starts the platform")
    parser.add_argument("--cwd", type=Path, default=REPO)
    args = parser.parse_args(argv)
    command = shlex.split(args.command)
    if command[0] == "crosscheck":
        command = [sys.executable, "-m", "crosscheck", *command[1:]]
    return 0 if report(run_cycles(args.cycles, command, args.cwd)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
