"""One deadline per step, passed down from the orchestrator to the peer and its provider.

The orchestrator opens a deadline for each peer call of a step (``ORCHESTRATOR_STEP_BUDGET_S``)
and sends what is left of it with every attempt, in the ``X-Crosscheck-Deadline-Ms`` header
(milliseconds remaining when the request left: relative, so no clock has to agree). A peer's
service frame reads it into this context; the provider's retries and the Critic's depth budget
then fit inside it, and a request whose time is spent ends ``BudgetExceeded`` (504), which the
orchestrator does not send again: the same request would take as long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from tenacity.stop import stop_base

from shared.errors import BadRequest

if TYPE_CHECKING:
    from tenacity import RetryCallState

HEADER = "X-Crosscheck-Deadline-Ms"
MAX_MS = 86_400_000  # a day: longer is not a deadline
# what a peer keeps back from the caller's deadline, so its answer (with what the failed calls
# cost) reaches the caller before the caller's own clock runs out
REPLY_MARGIN_S = 1.0

_deadline: ContextVar[float | None] = ContextVar("crosscheck_deadline", default=None)


def _now() -> float:
    return time.monotonic()


def remaining() -> float | None:
    """Seconds left before this context's deadline (may be negative); None without one."""
    at = _deadline.get()
    return None if at is None else at - _now()


def within(seconds: float) -> float:
    """``seconds``, or less when the deadline comes sooner (never below zero)."""
    left = remaining()
    return seconds if left is None else max(0.0, min(seconds, left))


@contextmanager
def scope(seconds: float | None) -> Iterator[None]:
    """A deadline ``seconds`` from now for what runs inside (an outer, sooner one is kept);
    None opens none."""
    if seconds is None:
        yield
        return
    at = _now() + seconds
    outer = _deadline.get()
    token = _deadline.set(at if outer is None else min(outer, at))
    try:
        yield
    finally:
        _deadline.reset(token)


def header_value() -> str | None:
    """What to send in ``HEADER``: the milliseconds left, None without a deadline."""
    left = remaining()
    return None if left is None else str(max(1, int(left * 1000)))


def parse_header(value: str) -> float:
    """Seconds a peer may spend on a request whose caller sent ``value``, its reply margin
    kept back. A value that is not a whole number of milliseconds from 1 to a day is the
    caller's mistake: a 400 naming the header."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_MS:
        raise BadRequest(
            f"{HEADER} must be a whole number of milliseconds from 1 to {MAX_MS}, "
            f"got {value[:40]!r}"
        )
    ms = int(text)
    return max(ms / 1000 - REPLY_MARGIN_S, ms / 2000)


def expired() -> bool:
    left = remaining()
    return left is not None and left <= 0


class stop_at_deadline(stop_base):
    """A tenacity stop: no next attempt when the wait before it would pass the deadline."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        left = remaining()
        return left is not None and retry_state.upcoming_sleep >= left


def timeout(seconds: float | None = None) -> asyncio.Timeout:
    """``async with`` this: what runs inside is cancelled (``TimeoutError``) after ``seconds``
    or at the deadline, whichever comes first; neither given, never."""
    left = remaining()
    if left is not None:
        seconds = max(0.0, left if seconds is None else min(seconds, left))
    return asyncio.timeout(seconds)
