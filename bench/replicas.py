"""Scale-out benchmark: runs/s with 1, 2 and 3 orchestrator replicas sharing one Postgres.

Workload: N runs (default 300) of the reflection loop, 3 rounds each (1 draft + 3 critiques
+ 2 revisions = 6 model calls), every model call answered by the fake model server after a
small latency. The runs are posted round-robin to the replicas, all at once (at most
``--inflight`` requests open); a websocket on the first replica follows every replica's
events (LISTEN/NOTIFY) and marks each run finished. One Actor, one Critic and the fake model
server serve every configuration; each configuration gets a new Postgres database.

  uv run python -m bench.replicas                        # 1, 2, 3 replicas, 300 runs, 20 ms
  uv run python -m bench.replicas --replicas 1,3 --runs 500 --latency-ms 50

Prints a table and one JSON line per configuration: wall time, runs/s, and CPU seconds per
run for each process (orchestrators summed and per replica). No timing asserts: on a shared
2-core machine the replicas compete for the same cores as the Actor, the Critic, the fake
model and Postgres, so the figures say what one machine gives, not what N machines would.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rich.console import Console
from rich.table import Table

from bench.reflection_loop import ADMIN, Finished
from tests.support.servers import free_port

SERVICE_TOKEN = "bench-service-token-0123456789abcdef"
TASK = "Summarise why reflection loops need an independent critic. [bench:3]"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
console = Console(width=150)

try:  # optional: /proc gives the same figures on Linux
    psutil: Any = importlib.import_module("psutil")
except ImportError:
    psutil = None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    if psutil is not None:
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float | None:
    """CPU of every Postgres server process on this machine (None if not readable)."""
    total = 0.0
    seen = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in {"postgres", "postmaster"}:
                continue
            total += cpu_seconds(int(entry.name))
            seen = True
        except (OSError, ValueError):
            continue
    return total if seen else None


class Process:
    def __init__(self, name: str, module: str, env: dict[str, str], port_var: str, log: Path):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.module = module
        self.env = {**env, port_var: str(self.port)}
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module], env=self.env, stdout=out, stderr=out
            )

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.log}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not become healthy: {self.log}")

    def cpu(self) -> float:
        assert self.process is not None
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def new_database(admin_url: str) -> Iterator[str]:
    name = f"cc_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def base_env() -> dict[str, str]:
    prefixes = ("OPENAI_", "ANTHROPIC_", "ORCHESTRATOR_", "ACTOR_", "CRITIC_", "FAKEMODEL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(
        {
            "CROSSCHECK_SERVICE_TOKEN": SERVICE_TOKEN,
            "CROSSCHECK_LOG_LEVEL": "WARNING",
            "OPENAI_API_KEY": "sk-fake-bench",
            "ANTHROPIC_API_KEY": "sk-ant-fake-bench",
        }
    )
    env.pop("DATABASE_URL", None)
    return env


async def post_runs(urls: list[str], count: int, inflight: int) -> list[str]:
    """Start ``count`` runs spread over the replicas; their ids."""
    gate = asyncio.Semaphore(inflight)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    limits = httpx.Limits(max_connections=inflight)
    clients = [
        httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) for url in urls
    ]

    async def one(i: int) -> str:
        async with gate:
            response = await clients[i % len(clients)].post(
                "/v1/runs", json={"task": TASK, "policy": {"max_rounds": 3}}
            )
        response.raise_for_status()
        return str(response.json()["id"])

    try:
        return list(await asyncio.gather(*(one(i) for i in range(count))))
    finally:
        for client in clients:
            await client.aclose()


async def drive(urls: list[str], runs: int, inflight: int, timeout_s: float) -> dict[str, str]:
    """Every run's final status, as one replica's event stream (every replica's events) says."""
    finished = Finished(urls[0])
    await finished.start()
    try:
        ids = await post_runs(urls, runs, inflight)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(finished.wait(run_id) for run_id in ids)), timeout_s
        )
    finally:
        await finished.stop()
    return {run_id: str(data.get("status")) for run_id, data in zip(ids, outcomes, strict=True)}


