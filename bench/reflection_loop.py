"""The reflection loop on Crosscheck alone, and the pieces every loop benchmark shares.

Workload: one run = 1 draft + 3 critiques + 2 revisions, 6 model calls, each answered by the
fake model server after LAT seconds. The run goes the whole way: HTTP to the orchestrator, a
durable DBOS workflow on SQLite, HTTP to the Actor and the Critic, the official
OpenAI/Anthropic SDKs, HTTP to the fake model. ``bench.peers`` runs this same workload
beside two LangGraph peers on the same fake model process; this module measures Crosscheck
alone, quickly, and holds what the other benchmarks import (``Platform``, ``Finished``,
``Driver``, ``one_run``).

  uv run python -m bench.reflection_loop --runs 100 --concurrency 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets
from rich.console import Console
from rich.table import Table

from bench.procstat import cpu_seconds, peak_rss_mb
from crosscheck.launcher import Supervisor, plan
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "bench-admin-token-0123456789abcdef"
TASK = "Summarise why reflection loops need an independent critic. [bench:3]"
console = Console()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Platform:
    """Fake model, Actor, Critic and Orchestrator as real processes on loopback."""

    def __init__(self, workdir: Path, executor_threads: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        for prefix in ("ACTOR", "CRITIC", "SANDBOX", "RESEARCH", "FAKEMODEL", "ORCHESTRATOR"):
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
    """Follows the event stream and resolves a future per run when it finishes.

    It asks the server for ``run.finished`` events only: reading all 14 events of a run
    to find that one cost the load generator (on the same cores) CPU per run.
    """

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
                    f"{self.url}?type=run.finished&since={self.since}",
                    additional_headers=headers,
                    max_size=None,
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


class Driver:
    """The load generator: POSTs runs through one pooled client and waits for them.

    Requests wait for a connection in a semaphore of the pool's size, not in httpx's pool:
    httpcore rescans every queued request against every connection on each pool event,
    which made 1000 queued POSTs cost the client seconds of CPU on the cores it shares with
    the system under test.
    """

    def __init__(self, url: str, connections: int, *, timeout_s: float = 600) -> None:
        self.url = url
        self.finished = Finished(url)
        self.gate = asyncio.Semaphore(connections)
        self.client = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {ADMIN}"},
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            timeout=timeout_s,
        )

    async def __aenter__(self) -> Driver:
        await self.finished.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.finished.stop()
        await self.client.aclose()

    async def one_run(self) -> tuple[float, str]:
        return await one_run(self.client, self.finished, self.gate)


async def one_run(
    client: httpx.AsyncClient, finished: Finished, gate: asyncio.Semaphore | None = None
) -> tuple[float, str]:
    start = time.perf_counter()
    key = uuid.uuid4().hex
    body = {"task": TASK, "policy": {"max_rounds": 3}}
    for attempt in range(5):  # a dropped keep-alive connection is retried with the same key
        try:
            if gate is None:
                response = await client.post(
                    "/v1/runs", json=body, headers={"Idempotency-Key": key}
                )
            else:
                async with gate:
                    response = await client.post(
                        "/v1/runs", json=body, headers={"Idempotency-Key": key}
                    )
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


WARMUP_RUNS = 5


async def ours_sequential(platform: Platform, runs: int) -> dict[str, Any]:
    platform.set_latency(0)
    async with Driver(platform.url, 10) as driver:
        for _ in range(WARMUP_RUNS):
            await driver.one_run()
        durations, outcomes = [], []
        cpu_before = platform.cpu()
        began = time.perf_counter()
        for _ in range(runs):
            seconds, outcome = await driver.one_run()
            durations.append(seconds)
            outcomes.append(outcome)
        wall = time.perf_counter() - began
        cpu = cpu_used(cpu_before, platform.cpu())
    return {
        "variant": "a",
        "desc": "ours: LAT=0, sequential, real services + SQLite",
        "runs": runs,
        "runs_per_s": round(runs / wall, 2),
        "p50_ms": round(percentile(durations, 50) * 1000, 2),
        "p99_ms": round(percentile(durations, 99) * 1000, 2),
        "errors": sum(o != "ok" for o in outcomes),
        "cpu_s_by_process": cpu,
    }


async def ours_concurrent(platform: Platform, concurrency: int, lat: float) -> dict[str, Any]:
    async with Driver(platform.url, 100) as driver:
        platform.set_latency(0)
        for _ in range(WARMUP_RUNS):  # the same warm-up as the sequential measurement
            await driver.one_run()
        platform.set_latency(lat)
        cpu_before = platform.cpu()
        began = time.perf_counter()
        results = await asyncio.gather(
            *[driver.one_run() for _ in range(concurrency)], return_exceptions=True
        )
        wall = time.perf_counter() - began
        cpu = cpu_used(cpu_before, platform.cpu())
    errors = [r for r in results if isinstance(r, BaseException) or r[1] != "ok"]
    durations = [r[0] for r in results if not isinstance(r, BaseException)]
    memory = platform.peak_memory()
    return {
        "variant": "b",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="sequential runs at LAT=0")
    parser.add_argument("--concurrency", type=int, default=1000, help="concurrent runs")
    parser.add_argument("--lat", type=float, default=0.05, help="model latency for (b), s")
    parser.add_argument("--executor-threads", type=int, default=8)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="crosscheck-bench-") as tmp:
        with Platform(Path(tmp), args.executor_threads) as platform:
            console.print("running Crosscheck (a) sequential ...")
            rows.append(asyncio.run(ours_sequential(platform, args.runs)))
        with Platform(Path(tmp) / "b", args.executor_threads) as platform:
            console.print(f"running Crosscheck (b) {args.concurrency} concurrent ...")
            rows.append(asyncio.run(ours_concurrent(platform, args.concurrency, args.lat)))

    table = Table(title="Crosscheck alone: 1 draft + 3 critiques + 2 revisions per run")
    for column in ("variant", "runs/s", "p50 ms", "p99 ms", "wall s", "peak MB", "errors", "CPU s"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["variant"],
            str(r.get("runs_per_s", "")),
            str(r.get("p50_ms", "")),
            str(r.get("p99_ms", "")),
            str(r.get("wall_s", "")),
            str(r.get("peak_rss_mb", "")),
            str(r.get("errors", "")),
            json.dumps(r["cpu_s_by_process"]),
        )
    console.print(table)
    for r in rows:
        print(json.dumps(r))  # noqa: T201


if __name__ == "__main__":
    main()
