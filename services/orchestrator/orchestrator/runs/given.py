"""Runs whose first version the caller gave (``RunCreate.given_output``): no Actor draft.

Round 1 holds the caller's text with provenance ``given``, written with the run in one
transaction; the engine's given-run workflow (``engine/launch.py``) then evaluates it when
the run has an evaluator and puts it before a person, or, ``critic_first``, has the Critic
critique it and then puts it before a person whatever the Critic said. From the person's
decision on it is an ordinary run. The one gate out (``engine/records.through_gate``) ships
a given version only on a person's approval.
"""

from __future__ import annotations

from sqlmodel import Session

from orchestrator.auth.service import Principal
from orchestrator.engine.policy import output_hash
from orchestrator.readmodel import rounds
from orchestrator.readmodel.events import append_event
from orchestrator.tables import Run
from shared.orchestration import GIVEN_PROVENANCE, EvaluatorKind, RunCreate, RunStatus


def first_status(body: RunCreate) -> RunStatus:
    """What a given run does first: its evaluator, else the critique or the pause."""
    if body.evaluator not in (None, EvaluatorKind.none) or not body.critic_first:
        return RunStatus.evaluating  # the evaluate step also opens the review item
    return RunStatus.critiquing


def add_round(
    session: Session, principal: Principal, run: Run, text: str, critic_first: bool
) -> None:
    """Round 1 of ``run``: the caller's text, marked as theirs (never a model's or a
    reviewer's version). ``review`` records who gave it and what comes first."""
    digest = output_hash(text)
    review = {"given_by": principal.id, "author": principal.name, "critic_first": critic_first}
    rounds.add_round(session, run.id, 1, text, digest, provenance=GIVEN_PROVENANCE, review=review)
    append_event(
        session,
        run.id,
        "round.output",
        {
            "round": 1,
            "stage": "given",
            "provenance": GIVEN_PROVENANCE,
            "output_hash": digest,
            "chars": len(text),
        },
    )
