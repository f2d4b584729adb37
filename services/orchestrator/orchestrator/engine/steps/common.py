"""What every step shares: retries within the step's deadline, one read-model transaction
per unit of work, finishing a run, and billing each model call once.

DBOS records a finished step's return value, so a recovered workflow never repeats it; a
step cut off mid-way runs again, which is why every peer call carries an idempotency key
made of (run, round, role, attempt) and every write here is an upsert. Database work runs
on the database's own thread (``Runtime.db``), never on the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from sqlmodel import Session
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from orchestrator.engine import records
from orchestrator.engine.policy import Stop
from orchestrator.engine.runtime import Runtime, current
from orchestrator.peers.errors import PeerUnavailable
from orchestrator.readmodel.calls import FailedCall, record_call
from orchestrator.readmodel.events import append_event, appended_types
from orchestrator.readmodel.runs import RunChanges, RunState, read_run, update_run
from orchestrator.tables import Run
from orchestrator.tracing import traced_step
from shared import deadline
from shared.contracts import ActorResult, CritiqueResult, ModelExchange, Usage
from shared.logging import get_logger
from shared.orchestration import RunStatus, StopReason

T = TypeVar("T")
P = ParamSpec("P")
log = get_logger("crosscheck.steps")
# one billed call: key, result, role, stage
Call = tuple[str, ActorResult | CritiqueResult, str, str]
CANCELLED = Stop(RunStatus.cancelled, StopReason.cancelled, error_class="none", detail="cancelled")
# what the failed calls of the running step cost, billed as they failed (``bill_failed``):
# the step's commit adds it to the run it read at the start instead of reading it again
_FAILED: ContextVar[RunChanges | None] = ContextVar("crosscheck_failed_usage", default=None)


async def with_retries(
    rt: Runtime, peer: str, call: Callable[[], Awaitable[T]], *, run_id: str | None = None
) -> T:
    """Environment errors are retried with backoff; they never cost a round.

    Every attempt fits the step's deadline (``step_budget``): no retry starts when its wait
    would pass it, and each retry is a ``peer.retry`` event of the run (the CLI and the
    console show them as they happen) and a log line."""
    settings = rt.settings

    async def retrying_soon(state: RetryCallState) -> None:
        rt.metrics.environment_retries.labels(peer).inc()
        exc = state.outcome.exception() if state.outcome else None
        status = exc.status if isinstance(exc, PeerUnavailable) else None
        data = {
            "peer": peer,
            "attempt": state.attempt_number + 1,
            "attempts": settings.peer_max_attempts,
            "status": status,
            "reason": str(exc)[:300],
            "wait_s": round(state.upcoming_sleep, 1),
        }
        log.warning("peer call failed; retrying", run_id=run_id, **data)
        if run_id is None:
            return
        billing = exc.billing(state.attempt_number) if isinstance(exc, PeerUnavailable) else None
        _add_failed(await unit(rt, lambda session: _retried(session, run_id, data, billing)))

    def _retried(
        session: Session, run_id: str, data: dict[str, Any], billing: dict[str, Any] | None
    ) -> RunChanges | None:
        billed = None
        if billing is not None:  # what the failed attempt's model calls cost
            billed = bill_failed(rt, session, run_id, billing)
        append_event(session, run_id, "peer.retry", data)
        return billed

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(PeerUnavailable),
        stop=stop_after_attempt(settings.peer_max_attempts) | deadline.stop_at_deadline(),
        wait=wait_exponential_jitter(
            multiplier=settings.peer_retry_initial_s,
            exp_base=settings.peer_retry_backoff,
            max=30,
        ),
        before_sleep=retrying_soon,
        reraise=True,
    )
    with deadline.scope(settings.step_budget_s):  # the step's own, when it opened one first
        try:
            async for attempt in retrying:
                with attempt:
                    return await call()
        except PeerUnavailable as exc:
            made = retrying.statistics.get("attempt_number", 1)
            billing = exc.billing(made)
            if run_id is not None and billing is not None:
                _add_failed(await unit(rt, lambda s: bill_failed(rt, s, run_id, billing)))
            if made < settings.peer_max_attempts:  # stopped by the deadline, not the count
                raise PeerUnavailable(
                    f"{exc} (attempt {made} of {settings.peer_max_attempts}; the step's "
                    f"{settings.step_budget_s:g} s budget leaves no time for another)",
                    status=exc.status,
                ) from exc
            raise
    raise AssertionError("unreachable")


def step_budget(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Run a step within one deadline (``ORCHESTRATOR_STEP_BUDGET_S``) that all its peer
    calls, their retries and the peers' own model calls share."""

    @functools.wraps(fn)
    async def within(*args: P.args, **kwargs: P.kwargs) -> T:
        failed = _FAILED.set(RunChanges({}))
        try:
            with deadline.scope(current().settings.step_budget_s):
                return await fn(*args, **kwargs)
        finally:
            _FAILED.reset(failed)

    return traced_step(within)