def measure(
    replicas: int, args: argparse.Namespace, peers: dict[str, Process], workdir: Path
) -> dict[str, Any]:
    env = base_env()
    with ExitStack() as stack:
        database_url = stack.enter_context(new_database(args.postgres_url))
        orch_env = {
            **env,
            "DATABASE_URL": database_url,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN,
            "ACTOR_URL": peers["actor"].url,
            "CRITIC_URL": peers["critic"].url,
            "ORCHESTRATOR_HOST": "127.0.0.1",
            "ORCHESTRATOR_EXECUTOR_THREADS": str(args.executor_threads),
            "ORCHESTRATOR_DB_POOL_SIZE": "4",
            "ORCHESTRATOR_DB_MAX_OVERFLOW": "8",
            "ORCHESTRATOR_SYSTEM_DB_POOL_SIZE": "8",
        }
        orchestrators = []
        for i in range(replicas):
            name = f"orchestrator-{i + 1}"
            process = Process(
                name,
                "orchestrator",
                {**orch_env, "ORCHESTRATOR_EXECUTOR_ID": f"bench-{i + 1}"},
                "ORCHESTRATOR_PORT",
                workdir / f"{name}-of-{replicas}.log",
            )
            stack.callback(process.stop)
            process.start()
            orchestrators.append(process)
        for process in orchestrators:
            process.wait_healthy()
        urls = [p.url for p in orchestrators]
        httpx.post(f"{peers['fakemodel'].url}/_control/config", json={"latency_ms": 0})
        asyncio.run(drive(urls, 3 * replicas, 3 * replicas, 60))  # warm-up
        httpx.post(
            f"{peers['fakemodel'].url}/_control/config", json={"latency_ms": args.latency_ms}
        )
        everyone = [*orchestrators, peers["actor"], peers["critic"], peers["fakemodel"]]
        before = {p.name: p.cpu() for p in everyone}
        pg_before = postgres_cpu_seconds()
        began = time.perf_counter()
        outcomes = asyncio.run(drive(urls, args.runs, args.inflight, args.timeout_s))
        wall = time.perf_counter() - began
        after = {p.name: p.cpu() for p in everyone}
        pg_after = postgres_cpu_seconds()
    per_run = {name: (after[name] - before[name]) / args.runs for name in after}
    orchestrator_cpu = sum(v for k, v in per_run.items() if k.startswith("orchestrator"))
    failed = sum(1 for status in outcomes.values() if status != "succeeded")
    result: dict[str, Any] = {
        "bench": "replicas",
        "replicas": replicas,
        "runs": args.runs,
        "latency_ms": args.latency_ms,
        "inflight": args.inflight,
        "wall_s": round(wall, 2),
        "runs_per_s": round(args.runs / wall, 1),
        "not_succeeded": failed,
        "cpu_ms_per_run": {k: round(v * 1000, 1) for k, v in per_run.items()},
        "orchestrators_cpu_ms_per_run": round(orchestrator_cpu * 1000, 1),
    }
    if pg_before is not None and pg_after is not None:
        result["postgres_cpu_ms_per_run"] = round((pg_after - pg_before) / args.runs * 1000, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,2,3", help="comma-separated replica counts")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--inflight", type=int, default=64, help="POSTs open at once")
    parser.add_argument("--executor-threads", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("CROSSCHECK_TEST_POSTGRES_URL", DEFAULT_PG),
        help="an admin URL: each configuration gets a new database on this server",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.replicas.split(",") if n.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="crosscheck-bench-replicas-"))
    env = base_env()
    peers = {
        "fakemodel": Process(
            "fakemodel", "fakemodel", env, "FAKEMODEL_PORT", workdir / "fakemodel.log"
        ),
    }
    fake = peers["fakemodel"].url
    peer_env = {
        **env,
        "OPENAI_BASE_URL": f"{fake}/v1",
        "ANTHROPIC_BASE_URL": fake,
        "ACTOR_REPLAY_DB": str(workdir / "actor-replays.sqlite"),
        "CRITIC_REPLAY_DB": str(workdir / "critic-replays.sqlite"),
    }
    peers["actor"] = Process("actor", "actor", peer_env, "ACTOR_PORT", workdir / "actor.log")
    peers["critic"] = Process("critic", "critic", peer_env, "CRITIC_PORT", workdir / "critic.log")
    results = []
    with ExitStack() as stack:
        for process in peers.values():
            stack.callback(process.stop)
            process.start()
        for process in peers.values():
            process.wait_healthy()
        for count in counts:
            console.print(f"[bold]{count} replica(s)[/]: {args.runs} runs ...")
            result = measure(count, args, peers, workdir)
            results.append(result)
            print(json.dumps(result), flush=True)  # noqa: T201

    table = Table(
        title=f"{args.runs} runs x 6 model calls at {args.latency_ms} ms, Postgres, "
        f"{os.cpu_count()} cores (logs: {workdir})"
    )
    for column in (
        "replicas",
        "wall s",
        "runs/s",
        "orchestrators CPU ms/run",
        "per replica",
        "actor",
        "critic",
        "fake model",
        "postgres (all)",
        "not ok",
    ):
        table.add_column(column, justify="right")
    for r in results:
        cpu = r["cpu_ms_per_run"]
        replicas = [f"{v:g}" for k, v in cpu.items() if k.startswith("orchestrator")]
        table.add_row(
            str(r["replicas"]),
            f"{r['wall_s']:.1f}",
            f"{r['runs_per_s']:.1f}",
            f"{r['orchestrators_cpu_ms_per_run']:.1f}",
            " / ".join(replicas),
            f"{cpu['actor']:.1f}",
            f"{cpu['critic']:.1f}",
            f"{cpu['fakemodel']:.1f}",
            f"{r.get('postgres_cpu_ms_per_run', float('nan')):.1f}",
            str(r["not_succeeded"]),
        )
    console.print(table)
    return 1 if any(r["not_succeeded"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
