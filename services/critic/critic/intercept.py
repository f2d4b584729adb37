"""Critical-error intercept rate: a labelled set of outputs with one planted error each,
and the rule that says whether a critique caught it."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints

from critic.service import quote_found
from shared.contracts import CritiqueResult, Depth, ProfileName, TaskKind, TaskText, WireModel
from shared.datafiles import load_toml_model
from shared.evaluations import INTERCEPT_TARGET

TARGET = INTERCEPT_TARGET  # one constant: the command's default, the alert and the console


class InterceptItem(WireModel):
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    profile: ProfileName
    kind: TaskKind = TaskKind.text
    task: TaskText
    output: Annotated[str, StringConstraints(min_length=1)]
    error_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    span: Annotated[str, StringConstraints(min_length=1)] = Field(
        description="The planted error, an exact span of the output."
    )


class InterceptSet(WireModel):
    items: Annotated[list[InterceptItem], Field(min_length=1)]


class InterceptSetError(ValueError):
    """A labelled set that cannot be used; the message names the file and the item."""


class ItemResult(WireModel):
    id: str
    profile: str
    error_type: str
    intercepted: bool
    verdict: str
    depth: str
    degraded: bool
    found: list[str] = Field(description="The error types the Critic reported.")


class ProfileRate(WireModel):
    profile: str
    items: int
    intercepted: int
    rate: float


class InterceptReport(WireModel):
    items: int
    intercepted: int
    rate: float
    target: float
    met: bool
    profiles: list[ProfileRate]
    results: list[ItemResult]


def shipped_set() -> Path:
    return Path(str(files("critic") / "evalsets" / "intercept.toml"))


def load_set(path: Path) -> list[InterceptItem]:
    items = load_toml_model(path, InterceptSet, "labelled set", InterceptSetError).items
    for item in items:
        if item.span not in item.output:
            raise InterceptSetError(
                f"labelled set {path}: item {item.id!r}: `span` is not in `output`"
            )
    return items


def _overlaps(a: str, b: str) -> bool:
    return quote_found(a, b) or quote_found(b, a)


def judge(item: InterceptItem, critique: CritiqueResult) -> ItemResult:
    """Caught: the Critic did not pass the output, and an issue names the planted error type
    or quotes a span overlapping the planted one."""
    caught = critique.verdict.value != "pass" and any(
        issue.error_type == item.error_type
        or (issue.original_text is not None and _overlaps(issue.original_text, item.span))
        for issue in critique.issues
    )
    return ItemResult(
        id=item.id,
        profile=item.profile,
        error_type=item.error_type,
        intercepted=caught,
        verdict=critique.verdict.value,
        depth=critique.depth,
        degraded=critique.degraded,
        found=[issue.error_type for issue in critique.issues],
    )


def report(results: list[ItemResult], target: float = TARGET) -> InterceptReport:
    by_profile: dict[str, list[ItemResult]] = {}
    for result in results:
        by_profile.setdefault(result.profile, []).append(result)
    caught = sum(r.intercepted for r in results)
    rate = round(caught / len(results), 6) if results else 0.0
    return InterceptReport(
        items=len(results),
        intercepted=caught,
        rate=rate,
        target=target,
        met=rate >= target,
        profiles=[
            ProfileRate(
                profile=name,
                items=len(group),
                intercepted=sum(r.intercepted for r in group),
                rate=round(sum(r.intercepted for r in group) / len(group), 6),
            )
            for name, group in sorted(by_profile.items())
        ],
        results=results,
    )


def request_body(item: InterceptItem, depth: Depth | None) -> dict[str, object]:
    body: dict[str, object] = {
        "task": item.task,
        "kind": item.kind.value,
        "output": item.output,
        "profile": item.profile,
    }
    if depth is not None:
        body["depth"] = depth.value
    return body
