"""Durable steps. Each calls at most one peer and commits its result in one transaction.

DBOS records a finished step's return value, so a recovered workflow never repeats it; a
step cut off mid-way runs again, which is why every peer call carries an idempotency key
made of (run, round, role, attempt) and every write here is an upsert. Database work runs
on the database's own thread (``Runtime.db``), never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from dbos import DBOS
from sqlmodel import Session
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from orchestrator.engine import (
    difflock,
    discipline,
    drafts,
    gate,
    guard,
    records,
    research,
    sectioned,
    settled,
    store,
)
from orchestrator.engine.policy import (
    ENVIRONMENT_RETRIES,
    Stop,
    after_critique,
    after_output,
    change_ratio,
    critic_blames_environment,
    critique_signature,
    environment_stop,
    output_hash,
    shrank,
    shrink_ratio,
)
from orchestrator.engine.runtime import Runtime, current
from orchestrator.engine.sections import Section
from orchestrator.evaluators.base import EvaluationJob, Evaluator
from orchestrator.events.repository import append_event, appended_types
from orchestrator.knowledge.service import profile_for
from orchestrator.peers.errors import PeerUnavailable
from orchestrator.tables import (
    Reflection,
    Run,
    utcnow,
)
from shared import deadline, verdicts
from shared.contracts import (
    MAX_EVIDENCE,
    ActorResult,
    CritiqueRequest,
    CritiqueResult,
    DeclinedIssue,
    Depth,
    DraftRequest,
    Evaluation,
    Evidence,
    ModelExchange,
    ReflectionSource,
    ReviseRequest,
    TaskKind,
    Usage,
)
from shared.contracts import Reflection as ReflectionDTO
from shared.logging import get_logger
from shared.orchestration import Policy, ReviewMode, RunStatus, StopReason
from shared.verdicts import pass_refusals

T = TypeVar("T")
P = ParamSpec("P")
log = get_logger("crosscheck.steps")
CANCELLED = Stop(RunStatus.cancelled, StopReason.cancelled, error_class="none", detail="cancelled")


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
        await _unit(rt, lambda session: _retried(session, run_id, data, billing))

    def _retried(
        session: Session, run_id: str, data: dict[str, Any], billing: dict[str, Any] | None
    ) -> None:
        if billing is not None:  # what the failed attempt's model calls cost
            bill_failed(rt, session, run_id, billing)
        append_event(session, run_id, "peer.retry", data)

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
                await _unit(rt, lambda session: bill_failed(rt, session, run_id, billing))
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
        with deadline.scope(current().settings.step_budget_s):
            return await fn(*args, **kwargs)

    return within


async def _unit(rt: Runtime, work: Callable[[Session], T]) -> T:
    """``work`` in one read-model transaction; once committed, wake the event subscribers
    that follow the types of event it appended (none: nobody is woken)."""

    def recorded(session: Session) -> tuple[T, frozenset[str]]:
        return work(session), appended_types(session)

    result, types = await rt.db.run(recorded)
    rt.hub.notify(types)
    return result


def _stop_dict(stop: Stop | None) -> dict[str, Any] | None:
    if stop is None:
        return None
    return {"status": stop.status.value, "reason": stop.reason.value}


def _finish(rt: Runtime, session: Session, run: Run, stop: Stop, final_round: int | None) -> Stop:
    stop = records.finalize(session, run, stop, final_round=final_round)
    rt.metrics.runs_finished.labels(stop.status.value, stop.reason.value).inc()
    rt.metrics.rounds_per_run.observe(max(run.rounds, 1))
    return stop


def _finish_run(rt: Runtime, session: Session, run_id: str, stop: Stop, final: int | None) -> Stop:
    """Finish a run whose step wrote through Core (``finalize_fast`` sees those writes).
    Returns the stop as applied: a ``succeeded`` one the gate refused is an escalation."""
    run, stop = records.finalize_fast(session, run_id, stop, final_round=final)
    rt.metrics.runs_finished.labels(stop.status.value, stop.reason.value).inc()
    rt.metrics.rounds_per_run.observe(max(run.rounds, 1))
    return stop


def _reflections(rows: list[store.ReflectionRow]) -> list[ReflectionDTO]:
    return [
        ReflectionDTO(
            source=ReflectionSource(r.source),
            content=r.content,
            author=r.author,
            created_at=r.created_at,
        )
        for r in rows
    ]


OFF_LOOP_CHARS = 8_000  # longer texts are compared on a worker thread, off the event loop


async def _change_ratio(previous: str, current: str) -> float:
    if len(previous) + len(current) < OFF_LOOP_CHARS:
        return change_ratio(previous, current)
    return await asyncio.to_thread(change_ratio, previous, current)


# A note the act step adds to a revision request has a fixed time: the request must be the
# same bytes when a step cut off after the call runs again (the Actor replays only those).
NOTE_TIME = datetime(2000, 1, 1, tzinfo=UTC)
RETRY_NOTE = (
    "A person asked for another revision of round {round}. Improve it where the task is not "
    "fully met; keep everything that is correct."
)


def _note(content: str) -> ReflectionDTO:
    return ReflectionDTO(source=ReflectionSource.evaluator, content=content, created_at=NOTE_TIME)


def _binding_first(reflections: list[ReflectionDTO], limit: int) -> list[ReflectionDTO]:
    """A person's word first, then the latest of the rest: a long run must never push a
    reviewer's reflection out of the request."""
    human = [r for r in reflections if r.source is ReflectionSource.human][-limit:]
    rest = [r for r in reflections if r.source is not ReflectionSource.human]
    return human + rest[len(rest) - (limit - len(human)) :] if limit > len(human) else human


