"""One gate out: whatever rule stops the loop, the version that ships is the version that
was checked.

A run ends ``succeeded`` only with a version that passed its evaluator (when the run has one)
and got a Critic ``pass`` on that very version with every binding point satisfied, or that a
person approved (or wrote, in an edit). Stop rules decide when to stop revising, never whether
to check. The steps apply this as they go; :func:`check` applies it once more where every run
ends (``records.finalize``), so that no path to ``succeeded``, present or future, can skip it:
a version the gate refuses escalates to a person instead.

The evaluation and the critique of a round record the hash of the output they judged
(``output_hash``), so a round whose output changed after its check (a rollback, a re-ask)
is not taken for checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.orchestration import Policy, ReviewMode, ShippedBy, StopReason
from shared.verdicts import pass_refusals

# Stops that hand a person's own decision to the gate: they approved (or wrote) that version.
PERSON_STOPS = frozenset({StopReason.review_approved})


def min_pass_confidence(policy: Policy) -> float | None:
    """The confidence a Critic ``pass`` needs: the run's low-confidence threshold, unless a
    person is asked about low-confidence critiques (``on_low_confidence``), who then decides."""
    if policy.review is ReviewMode.on_low_confidence:
        return None
    return policy.review_confidence_threshold


@dataclass(frozen=True)
class Verdict:
    shipped_by: ShippedBy | None
    why_not: str = ""


def check(
    *,
    reason: StopReason,
    output_hash: str,
    evaluator: str,
    evaluation: dict[str, Any] | None,
    critique: dict[str, Any] | None,
    citations: dict[str, Any] | None,
    unsourced: list[dict[str, Any]] | None,
    binding_points: list[str] | None,
    policy: Policy,
) -> Verdict:
    """Which gate lets this version out, or why none does."""
    if reason in PERSON_STOPS:
        return Verdict(ShippedBy.person)
    if critique is None:
        return Verdict(None, "it has no critique")
    if critique.get("output_hash") != output_hash:
        return Verdict(None, "its critique judged another version")
    if critique.get("verdict") != "pass":
        return Verdict(None, f"the Critic said {critique.get('verdict')!r}, not pass")
    refusals = pass_refusals(
        critique,
        dimensions=critique.get("dimensions") or (),
        min_confidence=min_pass_confidence(policy),
    )
    if refusals:
        return Verdict(None, "its pass is no pass: " + "; ".join(refusals))
    unmet = [c.get("point") for c in critique.get("binding_checks") or [] if not c.get("satisfied")]
    if binding_points or unmet:
        return Verdict(None, "a reviewer's binding point is not satisfied")
    if citations is not None and not citations.get("ok", True):
        return Verdict(None, "its citations do not match the evidence")
    if unsourced:
        return Verdict(None, "it keeps a claim flagged as a hallucination without a source")
    if evaluator == "none":
        return Verdict(ShippedBy.critic)
    if evaluation is None or evaluation.get("output_hash") != output_hash:
        return Verdict(None, f"its {evaluator} evaluation did not run on this version")
    if not evaluation.get("passed"):
        return Verdict(None, f"it failed its {evaluator} evaluation")
    return Verdict(ShippedBy.evaluator_critic)
