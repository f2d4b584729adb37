"""Durable steps. Each calls at most one peer and commits its result in one transaction.

DBOS records a finished step's return value, so a recovered workflow never repeats it; a
step cut off mid-way runs again, which is why every peer call carries an idempotency key
made of (run, round, role, attempt) and every write here is an upsert. Database work runs
on the database's own thread (``Runtime.db``), never on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from dbos import DBOS
from sqlmodel import Session
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from orchestrator.engine import records, store
from orchestrator.engine.policy import (
    Stop,
    after_critique,
    after_output,
    change_ratio,
    critique_signature,
    output_hash,
    shrank,
    shrink_ratio,
)
from orchestrator.engine.runtime import Runtime, current
from orchestrator.evaluators.base import EvaluationJob, Evaluator
from orchestrator.events.repository import append_event, appended_types
from orchestrator.knowledge.service import KnowledgeService, profile_for
from orchestrator.peers.errors import PeerUnavailable
from orchestrator.reviews import lessons
from orchestrator.tables import (
    Reflection,
    ReviewItem,
    Run,
    new_id,
    utcnow,
)
from orchestrator.webhooks import outbox
from shared.contracts import (
    ActorResult,
    CritiqueRequest,
    CritiqueResult,
    DraftRequest,
    Evaluation,
    ReflectionSource,
    ReviseRequest,
    TaskKind,
)
from shared.contracts import Reflection as ReflectionDTO
from shared.orchestration import Policy, ReviewMode, RunStatus, StopReason

T = TypeVar("T")
CANCELLED = Stop(RunStatus.cancelled, StopReason.cancelled, error_class="none", detail="cancelled")


async def with_retries(rt: Runtime, peer: str, call: Callable[[], Awaitable[T]]) -> T:
    """Environment errors are retried with backoff; they never cost a round."""

    def count(_: RetryCallState) -> None:
        rt.metrics.environment_retries.labels(peer).inc()

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(PeerUnavailable),
        stop=stop_after_attempt(rt.settings.peer_max_attempts),
        wait=wait_exponential_jitter(
            multiplier=rt.settings.peer_retry_initial_s,
            exp_base=rt.settings.peer_retry_backoff,
            max=30,
        ),
        before_sleep=count,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable")


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


def _finish(rt: Runtime, session: Session, run: Run, stop: Stop, final_round: int | None) -> None:
    records.finalize(session, run, stop, final_round=final_round)
    rt.metrics.runs_finished.labels(stop.status.value, stop.reason.value).inc()
    rt.metrics.rounds_per_run.observe(max(run.rounds, 1))


def _finish_run(rt: Runtime, session: Session, run_id: str, stop: Stop, final: int | None) -> None:
    """Finish through the ORM (the rare path); it sees the step's Core writes."""
    _finish(rt, session, records.load_run(session, run_id), stop, final)


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
    result: ActorResult | CritiqueResult,
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


# ----------------------------------------------------------------------------- act


@dataclass
class _ActInput:
    cancelled: bool
    request: DraftRequest | ReviseRequest | None = None
    previous_output: str = ""
    rollback_note: str | None = None