def _bill(
    rt: Runtime,
    session: Session,
    run: store.RunState,
    changes: store.RunChanges,
    *,
    round: int,
    role: str,
    stage: str,
    key: str,
    result: ActorResult | CritiqueResult | store.FailedCall,
) -> None:
    """Store the call for the trajectory and bill it, once per key."""
    usage = store.record_call(
        session, run.id, round=round, role=role, stage=stage, key=key, result=result
    )
    if usage is not None:
        changes.bill(run, usage)
        provider = result.usage.provider
        rt.metrics.calls.labels(role, provider, result.usage.model).inc()
        rt.metrics.tokens.labels(role, provider, "input").inc(result.usage.input_tokens)
        rt.metrics.tokens.labels(role, provider, "output").inc(result.usage.output_tokens)
        rt.metrics.cost.labels(role, provider).inc(result.usage.cost_usd or 0.0)
    info = {"provider": result.usage.provider, "model": result.usage.model}
    changes.values["actor_info" if role == "actor" else "critic_info"] = info


def _bill_critiques(
    rt: Runtime,
    session: Session,
    run: store.RunState,
    changes: store.RunChanges,
    round: int,
    calls: list[tuple[str, CritiqueResult]],
) -> None:
    """Bill the critic calls behind one critique (one, or one per section), once per key."""
    for key, result in calls:
        _bill(
            rt,
            session,
            run,
            changes,
            round=round,
            role="critic",
            stage="critique",
            key=key,
            result=result,
        )


# ----------------------------------------------------------------------------- act


@dataclass
class _ActInput:
    cancelled: bool
    request: DraftRequest | ReviseRequest | None = None
    previous_output: str = ""
    rollback_note: str | None = None
    previous_critique: dict[str, Any] | None = None
    lock: difflock.LockRules | None = None
    drafts: int = 1  # best of N: with the templates each draft's evaluation and critique use
    critique_template: CritiqueRequest | None = None
    job_template: EvaluationJob | None = None
    evaluator: Evaluator | None = None
    sections: list[Section] | None = None  # revise only these flagged sections
    section_record: list[dict[str, Any]] | None = None
    evidence: list[Evidence] | None = None  # the previous round's research: cite only these
    require_citations: bool = False


async def _best_of(
    rt: Runtime, run_id: str, prepared: _ActInput, request: DraftRequest
) -> tuple[ActorResult, list[tuple[str, ActorResult | CritiqueResult, str, str]], list[Any]]:
    """N drafts, each evaluated and critiqued; the best one is round 1's output."""
    assert prepared.critique_template is not None
    assert prepared.job_template is not None
    candidates = await drafts.make(
        request,
        prepared.drafts,
        run_id=run_id,
        draft=lambda r, k: rt.actor.draft(r, key=k),
        critique=lambda r, k: rt.critic.critique(r, key=k),
        critique_template=prepared.critique_template,
        evaluator=prepared.evaluator,
        job_template=prepared.job_template,
        retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
    )
    chosen = drafts.choose(candidates)
    calls: list[tuple[str, ActorResult | CritiqueResult, str, str]] = []
    for c in candidates:
        calls.append((c.key, c.result, "actor", "draft"))
        if c.critique is not None:
            calls.append((c.critic_key, c.critique, "critic", "critique"))
    return chosen.result, calls, drafts.trajectory(candidates, chosen)


