"""Human-in-the-loop latency: pause -> event at a websocket client, decision -> run resumed.

Each sample: a run with ``review: first_round`` drafts and pauses; we time how long the
``review.created`` event takes to reach a websocket client (server timestamp to receipt),
then claim the item, post a ``comment`` decision and time until the client receives the
``run.resumed`` event that the resumed workflow emits from its first durable step. Real
orchestrator, Actor, Critic and fake model processes on loopback, SQLite, LAT=0.

  uv run python -m bench.review_latency --runs 100

Beside it, the LangGraph peer's variant (c) (interrupt before the critic, resume from
outside) from ../shared/peer-bench, run in the same process of measurement.
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
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import websockets
from rich.console import Console
from rich.table import Table

from bench.reflection_loop import ADMIN, ROOT, Platform, percentile

console = Console()
PEER_DIR = (ROOT / ".." / "shared" / "peer-bench").resolve()
PEER_VENV = Path(os.environ.get("CROSSCHECK_PEER_VENV", "/tmp/crosscheck-lgvenv"))


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


async def measure(platform: Platform, runs: int) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=platform.url, headers=admin, timeout=30) as api:
        token = (
            await api.post("/v1/tokens", json={"name": "bench reviewer", "role": "reviewer"})
        ).json()["token"]
        reviewer = {"Authorization": f"Bearer {token}"}
        ws_url = platform.url.replace("http", "ws") + "/v1/events"
        pause_ms: list[float] = []
        resume_ms: list[float] = []
        async with websockets.connect(ws_url, additional_headers=admin, max_size=None) as ws:

            async def next_event(kind: str, run_id: str) -> tuple[dict[str, Any], float]:
                while True:
                    event = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if event["type"] == kind and event["run_id"] == run_id:
                        return event, time.time()

            for _ in range(runs + 5):
                created = await api.post(
                    "/v1/runs",
                    json={"task": "Explain tides. [bench:2]", "policy": {"review": "first_round"}},
                )
                run_id = created.json()["id"]
                event, received = await next_event("review.created", run_id)
                at = datetime.fromisoformat(event["created_at"]).timestamp()
                review_id = event["data"]["review_id"]
                await api.post(f"/v1/reviews/{review_id}/claim", headers=reviewer)
                sent = time.time()
                decided = await api.post(
                    f"/v1/reviews/{review_id}/decision",
                    json={"action": "comment", "comment": "Mention the Moon."},
                    headers=reviewer,
                )
                decided.raise_for_status()
                _, resumed = await next_event("run.resumed", run_id)
                await next_event("run.finished", run_id)
                pause_ms.append((received - at) * 1000)
                resume_ms.append((resumed - sent) * 1000)
    pause_ms, resume_ms = pause_ms[5:], resume_ms[5:]  # warm-up
    return {
        "who": "crosscheck",
        "runs": len(pause_ms),
        "pause_to_ws_event_p50_ms": round(percentile(pause_ms, 50), 2),
        "pause_to_ws_event_p99_ms": round(percentile(pause_ms, 99), 2),
        "decision_to_resumed_p50_ms": round(percentile(resume_ms, 50), 2),
        "decision_to_resumed_p99_ms": round(percentile(resume_ms, 99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    if not args.skip_peer:
        console.print("running the LangGraph peer (variant c) ...")
        peer = [r for r in run_peer(args.runs, 10, 3) if r.get("variant") == "c"]
        rows += [{**r, "who": "langgraph"} for r in peer]
    with tempfile.TemporaryDirectory(prefix="crosscheck-review-") as tmp:
        with Platform(Path(tmp), executor_threads=8) as platform:
            console.print(f"running Crosscheck: {args.runs} pause/decide cycles ...")
            rows.append(asyncio.run(measure(platform, args.runs)))
    table = Table(title="Pause and resume (target: p99 <= 100 ms for both on SQLite)")
    for column in ("who", "pause -> event p50/p99 ms", "decision -> resumed p50/p99 ms"):
        table.add_column(column)
    for r in rows:
        if r["who"] == "langgraph":
            table.add_row(
                "langgraph (c)",
                f"first call to pause p50 {r.get('first_call_to_pause_p50_ms')}",
                f"resume call p50 {r.get('resume_call_p50_ms')} / "
                f"p99 {r.get('resume_call_p99_ms')}",
            )
        else:
            table.add_row(
                "crosscheck",
                f"{r['pause_to_ws_event_p50_ms']} / {r['pause_to_ws_event_p99_ms']}",
                f"{r['decision_to_resumed_p50_ms']} / {r['decision_to_resumed_p99_ms']}",
            )
    console.print(table)
    for r in rows:
        print(json.dumps(r))  # noqa: T201


if __name__ == "__main__":
    main()
