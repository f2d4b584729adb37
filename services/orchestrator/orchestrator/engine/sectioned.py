"""Long outputs, section by section: the Critic judges each section of a version longer
than ``policy.section_chars``, and the next revision rewrites only the flagged ones.

The sections come from :mod:`orchestrator.engine.sections`. Section calls run concurrently
(at most ``CONCURRENCY`` at a time), each with its own idempotency key
(``{run}:{round}:critic:s{k}``, ``{run}:{round}:actor:s{k}``). The section critiques merge
into one critique (its issues tagged with their ``section``); the revised sections replace
their originals and every other section stays byte-identical.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.engine import sections as split_sections
from orchestrator.engine.discipline import issue_id
from orchestrator.engine.sections import Section
from shared.citations import split_references
from shared.contracts import (
    MAX_REFLECTION_CHARS,
    MAX_TASK_CHARS,
    ActorResult,
    CritiqueRequest,
    CritiqueResult,
    Reflection,
    ReflectionSource,
    ReviseRequest,
    Usage,
)

CONCURRENCY = 4
_VERDICTS = ("pass", "revise", "escalate")
Retry = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


def parts_of(policy_chars: int, output: str, kind: str) -> list[Section] | None:
    """The sections to critique ``output`` in, or None: sectioning is off, the output is
    not above the threshold, or it has only one section."""
    if policy_chars <= 0 or len(output) <= policy_chars:
        return None
    parts = split_sections.split(output, kind)
    return parts if len(parts) > 1 else None


def _note(task: str, part: Section, total: int, role: str) -> str:
    what = (
        "judge this section only, not what the other sections cover"
        if role == "critic"
        else "revise this section only and return only its new text (keep its heading or "
        "signature); the other sections stay as they are"
    )
    return (
        f"This is section {part.index + 1} of {total} of a longer document "
        f"({part.title!r}): {what}."
    )


def _section_task(task: str, note: str) -> str:
    room = MAX_TASK_CHARS - len(note) - 2
    return f"{task[:room]}\n\n{note}"


async def _bounded(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


# ------------------------------------------------------------------------- critique


async def critique(
    parts: list[Section],
    template: CritiqueRequest,
    *,
    run_id: str,
    round: int,
    ask: Callable[[CritiqueRequest, str], Awaitable[CritiqueResult]],
    retry: Retry,
    suffix: str = "",
) -> list[tuple[str, CritiqueResult]]:
    """One critique per section, in section order, with its call key (``suffix``: the
    attempt's or retry's part of the key, as the whole-version critique has)."""

    def call(part: Section) -> Callable[[], Awaitable[tuple[str, CritiqueResult]]]:
        key = f"{run_id}:{round}:critic:s{part.index}{suffix}"
        note = _note(template.task, part, len(parts), "critic")
        request = template.model_copy(
            update={"output": part.text, "task": _section_task(template.task, note)}
        )

        async def run() -> tuple[str, CritiqueResult]:
            result: CritiqueResult = await retry("critic", lambda: ask(request, key))
            return key, result

        return run

    return await _bounded([call(p) for p in parts])


def flagged(result: CritiqueResult) -> bool:
    return result.verdict.value != "pass"


def merge(parts: list[Section], results: list[CritiqueResult]) -> dict[str, Any]:
    """One critique document from the section critiques (the shape of a whole one)."""
    docs = [r.model_dump(mode="json", exclude={"usage", "exchanges"}) for r in results]
    verdict = max((d["verdict"] for d in docs), key=_VERDICTS.index)
    pairs = list(zip(parts, docs, strict=True))
    issues = [{**i, "section": p.index} for p, d in pairs for i in d["issues"]]
    checks: dict[str, dict[str, Any]] = {}
    for d in docs:
        for check in d["binding_checks"]:
            seen = checks.get(check["point"])
            if seen is None or (check["satisfied"] and not seen["satisfied"]):
                checks[check["point"]] = check
    flagged_docs = [(p, d) for p, d in zip(parts, docs, strict=True) if d["verdict"] != "pass"]
    shown = flagged_docs or list(zip(parts, docs, strict=True))
    first = docs[0]
    return {
        **first,
        "verdict": verdict,
        "confidence": min(d["confidence"] for d in docs),
        "issues": issues,
        "binding_checks": list(checks.values()),
        "reflection": "\n".join(
            f"[section {p.index + 1}: {p.title}] {d['reflection']}" for p, d in shown
        ),
        "error_class": flagged_docs[0][1]["error_class"] if flagged_docs else "none",
        "no_error_found": not issues,
        "justification": "\n".join(d["justification"] for d in docs if d["justification"]),
        "degraded": any(d["degraded"] for d in docs),
        "degraded_reason": next((d["degraded_reason"] for d in docs if d["degraded"]), None),
        "rounds": max(d["rounds"] for d in docs),
        "knowledge_used": sorted({k for d in docs for k in d["knowledge_used"]}),
    }


def record(parts: list[Section], results: list[CritiqueResult]) -> list[dict[str, Any]]:
    """The round's ``sections``: what was critiqued and flagged (revised: not yet)."""
    return [
        {
            "index": p.index,
            "title": p.title,
            "chars": p.chars,
            "flagged": flagged(r),
            "revised": False,
        }
        for p, r in zip(parts, results, strict=True)
    ]


