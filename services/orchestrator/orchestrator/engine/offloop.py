"""Where the engine's own pure work runs: on the event loop when it is short, on a worker
thread when it is long.

Comparing a revision with the version before it (the change ratio the convergence rule
reads) and the diff lock are pure CPU work whose cost grows with the texts. On the event
loop, a long one would hold every request and every other run behind it
(``bench.large_outputs``); on a worker thread, a short one pays for the hop: about 70 us of
CPU and 75 us of latency here (``bench.off_loop``), for work that takes a few microseconds.
So each kind of work has a size, in characters of both texts together, below which it
takes under ``INLINE_MS`` on this machine and runs where it is called; at that size and
above it runs on a thread. ``bench.off_loop`` measures each at sizes around its limit and
says which side of the millisecond each falls on.

The read model's transactions are not sized this way: they stay on the database's own
threads (``orchestrator.db.Database``), since on SQLite one thread writes and a write on the
loop would wait in SQLite's busy handler behind it, and on Postgres a query waits on the
network and on the pool. A run's JSON schema is checked on a thread too: Draft 2020-12's
meta-schema alone takes about half a millisecond, and a schema of a hundred properties 20 ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

INLINE_MS = 1.0  # what work on the event loop may take, at most (medians on this machine)
# measured by bench.off_loop (2026-12-06): the change ratio 0.45 ms at 12,000 characters and
# 1.1 ms at 16,000; the diff lock on text 0.9 ms at 4,000 and 1.2 ms at 6,000; on code (it
# parses both versions) 0.8 ms at 2,000 and 1.2 ms at 3,000
CHANGE_RATIO_CHARS = 12_000  # the change ratio (rapidfuzz's bit-parallel Indel distance)
LOCK_CHARS = {"text": 4_000, "code": 2_000}  # the diff lock, by the run's kind


async def sized(
    size: int, limit: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``work(*args, **kwargs)`` on the event loop when ``size`` is below ``limit``, else on a
    worker thread (the loop keeps serving meanwhile)."""
    if size < limit:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)
