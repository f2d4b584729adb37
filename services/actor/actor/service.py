"""The Actor's behaviour: draft and revise through whichever provider is configured."""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel, Field

from shared.contracts import (
    ActorResult,
    DraftRequest,
    PointAction,
    PointResponse,
    ReflectionSource,
    ReviseRequest,
    Stage,
    TaskKind,
)
from shared.prompting import PromptBook
from shared.providers import ModelCall, ModelProvider

SCHEMA_NAME = "actor_output"
_FENCE = re.compile(r"^\s*```[\w+-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


class PointAnswer(BaseModel):
    point: str = Field(description="The point answered, copied exactly.")
    action: PointAction = Field(description="`applied`, or `declined` with a reason.")
    reason: str = Field(description="Why it was declined, or how it was applied.")
    where: str = Field(description="Where in the output the change is (a quote or a place).")


class ActorOutput(BaseModel):
    """What the model must return (the wire ``ActorResult`` adds usage)."""

    output: str = Field(description="The answer itself; for code tasks, only source code.")
    uncertainties: list[str] = Field(description="What the answer is unsure about.")
    responses: list[PointAnswer] = Field(
        default_factory=list,
        description="One answer per reviewer point of a revision; empty for a first draft.",
    )


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def point_problems(points: list[str], value: ActorOutput) -> list[str]:
    """Every reviewer point must be answered, and answered ``applied``."""
    problems = []
    for point in points:
        answer = next((r for r in value.responses if _same(r.point, point)), None)
        if answer is None:
            problems.append(
                f"`responses` has no entry for the reviewer point {point!r}: add one that "
                "copies the point exactly, with action `applied` and `where` the change is"
            )
        elif answer.action is not PointAction.applied:
            problems.append(
                f"the reviewer point {point!r} was declined; a human reviewer's point cannot "
                "be declined: apply it in `output` and answer it with action `applied`"
            )
    return problems


def strip_fences(code: str) -> str:
    """Code tasks return code only: unwrap a single markdown fence a model may add."""
    match = _FENCE.match(code)
    return match.group("body") if match else code


def code_problems(value: ActorOutput) -> list[str]:
    try:
        ast.parse(strip_fences(value.output))
    except SyntaxError as exc:
        return [
            "`output` must be only Python source code with no prose around it; "
            f"it does not parse: {exc.msg} (line {exc.lineno})"
        ]
    return []


class ActorService:
    def __init__(
        self,
        provider: ModelProvider,
        *,
        draft_model: str,
        revise_model: str,
        draft_temperature: float,
        revise_temperature: float,
        max_tokens: int,
    ) -> None:
        self.provider = provider
        self.prompts = PromptBook("actor")
        self.draft_model = draft_model
        self.revise_model = revise_model
        self.draft_temperature = draft_temperature
        self.revise_temperature = revise_temperature
        self.max_tokens = max_tokens

    async def draft(self, request: DraftRequest) -> ActorResult:
        user = self.prompts.render(
            "draft.j2",
            task=request.task,
            kind=request.kind.value,
            entry_point=request.entry_point,
            lessons=request.lessons,
        )
        call = ModelCall(
            stage=Stage.draft,
            model=self.draft_model,
            temperature=self.draft_temperature,
            system=self._system(request.kind, request.entry_point),
            user=user,
            max_tokens=self.max_tokens,
        )
        return await self._ask(call, request.kind)

    async def revise(self, request: ReviseRequest) -> ActorResult:
        binding = [r for r in request.reflections if r.source is ReflectionSource.human]
        advisory = [r for r in request.reflections if r.source is not ReflectionSource.human]
        user = self.prompts.render(
            "revise.j2",
            task=request.task,
            kind=request.kind.value,
            entry_point=request.entry_point,
            previous_output=request.previous_output,
            binding=binding,
            advisory=advisory,
            lessons=request.lessons,
            points=request.binding_points,
        )
        call = ModelCall(
            stage=Stage.revise,
            model=self.revise_model,
            temperature=self.revise_temperature,
            system=self._system(request.kind, request.entry_point),
            user=user,
            max_tokens=self.max_tokens,
        )
        return await self._ask(call, request.kind, request.binding_points)

    def _system(self, kind: TaskKind, entry_point: str | None) -> str:
        # the same few texts on every call: rendered once per (kind, entry point)
        return self.prompts.render_constant("system.j2", kind=kind.value, entry_point=entry_point)

    async def _ask(
        self, call: ModelCall, kind: TaskKind, points: list[str] | None = None
    ) -> ActorResult:
        def check(value: ActorOutput) -> list[str]:
            problems = code_problems(value) if kind is TaskKind.code else []
            return problems + point_problems(points or [], value)

        reply = await self.provider.structured(call, ActorOutput, SCHEMA_NAME, check=check)
        output = reply.value.output
        if kind is TaskKind.code:
            output = strip_fences(output)
        return ActorResult(
            output=output,
            uncertainties=[u for u in reply.value.uncertainties if u.strip()],
            responses=[PointResponse(**r.model_dump()) for r in reply.value.responses],
            usage=reply.usage,
            exchanges=reply.exchanges,
        )