@DBOS.step(name="crosscheck.act")
@step_budget
async def act(
    run_id: str,
    round: int,
    stage: str,
    attempt: int,
    seen_hashes: list[str],
    reason: str = "shrank",
    note: str | None = None,
    cause: str = "evaluation",
) -> dict[str, Any]:
    """Draft (round 1) or revise (later rounds); apply the rules that read a new version.
    A later attempt re-asks after a rollback (``reason``: ``shrank``, or ``over_correction``
    with the guard's ``note``; ``cause``: ``evaluation`` or ``reopened_issue``)."""
    rt = current()
    started = time.perf_counter()

    def prepare(session: Session) -> _ActInput:
        run = store.load_run(session, run_id)
        if run.cancel_requested:
            _finish_run(rt, session, run_id, CANCELLED, run.rounds or None)
            return _ActInput(cancelled=True)
        kind = TaskKind(run.kind)
        knowledge = rt.knowledge.for_actor(session, run, stage, vector)  # chosen at the draft
        policy = Policy.model_validate(run.policy)
        if stage == "draft":
            draft = DraftRequest(
                task=run.task, kind=kind, entry_point=run.entry_point, knowledge=knowledge
            )
            if policy.drafts == 1:
                return _ActInput(False, draft)
            full = records.load_run(session, run_id)
            return _ActInput(
                False,
                draft,
                drafts=policy.drafts,
                critique_template=_critique_request(
                    rt, session, run, policy, "", round, None, vector
                ),
                job_template=EvaluationJob(
                    run.kind, "", full.tests, run.entry_point, full.json_schema, full.created_by
                ),
                evaluator=rt.evaluators.get(run.evaluator),
            )
        previous = store.load_round(session, run_id, round - 1)
        assert previous is not None, "a revision needs the previous round"
        rows = store.reflections(session, run_id)
        reflections = _reflections(rows)
        lock = guard.lock_rules(run, policy, previous, rows, round)
        evidence = research.evidence_of(previous.research)
        rollback_note = None
        if attempt > 1 and note:
            rollback_note = note
            reflections.append(_note(note))
        elif attempt > 1:
            rollback_note = (
                f"Your last revision was more than {policy.shrink_threshold:.0%} shorter than "
                "the previous version and was rolled back. Revise the previous version again "
                "and keep all of its correct content; only change what the reflections ask for."
            )
            reflections.append(_note(rollback_note))
        if not reflections:
            # a person asked for another round of a version nothing criticised (a retry after
            # a pass that could not ship, say): the revision still needs a reflection to follow
            reflections.append(_note(RETRY_NOTE.format(round=round - 1)))
        request = ReviseRequest(
            task=run.task,
            kind=kind,
            entry_point=run.entry_point,
            previous_output=previous.output,
            reflections=_binding_first(reflections, 50),
            knowledge=knowledge,
            binding_points=run.binding_points or [],
            issues=discipline.numbered(previous.critique),
            evidence=evidence[:MAX_EVIDENCE],
            unverified=research.unverified_before(session, run_id, round),
        )
        parts = None
        if policy.section_chars > 0 and not run.binding_points:
            parts = sectioned.plan(previous.output, run.kind, previous.sections)
        return _ActInput(
            False,
            request,
            previous.output,
            rollback_note,
            previous.critique,
            lock,
            sections=parts,
            section_record=previous.sections if parts else None,
            evidence=evidence or None,
            require_citations=policy.require_citations,
        )

    vector = await rt.knowledge.actor_vector(rt.db, run_id, stage)
    prepared = await _unit(rt, prepare)
    if prepared.cancelled:
        return {"stop": _stop_dict(CANCELLED)}
    key = f"{run_id}:{round}:actor:{attempt}"
    request = prepared.request
    calls: list[tuple[str, ActorResult | CritiqueResult, str, str]] = []  # key, result, role
    extra: dict[str, Any] = {}  # more columns of this round
    revised_sections: list[dict[str, Any]] | None = None  # the previous round's, updated
    if isinstance(request, DraftRequest) and prepared.drafts > 1:
        result, calls, extra["drafts"] = await _best_of(rt, run_id, prepared, request)
    elif isinstance(request, DraftRequest):
        draft_request = request
        result = await with_retries(
            rt, "actor", lambda: rt.actor.draft(draft_request, key=key), run_id=run_id
        )
    elif isinstance(request, ReviseRequest) and prepared.sections and prepared.section_record:
        revised = await sectioned.revise(
            prepared.sections,
            prepared.section_record,
            prepared.previous_critique or {},
            request,
            run_id=run_id,
            round=round,
            attempt=attempt,
            ask=lambda r, k: rt.actor.revise(r, key=k),
            retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
        )
        result = sectioned.reassemble(prepared.sections, revised)
        calls = [(k, r, "actor", stage) for _, k, r in revised]
        revised_sections = sectioned.mark_revised(prepared.section_record, revised)
    else:
        assert isinstance(request, ReviseRequest)
        revise_request = request
        result = await with_retries(
            rt, "actor", lambda: rt.actor.revise(revise_request, key=key), run_id=run_id
        )
    received = [note.id for note in request.knowledge]  # what this call's Actor was given
    calls = calls or [(key, result, "actor", stage)]
    rt.metrics.stage_latency.labels(stage).observe(time.perf_counter() - started)

    output = result.output
    revising = stage == "revise"
    locked: difflock.Locked | None = None
    if revising and prepared.lock is not None:
        wheres = [r.where for r in result.responses if r.action.value == "applied" and r.where]
        if prepared.evidence:  # asked to add a reference list: the lock keeps its lines
            wheres += research.reference_lines(output)
        locked = await difflock.enforce_off_loop(
            prepared.lock, prepared.previous_output, output, wheres
        )
        output = locked.output
    digest = output_hash(output)
    answered = [r.model_dump(mode="json") for r in result.responses]
    unsourced: list[discipline.Unsourced] = []
    if isinstance(request, ReviseRequest):  # a claimed source is checked against these
        given = discipline.Sources(request.task, request.evidence, request.knowledge)
        unsourced = discipline.unsourced(prepared.previous_critique, answered, output, given)
    citations: dict[str, Any] | None = None
    citation_note = ""
    if revising and prepared.evidence:
        report, citations = research.check_citations(
            output,
            prepared.evidence,
            prepared.previous_output,
            prepared.require_citations,
            task=request.task,
            flagged=[i.quote for i in discipline.numbered(prepared.previous_critique) if i.quote],
        )
        citation_note = report.reflection()
        rt.metrics.citation_checks.labels(str(report.ok).lower()).inc()
    out: dict[str, Any] = {
        "output_hash": digest,
        "shrink": shrink_ratio(prepared.previous_output, output) if revising else 0.0,
        "shrank": False,
        "stop": None,
    }

    def commit(session: Session) -> None:
        run = store.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        out["policy"] = run.policy
        out["evaluator"] = run.evaluator
        out["research"] = research.research_on(
            policy, bool(rt.settings.research_url), run.critique_depth
        )
        changes = store.RunChanges({"rounds": max(run.rounds, round)})
        points_open = bool(run.binding_points)
        for call_key, call_result, role, call_stage in calls:
            _bill(
                rt,
                session,
                run,
                changes,
                round=round,
                role=role,
                stage=call_stage,
                key=call_key,
                result=call_result,
            )
        if revised_sections is not None:
            store.update_round(session, run_id, round - 1, {"sections": revised_sections})
        row = store.load_round(session, run_id, round)
        rolled_back = list(row.rolled_back or []) if row else []
        if row is not None and attempt > 1 and row.output != output:
            rolled_back.append({"attempt": attempt - 1, "output": row.output, "reason": reason})
        if prepared.rollback_note and row is not None and attempt > 1:
            store.add_reflection(session, run_id, round, "evaluator", prepared.rollback_note)
        values: dict[str, Any] = {
            "output": output,
            "output_hash": digest,
            "uncertainties": result.uncertainties,
            "actor_usage": result.usage.model_dump(mode="json"),
            "rolled_back": rolled_back or None,
            "responses": [r.model_dump(mode="json") for r in result.responses] or None,
            "actor_knowledge": received,
            "reverted_hunks": (locked.reverted if locked else None) or None,
            "unlocked_output": result.output if output != result.output else None,
            "search_queries": result.search_queries or None,
            "citations": citations,
            # a hallucination the revision kept without a supporting source holds back a pass
            "unsourced": [
                {"issue": u.issue.id, "quote": u.issue.quote, "reason": u.reason} for u in unsourced
            ]
            or None,
            **extra,
        }
        if row is None and revising and points_open:
            changes.values["human_rounds"] = run.human_rounds + 1  # a person asked for it
        if revising and attempt == 1:
            rt.metrics.revisions.inc()
        elif revising and reason == "over_correction":
            rt.metrics.over_corrections.labels(cause, "rolled_back").inc()
            values["over_correction"] = {"reason": cause, "rollbacks": 1, "kept": "retry"}
        out["run_tokens"] = changes.tokens(run)
        out["run_cost"] = changes.cost(run)
        stop: Stop | None = None
        if revising and shrank(policy, out):
            if attempt == 1:
                out["shrank"] = True
            else:
                # Still too short after the re-ask: keep the previous version, ask a person.
                values["rolled_back"] = [
                    *rolled_back,
                    {"attempt": attempt, "output": output, "reason": "shrank"},
                ]
                previous = store.load_round(session, run_id, round - 1)
                assert previous is not None
                values["output"], values["output_hash"] = previous.output, previous.output_hash
                values["unlocked_output"] = None
                stop = Stop(
                    RunStatus.escalated,
                    StopReason.output_shrank,
                    detail=f"round {round} shrank by {out['shrink']:.0%} twice; "
                    f"kept round {round - 1}",
                )
        if row is None:
            store.insert_round(session, run_id, round, values)
            if revising:  # the version it revises settles (once: a re-run finds the row)
                settled.revised(session, run_id, round - 1, prepared.previous_critique)
        else:
            store.update_round(session, run_id, round, values)
        if locked is not None and locked.reverted:
            guard.record_reverted(rt, session, run_id, round, attempt, locked)
        store.append_event(
            session,
            run_id,
            "round.output",
            {
                "round": round,
                "stage": stage,
                "attempt": attempt,
                "output_hash": digest,
                "chars": len(output),
                "uncertainties": result.uncertainties,
            },
        )
        if unsourced and not out["shrank"]:
            # a fact, like a failed test: the next revision must remove or source the claim
            store.add_reflection(
                session, run_id, round, "evaluator", discipline.unsourced_note(round, unsourced)
            )
            store.append_event(
                session,
                run_id,
                "round.unsourced_claims",
                {"round": round, "issues": [i.id for i in unsourced]},
            )
        if citation_note and not out["shrank"]:
            # a fact, like a failed test: the next revision must fix its references
            store.add_reflection(session, run_id, round, "evaluator", citation_note[:8000])
        if stop is None and not out["shrank"]:
            stop = after_output(
                policy, round=round, seen_hashes=seen_hashes, out=out, points_open=points_open
            )
        if stop is not None:
            store.update_run(session, run, changes)
            stop = _finish_run(rt, session, run_id, stop, round)
        elif out["shrank"]:
            store.update_run(session, run, changes)
        else:
            nxt = RunStatus.evaluating if run.evaluator != "none" else RunStatus.critiquing
            store.update_run(session, run, changes, status=nxt, event={"round": round})
        out["stop"] = _stop_dict(stop)

    await _unit(rt, commit)
    return out


