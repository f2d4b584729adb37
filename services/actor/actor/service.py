"""The Actor's behaviour: draft and revise through whichever provider is configured."""

from __future__ import annotations

import ast
import re
from collections.abc import Awaitable, Iterator
from dataclasses import replace
from typing import Annotated

from pydantic import BaseModel, Field

from shared.contracts import (
    MAX_ISSUES,
    MAX_LABEL_CHARS,
    MAX_OUTPUT_CHARS,
    MAX_POINT_CHARS,
    MAX_POINTS,
    MAX_SPAN_CHARS,
    MAX_UNCERTAINTIES,
    MAX_UNCERTAINTY_CHARS,
    ActorResult,
    DraftRequest,
    KnowledgeKind,
    KnowledgeNote,
    PointAction,
    PointResponse,
    ReflectionSource,
    ReviseRequest,
    RevisionIssue,
    Stage,
    TaskKind,
)
from shared.prompting import PromptBook
from shared.providers import ModelCall, ModelProvider
from shared.providers.base import StructuredReply
from shared.replay.journal import CallJournal, journalled, with_cut_off

SCHEMA_NAME = "actor_output"
MAX_SEARCH_QUERIES = 3
# What an Actor reply needs, in output tokens: a first draft by the task's kind; a revision
# its previous output (about 3 characters a token, JSON-escaped) and an answer per point and
# issue. A reply cut off by this cap is asked again once at twice it (within the ceiling).
DRAFT_TOKENS = {TaskKind.text: 2048, TaskKind.code: 2048}
ANSWER_TOKENS = 150
ENVELOPE_TOKENS = 300  # uncertainties, search queries, the JSON around them


def actor_cap(kind: TaskKind, ceiling: int, *, previous_output: str = "", answers: int = 0) -> int:
    """The output-token cap of one Actor call, at most ``ceiling``."""
    need = max(
        DRAFT_TOKENS.get(kind, 2048),
        len(previous_output) * 5 // 12 + ENVELOPE_TOKENS + ANSWER_TOKENS * answers,
    )
    return max(1, min(need, ceiling))


_FENCE = re.compile(r"^\s*```[\w+-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


class PointAnswer(BaseModel):
    point: str = Field(
        default="",
        max_length=MAX_POINT_CHARS,
        description="The reviewer point answered, copied exactly; empty for an issue.",
    )
    issue: str = Field(
        default="",
        max_length=MAX_LABEL_CHARS,
        description="The critic issue answered, by its id (`i1`); empty for a point.",
    )
    action: PointAction = Field(description="`applied`, or `declined` with a reason.")
    reason: str = Field(
        default="",
        max_length=MAX_SPAN_CHARS,
        description="Why it was declined, or how it was applied.",
    )
    where: str = Field(
        default="",
        max_length=MAX_SPAN_CHARS,
        description="Where in the output the change is (a quote or a place).",
    )
    source: str = Field(
        default="",
        max_length=MAX_SPAN_CHARS,
        description="For a hallucination issue whose claim stays: the source that supports it "
        '(`[n]`, `evidence:[n]` or its URL, `knowledge:<id>`, or `task: "<exact span>"`); '
        "else empty.",
    )


class ActorOutput(BaseModel):
    """What the model must return (the wire ``ActorResult`` adds usage)."""

    output: str = Field(
        max_length=MAX_OUTPUT_CHARS,
        description="The answer itself; for code tasks, only source code.",
    )
    uncertainties: Annotated[
        list[Annotated[str, Field(max_length=MAX_UNCERTAINTY_CHARS)]],
        Field(max_length=MAX_UNCERTAINTIES),
    ] = Field(description="What the answer is unsure about.")
    responses: Annotated[list[PointAnswer], Field(max_length=MAX_POINTS + MAX_ISSUES)] = Field(
        default_factory=list,
        description="One answer per reviewer point and per critic issue of a revision; empty "
        "for a first draft.",
    )
    search_queries: Annotated[
        list[Annotated[str, Field(max_length=MAX_LABEL_CHARS)]],
        Field(max_length=MAX_SEARCH_QUERIES + 2),
    ] = Field(
        default_factory=list,
        description="1-3 short web search queries (at most 8 words each) that would check the "
        "answer's factual claims; empty when it states nothing that needs checking.",
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


def lessons_first(notes: list[KnowledgeNote]) -> list[KnowledgeNote]:
    """Reviewers' lessons lead the guidance; the rest keep their rank."""
    return sorted(notes, key=lambda note: note.kind is not KnowledgeKind.lesson)


def issue_problems(issues: list[RevisionIssue], value: ActorOutput) -> list[str]:
    """Every critic issue must be answered by its id; a declined one needs a reason."""
    problems = []
    for issue in issues:
        answer = next((r for r in value.responses if r.issue.strip() == issue.id), None)
        if answer is None:
            problems.append(
                f"`responses` has no entry for the critic issue {issue.id}: add one with "
                f'`issue` "{issue.id}", `action` "applied" (and `where` the change is) or '
                '"declined" (and the `reason`)'
            )
        elif answer.action is PointAction.declined and not answer.reason.strip():
            problems.append(
                f"the critic issue {issue.id} was declined without a reason: say in `reason` "
                "why the output is right as it is, or apply it"
            )
    return problems


def strip_fences(code: str) -> str:
    """Code tasks return code only: unwrap a single markdown fence a model may add."""
    match = _FENCE.match(code)
    return match.group("body") if match else code


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, and those of its top-level ``if``/``try``/``with`` blocks
    (``try: from x import f`` / ``except ImportError: def f...`` binds ``f`` too)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With | ast.AsyncWith):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try | ast.TryStar):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)


