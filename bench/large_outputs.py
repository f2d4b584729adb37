"""Large outputs: do API requests wait while the orchestrator compares long revisions?

Each run drafts and revises a 20 KB answer (the fake model's ``[bench:3:SIZE]`` task: three
versions of about SIZE characters, the Critic passes the third), so every revision is
compared with the version before it (the convergence and shrink rules read the change
ratio). Meanwhile a prober asks the orchestrator ``GET /v1/runs/{id}`` every 20 ms and
records how long each answer took: a comparison that ran on the event loop would hold every
request behind it.

  uv run python -m bench.large_outputs                  # 20 runs at once, 20 KB each
  uv run python -m bench.large_outputs --runs 40 --size 50000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.reflection_loop import ADMIN, Finished, Platform, percentile

console = Console()
PROBE_EVERY_S = 0.02


async def probe(client: httpx.AsyncClient, run_id: str, stop: asyncio.Event) -> list[float]:
    waits: list[float] = []
    while not stop.is_set():
        started = time.perf_counter()
        response = await client.get(f"/v1/runs/{run_id}")
        response.raise_for_status()
        waits.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(PROBE_EVERY_S)
    return waits


async def measure(platform: Platform, runs: int, size: int) -> dict[str, Any]:
    task = f"Summarise the report in full. [bench:3:{size}]"
    policy = {"max_rounds": 3, "convergence_threshold": 0}
    headers = {"Authorization": f"Bearer {ADMIN}"}
    finished = Finished(platform.url)
    await finished.start()
    async with (
        httpx.AsyncClient(base_url=platform.url, headers=headers, timeout=120) as client,
        httpx.AsyncClient(base_url=platform.url, headers=headers, timeout=120) as prober,
    ):
        first = await client.post("/v1/runs", json={"task": "Warm up. [bench:1]"})
        await finished.wait(first.json()["id"])
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(prober, first.json()["id"], stop))
        started = time.perf_counter()
        created = [
            (await client.post("/v1/runs", json={"task": task, "policy": policy})).json()["id"]
            for _ in range(runs)
        ]
        results = await asyncio.gather(*(finished.wait(run_id) for run_id in created))
        wall = time.perf_counter() - started
        stop.set()
        waits = await probing
        sample = (await client.get(f"/v1/runs/{created[0]}")).json()
    await finished.stop()
    outcomes = [f"{r['status']}/{r['stop_reason']}" for r in results]
    return {
        "runs": runs,
        "output_chars": [len(r["output"]) for r in sample["rounds"]],
        "succeeded": outcomes.count("succeeded/critic_pass"),
        "other_outcomes": sorted(set(outcomes) - {"succeeded/critic_pass"}),
        "wall_s": round(wall, 2),
        "probes": len(waits),
        "probe_p50_ms": round(percentile(waits, 50), 1),
        "probe_p99_ms": round(percentile(waits, 99), 1),
        "probe_max_ms": round(max(waits), 1),
        "probes_over_100_ms": sum(w > 100 for w in waits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs started at once")
    parser.add_argument("--size", type=int, default=20_000, help="characters per version")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Platform(Path(tmp), executor_threads=8) as platform:
        platform.set_latency(0.0)
        result = asyncio.run(measure(platform, args.runs, args.size))
    table = Table(title=f"{args.runs} runs at once, ~{args.size} characters per version")
    for column in ("measurement", "value"):
        table.add_column(column)
    for key, value in result.items():
        table.add_row(key, str(value))
    console.print(table)
    print(json.dumps({"bench": "large_outputs", **result}))  # noqa: T201


if __name__ == "__main__":
    main()