# ------------------------------------------------------------------------ evaluate


@DBOS.step(name="crosscheck.evaluate")
@step_budget
async def evaluate(run_id: str, round: int, pause_after: bool, attempt: int = 1) -> dict[str, Any]:
    """Run the evaluator; a failure becomes an evaluator reflection (a fact, not an opinion).
    ``regressed``: this version fails where the previous one passed (the guard re-asks)."""
    rt = current()
    started = time.perf_counter()

    def prepare(
        session: Session,
    ) -> tuple[EvaluationJob, Evaluator | None, dict[str, Any] | None, str | None] | None:
        run = records.load_run(session, run_id)
        if run.cancel_requested:
            _finish(rt, session, run, CANCELLED, run.rounds or None)
            return None
        row = records.load_round(session, run_id, round)
        assert row is not None
        job = EvaluationJob(
            run.kind, row.output, run.tests, run.entry_point, run.json_schema, run.created_by
        )
        # best of N evaluated every draft already: the chosen one's evaluation is this round's
        reused = drafts.chosen_evaluation(row.drafts, row.output_hash)
        unlocked = guard.unlocked_candidate(session, run, row)  # when the lock changed it
        return job, rt.evaluators.get(run.evaluator), reused, unlocked

    prepared = await _unit(rt, prepare)
    if prepared is None:
        return {"stop": _stop_dict(CANCELLED), "passed": None, "paused": False}
    job, evaluator, reused, unlocked = prepared
    passed: bool | None = None
    override: guard.LockOverride | None = None
    evaluation: dict[str, Any] | None = None
    # each evaluation records the hash of the version it judged: the gate ships no other on
    # its strength
    if reused is not None:
        passed = bool(reused["passed"])
        evaluation = {**reused, "output_hash": output_hash(job.output)}
    elif evaluator is not None:
        key = f"{run_id}:{round}:evaluator" + (f":{attempt}" if attempt > 1 else "")
        outcome = await with_retries(
            rt, "sandbox", lambda: evaluator.evaluate(job, key=key), run_id=run_id
        )
        passed = outcome.passed
        evaluation = {**outcome.as_dict(), "output_hash": output_hash(job.output)}
        override = await guard.prefer_unlocked(
            evaluation,
            unlocked,
            lambda text: _evaluate_unlocked(rt, evaluator, job, text, key, run_id),
        )
        if override is not None:  # the unlocked revision ships: its evaluation holds its hash
            passed, evaluation = bool(override.evaluation["passed"]), override.evaluation
        rt.metrics.stage_latency.labels("evaluate").observe(time.perf_counter() - started)

    regressed = False

    def commit(session: Session) -> Stop | None:
        nonlocal regressed
        run = records.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        if evaluation is not None and passed is not None:
            before = store.load_round(session, run_id, round - 1)
            regressed = before is not None and guard.regressed(policy, before.evaluation, passed)
        if evaluation is not None:
            row = records.load_round(session, run_id, round)
            assert row is not None
            if override is not None:
                guard.apply_override(session, row, attempt, override)
            row.evaluation = evaluation
            row.updated_at = utcnow()
            session.add(row)
            if not passed:
                session.add(
                    Reflection(
                        run_id=run_id,
                        round=round,
                        source="evaluator",
                        content=f"Round {round} failed evaluation ({run.evaluator}):\n"
                        + str(evaluation["summary"]),
                    )
                )
            append_event(
                session,
                run_id,
                "round.evaluation",
                {"round": round, "passed": passed, "summary": str(evaluation["summary"])[:500]},
            )
        if regressed:
            pass  # the workflow rolls this version back or keeps the better one
        elif pause_after:
            records.pause_for_review(session, run, round)
        else:
            records.set_status(session, run, RunStatus.critiquing, round=round)
        return None

    stop = await _unit(rt, commit)
    return {
        "passed": passed,
        # the version this round now holds (the unlocked revision, when the lock gave way)
        "output_hash": evaluation.get("output_hash") if evaluation else None,
        "stop": _stop_dict(stop),
        "paused": stop is None and pause_after and not regressed,
        "regressed": regressed,
        "summary": str(evaluation["summary"]) if evaluation and regressed else "",
    }


