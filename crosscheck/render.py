"""Terminal views of runs for the CLI: live progress, the outcome, and the full trajectory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from shared.contracts import TaskKind
from shared.orchestration import (
    EventPublic,
    RoundPublic,
    RunPublic,
    ShippedBy,
    Trajectory,
    TrajectoryCall,
    retry_summary,
)

# The model name of the scripted demo (shared.providers.defaults.DEMO_MODEL). Not imported:
# shared.providers loads both provider SDKs, which would add seconds to every command.
DEMO_MODEL = "scripted-demo"
STATUS_STYLE = {
    "succeeded": "bold green",
    "escalated": "bold yellow",
    "awaiting_review": "bold yellow",
    "failed": "bold red",
    "cancelled": "bold red",
}
SEVERITY_STYLE = {"critical": "bold red", "major": "red", "minor": "yellow"}
VERDICT_STYLE = {"pass": "green", "revise": "yellow", "escalate": "red"}
WAITING = {
    "drafting": "the Actor drafts",
    "evaluating": "evaluating",
    "critiquing": "the Critic reads",
    "revising": "the Actor revises",
}
# `show` clips long text unless --full
CLIP_LINES = 30
CLIP_CHARS = 2_500
INDENT = (0, 0, 0, 2)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, "bold"))


def is_demo(run: RunPublic) -> bool:
    """The scripted demo model stood in for a real provider in at least one role."""
    return any(
        isinstance(info, dict) and info.get("model") == DEMO_MODEL for info in run.models.values()
    )


def demo_note() -> Text:
    return Text(
        "DEMO: the scripted demo model answered, not a real LLM. Set the provider API keys "
        "and restart `crosscheck up` to use real models.",
        style="bold yellow",
    )


def models_text(run: RunPublic) -> str:
    parts = []
    for role in ("actor", "critic"):
        info = run.models.get(role) or {}
        if isinstance(info, dict) and info:
            parts.append(f"{role} {info.get('provider', '?')}/{info.get('model', '?')}")
    return ", ".join(parts) or "none called yet"


def money(value: float | None) -> str:
    if not value:
        return "$0"
    return f"${value:.4f}" if value >= 0.0001 else f"${value:.2e}"


def plural(n: int, word: str) -> str:
    """``1 issue``, ``3 issues``; ``3 uncertainties``, ``2 passes`` (the last word inflects)."""
    if n == 1:
        return f"{n} {word}"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{n} {word[:-1]}ies"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return f"{n} {word}es"
    return f"{n} {word}s"


def rollbacks(count: object) -> str:
    return plural(count, "rollback") if isinstance(count, int) else f"{count or '?'} rollback(s)"


def version_round(run: RunPublic) -> int | None:
    """The round that wrote the version the run ended on: the final round, or the earlier one
    whose version it kept (a revision that shrank twice is replaced by its predecessor)."""
    by_number = {r.number: r for r in run.rounds}
    number = run.final_round
    if number is None or number not in by_number:
        return number
    while number - 1 in by_number and (
        by_number[number - 1].output_hash == by_number[number].output_hash
    ):
        number -= 1
    return number


def final_round_text(run: RunPublic) -> str:
    """``round 2``, or ``round 1's version, kept in round 2``: never a round's number beside a
    detail that says another round's version was kept."""
    written = version_round(run)
    if written is None or written == run.final_round:
        return f"round {run.final_round}"
    return f"round {written}'s version, kept in round {run.final_round}"