@DBOS.step(name="crosscheck.act")
async def act(
    run_id: str, round: int, stage: str, attempt: int, seen_hashes: list[str]
) -> dict[str, Any]:
    """Draft (round 1) or revise (later rounds); apply the rules that read a new version."""
    rt = current()
    started = time.perf_counter()

    def prepare(session: Session) -> _ActInput:
        run = store.load_run(session, run_id)
        if run.cancel_requested:
            _finish_run(rt, session, run_id, CANCELLED, run.rounds or None)
            return _ActInput(cancelled=True)
        kind = TaskKind(run.kind)
        chosen = run.lessons_used
        if chosen is None and stage == "draft":  # chosen once, at the draft; the run keeps them
            found = lessons.relevant(session, run.task, run.tags or [])
            for lesson in found:
                lesson.uses += 1
                session.add(lesson)
            chosen = [lesson.id for lesson in found]
            store.update_run(session, run, store.RunChanges({"lessons_used": chosen}))
        lesson_texts = store.lesson_texts(session, chosen or [])
        if stage == "draft":
            return _ActInput(
                False,
                DraftRequest(
                    task=run.task, kind=kind, entry_point=run.entry_point, lessons=lesson_texts
                ),
            )
        previous = store.load_round(session, run_id, round - 1)
        assert previous is not None, "a revision needs the previous round"
        reflections = _reflections(store.reflections(session, run_id))
        note = None
        if attempt > 1:
            policy = Policy.model_validate(run.policy)
            note = (
                f"Your last revision was more than {policy.shrink_threshold:.0%} shorter than "
                "the previous version and was rolled back. Revise the previous version again "
                "and keep all of its correct content; only change what the reflections ask for."
            )
            reflections.append(ReflectionDTO(source=ReflectionSource.evaluator, content=note))
        request = ReviseRequest(
            task=run.task,
            kind=kind,
            entry_point=run.entry_point,
            previous_output=previous.output,
            reflections=_binding_first(reflections, 50),
            lessons=lesson_texts,
            binding_points=run.binding_points or [],
        )
        return _ActInput(False, request, previous.output, note)

    prepared = await _unit(rt, prepare)
    if prepared.cancelled:
        return {"stop": _stop_dict(CANCELLED)}
    key = f"{run_id}:{round}:actor:{attempt}"
    request = prepared.request
    if isinstance(request, DraftRequest):
        draft_request = request
        result = await with_retries(rt, "actor", lambda: rt.actor.draft(draft_request, key=key))
    else:
        assert isinstance(request, ReviseRequest)
        revise_request = request
        result = await with_retries(rt, "actor", lambda: rt.actor.revise(revise_request, key=key))
    rt.metrics.stage_latency.labels(stage).observe(time.perf_counter() - started)

    output = result.output
    digest = output_hash(output)
    revising = stage == "revise"
    out: dict[str, Any] = {
        "output_hash": digest,
        "change_ratio": await _change_ratio(prepared.previous_output, output) if revising else 1.0,
        "shrink": shrink_ratio(prepared.previous_output, output) if revising else 0.0,
        "shrank": False,
        "stop": None,
    }

    def commit(session: Session) -> None:
        run = store.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        out["policy"] = run.policy
        out["evaluator"] = run.evaluator
        changes = store.RunChanges({"rounds": max(run.rounds, round)})
        points_open = bool(run.binding_points)
        _bill(
            rt,
            session,
            run,
            changes,
            round=round,
            role="actor",
            stage=stage,
            key=key,
            result=result,
        )
        row = store.load_round(session, run_id, round)
        rolled_back = list(row.rolled_back or []) if row else []
        if row is not None and attempt > 1 and row.output != output:
            rolled_back.append({"attempt": attempt - 1, "output": row.output, "reason": "shrank"})
        if prepared.rollback_note and row is not None and attempt > 1:
            store.add_reflection(session, run_id, round, "evaluator", prepared.rollback_note)
        values: dict[str, Any] = {
            "output": output,
            "output_hash": digest,
            "uncertainties": result.uncertainties,
            "actor_usage": result.usage.model_dump(mode="json"),
            "rolled_back": rolled_back or None,
            "responses": [r.model_dump(mode="json") for r in result.responses] or None,
        }
        if row is None and revising and points_open:
            changes.values["human_rounds"] = run.human_rounds + 1  # a person asked for it
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
                stop = Stop(
                    RunStatus.escalated,
                    StopReason.output_shrank,
                    detail=f"round {round} shrank by {out['shrink']:.0%} twice; "
                    f"kept round {round - 1}",
                )
        if row is None:
            store.insert_round(session, run_id, round, values)
        else:
            store.update_round(session, run_id, round, values)
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
        if stop is None and not out["shrank"]:
            stop = after_output(
                policy, round=round, seen_hashes=seen_hashes, out=out, points_open=points_open
            )
        if stop is not None:
            store.update_run(session, run, changes)
            _finish_run(rt, session, run_id, stop, round)
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
async def evaluate(run_id: str, round: int, pause_after: bool) -> dict[str, Any]:
    """Run the evaluator; a failure becomes an evaluator reflection (a fact, not an opinion)."""
    rt = current()
    started = time.perf_counter()

    def prepare(session: Session) -> tuple[EvaluationJob, Evaluator | None] | None:
        run = records.load_run(session, run_id)
        if run.cancel_requested:
            _finish(rt, session, run, CANCELLED, run.rounds or None)
            return None
        row = records.load_round(session, run_id, round)
        assert row is not None
        job = EvaluationJob(run.kind, row.output, run.tests, run.entry_point, run.json_schema)
        return job, rt.evaluators.get(run.evaluator)

    prepared = await _unit(rt, prepare)
    if prepared is None:
        return {"stop": _stop_dict(CANCELLED), "passed": None, "paused": False}
    job, evaluator = prepared
    passed: bool | None = None
    evaluation: dict[str, Any] | None = None
    if evaluator is not None:
        key = f"{run_id}:{round}:evaluator"
        outcome = await with_retries(rt, "sandbox", lambda: evaluator.evaluate(job, key=key))
        passed, evaluation = outcome.passed, outcome.as_dict()
        rt.metrics.stage_latency.labels("evaluate").observe(time.perf_counter() - started)

    def commit(session: Session) -> Stop | None:
        run = records.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        if evaluation is not None:
            row = records.load_round(session, run_id, round)
            assert row is not None
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
            if passed and policy.stop_on_evaluator_pass:
                stop = Stop(RunStatus.succeeded, StopReason.evaluator_pass, error_class="none")
                session.flush()
                _finish(rt, session, run, stop, round)
                return stop
        if pause_after:
            _pause(session, run, round)
        else:
            records.set_status(session, run, RunStatus.critiquing, round=round)
        return None

    stop = await _unit(rt, commit)
    return {"passed": passed, "stop": _stop_dict(stop), "paused": stop is None and pause_after}