def total_usage(usages: list[Usage]) -> Usage:
    costs = [u.cost_usd for u in usages]
    return Usage(
        provider=usages[0].provider,
        model=usages[0].model,
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        cost_usd=None if all(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 8),
        latency_ms=max(u.latency_ms for u in usages),
        attempts=sum(u.attempts for u in usages),
    )


# --------------------------------------------------------------------------- revise


def plan(output: str, kind: str, recorded: list[dict[str, Any]] | None) -> list[Section] | None:
    """The previous version's sections when its critique was sectioned and flagged some:
    the same split it was critiqued in (else None: revise the whole version)."""
    if not recorded or not any(s["flagged"] for s in recorded):
        return None
    parts = split_sections.split(output, kind)
    if [(p.index, p.chars) for p in parts] != [(s["index"], s["chars"]) for s in recorded]:
        return None
    return parts


def _issue_line(issue: dict[str, Any]) -> str:
    line = f"- [{issue['severity']}] {issue['dimension']}: {issue['suggestion']}"
    return line + (f' (on: "{issue["quote"][:200]}")' if issue.get("quote") else "")


async def revise(
    parts: list[Section],
    recorded: list[dict[str, Any]],
    critique_doc: dict[str, Any],
    template: ReviseRequest,
    *,
    run_id: str,
    round: int,
    attempt: int,
    ask: Callable[[ReviseRequest, str], Awaitable[ActorResult]],
    retry: Retry,
) -> list[tuple[int, str, ActorResult]]:
    """Revise each flagged section alone: (section index, call key, result) in order."""
    binding = [r for r in template.reflections if r.source is ReflectionSource.human]
    others = [r for r in template.reflections if r.source is not ReflectionSource.human]
    rollback = [r for r in others if r.source is ReflectionSource.evaluator and attempt > 1][-1:]

    def call(part: Section) -> Callable[[], Awaitable[tuple[int, str, ActorResult]]]:
        suffix = "" if attempt == 1 else f":{attempt}"
        key = f"{run_id}:{round}:actor:s{part.index}{suffix}"
        issues = [i for i in critique_doc.get("issues", []) if i.get("section") == part.index]
        content = (
            f"{_note(template.task, part, len(parts), 'actor')}\nThe critic's issues in this "
            "section:\n" + ("\n".join(_issue_line(i) for i in issues) or "- (see the reflection)")
        )
        reflections = [
            *binding,
            *rollback,
            Reflection(source=ReflectionSource.critic, content=content[:MAX_REFLECTION_CHARS]),
        ][-50:]
        # the section's own critic issues, under the ids the whole critique gave them: the
        # Actor answers those, and the answers of all sections together cover every issue
        mine = {
            issue_id(n)
            for n, i in enumerate(critique_doc.get("issues", []))
            if i.get("section") == part.index
        }
        request = template.model_copy(
            update={
                "previous_output": part.text,
                "reflections": reflections,
                "issues": [i for i in template.issues if i.id in mine],
            }
        )

        async def run() -> tuple[int, str, ActorResult]:
            result: ActorResult = await retry("actor", lambda: ask(request, key))
            return part.index, key, result

        return run

    wanted = {s["index"] for s in recorded if s["flagged"]}
    return await _bounded([call(p) for p in parts if p.index in wanted])


def reassemble(parts: list[Section], revised: list[tuple[int, str, ActorResult]]) -> ActorResult:
    """The whole new version: revised sections in place, the rest byte-identical.

    A section revised with evidence ends with its own ``[n] URL`` list; left in place, that
    list would sit in the middle of the document, where it is no reference list at all. Such
    lists move to one list at the end, merged with the document's own (numbers are the
    run's, so they agree across sections)."""
    results = [r for _, _, r in revised]
    bodies: dict[int, str] = {}
    moved: dict[int, list[str]] = {}
    for index, _, result in revised:
        body, references, _ = split_references(result.output)
        if references and body.strip():
            bodies[index] = body.rstrip("\n") + "\n"
            for number, urls in references.items():
                bucket = moved.setdefault(number, [])
                bucket.extend(u for u in urls if u not in bucket)
        else:
            bodies[index] = result.output
    output = split_sections.replace(parts, bodies)
    if moved:
        output = _with_references(output, moved)
    return ActorResult(
        output=output,
        uncertainties=[u for r in results for u in r.uncertainties],
        responses=[p for r in results for p in r.responses],
        usage=total_usage([r.usage for r in results]),
    )


def _with_references(text: str, moved: dict[int, list[str]]) -> str:
    """``text`` ending with one reference list: its own trailing list (heading kept) merged
    with ``moved``, by number."""
    body, references, _ = split_references(text)
    tail = text[len(body) :] if text.startswith(body) else ""
    heading = next(
        (
            line.strip()
            for line in tail.splitlines()
            if line.strip() and not line.lstrip().startswith("[")
        ),
        None,
    )
    for number, urls in moved.items():
        bucket = references.setdefault(number, [])
        bucket.extend(u for u in urls if u not in bucket)
    # a number listed without a URL stays as it was, for the citation check to report
    lines = [f"[{n}] {url}".rstrip() for n in sorted(references) for url in references[n] or [""]]
    return body.rstrip("\n") + "\n\n" + "\n".join([*([heading] if heading else []), *lines]) + "\n"


def mark_revised(
    recorded: list[dict[str, Any]], revised: list[tuple[int, str, ActorResult]]
) -> list[dict[str, Any]]:
    done = {i for i, _, _ in revised}
    return [{**s, "revised": s["index"] in done} for s in recorded]