async def _evaluate_unlocked(
    rt: Runtime, evaluator: Evaluator, job: EvaluationJob, output: str, key: str, run_id: str
) -> dict[str, Any]:
    unlocked = replace(job, output=output)
    outcome = await with_retries(
        rt, "sandbox", lambda: evaluator.evaluate(unlocked, key=f"{key}:unlocked"), run_id=run_id
    )
    return outcome.as_dict()


# ------------------------------------------------------------------------ critique


@dataclass
class _CritiqueInput:
    request: CritiqueRequest
    previous_critique: dict[str, Any] | None
    responses: list[dict[str, Any]] | None
    reused: tuple[str, CritiqueResult] | None = None
    parts: list[Section] | None = None
    research: dict[str, Any] | None = None  # this round's research step, if it ran
    requested_depth: str | None = None  # the policy's depth, before research degraded it
    citations_failed: bool = False  # this version's references are not the evidence's
    output_hash: str = ""  # the version critiqued
    revised_from: str | None = None  # the previous version, when this is the Actor's revision
    citations_reason: str = ""  # what the failed check found, for the run's detail
    unsourced: list[dict[str, Any]] | None = None  # flagged claims kept without a source


def _critique_request(
    rt: Runtime,
    session: Session,
    run: store.RunState,
    policy: Policy,
    output: str,
    round: int,
    evaluation: Evaluation | None,
    vector: list[float] | None,
    declined: list[DeclinedIssue] | None = None,
) -> CritiqueRequest:
    human = store.reflections(session, run.id, source="human")
    return CritiqueRequest(
        task=run.task,
        kind=TaskKind(run.kind),
        output=output,
        round=round,
        evaluation=evaluation,
        reflections=_reflections(human),
        binding_points=run.binding_points or [],
        profile=policy.profile,
        depth=policy.depth,
        knowledge=rt.knowledge.for_critic(
            session, run, profile_for(policy.profile, TaskKind(run.kind)), vector
        ),
        declined=declined or [],
        min_pass_confidence=gate.min_pass_confidence(policy),
        latency_budget_s=policy.latency_budget_s,
    )


