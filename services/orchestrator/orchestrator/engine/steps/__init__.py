"""Durable steps of the reflection loop, one module each: ``act``, ``evaluate``,
``critique`` and ``finish`` (with ``resume_state``). Each calls at most one kind of peer and
commits what it learned in one transaction; each returns a typed outcome (``outcomes``)
whose plain-dict record is what DBOS keeps. ``requests`` builds what they send, ``common``
holds retries, deadlines and billing."""

from orchestrator.engine.steps.act import act
from orchestrator.engine.steps.critique import critique
from orchestrator.engine.steps.evaluate import evaluate
from orchestrator.engine.steps.finish import finish, resume_state
from orchestrator.engine.steps.outcomes import (
    ActOutcome,
    CritiqueOutcome,
    EvaluateOutcome,
    FinishOutcome,
    ResumeState,
)

__all__ = [
    "ActOutcome",
    "CritiqueOutcome",
    "EvaluateOutcome",
    "FinishOutcome",
    "ResumeState",
    "act",
    "critique",
    "evaluate",
    "finish",
    "resume_state",
]