def _pause(session: Session, run: Run, round: int, reason: str = "before_critique") -> None:
    policy = Policy.model_validate(run.policy)
    item = ReviewItem(
        id=new_id("rev"),
        run_id=run.id,
        round=round,
        kind="pre_critique",
        status="pending",
        reason=reason,
        deadline=utcnow() + timedelta(seconds=policy.review_deadline_s),
        on_expiry=policy.review_on_expiry.value,
        context={"task": run.task, "round": round},
    )
    session.add(item)
    records.set_status(session, run, RunStatus.awaiting_review, round=round, review_id=item.id)
    append_event(
        session,
        run.id,
        "review.created",
        {"review_id": item.id, "kind": "pre_critique", "round": round},
    )
    outbox.review_created(session, run, item)


# ------------------------------------------------------------------------ critique


@DBOS.step(name="crosscheck.critique")
async def critique(
    run_id: str, round: int, previous_signature: str | None, evaluation_passed: bool | None
) -> dict[str, Any]:
    """Ask the Critic; its structured verdict, and only that, drives the stop rules."""
    rt = current()
    started = time.perf_counter()

    def prepare(session: Session) -> tuple[CritiqueRequest, list[dict[str, Any]]] | None:
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
        human = store.reflections(session, run_id, source="human")
        policy = Policy.model_validate(run.policy)
        request = CritiqueRequest(
            task=run.task,
            kind=TaskKind(run.kind),
            output=row.output,
            round=round,
            evaluation=evaluation,
            reflections=_reflections(human),
            binding_points=run.binding_points or [],
            profile=policy.profile,
            depth=policy.depth,
            knowledge=KnowledgeService(rt.settings.knowledge_min_score).relevant(
                session, run.task, profile_for(policy.profile, TaskKind(run.kind))
            ),
        )
        issues = (previous.critique or {}).get("issues", []) if previous else []
        return request, list(issues)

    prepared = await _unit(rt, prepare)
    if prepared is None:
        return {"stop": _stop_dict(CANCELLED), "signature": None, "verdict": None}
    request, previous_issues = prepared
    key = f"{run_id}:{round}:critic"
    result = await with_retries(rt, "critic", lambda: rt.critic.critique(request, key=key))
    rt.metrics.stage_latency.labels("critique").observe(time.perf_counter() - started)
    rt.metrics.critiques.labels(result.profile, result.depth, str(result.degraded).lower()).inc()
    doc = result.model_dump(mode="json", exclude={"usage", "exchanges"})
    signature = critique_signature(doc)
    adoption: float | None = None
    if previous_issues:
        raised_now = {(i["dimension"], i.get("quote")) for i in doc["issues"]}
        kept = [i for i in previous_issues if (i["dimension"], i.get("quote")) in raised_now]
        adoption = round_share(len(previous_issues) - len(kept), len(previous_issues))
        rt.metrics.critic_issues.inc(len(previous_issues))
        rt.metrics.critic_issues_adopted.inc(len(previous_issues) - len(kept))

    paused = False

    def commit(session: Session) -> Stop | None:
        nonlocal paused
        run = store.load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        changes = store.RunChanges({})
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
        store.update_round(
            session,
            run_id,
            round,
            {
                "critique": doc,
                "critic_usage": result.usage.model_dump(mode="json"),
                "adoption": adoption,
            },
        )
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
        if doc["verdict"] != "pass" or evaluation_passed is False:
            lines = [doc["reflection"]] + [
                f"- [{i['severity']}] {i['dimension']}: {i['suggestion']}"
                + (f' (on: "{i["quote"][:200]}")' if i.get("quote") else "")
                for i in doc["issues"]
            ]
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
            },
        )
        decision = {
            **doc,
            "signature": signature,
            "run_tokens": changes.tokens(run),
            "run_cost": changes.cost(run),
        }
        stop = after_critique(
            policy,
            round=round,
            critique=decision,
            evaluation_passed=evaluation_passed,
            previous_signature=previous_signature,
            human_rounds=run.human_rounds,
            unmet_points=unmet if run.binding_points else [],
            unmet_attempts=run.binding_attempts + 1 if run.binding_points and unmet else 0,
        )
        if stop is not None:
            store.update_run(session, run, changes)
            _finish_run(rt, session, run_id, stop, round)
        elif (
            policy.review is ReviewMode.on_low_confidence
            and doc["confidence"] < policy.review_confidence_threshold
        ):
            paused = True  # the critic is unsure: a person decides before anyone revises
            store.update_run(session, run, changes)
            _pause(session, records.load_run(session, run_id), round, reason="low_confidence")
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
    }


def round_share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


# -------------------------------------------------------------------------- finish


@DBOS.step(name="crosscheck.finish")
async def finish(
    run_id: str, status: str, reason: str, error_class: str, detail: str
) -> dict[str, Any]:
    """End a run the loop could not carry on (environment failure, a peer's refusal)."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
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
        append_event(session, run_id, "run.resumed", {"round": round, "stage": stage})
        return {
            "hashes": [r.output_hash for r in earlier],
            "signature": critique_signature(before.critique)
            if before and before.critique
            else None,
            "passed": bool(evaluation["passed"]) if evaluation else None,
        }

    state = await _unit(rt, work)
    return state
