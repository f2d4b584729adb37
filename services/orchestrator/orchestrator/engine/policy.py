"""Stop and break rules, as pure functions of what the steps reported.

The workflow calls these between steps; because they only read step results (which DBOS
records), a recovered workflow takes exactly the same decisions again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from rapidfuzz.distance import Indel

from shared.orchestration import Policy, ReviewMode, RunStatus, StopReason

MAX_UNMET_ATTEMPTS = 2  # revisions that may miss a reviewer's point before a person decides
ENVIRONMENT_RETRIES = 2  # critiques blaming the environment retried before the run escalates
_BLOCKING = ("major", "critical")


@dataclass(frozen=True)
class Stop:
    status: RunStatus
    reason: StopReason
    error_class: str = "logic"
    detail: str = ""


def output_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def change_ratio(previous: str, current: str) -> float:
    """Share of the text that changed (0 = identical, 1 = nothing in common): characters
    inserted or deleted over both lengths (1 - 2 LCS / total). Bit-parallel, so 20 KB takes
    about 10 ms here, where difflib's quadratic matcher took seconds."""
    if previous == current:
        return 0.0
    return round(float(Indel.normalized_distance(previous, current)), 6)


def shrink_ratio(previous: str, current: str) -> float:
    """How much shorter the current version is (0 when it did not shrink)."""
    if not previous:
        return 0.0
    return max(0.0, round(1.0 - len(current) / len(previous), 6))


