"""What each step returns, typed, and exactly what DBOS records of it.

DBOS records a finished step's return value and hands the record back when it recovers a
workflow, possibly one an older release started. So a step returns its outcome's
``record()``, a plain dict (no class path in the recording), and the workflow reads it back
with ``Outcome.of(record)``. A record made before outcomes were typed has no ``v`` and the
same keys, with fewer of them: every field has the default such a record implied.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, Self, TypeVar

from pydantic import BaseModel, ConfigDict

from orchestrator.engine.policy import Stop
from shared.orchestration import Policy

OUTCOME_VERSION = 2  # 1: the untyped dicts of before (no ``v`` key)


class StopInfo(BaseModel):
    """How a step ended its run (absent: the run goes on)."""

    model_config = ConfigDict(frozen=True)

    status: str
    reason: str | None = None

    @classmethod
    def of(cls, stop: Stop | None) -> StopInfo | None:
        return None if stop is None else cls(status=stop.status.value, reason=stop.reason.value)


class Recorded(BaseModel):
    """An outcome as DBOS records it: ``record()`` to store, ``of(record)`` to read back."""

    model_config = ConfigDict(extra="ignore")

    v: int = 1

    def record(self) -> dict[str, Any]:
        """What DBOS records: JSON types only, stamped with this release's version."""
        return {**self.model_dump(mode="json", exclude={"v"}), "v": OUTCOME_VERSION}

    @classmethod
    def of(cls, record: dict[str, Any]) -> Self:
        """A recorded outcome, of this release or an older one."""
        return cls.model_validate(record)


R = TypeVar("R", bound=Recorded)
P = ParamSpec("P")


def read_back(
    kind: type[R],
) -> Callable[[Callable[P, Awaitable[dict[str, Any]]]], Callable[P, Awaitable[R]]]:
    """The step ``step`` (which returns its record, as DBOS keeps it) with its record read
    back as a ``kind``: what the workflow calls."""

    def typed(step: Callable[P, Awaitable[dict[str, Any]]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(step)
        async def read(*args: P.args, **kwargs: P.kwargs) -> R:
            return kind.of(await step(*args, **kwargs))

        return read

    return typed


class StepOutcome(Recorded):
    stop: StopInfo | None = None

    @property
    def stopped(self) -> str | None:
        """The run's final status when this step ended it, else None."""
        return self.stop.status if self.stop is not None else None


class ActOutcome(StepOutcome):
    """A new version of the round (or the stop that came instead)."""

    output_hash: str = ""
    shrink: float = 0.0  # how much shorter than the previous version (0: not a revision)
    shrank: bool = False  # too much shorter: the workflow re-asks once
    policy: Policy | None = None  # the run's, as the step read it
    evaluator: str = "none"
    research: bool = False  # this round's critique gets a research step first
    run_tokens: int = 0
    run_cost: float = 0.0


class EvaluateOutcome(StepOutcome):
    passed: bool | None = None
    output_hash: str | None = None  # the version judged (the unlocked one when the lock gave)
    paused: bool = False  # waiting for a person before the critique
    regressed: bool = False  # fails where the previous version passed: the guard re-asks
    summary: str = ""  # the evaluation's summary, when it regressed
    kept: str | None = None  # the guard's choice after a second regression


class CritiqueOutcome(StepOutcome):
    signature: str | None = None  # the critique's, for the no-progress rule
    verdict: str | None = None
    paused: bool = False  # the Critic is unsure: a person decides before anyone revises
    reopened: list[str] = []  # closed issues this version reopened: the workflow re-asks
    retry: bool = False  # the Critic blamed the environment: ask it again after a backoff


class FinishOutcome(StepOutcome):
    pass


class ResumeState(Recorded):
    """What a resumed segment needs to apply the rules the first segment applied."""

    hashes: list[str] = []
    signature: str | None = None
    passed: bool | None = None
    research: bool = False
    reasked: bool = False  # the version critiqued next is a reopened-issue re-ask
    unevaluated: bool = False  # the version critiqued next (a person's edit) has no evaluation
