"""A run's trace: a span per step, each a child of the request that created the run.

The run keeps that request's ``traceparent`` (``runs.traceparent``, itself a child of the
caller's), so a step's span finds its parent wherever and whenever the step runs: in the first
segment, in one a reviewer's decision resumed, or after DBOS recovered the workflow on another
process. ``traced_step`` goes inside ``@DBOS.step``: a step DBOS replays from its record does
not run, and makes no second span. Tracing off, it costs one flag check per step.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from opentelemetry.context import Context
from sqlmodel import Session

from orchestrator.engine.runtime import current
from orchestrator.readmodel.runs import traceparent_of
from shared import tracing

P = ParamSpec("P")
T = TypeVar("T")

RUN_ID = "crosscheck.run_id"
ROUND = "crosscheck.round"
STEP = "crosscheck.step"
STOP_REASON = "crosscheck.stop_reason"
RUN_STATUS = "crosscheck.run_status"
# a run's traceparent never changes: each process reads it once per run (recent ones kept)
_KEPT = 4096
_parents: OrderedDict[str, str | None] = OrderedDict()


async def run_context(run_id: str) -> Context | None:
    """The context a step of ``run_id`` is a child of (None: the run has no traceparent)."""
    if run_id in _parents:
        _parents.move_to_end(run_id)
        return tracing.context_of(_parents[run_id])

    def stored(session: Session) -> str | None:
        return traceparent_of(session, run_id)

    traceparent = await current().db.read(stored)
    _parents[run_id] = traceparent
    if len(_parents) > _KEPT:
        _parents.popitem(last=False)
    return tracing.context_of(traceparent)


def traced_step(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """A span around the step ``fn(run_id, round, ...)`` (``act_step`` -> ``act``), in its
    run's trace, with the run id, the round and, when the step ended the run, the stop."""
    name = fn.__name__.removesuffix("_step")

    @functools.wraps(fn)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> T:
        if not tracing.enabled():
            return await fn(*args, **kwargs)
        run_id = str(args[0])
        attributes: dict[str, str | int] = {STEP: name, RUN_ID: run_id}
        if len(args) > 1 and isinstance(args[1], int):
            attributes[ROUND] = args[1]
        with tracing.span(name, attributes=attributes, context=await run_context(run_id)) as span:
            result = await fn(*args, **kwargs)
            stop = _stop_of(result)
            if stop is not None:
                span.set_attribute(RUN_STATUS, str(stop.get("status")))
                if stop.get("reason"):
                    span.set_attribute(STOP_REASON, str(stop["reason"]))
            return result

    return traced


def _stop_of(record: Any) -> dict[str, Any] | None:
    """The ``stop`` of a recorded step outcome (``engine.steps.outcomes``): it ended the run."""
    stop = record.get("stop") if isinstance(record, dict) else None
    return stop if isinstance(stop, dict) else None