@DBOS.step(name="crosscheck.critique")
@step_budget
async def critique(
    run_id: str,
    round: int,
    previous_signature: str | None,
    evaluation_passed: bool | None,
    attempt: int = 1,
    retry: int = 0,
) -> dict[str, Any]:
    """Ask the Critic; its structured verdict, and only that, drives the stop rules.

    A critique blaming the environment is asked again (``retry``: 1, 2, ... under its own
    idempotency key) and costs no round. ``reopened``: this version reopened an issue the
    previous critique had closed (the workflow re-asks the Actor; on a later ``attempt``, the
    version's, the guard keeps the better version)."""
    rt = current()
    started = time.perf_counter()

    def prepare(session: Session) -> _CritiqueInput | None:
        run = store.load_run(session, run_id)
        if run.cancel_requested:
            _finish_run(rt, session, run_id, CANCELLED, run.rounds or None)
            return None
        row = store.load_round(session, run_id, round)
        assert row is not None
        previous = store.load_round(session, run_id, round - 1)
        evaluation = (
            Evaluation(
                passed=bool(row.evaluation["passed"]),
                summary=str(row.evaluation["summary"])[:8000],
            )
            if row.evaluation
            else None
        )
        policy = Policy.model_validate(run.policy)
        declined = discipline.declined(previous.critique, row.responses) if previous else []
        request = _critique_request(
            rt, session, run, policy, row.output, round, evaluation, vector, declined
        )
        # what the author was unsure of: the Critic checks it especially
        request.uncertainties = research.for_critic(row.uncertainties)
        parts = sectioned.parts_of(policy.section_chars, row.output, run.kind)
        requested = policy.depth.value if policy.depth else None
        if row.research is not None:
            # the evidence goes to the Critic; research that failed leaves it at L1
            update: dict[str, Any] = {
                "evidence": research.evidence_of(row.research)[:MAX_EVIDENCE],
                "research": True,
            }
            if research.is_degraded(row.research):
                update["depth"] = Depth.L1
            request = request.model_copy(update=update)
        # a best-of-N round 1 was critiqued already: the chosen draft's critique is its own
        # (unless a person spoke since, research ran, or the draft is long enough to judge
        # in sections)
        plain = (
            not request.reflections
            and not request.binding_points
            and parts is None
            and row.research is None
        )
        return _CritiqueInput(
            request,
            # adoption measures the Actor's revisions: a person's edit answers no critique
            previous.critique if previous and row.provenance == "actor" else None,
            row.responses,
            reused=drafts.chosen_critique(row.drafts, row.output_hash) if plain else None,
            parts=parts,
            research=row.research,
            requested_depth=requested,
            citations_failed=row.citations is not None and not row.citations.get("ok", True),
            output_hash=row.output_hash,
            # how much the Actor changed: a small revision that passes its check is the last
            revised_from=previous.output
            if previous is not None and row.provenance == "actor" and not run.binding_points
            else None,
            citations_reason=research.citations_reason(row.citations),
            unsourced=row.unsourced,
        )

    vector = await rt.knowledge.run_vector(rt.db, run_id)
    prepared = await _unit(rt, prepare)
    if prepared is None:
        return {"stop": _stop_dict(CANCELLED), "signature": None, "verdict": None}
    request = prepared.request
    previous_critique, responses = prepared.previous_critique, prepared.responses
    suffix = (f":{attempt}" if attempt > 1 else "") + (f":retry{retry}" if retry else "")
    key = f"{run_id}:{round}:critic{suffix}"
    section_record: list[dict[str, Any]] | None = None
    if prepared.reused is not None and attempt == 1 and not retry:
        key, result = prepared.reused
        calls = [(key, result)]
        doc = result.model_dump(mode="json", exclude={"usage", "exchanges"})
    elif prepared.parts is not None:
        calls = await sectioned.critique(
            prepared.parts,
            request,
            run_id=run_id,
            round=round,
            ask=lambda r, k: rt.critic.critique(r, key=k),
            retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
            suffix=suffix,
        )
        results = [r for _, r in calls]
        doc = sectioned.merge(prepared.parts, results)
        section_record = sectioned.record(prepared.parts, results)
        result = results[0].model_copy(
            update={"usage": sectioned.total_usage([r.usage for r in results])}
        )
    else:
        result = await with_retries(
            rt, "critic", lambda: rt.critic.critique(request, key=key), run_id=run_id
        )
        calls = [(key, result)]
        doc = result.model_dump(mode="json", exclude={"usage", "exchanges"})
    if research.is_degraded(prepared.research):
        # the Critic's own degraded flag: this critique is L1 because research failed
        assert prepared.research is not None
        doc = {
            **doc,
            "degraded": True,
            "degraded_reason": doc.get("degraded_reason")
            or research.degraded_reason(prepared.research),
            "depth": Depth.L1.value,
            "requested_depth": prepared.requested_depth or doc.get("requested_depth", ""),
        }
    rt.metrics.stage_latency.labels("critique").observe(time.perf_counter() - started)
    for _, each in calls:
        rt.metrics.critiques.labels(each.profile, each.depth, str(each.degraded).lower()).inc()
    # The Critic's pass is checked again here: a pass listing a major or critical issue, an
    # off-profile issue, or too little confidence (when no person is asked) is no pass.
    refusals = pass_refusals(
        doc,
        dimensions=doc.get("dimensions") or (),
        min_confidence=prepared.request.min_pass_confidence,
    )
    doc = {**verdicts.refused(doc, refusals), "output_hash": prepared.output_hash}
    if doc.get("refused_pass"):
        rt.metrics.refused_passes.inc()
    change = (
        await _change_ratio(prepared.revised_from, request.output)
        if prepared.revised_from is not None
        else None
    )
    signature = critique_signature(doc)
    environment = critic_blames_environment(doc)
    if environment and retry < ENVIRONMENT_RETRIES:
        rt.metrics.environment_retries.labels("critic").inc()

        def record_retry(session: Session) -> None:
            run = store.load_run(session, run_id)
            changes = store.RunChanges({})
            _bill_critiques(rt, session, run, changes, round, calls)
            store.update_run(session, run, changes)
            store.append_event(
                session,
                run_id,
                "round.critique_retried",
                {
                    "round": round,
                    "attempt": retry + 1,
                    "error_class": doc["error_class"],
                    "reflection": doc["reflection"][:500],
                },
            )

        await _unit(rt, record_retry)
        return {"stop": None, "signature": None, "verdict": doc["verdict"], "retry": True}
    measured = None if environment else discipline.adoption(previous_critique, responses, doc)
    adoption = measured.share if measured is not None else None
    if measured is not None:
        rt.metrics.critic_issues.inc(measured.counted)
        rt.metrics.critic_issues_adopted.inc(measured.adopted)

    paused = False
    reopened: guard.Reopened | None = None

    def commit(session: Session) -> Stop | None:
        nonlocal paused, reopened, doc, signature
        run = store.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        changes = store.RunChanges({})
        _bill_critiques(rt, session, run, changes, round, calls)
        store.update_round(
            session,
            run_id,
            round,
            {
                "critique": doc,
                "critic_usage": result.usage.model_dump(mode="json"),
                "adoption": adoption,
                **({"sections": section_record} if section_record is not None else {}),
            },
        )
        reopened = guard.check_reopened(
            session, run_id, round, attempt, policy, doc, bool(run.binding_points)
        )
        if reopened is not None and reopened.kept is None:
            store.update_run(session, run, changes)
            return None  # rolled back: the workflow re-asks the Actor
        if reopened is not None and reopened.critique is not None:
            doc = reopened.critique  # the previous version stays, with its critique
            signature = critique_signature(doc)
            rt.metrics.over_corrections.labels("reopened_issue", "previous").inc()
        elif reopened is not None:
            rt.metrics.over_corrections.labels("reopened_issue", "current").inc()
        unmet = [c["point"] for c in doc["binding_checks"] if not c["satisfied"]]
        if run.binding_points and not unmet:
            changes.values.update(binding_points=None, binding_attempts=0)
        elif run.binding_points:
            changes.values["binding_attempts"] = run.binding_attempts + 1
            store.add_reflection(
                session,
                run_id,
                round,
                "critic",
                "This version does not yet apply the reviewer's binding points:\n"
                + "\n".join(f"- {point}" for point in unmet),
            )
        if run.binding_points:
            store.append_event(
                session,
                run_id,
                "round.binding_checks",
                {"round": round, "points": len(doc["binding_checks"]), "unmet": len(unmet)},
            )
        if not environment and (doc["verdict"] != "pass" or evaluation_passed is False):
            lines = [doc["reflection"]] + [
                f"- [{i['severity']}] {i['dimension']}: {i['suggestion']}"
                + (f' (on: "{i["quote"][:200]}")' if i.get("quote") else "")
                for i in doc["issues"]
            ]
            if doc.get("refused_pass"):
                lines.append(
                    "The critic's pass was not accepted: " + "; ".join(doc["refused_pass"])
                )
            store.add_reflection(session, run_id, round, "critic", "\n".join(lines)[:8000])
        store.append_event(
            session,
            run_id,
            "round.critique",
            {
                "round": round,
                "verdict": doc["verdict"],
                "confidence": doc["confidence"],
                "issues": len(doc["issues"]),
                "error_class": doc["error_class"],
                **({"refused_pass": len(doc["refused_pass"])} if doc.get("refused_pass") else {}),
            },
        )
        decision = {
            **doc,
            "signature": signature,
            "run_tokens": changes.tokens(run),
            "run_cost": changes.cost(run),
        }
        stop = environment_stop(round, retry + 1) if environment else None
        stop = stop or after_critique(
            policy,
            round=round,
            critique=decision,
            # invalid citations, or a flagged claim kept without a source, hold back a pass
            # like a failed evaluation
            evaluation_passed=False
            if prepared.citations_failed or prepared.unsourced
            else evaluation_passed,
            previous_signature=previous_signature,
            human_rounds=run.human_rounds,
            unmet_points=unmet if run.binding_points else [],
            unmet_attempts=run.binding_attempts + 1 if run.binding_points and unmet else 0,
            change_ratio=change,
        )
        held_back = [prepared.citations_reason] if prepared.citations_reason else []
        if prepared.unsourced:
            held_back.append(
                "claim(s) flagged as hallucinations stayed without a supporting source: "
                + ", ".join(str(u.get("issue")) for u in prepared.unsourced)
            )
        if stop is not None and stop.status is RunStatus.escalated and held_back:
            # the person deciding sees why a pass was held back, not only that none came
            held = "the critic passed it, but" if doc["verdict"] == "pass" else "also,"
            why = f"round {round}: {held} its " + "; its ".join(held_back)
            stop = replace(stop, detail=f"{stop.detail}; {why}" if stop.detail else why)
        unsure = (
            policy.review is ReviewMode.on_low_confidence
            and doc["confidence"] < policy.review_confidence_threshold
        )
        if stop is not None and stop.status is RunStatus.succeeded and unsure:
            stop = None  # a pass the critic is unsure of: a person decides whether it ships
        if stop is not None:
            store.update_run(session, run, changes)
            stop = _finish_run(rt, session, run_id, stop, round)
        elif unsure:
            paused = True  # the critic is unsure: a person decides before anyone revises
            store.update_run(session, run, changes)
            records.pause_for_review(
                session, records.load_run(session, run_id), round, reason="low_confidence"
            )
        else:
            store.update_run(
                session, run, changes, status=RunStatus.revising, event={"round": round + 1}
            )
        return stop

    stop = await _unit(rt, commit)
    return {
        "stop": _stop_dict(stop),
        "signature": signature,
        "verdict": doc["verdict"],
        "paused": paused,
        "reopened": reopened.issues if reopened is not None and reopened.kept is None else [],
    }