def _bound(node: ast.stmt) -> set[str]:
    """The names a top-level statement binds in the module (``*``: a star import)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return {node.target.id} if isinstance(node.target, ast.Name) else set()
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names}
    return set()


def _inert(node: ast.stmt) -> bool:
    """A statement that does nothing when run: a bare name, attribute or literal (``output.json``,
    ``[0, 2, 3]``); a docstring is one too."""
    return isinstance(node, ast.Expr) and not any(
        isinstance(n, ast.Call | ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
        for n in ast.walk(node.value)
    )


def code_problems(value: ActorOutput, entry_point: str | None = None) -> list[str]:
    """Python source, not just anything ``ast.parse`` accepts: an empty reply, a file name or
    a list of numbers parse too. A module that defines ``entry_point`` when one is named,
    else one that does something (not only bare names and literals)."""
    source = strip_fences(value.output)
    if not source.strip():
        return ["`output` is empty: it must be the Python source code the task asks for"]
    try:
        module = ast.parse(source)
    except SyntaxError as exc:
        return [
            "`output` must be only Python source code with no prose around it; "
            f"it does not parse: {exc.msg} (line {exc.lineno})"
        ]
    if entry_point and entry_point.isidentifier():  # anything else is not a name to define
        names = set().union(*(_bound(node) for node in _top_level(module.body)))
        if entry_point not in names and "*" not in names:
            return [
                f"`output` does not define `{entry_point}`: it must be a Python module with a "
                f"top-level `def {entry_point}(...)` (or a class, assignment or import of that "
                "name), complete with its imports"
            ]
    elif all(_inert(node) for node in module.body):
        return [
            "`output` is not a program: it holds only bare names or literals; it must be the "
            "Python source code the task asks for (definitions and statements)"
        ]
    return []


def search_queries(queries: list[str]) -> list[str]:
    """The model's queries with white space tidied and blanks dropped, at most
    ``MAX_SEARCH_QUERIES``; the Research service's gate judges the rest (length, duplicates)."""
    tidy = [" ".join(q.split()) for q in queries]
    return [q for q in tidy if q][:MAX_SEARCH_QUERIES]


def _response(answer: PointAnswer) -> PointResponse:
    fields = answer.model_dump()
    fields["issue"] = fields["issue"].strip() or None
    return PointResponse(**fields)


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

    async def draft(self, request: DraftRequest, journal: CallJournal | None = None) -> ActorResult:
        """The first version. With a ``journal`` (a keyed request) the call is journalled, so
        a retry after this process died counts the prompt it had sent (``cut_off_calls``)."""
        user = self.prompts.render(
            "draft.j2",
            task=request.task,
            kind=request.kind.value,
            entry_point=request.entry_point,
            lessons=request.lessons,
            knowledge=lessons_first(request.knowledge),
        )
        call = ModelCall(
            stage=Stage.draft,
            model=self.draft_model,
            temperature=(
                self.draft_temperature if request.temperature is None else request.temperature
            ),
            system=self._system(request.kind, request.entry_point),
            user=user,
            max_tokens=actor_cap(request.kind, self.max_tokens),
            max_tokens_ceiling=self.max_tokens,
        )
        return await self._ask(call, request.kind, entry_point=request.entry_point, journal=journal)

    async def revise(
        self, request: ReviseRequest, journal: CallJournal | None = None
    ) -> ActorResult:
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
            knowledge=lessons_first(request.knowledge),
            points=request.binding_points,
            issues=request.issues,
            evidence=request.evidence,
            unverified=request.unverified,
        )
        call = ModelCall(
            stage=Stage.revise,
            model=self.revise_model,
            temperature=self.revise_temperature,
            system=self._system(request.kind, request.entry_point),
            user=user,
            max_tokens=actor_cap(
                request.kind,
                self.max_tokens,
                previous_output=request.previous_output,
                answers=len(request.binding_points) + len(request.issues),
            ),
            max_tokens_ceiling=self.max_tokens,
        )
        return await self._ask(
            call,
            request.kind,
            request.binding_points,
            request.issues,
            entry_point=request.entry_point,
            journal=journal,
        )

    def _system(self, kind: TaskKind, entry_point: str | None) -> str:
        # the same few texts on every call: rendered once per (kind, entry point)
        return self.prompts.render_constant("system.j2", kind=kind.value, entry_point=entry_point)

    async def _ask(
        self,
        call: ModelCall,
        kind: TaskKind,
        points: list[str] | None = None,
        issues: list[RevisionIssue] | None = None,
        *,
        entry_point: str | None = None,
        journal: CallJournal | None = None,
    ) -> ActorResult:
        def check(value: ActorOutput) -> list[str]:
            problems = code_problems(value, entry_point) if kind is TaskKind.code else []
            return (
                problems + point_problems(points or [], value) + issue_problems(issues or [], value)
            )

        def ask() -> Awaitable[StructuredReply[ActorOutput]]:
            return self.provider.structured(call, ActorOutput, SCHEMA_NAME, check=check)

        reply, cut_off = await journalled(journal, call, ActorOutput, ask)
        reply = replace(reply, usage=with_cut_off(reply.usage, cut_off))
        output = reply.value.output
        if kind is TaskKind.code:
            output = strip_fences(output)
        return ActorResult(
            output=output,
            uncertainties=[u for u in reply.value.uncertainties if u.strip()],
            responses=[_response(r) for r in reply.value.responses],
            search_queries=search_queries(reply.value.search_queries),
            usage=reply.usage,
            exchanges=reply.exchanges,
        )