def when(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


# ------------------------------------------------------------------ live progress


def _row(label: str, stage: str, *rest: str | Text) -> Text:
    line = Text(f"{label:<9} ", style="bold")
    line.append(f"{stage:<10} ", style="cyan")
    for part in rest:
        line.append(part)
    return line


def event_line(event: EventPublic) -> Text | None:
    """One line for an event worth showing while a run is followed, else None."""
    data = event.data
    label = f"round {data.get('round', '?')}"
    if event.type == "round.output":
        line = _row(label, str(data.get("stage", "output")), f"{data.get('chars', 0)} chars")
        if int(data.get("attempt", 1)) > 1:
            line.append(f"  (attempt {data['attempt']}: the previous one shrank)", style="dim")
        uncertainties = data.get("uncertainties") or []
        if uncertainties:
            line.append(f"  {plural(len(uncertainties), 'uncertainty')}", style="dim")
        return line
    if event.type == "round.evaluation":
        passed = bool(data.get("passed"))
        summary = str(data.get("summary") or "").strip().splitlines()
        line = _row(
            label,
            "evaluation",
            Text("passed" if passed else "failed", style="green" if passed else "red"),
        )
        if summary:
            line.append(f"  {summary[0][:120]}", style="dim")
        return line
    if event.type == "round.critique":
        verdict = str(data.get("verdict", "?"))
        line = _row(label, "critique", Text(f"{verdict:<7}", style=VERDICT_STYLE.get(verdict, "")))
        line.append(f" confidence {float(data.get('confidence', 0.0)):.2f}")
        line.append(f"  {plural(int(data.get('issues', 0)), 'issue')}")
        error_class = data.get("error_class")
        if error_class and error_class != "none":
            line.append(f"  ({error_class})", style="dim")
        return line
    if event.type == "review.created":
        kind = str(data.get("kind", "review"))
        return _row("review", kind, f"review item {data.get('review_id', '?')} opened")
    if event.type == "run.status" and data.get("status") == "awaiting_review":
        return _row(
            "review",
            "waiting",
            f"review item {data.get('review_id', '?')}: a person decides before the run goes on",
        )
    if event.type == "peer.retry":
        line = Text(f"{'retry':<9} ", style="bold")
        line.append(retry_summary(data), style="yellow")
        if data.get("reason"):
            line.append(f"  {str(data['reason'])[:120]}", style="dim")
        return line
    if event.type == "run.cancel_requested":
        return _row("run", "cancel", "cancellation requested")
    if event.type == "run.finished":
        status = str(data.get("status", "?"))
        line = Text(f"{'finished':<9} ", style="bold")
        line.append(status_text(status))
        if data.get("stop_reason"):
            line.append(f"  stop reason {data['stop_reason']}")
        if data.get("final_round"):
            line.append(f", ended in round {data['final_round']}")
        if data.get("detail"):
            line.append(f"  {data['detail']}", style="dim")
        return line
    return None


def waiting_text(event: EventPublic) -> str | None:
    """What the spinner says after a status change."""
    if event.type != "run.status":
        return None
    doing = WAITING.get(str(event.data.get("status")))
    if doing is None:
        return None
    return f"round {event.data.get('round', 1)}: {doing} ..."


class Progress:
    """Prints a line per event above a spinner that says what the run is doing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status = console.status("round 1: the Actor drafts ...")

    def __enter__(self) -> Self:
        self._status.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._status.__exit__(exc_type, exc, tb)

    def event(self, event: EventPublic) -> None:
        line = event_line(event)
        if line is not None:
            self.console.print(line)
        waiting = waiting_text(event)
        if waiting is not None:
            self._status.update(waiting)

    def notice(self, message: str) -> None:
        self.console.print(Text(message, style="dim"))


# ------------------------------------------------------------------ outcome of `run`


def output_renderable(text: str, kind: TaskKind, *, highlight: bool) -> RenderableType:
    """Code is syntax-highlighted on a terminal; piped, it stays plain so it copies intact."""
    if kind is TaskKind.code and highlight:
        return Syntax(text, "python", theme="ansi_dark", word_wrap=True, background_color="default")
    return Text(text)


def _facts(rows: Iterable[tuple[str, str | Text]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table


SHIPPED_BY = {
    ShippedBy.critic: "the Critic passed this version",
    ShippedBy.evaluator_critic: "its evaluator and the Critic passed this version",
    ShippedBy.person: "a person approved this version",
}


def _header_rows(run: RunPublic) -> list[tuple[str, str | Text]]:
    status = status_text(run.status.value)
    if run.stop_reason:
        status.append(f" ({run.stop_reason.value})", style="")
    rows: list[tuple[str, str | Text]] = [("status", status)]
    if run.shipped_by:
        rows.append(("shipped by", SHIPPED_BY[run.shipped_by]))
    if run.error_class and run.error_class != "none":
        rows.append(("error class", run.error_class))
    if run.detail:
        rows.append(("detail", run.detail))
    rounds = str(len(run.rounds))
    if run.final_round:
        rounds += f" (final: {final_round_text(run)})"
    rows += [
        ("rounds", rounds),
        ("tokens", f"{run.input_tokens:,} in / {run.output_tokens:,} out"),
        ("cost", money(run.cost_usd)),
        ("models", models_text(run)),
    ]
    return rows


def next_step(run: RunPublic) -> str | None:
    status = run.status.value
    if status == "escalated":
        return "A person decides next: the run waits in the review queue."
    if status == "awaiting_review":
        return "The run is paused until a person reviews it in the review queue."
    if status == "cancelled":
        return "The run was cancelled."
    return None


def render_outcome(console: Console, run: RunPublic) -> None:
    """Where a followed run ended, what it cost, and its final output."""
    console.print(Rule(Text.assemble("run ", run.id, ": ", status_text(run.status.value))))
    console.print(_facts(_header_rows(run)))
    if is_demo(run):
        console.print(demo_note())
    step = next_step(run)
    if step:
        console.print(Text(step, style="yellow"))
    output = run.final_output
    if output is None and run.rounds:
        output, title = run.rounds[-1].output, f"latest output (round {run.rounds[-1].number})"
    else:
        title = f"final output ({final_round_text(run)})"
    if output is None:
        console.print(Text("no output was produced", style="dim"))
    else:
        console.print(Rule(Text(title)))
        highlight = console.is_terminal
        console.print(
            output_renderable(output, run.kind, highlight=highlight), soft_wrap=not highlight
        )
        console.print(Rule())
    console.print(Text(f"Details: crosscheck show {run.id}", style="dim"))


# ------------------------------------------------------------------ `show`


def clip(text: str, full: bool) -> tuple[str, str | None]:
    """``text`` cut to a screenful, with a note saying what was left out."""
    if full:
        return text, None
    lines = text.splitlines()
    kept = "\n".join(lines[:CLIP_LINES])
    if len(kept) > CLIP_CHARS:
        kept = kept[:CLIP_CHARS]
    if kept == text or kept == text.rstrip("\n"):
        return text, None
    hidden_lines = max(0, len(lines) - len(kept.splitlines()))
    hidden = plural(hidden_lines, "more line") if hidden_lines else "more"
    return kept, f"... {hidden}, {len(text) - len(kept):,} more chars (--full shows everything)"


def _clipped(text: str, kind: TaskKind, full: bool, highlight: bool) -> RenderableType:
    kept, note = clip(text, full)
    body = output_renderable(kept, kind, highlight=highlight)
    return Group(body, Text(note, style="dim")) if note else body


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, INDENT)


def _critique(critique: dict[str, Any], full: bool) -> RenderableType:
    verdict = str(critique.get("verdict", "?"))
    head = Text("critique  ", style="bold")
    head.append(verdict, style=VERDICT_STYLE.get(verdict, ""))
    head.append(f"  confidence {float(critique.get('confidence', 0.0)):.2f}")
    if critique.get("error_class") and critique["error_class"] != "none":
        head.append(f"  error class {critique['error_class']}")
    parts: list[RenderableType] = [head]
    if critique.get("reflection"):
        kept, note = clip(str(critique["reflection"]), full)
        parts.append(_indent(Text(kept + (f"\n{note}" if note else ""), style="italic")))
    issues = critique.get("issues") or []
    if issues:
        table = Table(show_lines=True, expand=True, padding=(0, 1))
        table.add_column("severity", no_wrap=True)
        table.add_column("dimension", no_wrap=True)
        table.add_column("quote", ratio=1)
        table.add_column("suggestion", ratio=1)
        for issue in issues:
            severity = str(issue.get("severity", "?"))
            quote = issue.get("quote")
            table.add_row(
                Text(severity, style=SEVERITY_STYLE.get(severity, "")),
                str(issue.get("dimension", "")),
                Text(f"“{quote}”") if quote else Text("-", style="dim"),
                str(issue.get("suggestion", "")),
            )
        parts.append(_indent(table))
    return Group(*parts)


def _evaluation(evaluation: dict[str, Any], full: bool) -> RenderableType:
    passed = bool(evaluation.get("passed"))
    head = Text("evaluation  ", style="bold")
    head.append("passed" if passed else "failed", style="green" if passed else "red")
    summary = str(evaluation.get("summary") or "").strip()
    if not summary:
        return head
    kept, note = clip(summary, full)
    return Group(head, _indent(Text(kept + (f"\n{note}" if note else ""), style="dim")))


def _reflection(reflection: dict[str, Any], full: bool) -> RenderableType:
    source = str(reflection.get("source", "?"))
    head = Text("reflection  ", style="bold")
    head.append(source, style="magenta")
    if source == "human":
        head.append("  BINDING", style="bold red")
    if reflection.get("author"):
        head.append(f"  by {reflection['author']}", style="dim")
    kept, note = clip(str(reflection.get("content", "")), full)
    return Group(head, _indent(Text(kept + (f"\n{note}" if note else ""))))


def _calls(calls: list[TrajectoryCall]) -> Table:
    """One row per model call: who, which stage, which model, how long, how many tokens."""
    table = Table.grid(padding=(0, 2))
    for justify in ("left", "left", "left", "right", "right", "right"):
        table.add_column(justify=justify)
    for call in calls:
        usage = call.usage or {}
        tokens = (
            f"{int(usage.get('input_tokens', 0)):,} in / {int(usage.get('output_tokens', 0)):,} out"
        )
        failed = sum(1 for e in call.exchanges if e.get("error"))
        model = Text(f"{usage.get('provider', '?')}/{usage.get('model', '?')}")
        if failed:
            model.append(f" ({plural(failed, 'failed attempt')})", style="red")
        table.add_row(
            Text(call.role, style="cyan"),
            call.stage,
            model,
            f"{call.latency_ms:,.0f} ms",
            tokens,
            money(usage.get("cost_usd")),
        )
    return table


def _points(round_: RoundPublic) -> list[RenderableType]:
    """Each reviewer point this round answered: the Actor's answer (where it applied it, or
    why it declined) and the Critic's check of it (satisfied, with its quote)."""
    answers = [r for r in round_.responses if r.get("point")]
    checks = [c for c in (round_.critique or {}).get("binding_checks") or [] if isinstance(c, dict)]
    points = [str(a["point"]) for a in answers] or [str(c.get("point") or "") for c in checks]
    if not points:
        return []
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for n, point in enumerate(points, start=1):
        answer = _same_point(point, n - 1, answers)
        check = _same_point(point, n - 1, checks)
        said = Text(point, style="bold")
        if answer is None:
            said.append("\nActor: no answer", style="dim")
        else:
            action = str(answer.get("action") or "?")
            said.append(f"\nActor: {action}", style="green" if action == "applied" else "red")
            if answer.get("where"):
                said.append(f" at “{answer['where']}”")
            if action != "applied" and answer.get("reason"):
                said.append(f": {answer['reason']}")
        if check is None:
            said.append("\nCritic: not checked", style="dim")
        else:
            ok = bool(check.get("satisfied"))
            said.append("\nCritic: ")
            said.append("satisfied" if ok else "NOT satisfied", style="green" if ok else "red")
            if check.get("quote"):
                said.append(f" “{check['quote']}”")
        table.add_row(f"point {n}", said)
    return [Text("reviewer points", style="bold"), _indent(table)]