def round_share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


# -------------------------------------------------------------------------- finish


def bill_failed(rt: Runtime, session: Session, run_id: str, failed_call: dict[str, Any]) -> None:
    """Bill a failed peer call (``PeerRejected.billing`` / ``PeerUnavailable.billing``) to
    the run's current round: tokens, cost, trajectory and stats, once per key."""
    state = store.load_run(session, run_id)
    changes = store.RunChanges({})
    _bill(
        rt,
        session,
        state,
        changes,
        round=max(state.rounds, 1),
        role=str(failed_call["role"]),
        stage=str(failed_call["stage"]),
        key=str(failed_call["key"]),
        result=store.FailedCall(
            Usage.model_validate(failed_call["usage"]),
            [ModelExchange.model_validate(e) for e in failed_call.get("exchanges") or []],
        ),
    )
    store.update_run(session, state, changes)


@DBOS.step(name="crosscheck.finish")
async def finish(
    run_id: str,
    status: str,
    reason: str,
    error_class: str,
    detail: str,
    failed_call: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """End a run the loop could not carry on (environment failure, a peer's refusal).
    ``failed_call`` (``PeerRejected.billing``): the refused call's model usage, billed to
    the run and counted in the stats like any call."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        if failed_call is not None:
            bill_failed(rt, session, run_id, failed_call)
        run = records.load_run(session, run_id)
        if RunStatus(run.status).final:
            return {"stop": {"status": run.status, "reason": run.stop_reason}}
        stop = Stop(RunStatus(status), StopReason(reason), error_class=error_class, detail=detail)
        _finish(rt, session, run, stop, run.rounds or None)
        return {"stop": _stop_dict(stop)}

    result = await _unit(rt, work)
    return result


# -------------------------------------------------------------------------- resume


@DBOS.step(name="crosscheck.resume_state")
async def resume_state(run_id: str, round: int, stage: str) -> dict[str, Any]:
    """What a resumed segment needs to apply the same rules the first one did."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        rounds = records.all_rounds(session, run_id)
        upto = round if stage == "critique" else round - 1
        earlier = [r for r in rounds if r.number <= upto]
        before = next((r for r in rounds if r.number == round - 1), None)
        current_round = next((r for r in rounds if r.number == round), None)
        evaluation = current_round.evaluation if current_round and stage == "critique" else None
        # paused after a reopened-issue re-ask (the round's first version was critiqued)
        correction = (current_round.over_correction if current_round else None) or {}
        reasked = stage == "critique" and (correction.get("reason"), correction.get("kept")) == (
            "reopened_issue",
            "retry",
        )
        append_event(session, run_id, "run.resumed", {"round": round, "stage": stage})
        run = records.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        unevaluated = (
            stage == "critique"
            and run.evaluator != "none"
            and current_round is not None
            and (current_round.evaluation or {}).get("output_hash") != current_round.output_hash
        )
        return {
            "unevaluated": unevaluated,
            "research": research.research_on(
                policy, bool(rt.settings.research_url), run.critique_depth
            ),
            "hashes": [r.output_hash for r in earlier],
            "signature": critique_signature(before.critique)
            if before and before.critique
            else None,
            "passed": bool(evaluation["passed"]) if evaluation else None,
            "reasked": reasked,
        }

    state = await _unit(rt, work)
    return state
