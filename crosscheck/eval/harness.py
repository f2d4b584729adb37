"""Send each item through the real Orchestrator API in one mode and score what comes back.

* ``single``: one Actor call. No run policy skips the Critic (``max_rounds`` is at least 1
  and every version that could ship is critiqued), so a ``single`` item is a run with
  ``max_rounds: 1`` that pauses for a person before its critique (``review:
  before_critique``): the harness measures round 1's output (and its evaluator's result), and
  the tokens, cost and latency of round 1's Actor call(s) from the trajectory, then cancels
  the run, so no Critic is ever asked (should the cancel be refused, the pause expires into
  an escalation after ``SINGLE_REVIEW_DEADLINE_S``, still without a critique).
* ``self``: the whole loop with the Critic on the Actor's provider (a platform started with
  ``CRITIC_PROVIDER`` = ``ACTOR_PROVIDER`` and ``CROSSCHECK_ALLOW_SAME_PROVIDER=1``).
* ``cross``: the whole loop with the Critic on the other provider (the default platform).

Each run record names the providers that served it; a run whose providers do not fit the
mode stops the evaluation with :class:`ModeMismatch` (the first item runs alone first, so
a wrong platform is found after one item).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from crosscheck.client import CrosscheckClient, CrosscheckError, Settings
from crosscheck.eval.scoring import Judge, JudgeError, check_text
from crosscheck.eval.sets import Item
from shared.contracts import TaskKind
from shared.orchestration import (
    ExpiryAction,
    Policy,
    ReviewMode,
    RunCreate,
    RunPublic,
    RunStatus,
)

Mode = Literal["single", "self", "cross"]
MODES: tuple[Mode, ...] = ("single", "self", "cross")
SEEN_BY_A_PERSON = {RunStatus.escalated, RunStatus.awaiting_review, RunStatus.failed}
SINGLE_REVIEW_DEADLINE_S = 60


class ModeMismatch(CrosscheckError):
    """The platform's providers are not what the mode measures."""


