"""What the durable engine alone costs: a DBOS workflow of N steps that do nothing.

Crosscheck's run is one DBOS workflow with a step per model call (draft, critique, revise,
critique, revise, critique: six). DBOS records each step (a check before it, its output
after it, each in its own system-database transaction on a worker thread) and the
workflow's start and end. This measures that bookkeeping with nothing else in the process:
no HTTP, no read model, steps that return a small dict at once (a) one workflow after
another, (b) N workflows at once whose steps each wait ``--lat`` seconds, as the model
does in bench.peers' (b). Same SQLite pragmas as the orchestrator (WAL, synchronous=NORMAL),
same event loop (uvloop). Prints one JSON line:

  uv run --frozen python -m bench.dbos_floor                      # SQLite, 6 steps
  uv run --frozen python -m bench.dbos_floor --database-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from typing import Any

from dbos import DBOS, DBOSConfig

_latency = 0.0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@DBOS.step(name="floor.step")
async def _step(number: int) -> dict[str, Any]:
    if _latency:
        await asyncio.sleep(_latency)
    return {"number": number, "stop": None}


@DBOS.workflow(name="floor.workflow")
async def _workflow(steps: int) -> int:
    for number in range(steps):
        await _step(number)
    return steps


async def _one(steps: int) -> None:
    handle = await DBOS.start_workflow_async(_workflow, steps)
    if await handle.get_result() != steps:
        raise RuntimeError("a workflow did not run all its steps")


async def measure(steps: int, runs: int, concurrency: int, lat: float) -> dict[str, Any]:
    global _latency
    for _ in range(5):  # warm-up: compiled statements, pool connections
        await _one(steps)
    before, began = _cpu(), time.perf_counter()
    for _ in range(runs):
        await _one(steps)
    seq_cpu, seq_wall = _cpu() - before, time.perf_counter() - began
    _latency = lat
    before, began = _cpu(), time.perf_counter()
    await asyncio.gather(*[_one(steps) for _ in range(concurrency)])
    conc_cpu, conc_wall = _cpu() - before, time.perf_counter() - began
    return {
        "steps": steps,
        "a_runs": runs,
        "a_cpu_ms_per_workflow": round(seq_cpu / runs * 1000, 2),
        "a_wall_ms_per_workflow": round(seq_wall / runs * 1000, 2),
        "b_concurrency": concurrency,
        "b_lat_s": lat,
        "b_cpu_ms_per_workflow": round(conc_cpu / concurrency * 1000, 2),
        "b_wall_s": round(conc_wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="steps per workflow (a run: 6)")
    parser.add_argument("--runs", type=int, default=200, help="(a) workflows one after another")
    parser.add_argument("--concurrency", type=int, default=1000, help="(b) workflows at once")
    parser.add_argument("--lat", type=float, default=0.05, help="(b) each step waits this, s")
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument(
        "--executor-threads", type=int, default=8, help="DBOS's worker threads (orchestrator: 8)"
    )
    args = parser.parse_args()

    import uvloop

    from orchestrator.db import libpq_url, tune_sqlite

    with tempfile.TemporaryDirectory(prefix="dbos-floor-") as tmp:
        if args.database_url:
            url = libpq_url(args.database_url)
            database = "postgres"
        else:
            tune_sqlite()  # the orchestrator's pragmas, on DBOS's engine too
            url = f"sqlite:///{tmp}/floor.dbos.sqlite"
            database = "sqlite"
        # as the orchestrator configures DBOS (orchestrator/app.py), at its default threads
        config: DBOSConfig = {
            "name": "dbos-floor",
            "system_database_url": url,
            "log_level": "WARNING",
            "max_executor_threads": args.executor_threads,
        }
        if database == "sqlite":
            config["db_engine_kwargs"] = {"pool_pre_ping": False}
        DBOS(config=config)
        DBOS.launch()
        try:
            result = uvloop.run(measure(args.steps, args.runs, args.concurrency, args.lat))
        finally:
            DBOS.destroy()
    print(json.dumps({"row": "dbos_floor", "database": database, **result}))  # noqa: T201


if __name__ == "__main__":
    main()
