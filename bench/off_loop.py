"""Which of the engine's pure work runs on the event loop: is each under a millisecond there?

The engine compares each revision with the version before it (the change ratio) and applies
the diff lock to it; each runs on the event loop below a size in characters and on a worker
thread from that size on (``orchestrator.engine.offloop``). This times each at sizes around
its limit, on texts shaped like a revision (a tenth of the lines changed, some substantively,
some cosmetically; in code, edited bodies and a new helper), and the hop to a worker thread
itself. Each row says where the work runs at that size and whether that is the right side
of ``INLINE_MS``: ``ok`` false on a row means a limit is set wrong for this machine (work on
the loop that takes a millisecond or more, or work under a quarter of one sent to a thread).

  uv run --frozen python -m bench.off_loop
  uv run --frozen python -m bench.off_loop --repeat 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.engine import offloop
from orchestrator.engine.difflock import LockRules, enforce
from orchestrator.engine.policy import change_ratio

SIZES = (1_000, 1_500, 2_000, 3_000, 4_000, 6_000, 8_000, 12_000, 16_000, 24_000, 32_000)
WORDS = (
    "the model answers each question with a short account of what it found and why the "
    "critic asked for a source in 2024 while the reviewer in Paris did not agree"
).split()


def prose(chars: int) -> str:
    """Sentences of 8-15 words, one per line, until ``chars`` characters."""
    lines, total, i = [], 0, 0
    while total < chars:
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8 + i % 8)]
        line = f"{i}. " + " ".join(words).capitalize() + ".\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)[:chars]


def revised_prose(text: str) -> str:
    """Every 10th line reworded (new content), every 15th recased (cosmetic)."""
    lines = text.splitlines(keepends=True)
    for i in range(0, len(lines), 10):
        lines[i] = lines[i].replace("source", "primary source, cited,")
    for i in range(5, len(lines), 15):
        lines[i] = lines[i].upper()
    return "".join(lines)


def program(chars: int) -> str:
    """Small functions of four lines each, until ``chars`` characters."""
    parts, total, i = [], 0, 0
    while total < chars:
        part = f"def step_{i}(values):\n    total = sum(values) + {i}\n    return total * 2\n\n\n"
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts)


def revised_program(code: str) -> str:
    """Every 10th function's body edited, an import and a helper added at the top."""
    parts = code.split("\n\n\n")
    for i in range(0, len(parts), 10):
        parts[i] = parts[i].replace("sum(values)", "math.fsum(values)")
    return "import math\n\n\ndef helper(x):\n    return x\n\n\n" + "\n\n\n".join(parts)


def timed(work: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and 90th percentile of ``repeat`` calls, in ms."""
    work()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def hop(count: int) -> dict[str, Any]:
    """What one hand-off to a worker thread and back costs, for work that does nothing."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as threads:
        for _ in range(200):
            await loop.run_in_executor(threads, int)
        cpu, began = _cpu(), time.perf_counter()
        for _ in range(count):
            await loop.run_in_executor(threads, int)
        wall, cpu = time.perf_counter() - began, _cpu() - cpu
    return {
        "work": "thread hop",
        "hop_wall_us": round(wall / count * 1e6, 1),
        "hop_cpu_us": round(cpu / count * 1e6, 1),
    }


def row(
    work: str, kind: str, chars: int, limit: int, figures: tuple[float, float]
) -> dict[str, Any]:
    median, p90 = figures
    on_loop = chars < limit
    return {
        "work": work,
        "kind": kind,
        "chars": chars,
        "limit": limit,
        "runs_on": "loop" if on_loop else "thread",
        "median_ms": round(median, 3),
        "p90_ms": round(p90, 3),
        # on the loop it must stay under the budget; a thread is wasted on work of a few hops
        "ok": median < offloop.INLINE_MS if on_loop else median >= offloop.INLINE_MS / 4,
    }


def cases(chars: int) -> list[tuple[str, str, int, Callable[[], object]]]:
    """The three kinds of work on texts of about ``chars`` characters together: (work,
    kind, size, the call)."""
    before = prose(chars // 2)
    after = revised_prose(before)
    rules = LockRules(quotes=[before.splitlines()[0][:30]], kind="text")
    code = program(chars // 2)
    new = revised_program(code)
    code_rules = LockRules(quotes=[code.splitlines()[1].strip()], kind="code")
    text_size, code_size = len(before) + len(after), len(code) + len(new)
    return [
        ("change ratio", "text", text_size, lambda: change_ratio(before, after)),
        ("diff lock", "text", text_size, lambda: enforce(rules, before, after, [])),
        ("diff lock", "code", code_size, lambda: enforce(code_rules, code, new, [])),
    ]


LIMITS = {
    ("change ratio", "text"): offloop.CHANGE_RATIO_CHARS,
    ("diff lock", "text"): offloop.LOCK_CHARS["text"],
    ("diff lock", "code"): offloop.LOCK_CHARS["code"],
}


def measure(repeat: int) -> list[dict[str, Any]]:
    return [
        row(work, kind, size, LIMITS[work, kind], timed(call, repeat))
        for chars in SIZES
        for work, kind, size, call in cases(chars)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per size (median)")
    parser.add_argument("--hops", type=int, default=20_000, help="thread hops timed")
    args = parser.parse_args(argv)
    for figures in measure(args.repeat):
        print(json.dumps(figures))  # noqa: T201
    print(json.dumps(asyncio.run(hop(args.hops))))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