def _same_point(point: str, index: int, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry naming ``point`` (spaces and case aside), else the ``index``-th: the Actor
    and the Critic answer the points in the order given."""
    wanted = " ".join(point.split()).casefold()
    for entry in entries:
        if " ".join(str(entry.get("point") or "").split()).casefold() == wanted:
            return entry
    return entries[index] if index < len(entries) else None


def _discipline(round_: RoundPublic) -> list[RenderableType]:
    """What the loop did around this version: the Actor's answers, reverted hunks, the
    over-correction guard, best-of-N drafts, sections, research and the citation check."""
    parts: list[RenderableType] = []
    if round_.responses:
        answers = Counter(str(r.get("action", "?")) for r in round_.responses)
        line = Text("answers  ", style="bold")
        line.append(", ".join(f"{n} {action}" for action, n in sorted(answers.items())))
        parts.append(line)
        for r in round_.responses:
            if r.get("action") == "declined" and not r.get("point"):
                which = r.get("issue") or "?"
                parts.append(_indent(Text(f"declined {which}: {r.get('reason') or ''}")))
    parts += _points(round_)
    if round_.reverted_hunks:
        parts.append(
            Text(f"diff lock reverted {plural(len(round_.reverted_hunks), 'hunk')}", style="yellow")
        )
    if round_.over_correction:
        guard = round_.over_correction
        parts.append(
            Text(
                f"over-correction: {guard.get('reason', '?')}, "
                f"{rollbacks(guard.get('rollbacks'))}, kept {guard.get('kept', '?')}",
                style="yellow",
            )
        )
    if round_.drafts:
        chosen = next((d for d in round_.drafts if d.get("chosen")), None)
        index = chosen.get("index") if chosen else None
        kept = f", kept draft {index + 1}" if isinstance(index, int) else ""
        parts.append(Text(f"best of {len(round_.drafts)} drafts{kept}", style="dim"))
    if round_.sections:
        flagged = sum(1 for x in round_.sections if x.get("flagged"))
        parts.append(
            Text(f"{plural(len(round_.sections), 'section')}, {flagged} flagged", style="dim")
        )
    if round_.research:
        parts.append(_research(round_.research))
    if round_.citations:
        citations = round_.citations
        if citations.get("ok"):
            cited = ", ".join(f"[{n}]" for n in citations.get("cited", []))
            parts.append(Text(f"citations ok {cited}".rstrip(), style="green"))
        else:
            parts.append(Text("citations invalid", style="red"))
            problems = [str(p.get("message", "?")) for p in citations.get("problems", [])]
            parts.append(_indent(Text("\n".join(f"- {m}" for m in problems))))
    return parts


def _research(research: dict[str, Any]) -> RenderableType:
    evidence = research.get("evidence", [])
    failed = research.get("failed_queries", [])
    head = Text("research  ", style="bold")
    head.append(
        str(research.get("status", "?")), style="" if research.get("status") == "ok" else "yellow"
    )
    head.append(f"  {plural(len(evidence), 'source')}", style="dim")
    lines = [
        f"[{e.get('n', '?')}] {e.get('title') or ''} {e.get('url', '')}".strip() for e in evidence
    ]
    lines += [f"failed: {f.get('query', '?')} ({f.get('reason', '?')})" for f in failed]
    return Group(head, _indent(Text("\n".join(lines)))) if lines else head


def _round(
    run: RunPublic,
    number: int,
    round_: RoundPublic | None,
    reflections: list[dict[str, Any]],
    calls: list[TrajectoryCall],
    *,
    full: bool,
    highlight: bool,
) -> list[RenderableType]:
    title = f"round {number}"
    if number == run.final_round:
        title += " (final)"
    parts: list[RenderableType] = [Rule(Text(title), align="left")]
    if round_ is not None:
        stage = "draft" if number == 1 else "revision"
        head = Text(f"{stage}  ", style="bold")
        head.append(f"{len(round_.output):,} chars", style="dim")
        parts += [head, _indent(_clipped(round_.output, run.kind, full, highlight))]
        if round_.uncertainties:
            listed = Text("\n".join(f"- {u}" for u in round_.uncertainties))
            parts += [Text("uncertainties", style="bold"), _indent(listed)]
        for rolled in round_.rolled_back:
            parts.append(
                Text(
                    f"rolled back: attempt {rolled.get('attempt', '?')} "
                    f"({rolled.get('reason', '?')}, {len(str(rolled.get('output', ''))):,} chars)",
                    style="yellow",
                )
            )
        if round_.evaluation:
            parts.append(_evaluation(round_.evaluation, full))
        if round_.critique:
            parts.append(_critique(round_.critique, full))
        if round_.adoption is not None:
            parts.append(
                Text(f"adopted {round_.adoption:.0%} of the previous round's issues", style="dim")
            )
        parts += _discipline(round_)
        if round_.review:
            review = ", ".join(
                f"{k} {v}" for k, v in round_.review.items() if isinstance(v, str | int | float)
            )
            parts.append(Text.assemble(("review  ", "bold"), review or "recorded"))
    parts += [_reflection(r, full) for r in reflections]
    if calls:
        parts += [Text("model calls", style="bold"), _indent(_calls(calls))]
    return parts


def render_show(console: Console, run: RunPublic, trajectory: Trajectory, *, full: bool) -> None:
    """The run header, then every round: output, evaluation, critique, reflections, calls."""
    task, note = clip(run.task, full)
    rows: list[tuple[str, str | Text]] = [
        ("task", Text(task + (f"\n{note}" if note else ""))),
        ("kind", f"{run.kind.value}, evaluator {run.evaluator.value}"),
        *_header_rows(run),
        (
            "policy",
            f"max_rounds {run.policy.max_rounds}, review {run.policy.review.value}",
        ),
        ("created", when(run.created_at)),
    ]
    if run.finished_at:
        seconds = (run.finished_at - run.created_at).total_seconds()
        rows.append(("finished", f"{when(run.finished_at)} ({seconds:.1f} s)"))
    console.print(Rule(Text.assemble("run ", run.id), align="left"))
    console.print(_facts(rows))
    if is_demo(run):
        console.print(demo_note())
    rounds = {r.number: r for r in run.rounds}
    reflections: dict[int, list[dict[str, Any]]] = {}
    for reflection in run.reflections:
        reflections.setdefault(reflection.round, []).append(reflection.model_dump())
    calls: dict[int, list[TrajectoryCall]] = {}
    for call in trajectory.calls:
        calls.setdefault(call.round, []).append(call)
    numbers = sorted(set(rounds) | set(reflections) | set(calls))
    if not numbers:
        console.print(Text("no rounds yet", style="dim"))
    for number in numbers:
        for part in _round(
            run,
            number,
            rounds.get(number),
            reflections.get(number, []),
            calls.get(number, []),
            full=full,
            highlight=console.is_terminal,
        ):
            console.print(part)