def critique_signature(critique: dict[str, Any]) -> str:
    """Two critiques that say the same thing have the same signature."""
    issues = sorted(
        (
            i.get("dimension", ""),
            i.get("severity", ""),
            i.get("quote") or "",
            i.get("suggestion", ""),
        )
        for i in critique.get("issues", [])
    )
    body = {
        "verdict": critique.get("verdict"),
        "issues": issues,
        "reflection": critique.get("reflection", "").strip(),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def over_budget(policy: Policy, tokens: int, cost: float) -> Stop | None:
    if policy.max_tokens is not None and tokens > policy.max_tokens:
        return Stop(
            RunStatus.escalated,
            StopReason.budget_exceeded,
            detail=f"used {tokens} tokens, budget {policy.max_tokens}",
        )
    if policy.max_cost_usd is not None and cost > policy.max_cost_usd:
        return Stop(
            RunStatus.escalated,
            StopReason.budget_exceeded,
            detail=f"cost ${cost:.4f}, budget ${policy.max_cost_usd:.4f}",
        )
    return None


def after_output(
    policy: Policy,
    *,
    round: int,
    seen_hashes: list[str],
    out: dict[str, Any],
    points_open: bool = False,
) -> Stop | None:
    """Rules that look at a new version before anyone evaluates it. None of them ships it:
    a version is shipped only after its check (``after_critique``). While a reviewer's points
    are open the Critic's check of them decides, not whether the text repeats."""
    if points_open:
        return over_budget(policy, out["run_tokens"], out["run_cost"])
    if out["output_hash"] in seen_hashes:
        earlier = seen_hashes.index(out["output_hash"]) + 1
        return Stop(
            RunStatus.escalated,
            StopReason.duplicate_output,
            detail=f"round {round} repeated the output of round {earlier}: "
            "the reflection was ignored",
        )
    return over_budget(policy, out["run_tokens"], out["run_cost"])


def converged(policy: Policy, round: int, change_ratio: float | None) -> bool:
    """A revision that changed less than ``policy.convergence_threshold`` (0 = off): once its
    check passes it is the last one. ``change_ratio`` None: not an Actor's revision of the
    previous version (a draft, a person's edit, open reviewer points)."""
    return (
        round > 1
        and change_ratio is not None
        and policy.convergence_threshold > 0
        and change_ratio < policy.convergence_threshold
    )


def shrank(policy: Policy, out: dict[str, Any]) -> bool:
    return policy.shrink_threshold > 0 and out.get("shrink", 0.0) > policy.shrink_threshold


def needs_review_before_critique(policy: Policy, round: int) -> bool:
    return policy.review is ReviewMode.before_critique or (
        policy.review is ReviewMode.first_round and round == 1
    )


def degraded_pass(critique: dict[str, Any]) -> Stop | None:
    """A critique that fell back to L1 never passes a high-risk profile on its own: the run
    escalates and a person decides (approving it is one click)."""
    if not critique.get("degraded") or critique.get("risk") != "high":
        return None
    return Stop(
        RunStatus.escalated,
        StopReason.degraded_critique,
        error_class="environment",
        detail=f"the critic passed this version at L1 after its "
        f"{critique.get('requested_depth') or 'requested'} critique failed "
        f"({str(critique.get('degraded_reason') or 'no reason given')[:300]}); profile "
        f"{critique.get('profile')!r} is high-risk, so a person decides",
    )


def low_continue_value(
    policy: Policy, critique: dict[str, Any], evaluation_passed: bool | None
) -> Stop | None:
    """The Critic scores another round below ``policy.min_continue_value`` (0 = off) and
    raises no major or critical issue, and no evaluation failed: the loop stops revising.
    The Critic did not pass the version, so it cannot ship: a person decides."""
    value = critique.get("continue_value")
    if (
        policy.min_continue_value <= 0
        or value is None
        or critique["verdict"] != "revise"
        or evaluation_passed is False
        or any(i.get("severity") in _BLOCKING for i in critique.get("issues", []))
    ):
        return None
    if value >= policy.min_continue_value:
        return None
    return Stop(
        RunStatus.escalated,
        StopReason.converged,
        detail=f"the critic valued another round at {value}/10, under the run's "
        f"{policy.min_continue_value}/10, with no major or critical issue; it did not pass "
        "this version, so a person decides (approving it ships it)",
    )


def critic_blames_environment(critique: dict[str, Any]) -> bool:
    """A critique that does not pass and classes the fault as the environment's: no
    revision can fix it, so the critique is asked again instead."""
    return critique.get("error_class") == "environment" and critique.get("verdict") != "pass"


def environment_stop(round: int, attempts: int) -> Stop:
    return Stop(
        RunStatus.escalated,
        StopReason.environment,
        error_class="environment",
        detail=f"the critic blamed the environment {attempts} time(s) on round {round}; "
        "no revision can fix that, so a person decides",
    )


def passed(
    policy: Policy, round: int, evaluation_passed: bool | None, change_ratio: float | None
) -> Stop:
    """A checked version ends the run ``succeeded``; the reason says which rule ended it."""
    if policy.stop_on_evaluator_pass and evaluation_passed is True:
        return Stop(
            RunStatus.succeeded,
            StopReason.evaluator_pass,
            error_class="none",
            detail=f"round {round} passed its evaluator and the critic passed it",
        )
    if converged(policy, round, change_ratio):
        assert change_ratio is not None
        return Stop(
            RunStatus.succeeded,
            StopReason.converged,
            error_class="none",
            detail=f"round {round} changed {change_ratio:.1%} of the text, under the "
            f"{policy.convergence_threshold:.1%} threshold, and the critic passed it",
        )
    return Stop(RunStatus.succeeded, StopReason.critic_pass, error_class="none")


def after_critique(
    policy: Policy,
    *,
    round: int,
    critique: dict[str, Any],
    evaluation_passed: bool | None,
    previous_signature: str | None,
    human_rounds: int = 0,
    unmet_points: list[str] | None = None,
    unmet_attempts: int = 0,
    change_ratio: float | None = None,
) -> Stop | None:
    """Rules that read the critic's structured verdict (never its prose).

    Only here does a run succeed: with a Critic ``pass`` on this version and no failed
    evaluation. The stop rules that end revising (``converged``: the revision was too small
    to matter; ``evaluator_pass`` under ``stop_on_evaluator_pass``) name the reason of such a
    success; a version that fails its check goes on by the other rules.

    A reviewer's point the version misses holds back a pass and keeps the run revising,
    whatever ``max_rounds`` says (a person asked for those rounds), until the second
    revision that misses one: then a person must look again.
    """
    verdict = critique["verdict"]
    if unmet_points and unmet_attempts >= MAX_UNMET_ATTEMPTS:
        return Stop(
            RunStatus.escalated,
            StopReason.human_point_unmet,
            detail=f"{unmet_attempts} revisions missed the reviewer's point(s): "
            + "; ".join(unmet_points)[:1000],
        )
    if verdict == "escalate":
        return Stop(
            RunStatus.escalated,
            StopReason.critic_escalated,
            error_class=critique.get("error_class", "logic"),
            detail="the critic asked for a person to decide",
        )
    if unmet_points:
        return over_budget(policy, critique["run_tokens"], critique["run_cost"])
    if verdict == "pass" and evaluation_passed is not False:
        return degraded_pass(critique) or passed(policy, round, evaluation_passed, change_ratio)
    low_value = low_continue_value(policy, critique, evaluation_passed)
    if low_value is not None:
        return low_value
    if previous_signature is not None and critique["signature"] == previous_signature:
        return Stop(
            RunStatus.escalated,
            StopReason.repeated_critique,
            detail=f"round {round} got the same critique as round {round - 1}",
        )
    budget = over_budget(policy, critique["run_tokens"], critique["run_cost"])
    if budget:
        return budget
    if round - human_rounds >= policy.max_rounds:
        return Stop(
            RunStatus.escalated,
            StopReason.max_rounds,
            error_class=critique.get("error_class", "logic"),
            detail=f"no pass after {policy.max_rounds} round(s)",
        )
    return None
