"""Where the orchestrator's CPU goes: py-spy samples it while the reflection loop runs.

Starts the platform as ``bench.reflection_loop`` does (fake model, Actor, Critic,
orchestrator), warms up, then records the orchestrator with py-spy (idle threads excluded,
so every sample is CPU) during (a) sequential runs at latency 0 or (b) concurrent runs at
``--lat``. Prints the share of samples by what the orchestrator was doing (inclusive: a
sample counts for every group one of its frames belongs to) and the top leaf functions.

  uv tool install py-spy     # once; py-spy is on PyPI
  uv run python -m bench.profile_orchestrator --mode a --runs 100
  uv run python -m bench.profile_orchestrator --mode b --runs 300 --lat 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.procstat import cpu_seconds, thread_cpu_seconds
from bench.reflection_loop import Driver, Platform

# Each sample goes to the innermost frame that names an owner (walking from the leaf up);
# libraries doing work for an owner (SQLAlchemy, pydantic, json, asyncio) count for it.
OWNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("structlog/", "logging/__init__", "shared/logging.py")),
    ("metrics (prometheus)", ("prometheus_client/",)),
    (
        "read model: one transaction (Database._unit)",
        ("orchestrator/readmodel/", "orchestrator/engine/records.py", "Database._unit"),
    ),
    ("event feed (websockets)", ("orchestrator/events/", "websockets/")),
    ("peer HTTP calls (httpx/httpcore)", ("orchestrator/peers/", "httpx/", "httpcore/")),
    ("DBOS step and workflow records", ("dbos/",)),
    ("steps' own code", ("orchestrator/engine/",)),
    ("runs API", ("orchestrator/runs/", "orchestrator/auth/", "orchestrator/deps.py")),
    (
        "HTTP server and middleware",
        ("starlette/", "fastapi/", "uvicorn/", "h11/", "shared/service.py"),
    ),
    ("thread hand-offs", ("concurrent/futures", "asyncio/threads.py", "_chain_future")),
)
OTHER = "event loop and other"


def owner(frames: list[str]) -> str:
    for frame in reversed(frames):
        for label, keys in OWNERS:
            if any(k in frame for k in keys):
                if label.startswith("read model"):
                    in_step = any("orchestrator/engine/steps/" in f for f in frames)
                    return label + (", a step's" if in_step else ", an API/feed read")
                return label
    return OTHER


def summarise(raw: Path, top: int) -> str:
    groups: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():  # a line cut off when py-spy stopped
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        groups[owner(frames)] += count
        leaves[frames[-1]] += count
    lines = [f"{total} samples (thread holding the GIL)", "", "share by owner:"]
    for label, count in groups.most_common():
        lines.append(f"  {100 * count / max(total, 1):5.1f}%  {label}")
    lines += ["", f"top {top} leaf functions:"]
    for frame, count in leaves.most_common(top):
        lines.append(f"  {100 * count / max(total, 1):5.1f}%  {frame[:150]}")
    return "\n".join(lines)


def thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """Python's names of a process's threads (py-spy dump prints them with their ids)."""
    dump = subprocess.run(
        [py_spy, "dump", "-p", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    names: dict[int, str] = {}
    for line in dump.splitlines():
        # Thread 1234 (idle): "db-write_0"
        if line.startswith("Thread ") and '"' in line:
            tid = line.split()[1]
            if tid.isdigit():
                names[int(tid)] = line.split('"')[1]
    return names


def by_thread(
    before: dict[int, float], after: dict[int, float], names: dict[int, str], pid: int, runs: int
) -> str:
    """CPU per run of each thread group (a pool's threads summed), read from /proc: the
    real CPU, where py-spy's samples (wall time of the thread holding the GIL) stretch
    whatever a loaded machine preempts."""
    groups: dict[str, float] = {}
    for tid, seconds in after.items():
        name = "event loop (main thread)" if tid == pid else names.get(tid, f"thread {tid}")
        label = name.rstrip("0123456789").rstrip("_-")
        groups[label] = groups.get(label, 0.0) + seconds - before.get(tid, 0.0)
    lines = ["CPU per run by thread (from /proc):"]
    for label, used in sorted(groups.items(), key=lambda item: -item[1]):
        if used > 0:
            lines.append(f"  {1000 * used / runs:6.1f} ms  {label}")
    return "\n".join(lines)


async def workload(platform: Platform, mode: str, runs: int, lat: float, record) -> float:
    async with Driver(platform.url, 10 if mode == "a" else 100) as driver:
        platform.set_latency(0)
        for _ in range(5):
            await driver.one_run()
        platform.set_latency(0 if mode == "a" else lat)
        with record():
            pid = next(
                r.process.pid for r in platform.supervisor.running if r.spec.name == "orchestrator"
            )
            before = cpu_seconds(pid)
            record.threads_before = thread_cpu_seconds(pid)
            if mode == "a":
                outcomes = [(await driver.one_run())[1] for _ in range(runs)]
            else:
                done = await asyncio.gather(*[driver.one_run() for _ in range(runs)])
                outcomes = [o for _, o in done]
            used = cpu_seconds(pid) - before
            record.threads_after = thread_cpu_seconds(pid)
    bad = [o for o in outcomes if o != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} runs failed: {sorted(set(bad))[:3]}")
    return used / runs * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["a", "b"], default="a")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--lat", type=float, default=0.05)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default=None, help="keep py-spy's collapsed stacks here")
    parser.add_argument("--database-url", default=None, help="default: a SQLite file")
    parser.add_argument("--summarise", default=None, help="only summarise saved stacks")
    args = parser.parse_args()
    if args.summarise:
        print(summarise(Path(args.summarise), args.top))  # noqa: T201
        return
    found = shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy not found: `uv tool install py-spy`")
    py_spy: str = found

    with tempfile.TemporaryDirectory(prefix="crosscheck-profile-") as tmp:
        raw = Path(args.out or Path(tmp) / "orchestrator.txt")
        platform_ = Platform(Path(tmp), 8)
        if args.database_url:
            platform_.plan.env["DATABASE_URL"] = args.database_url
        with platform_ as platform:
            pid = next(
                r.process.pid for r in platform.supervisor.running if r.spec.name == "orchestrator"
            )

            class record:
                # CPU seconds per thread id, read by ``workload`` around the window
                threads_before: dict[int, float] = {}
                threads_after: dict[int, float] = {}

                def __enter__(self) -> None:
                    self.spy = subprocess.Popen(
                        [py_spy, "record", "-p", str(pid), "-r", str(args.rate), "-f", "raw"]
                        + ["-o", str(raw), "--nonblocking", "--gil"],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    time.sleep(1.0)  # py-spy attaches

                def __exit__(self, *_: object) -> None:
                    self.spy.send_signal(signal.SIGINT)
                    self.spy.wait(timeout=60)

            per_run = asyncio.run(workload(platform, args.mode, args.runs, args.lat, record))
            threads = by_thread(
                record.threads_before,
                record.threads_after,
                thread_names(py_spy, pid),
                pid,
                args.runs,
            )
        print(f"orchestrator CPU per run: {per_run:.1f} ms ({args.mode}, {args.runs} runs)")  # noqa: T201
        print(f"load average: {os.getloadavg()}")  # noqa: T201
        print(threads)  # noqa: T201
        print(summarise(raw, args.top))  # noqa: T201


if __name__ == "__main__":
    main()
