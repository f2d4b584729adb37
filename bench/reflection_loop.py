"""Reflection-loop benchmark: Crosscheck through its real services vs. the LangGraph peer.

Workload (shared with ../shared/peer-bench): one run = 1 draft + 3 critiques + 2 revisions,
6 model calls, each answered by the fake model server after LAT seconds. Ours goes the whole
way: HTTP to the orchestrator, a durable DBOS workflow on SQLite, HTTP to the Actor and the
Critic, the official OpenAI/Anthropic SDKs, HTTP to the fake model. The peer runs the same
6-node graph in one process with fake in-process model calls.

  uv run python -m bench.reflection_loop                   # both, default sizes
  uv run python -m bench.reflection_loop --skip-peer --concurrency 200

Prints a table and one JSON line per measurement. The LangGraph peer runs in its own venv
(created on first use from ../shared/peer-bench/requirements-langgraph.txt, from PyPI).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets
from rich.console import Console
from rich.table import Table

from crosscheck.launcher import Supervisor, plan
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = (ROOT / ".." / "shared" / "peer-bench").resolve()
PEER_VENV = Path(os.environ.get("CROSSCHECK_PEER_VENV", "/tmp/crosscheck-lgvenv"))
ADMIN = "bench-admin-token-0123456789abcdef"
TASK = "Summarise why reflection loops need an independent critic. [bench:3]"
console = Console()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Platform:
    """Fake model, Actor, Critic and Orchestrator as real processes on loopback."""

    def __init__(self, workdir: Path, executor_threads: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        for prefix in ("ACTOR", "CRITIC", "SANDBOX", "FAKEMODEL", "ORCHESTRATOR"):
            env[f"{prefix}_PORT"] = str(free_port())
        env.update(
            {
                "CROSSCHECK_ADMIN_TOKEN": ADMIN,
                "DATABASE_URL": f"sqlite:///{workdir}/crosscheck.sqlite",
                "CROSSCHECK_LOG_LEVEL": "WARNING",
                "ORCHESTRATOR_EXECUTOR_THREADS": str(executor_threads),
            }
        )
        self.plan = plan(env, with_sandbox=False, with_console=False)
        self.supervisor = Supervisor(self.plan, workdir / "logs")
        by_name = {s.name: s for s in self.plan.services}
        self.url = by_name["orchestrator"].url(self.plan.env)
        self.fake_url = by_name["fakemodel"].url(self.plan.env)

    def __enter__(self) -> Platform:
        try:
            for spec in self.plan.services:
                running = self.supervisor.start(spec)
                problem = self.supervisor.wait_healthy(running)
                if problem:
                    raise RuntimeError(f"{spec.name} did not start: {problem}")
        except BaseException:
            self.supervisor.stop()  # never leave the services that did start behind
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.supervisor.stop()

    def peak_memory(self) -> dict[str, float]:
        return {
            r.spec.name: round(peak_rss_mb(r.process.pid), 1)
            for r in self.supervisor.running
            if r.spec.name != "fakemodel"
        }

    def cpu(self) -> dict[str, float]:
        return {r.spec.name: cpu_seconds(r.process.pid) for r in self.supervisor.running}

    def set_latency(self, seconds: float) -> None:
        httpx.post(f"{self.fake_url}/_control/config", json={"latency_ms": int(seconds * 1000)})


class Finished:
    """Follows the event stream and resolves a future per run when it finishes."""

    def __init__(self, url: str) -> None:
        self.url = url.replace("http", "ws") + "/v1/events"
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.early: dict[str, dict[str, Any]] = {}
        self.since = 0
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        while True:
            try:
                async with websockets.connect(
                    f"{self.url}?since={self.since}", additional_headers=headers, max_size=None
                ) as ws:
                    async for raw in ws:
                        event = json.loads(raw)
                        self.since = event["seq"]
                        if event["type"] == "run.finished":
                            future = self.waiting.pop(event["run_id"], None)
                            if future is None:
                                self.early[event["run_id"]] = event["data"]
                            elif not future.done():
                                future.set_result(event["data"])
            except (OSError, websockets.exceptions.ConnectionClosed):
                await asyncio.sleep(0.1)

    def wait(self, run_id: str) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if run_id in self.early:
            future.set_result(self.early.pop(run_id))
        else:
            self.waiting[run_id] = future
        return future

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()


async def one_run(client: httpx.AsyncClient, finished: Finished) -> tuple[float, str]:
    start = time.perf_counter()
    key = uuid.uuid4().hex
    body = {"task": TASK, "policy": {"max_rounds": 3}}
    for attempt in range(5):  # a dropped keep-alive connection is retried with the same key
        try:
            response = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": key})
            break
        except httpx.TransportError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.1 * (attempt + 1))
    response.raise_for_status()
    data = await finished.wait(response.json()["id"])
    ok = data["status"] == "succeeded" and data["stop_reason"] == "critic_pass"
    return time.perf_counter() - start, "ok" if ok else f"{data['status']}/{data['stop_reason']}"


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


async def ours_sequential(platform: Platform, runs: int) -> dict[str, Any]:
    platform.set_latency(0)
    finished = Finished(platform.url)
    await finished.start()
    limits = httpx.Limits(max_connections=10)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=platform.url, headers=headers, limits=limits) as client:
        for _ in range(5):  # warm-up
            await one_run(client, finished)
        durations, outcomes = [], []
        cpu_before = platform.cpu()
        began = time.perf_counter()
        for _ in range(runs):
            seconds, outcome = await one_run(client, finished)
            durations.append(seconds)
            outcomes.append(outcome)
        wall = time.perf_counter() - began
    await finished.stop()
    return {
        "variant": "a",
        "desc": "ours: LAT=0, sequential, real services + SQLite",
        "runs": runs,
        "runs_per_s": round(runs / wall, 2),
        "p50_ms": round(percentile(durations, 50) * 1000, 2),
        "p99_ms": round(percentile(durations, 99) * 1000, 2),
        "errors": sum(o != "ok" for o in outcomes),
        "cpu_s_by_process": cpu_used(cpu_before, platform.cpu()),
    }


async def ours_concurrent(platform: Platform, concurrency: int, lat: float) -> dict[str, Any]:
    platform.set_latency(lat)
    finished = Finished(platform.url)
    await finished.start()
    limits = httpx.Limits(max_connections=100)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(
        base_url=platform.url, headers=headers, limits=limits, timeout=600
    ) as client:
        cpu_before = platform.cpu()
        began = time.perf_counter()
        results = await asyncio.gather(
            *[one_run(client, finished) for _ in range(concurrency)], return_exceptions=True
        )
        wall = time.perf_counter() - began
    await finished.stop()
    cpu = cpu_used(cpu_before, platform.cpu())
    errors = [r for r in results if isinstance(r, BaseException) or r[1] != "ok"]
    durations = [r[0] for r in results if not isinstance(r, BaseException)]
    memory = platform.peak_memory()
    return {
        "variant": "d",
        "desc": f"ours: LAT={lat}, {concurrency} concurrent runs, real services + SQLite",
        "lat_s": lat,
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "ideal_s": round(6 * lat, 2),
        "run_p50_s": round(percentile(durations, 50), 2) if durations else None,
        "run_p99_s": round(percentile(durations, 99), 2) if durations else None,
        "errors": len(errors),
        "error_kinds": sorted({repr(e) if isinstance(e, BaseException) else e[1] for e in errors})[
            :5
        ],
        "cpu_s_by_process": cpu,
        "peak_rss_mb": round(sum(memory.values()), 1),
        "peak_rss_mb_by_service": memory,
    }


def ensure_peer_venv() -> Path:
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        console.print(f"creating the LangGraph venv at {PEER_VENV} (PyPI) ...")
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "-r",
                str(PEER_DIR / "requirements-langgraph.txt"),
            ],
            check=True,
        )
    return python


def run_peer(runs: int, concurrency: int, repeats: int) -> list[dict[str, Any]]:
    python = ensure_peer_venv()
    completed = subprocess.run(
        [
            str(python),
            str(PEER_DIR / "bench_langgraph_reflection.py"),
            "--runs",
            str(runs),
            "--concurrency",
            str(concurrency),
            "--repeats",
            str(repeats),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="sequential runs at LAT=0")
    parser.add_argument("--concurrency", type=int, default=1000, help="concurrent runs")
    parser.add_argument("--lat", type=float, default=0.05, help="model latency for (d), s")
    parser.add_argument("--peer-repeats", type=int, default=3)
    parser.add_argument("--executor-threads", type=int, default=8)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--skip-ours", action="store_true")
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    if not args.skip_peer:
        console.print("running the LangGraph peer ...")
        rows += [
            {**r, "who": "langgraph"}
            for r in run_peer(args.runs, args.concurrency, args.peer_repeats)
            if r.get("variant") in {"b", "c", "d"}
        ]
    if not args.skip_ours:
        with tempfile.TemporaryDirectory(prefix="crosscheck-bench-") as tmp:
            with Platform(Path(tmp), args.executor_threads) as platform:
                console.print("running Crosscheck (a) sequential ...")
                rows.append(
                    {**asyncio.run(ours_sequential(platform, args.runs)), "who": "crosscheck"}
                )
            with Platform(Path(tmp) / "d", args.executor_threads) as platform:
                console.print(f"running Crosscheck (d) {args.concurrency} concurrent ...")
                rows.append(
                    {
                        **asyncio.run(ours_concurrent(platform, args.concurrency, args.lat)),
                        "who": "crosscheck",
                    }
                )

    table = Table(title="Reflection loop: 1 draft + 3 critiques + 2 revisions per run")
    for column in ("who", "variant", "runs/s", "p50 ms", "p99 ms", "wall s", "peak MB", "errors"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["who"],
            r["variant"],
            str(r.get("runs_per_s", "")),
            str(r.get("p50_ms", "")),
            str(r.get("p99_ms", "")),
            str(r.get("wall_s", "")),
            str(r.get("peak_rss_mb", "")),
            str(r.get("errors", "")),
        )
    console.print(table)
    for r in rows:
        print(json.dumps(r))  # noqa: T201


if __name__ == "__main__":
    main()