def _add_failed(billed: RunChanges | None) -> None:
    tally = _FAILED.get()
    if billed is not None and tally is not None:
        tally.add(billed)


def as_billed(run: RunState) -> RunState:
    """The run a step read at its start, with what its failed calls cost since (billed by
    the retry loop as they failed): the run the step's commit writes, without reading it
    again. Called on the step's own task, where the tally lives."""
    tally = _FAILED.get()
    return run if tally is None else tally.on(run)


async def unit(rt: Runtime, work: Callable[[Session], T]) -> T:
    """``work`` in one read-model transaction; once committed, wake the event subscribers
    that follow the types of event it appended (none: nobody is woken)."""

    def recorded(session: Session) -> tuple[T, frozenset[str]]:
        return work(session), appended_types(session)

    result, types = await rt.db.run(recorded)
    rt.hub.notify(types)
    return result


def finish_loaded(
    rt: Runtime, session: Session, run: Run, stop: Stop, final_round: int | None
) -> Stop:
    stop = records.finalize(session, run, stop, final_round=final_round)
    rt.metrics.runs_finished.labels(stop.status.value, stop.reason.value).inc()
    rt.metrics.rounds_per_run.observe(max(run.rounds, 1))
    return stop


def finish_run(rt: Runtime, session: Session, run_id: str, stop: Stop, final: int | None) -> Stop:
    """Finish a run whose step wrote through Core (``finalize_fast`` sees those writes).
    Returns the stop as applied: a ``succeeded`` one the gate refused is an escalation."""
    run, stop = records.finalize_fast(session, run_id, stop, final_round=final)
    rt.metrics.runs_finished.labels(stop.status.value, stop.reason.value).inc()
    rt.metrics.rounds_per_run.observe(max(run.rounds, 1))
    return stop


def cancelled(rt: Runtime, session: Session, run: RunState | Run) -> bool:
    """A step's first check: a cancel asked for since the last step ends the run here,
    before any peer is called (True: ended; the step returns at once)."""
    if not run.cancel_requested:
        return False
    if isinstance(run, Run):  # an ORM row, loaded by the step
        finish_loaded(rt, session, run, CANCELLED, run.rounds or None)
    else:
        finish_run(rt, session, run.id, CANCELLED, run.rounds or None)
    return True


def bill(
    rt: Runtime,
    session: Session,
    run: RunState,
    changes: RunChanges,
    *,
    round: int,
    role: str,
    stage: str,
    key: str,
    result: ActorResult | CritiqueResult | FailedCall,
) -> None:
    """Store the call for the trajectory and bill it, once per key."""
    usage = record_call(
        session, run.id, round=round, role=role, stage=stage, key=key, result=result
    )
    if usage is not None:
        changes.bill(usage)
        provider = result.usage.provider
        rt.metrics.calls.labels(role, provider, result.usage.model).inc()
        rt.metrics.tokens.labels(role, provider, "input").inc(result.usage.input_tokens)
        rt.metrics.tokens.labels(role, provider, "output").inc(result.usage.output_tokens)
        rt.metrics.cost.labels(role, provider).inc(result.usage.cost_usd or 0.0)
    info = {"provider": result.usage.provider, "model": result.usage.model}
    changes.values["actor_info" if role == "actor" else "critic_info"] = info


def bill_calls(
    rt: Runtime,
    session: Session,
    run: RunState,
    changes: RunChanges,
    round: int,
    calls: list[Call],
) -> None:
    """Bill the calls behind one step's result (a draft, best of N, one per section)."""
    for key, result, role, stage in calls:
        bill(rt, session, run, changes, round=round, role=role, stage=stage, key=key, result=result)


def bill_critiques(
    rt: Runtime,
    session: Session,
    run: RunState,
    changes: RunChanges,
    round: int,
    calls: list[tuple[str, CritiqueResult]],
) -> None:
    """Bill the critic calls behind one critique (one, or one per section), once per key."""
    billed: list[Call] = [(key, result, "critic", "critique") for key, result in calls]
    bill_calls(rt, session, run, changes, round, billed)


def bill_failed(
    rt: Runtime, session: Session, run_id: str, failed_call: dict[str, Any]
) -> RunChanges:
    """Bill a failed peer call (``PeerRejected.billing`` / ``PeerUnavailable.billing``) to
    the run's current round: tokens, cost, trajectory and stats, once per key. Returns what
    was billed (nothing when it was billed before)."""
    state = read_run(session, run_id)
    changes = RunChanges({})
    bill(
        rt,
        session,
        state,
        changes,
        round=max(state.rounds, 1),
        role=str(failed_call["role"]),
        stage=str(failed_call["stage"]),
        key=str(failed_call["key"]),
        result=FailedCall(
            Usage.model_validate(failed_call["usage"]),
            [ModelExchange.model_validate(e) for e in failed_call.get("exchanges") or []],
        ),
    )
    update_run(session, state, changes)
    return changes
