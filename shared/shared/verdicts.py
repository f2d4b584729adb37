"""When a critique's ``pass`` is a pass: the rule the Critic and the orchestrator both apply.

A ``pass`` says the version can ship as it is, so it cannot list a major or critical issue,
nor an issue on a dimension outside the profile it was judged under (the model judged
something else than it was asked to), and it must be at least as confident as the caller
asked for. The Critic re-asks its model once with these problems and then turns such a
``pass`` into ``revise``; the orchestrator checks the critique it receives again, so neither
layer trusts the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BLOCKING_SEVERITIES = frozenset({"major", "critical"})


def pass_refusals(
    critique: Mapping[str, Any],
    *,
    dimensions: Sequence[str] = (),
    min_confidence: float | None = None,
) -> list[str]:
    """Why the critique's ``pass`` is no pass (empty when it is one, or says no ``pass``).
    ``dimensions``: the profile's (empty: not checked)."""
    if critique.get("verdict") != "pass":
        return []
    reasons: list[str] = []
    allowed = set(dimensions)
    for n, issue in enumerate(critique.get("issues") or [], start=1):
        severity = str(issue.get("severity") or "")
        dimension = str(issue.get("dimension") or "")
        if severity in BLOCKING_SEVERITIES:
            reasons.append(
                f"issue {n} is {severity} ({dimension or 'no dimension'}): a pass lists no "
                "major or critical issue"
            )
        if allowed and dimension not in allowed:
            reasons.append(
                f"issue {n} is on {dimension!r}, which is not a dimension of the profile "
                f"({', '.join(dimensions)})"
            )
    confidence = critique.get("confidence")
    if (
        min_confidence is not None
        and isinstance(confidence, int | float)
        and confidence < min_confidence
    ):
        reasons.append(
            f"confidence {confidence:.2f} is under the {min_confidence:.2f} a pass needs"
        )
    return reasons


def refused(critique: dict[str, Any], reasons: Sequence[str]) -> dict[str, Any]:
    """The critique with its ``pass`` turned into ``revise``, saying why in ``refused_pass``."""
    if not reasons:
        return critique
    kept = list(critique.get("refused_pass") or [])
    return {
        **critique,
        "verdict": "revise",
        "error_class": "logic"
        if critique.get("error_class") in (None, "none")
        else critique["error_class"],
        "refused_pass": kept + [r for r in reasons if r not in kept],
    }