@dataclass
class Outcome:
    """One item in one mode: its score and what it took."""

    id: str
    mode: str
    profile: str | None
    run_id: str | None
    status: str
    stop_reason: str | None
    score: float
    rounds: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    escalated: bool
    seen_by_person: bool
    actor: dict[str, Any] = field(default_factory=dict)
    critic: dict[str, Any] = field(default_factory=dict)
    judge: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    output: str = ""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxScorer:
    """Runs an output against its tests on the sandbox service directly (``--no-sandbox``:
    the run itself carries no tests, so the loop never sees a test result)."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s + 60,
        )
        self.timeout_s = timeout_s

    def passes(self, item: Item, code: str) -> bool:
        body = {"code": code, "tests": item.tests or "", "timeout_s": self.timeout_s}
        if item.entry_point:
            body["entry_point"] = item.entry_point
        try:
            response = self._http.post("/v1/execute", json=body)
        except httpx.HTTPError as exc:
            raise CrosscheckError(f"cannot reach the sandbox at {self.url}: {exc}") from None
        if response.status_code != 200:
            raise CrosscheckError(
                f"the sandbox at {self.url} answered {response.status_code}: {response.text[:300]}"
            )
        return bool(response.json().get("status") == "passed")

    def close(self) -> None:
        self._http.close()


@dataclass
class Harness:
    settings: Settings
    mode: Mode
    sandbox: bool = True
    max_rounds: int | None = None
    concurrency: int = 4
    timeout_s: float = 1800.0
    poll_s: float = 0.25
    judge: Judge | None = None
    scorer: SandboxScorer | None = None
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _clients: list[CrosscheckClient] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -------------------------------------------------------------- requests

    def request(self, item: Item) -> RunCreate:
        policy: dict[str, Any] = {}
        if self.mode == "single":
            policy.update(
                max_rounds=1,
                review=ReviewMode.before_critique,
                review_deadline_s=SINGLE_REVIEW_DEADLINE_S,
                review_on_expiry=ExpiryAction.escalate,
            )
        elif self.max_rounds is not None:
            policy["max_rounds"] = self.max_rounds
        if item.critic_profile and item.kind == "text":
            policy["profile"] = item.critic_profile
        fields: dict[str, Any] = {"task": item.task, "kind": TaskKind(item.kind)}
        if item.kind == "code":
            fields["entry_point"] = item.entry_point
            if self.sandbox and item.tests:
                fields["tests"] = item.tests
        fields["policy"] = Policy.model_validate(policy)
        return RunCreate.model_validate(fields)

    # -------------------------------------------------------------- one item

    def _client(self) -> CrosscheckClient:
        client: CrosscheckClient | None = getattr(self._local, "client", None)
        if client is None:
            client = CrosscheckClient(self.settings)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _wait(self, client: CrosscheckClient, run_id: str) -> RunPublic | None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            run = client.get_run(run_id)
            if run.status.final or run.status is RunStatus.awaiting_review:
                return run
            if time.monotonic() > deadline:
                return None
            time.sleep(self.poll_s)

    def evaluate(self, item: Item) -> Outcome:
        """Run one item and score it; a mode/platform mismatch raises :class:`ModeMismatch`."""
        client = self._client()
        created = client.create_run(self.request(item))
        run = self._wait(client, created.id)
        if run is None:
            return Outcome(
                id=item.id,
                mode=self.mode,
                profile=item.profile,
                run_id=created.id,
                status="timeout",
                stop_reason=None,
                score=0.0,
                rounds=0,
                input_tokens=0,
                output_tokens=0,
                cost_usd=0.0,
                latency_s=self.timeout_s,
                escalated=False,
                seen_by_person=False,
                detail={"error": f"no end within {self.timeout_s:g} s"},
            )
        actor, critic = dict(run.models.get("actor") or {}), dict(run.models.get("critic") or {})
        self.check_providers(actor, critic)
        if self.mode == "single":
            if not run.status.final:  # paused before its critique: nothing more to measure
                try:
                    client.cancel_run(run.id)
                except CrosscheckError:
                    pass  # the pause expires into an escalation, still without a critique
            return self._single(client, item, run, actor, critic)
        return self._loop(item, run, actor, critic)

    def check_providers(self, actor: dict[str, Any], critic: dict[str, Any]) -> None:
        a, c = actor.get("provider"), critic.get("provider")
        if self.mode == "single" or not a or not c:
            return
        if self.mode == "self" and a != c:
            raise ModeMismatch(
                f"mode self measures the Critic on the Actor's own provider, but this platform's "
                f"Actor is on {a} and its Critic on {c}. Start the platform with "
                f"CRITIC_PROVIDER={a} CROSSCHECK_ALLOW_SAME_PROVIDER=1 crosscheck up, "
                "or choose --mode cross"
            )
        if self.mode == "cross" and a == c:
            raise ModeMismatch(
                f"mode cross measures the Critic on another provider, but this platform's Actor "
                f"and Critic are both on {a}. Start the platform without "
                "CROSSCHECK_ALLOW_SAME_PROVIDER (CRITIC_PROVIDER on the other provider), "
                "or choose --mode self"
            )

    def _score(
        self, item: Item, output: str, evaluation: dict[str, Any] | None
    ) -> tuple[float, dict[str, Any]]:
        if item.kind == "code":
            if self.sandbox and item.tests:
                passed = bool(evaluation and evaluation.get("passed"))
                return float(passed), {"passed": passed, "scored_by": "run evaluator"}
            if self.scorer is None:
                raise CrosscheckError("--no-sandbox needs the sandbox URL to score the outputs")
            passed = self.scorer.passes(item, output)
            return float(passed), {"passed": passed, "scored_by": "sandbox after the run"}
        check = check_text(item, output)
        return float(check.passed), {
            "passed": check.passed,
            "missing": list(check.missing),
            "forbidden_present": list(check.present),
        }

    def _judged(self, item: Item, output: str) -> float | None:
        if self.judge is None or item.kind != "text":
            return None
        return self.judge.score(item, output)

    def _single(
        self,
        client: CrosscheckClient,
        item: Item,
        run: RunPublic,
        actor: dict[str, Any],
        critic: dict[str, Any],
    ) -> Outcome:
        first = next((r for r in run.rounds if r.number == 1), None)
        output = first.output if first else ""
        calls = [c for c in client.trajectory(run.id).calls if c.role == "actor" and c.round == 1]
        usages = [c.usage or {} for c in calls]
        score, detail = self._score(item, output, first.evaluation if first else None)
        return Outcome(
            id=item.id,
            mode=self.mode,
            profile=item.profile,
            run_id=run.id,
            status="draft" if first else run.status.value,
            stop_reason=None if first else (run.stop_reason and run.stop_reason.value),
            score=score,
            rounds=1 if first else 0,
            input_tokens=sum(int(u.get("input_tokens") or 0) for u in usages),
            output_tokens=sum(int(u.get("output_tokens") or 0) for u in usages),
            cost_usd=sum(float(u.get("cost_usd") or 0.0) for u in usages),
            latency_s=sum(c.latency_ms for c in calls) / 1000,
            escalated=False,
            seen_by_person=False,
            actor=actor,
            critic={},
            judge=self._judged(item, output),
            detail=detail,
            output=output,
        )

    def _loop(
        self, item: Item, run: RunPublic, actor: dict[str, Any], critic: dict[str, Any]
    ) -> Outcome:
        final = next((r for r in run.rounds if r.number == run.final_round), None)
        if final is None and run.rounds:
            final = run.rounds[-1]
        output = (
            run.final_output if run.final_output is not None else (final.output if final else "")
        )
        score, detail = self._score(item, output, final.evaluation if final else None)
        ended = run.finished_at or run.updated_at
        return Outcome(
            id=item.id,
            mode=self.mode,
            profile=item.profile,
            run_id=run.id,
            status=run.status.value,
            stop_reason=run.stop_reason.value if run.stop_reason else None,
            score=score,
            rounds=len({r.number for r in run.rounds}),
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            latency_s=max(0.0, (ended - run.created_at).total_seconds()),
            escalated=run.status is RunStatus.escalated,
            seen_by_person=run.status in SEEN_BY_A_PERSON
            or run.human_rounds > 0
            or any(r.review for r in run.rounds),
            actor=actor,
            critic=critic,
            judge=self._judged(item, output),
            detail=detail,
            output=output,
        )

    # -------------------------------------------------------------- the set

    def run(
        self, items: list[Item], on_done: Callable[[Outcome], None] | None = None
    ) -> list[Outcome]:
        """Every item, at most ``concurrency`` at a time; the first alone, so that a platform
        that does not fit the mode is refused after one run. Results keep the items' order."""
        if not items:
            return []
        results: dict[str, Outcome] = {}

        def one(item: Item) -> None:
            try:
                outcome = self.evaluate(item)
            except JudgeError as exc:
                raise CrosscheckError(str(exc)) from None
            results[item.id] = outcome
            if on_done is not None:
                on_done(outcome)

        try:
            one(items[0])
            with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
                futures: list[Future[None]] = [pool.submit(one, item) for item in items[1:]]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((f for f in done if f.exception() is not None), None)
                if failed is not None:
                    for future in futures:
                        future.cancel()
                    error = failed.exception()
                    assert error is not None
                    raise error
        finally:
            self._close_clients()
        return [results[item.id] for item in items]

    def _close_clients(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()
        self._local = threading.local()
