"""The latest evaluation as the Metrics page shows it: one row per mode, and self and cross
against single (one Actor call). Pure functions over the API's JSON, which is untrusted: a
missing or mistyped figure shows as a dash, never an exception."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from console.view import parse_time
from shared.evaluations import INTERCEPT_MODE

MODES = ("single", "self", "cross")
DASH = "—"
MAKE_ONE = "crosscheck eval text --mode cross"


def number(value: Any) -> float | None:
    """A finite number from the API, else None (text, booleans, NaN and missing values)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def share(value: Any) -> str:
    found = number(value)
    return DASH if found is None else f"{found:.1%}"


def usd(value: Any) -> str:
    found = number(value)
    return DASH if found is None else f"${found:.4f}"


def seconds(value: Any) -> str:
    found = number(value)
    return DASH if found is None else f"{found:.2f} s"


def plain(value: Any, digits: int = 1) -> str:
    found = number(value)
    if found is None:
        return DASH
    return str(int(found)) if found == int(found) and digits == 0 else f"{found:.{digits}f}"


def names(value: Any) -> str:
    if not isinstance(value, list):
        return DASH
    return ", ".join(str(v) for v in value) or DASH


def by_mode(evaluation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The known modes in the order single, self, cross (anything else is left out)."""
    found: dict[str, dict[str, Any]] = {}
    for mode in evaluation.get("modes") or []:
        if isinstance(mode, dict) and mode.get("mode") in MODES:
            found.setdefault(str(mode["mode"]), mode)
    return {m: found[m] for m in MODES if m in found}


def table(evaluation: dict[str, Any]) -> list[dict[str, str]]:
    """One row per mode: score, cost, latency, rounds, escalations, the share a person saw."""
    rows = []
    modes = by_mode(evaluation)
    judged = any(number(m.get("judge")) is not None for m in modes.values())
    for name, mode in modes.items():
        row = {
            "mode": name,
            "items": plain(mode.get("items"), 0),
            "score": share(mode.get("score")),
        }
        if judged:
            row["judge"] = share(mode.get("judge"))
        row |= {
            "cost": usd(mode.get("cost_usd")),
            "p50": seconds(mode.get("latency_p50_s")),
            "p95": seconds(mode.get("latency_p95_s")),
            "rounds": plain(mode.get("rounds")),
            "tokens/item": plain(mode.get("tokens"), 0),
            "escalations": plain(mode.get("escalations"), 0),
            "person saw": share(mode.get("seen_by_person")),
            "actor": names(mode.get("actor")),
            "critic": names(mode.get("critic")),
        }
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Delta:
    """One figure of a mode beside single's: the value, and the change as text (None: one
    of the two is unknown). ``worse_when_higher`` colours cost and latency."""

    label: str
    value: str
    delta: str | None
    worse_when_higher: bool


def _difference(mine: float | None, base: float | None) -> float | None:
    return None if mine is None or base is None else mine - base


def _signed(value: float, text: str) -> str:
    return ("+" if value >= 0 else "−") + text


def deltas(evaluation: dict[str, Any]) -> dict[str, list[Delta]]:
    """Self and cross against single: score in points, cost (and how many times single's),
    latency p50 in seconds, rounds. Empty when the evaluation has no single mode."""
    modes = by_mode(evaluation)
    base = modes.get("single")
    if base is None:
        return {}
    out: dict[str, list[Delta]] = {}
    for name in ("self", "cross"):
        mode = modes.get(name)
        if mode is None:
            continue
        score = _difference(number(mode.get("score")), number(base.get("score")))
        my_cost, base_cost = number(mode.get("cost_usd")), number(base.get("cost_usd"))
        cost = _difference(my_cost, base_cost)
        cost_text = None
        if cost is not None:
            cost_text = _signed(cost, f"${abs(cost):.4f}")
            if my_cost is not None and base_cost:
                cost_text += f" (×{my_cost / base_cost:.1f})"
        latency = _difference(number(mode.get("latency_p50_s")), number(base.get("latency_p50_s")))
        rounds = _difference(number(mode.get("rounds")), number(base.get("rounds")))
        out[name] = [
            Delta(
                f"{name}: score",
                share(mode.get("score")),
                None if score is None else _signed(score, f"{abs(score) * 100:.1f} pts"),
                False,
            ),
            Delta(f"{name}: cost", usd(my_cost), cost_text, True),
            Delta(
                f"{name}: latency p50",
                seconds(mode.get("latency_p50_s")),
                None if latency is None else _signed(latency, f"{abs(latency):.2f} s"),
                True,
            ),
            Delta(
                f"{name}: rounds",
                plain(mode.get("rounds")),
                None if rounds is None else _signed(rounds, f"{abs(rounds):.1f}"),
                True,
            ),
        ]
    return out


def when(value: Any) -> str:
    """``2026-11-30 10:12 UTC``, or the text as sent when it is not a time."""
    found = parse_time(value)
    return found.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if found else str(value or DASH)


def facts(evaluation: dict[str, Any]) -> list[tuple[str, str]]:
    """What was evaluated, and when: dataset, items, limit, seed, models, finished, commit,
    published by. Values are the API's text, to be shown as text."""
    modes = by_mode(evaluation)
    actors = sorted({str(a) for m in modes.values() for a in m.get("actor") or []})
    critics = sorted({str(c) for m in modes.values() for c in m.get("critic") or []})
    limit, seed = evaluation.get("limit"), evaluation.get("seed")
    commit = evaluation.get("commit")
    return [
        ("dataset", str(evaluation.get("dataset") or DASH)),
        ("items", plain(evaluation.get("items"), 0)),
        ("limit", DASH if limit is None else str(limit)),
        ("seed", DASH if seed is None else str(seed)),
        ("Actor", ", ".join(actors) or DASH),
        ("Critic", ", ".join(critics) or DASH),
        ("finished", when(evaluation.get("finished_at"))),
        ("commit", str(commit)[:12] if commit else "unknown"),
        ("published by", str(evaluation.get("published_by") or DASH)),
    ]


@dataclass(frozen=True)
class InterceptPoint:
    """One published intercept rate: when its evaluation finished, the rate, and what it
    was measured on."""

    finished: datetime
    rate: float
    items: int | None
    intercepted: int | None
    critic: str
    published_by: str


def _count(value: Any) -> int | None:
    found = number(value)
    return int(found) if found is not None and found >= 0 and found == int(found) else None


def intercept_points(evaluations: Any) -> list[InterceptPoint]:
    """The published intercept rates, oldest first. An entry without a readable time or a
    rate between 0 and 1 in its critic mode is left out (the API's JSON is untrusted)."""
    points = []
    for evaluation in evaluations if isinstance(evaluations, list) else []:
        if not isinstance(evaluation, dict):
            continue
        modes = evaluation.get("modes")
        if not isinstance(modes, list):
            continue
        mode = next(
            (m for m in modes if isinstance(m, dict) and m.get("mode") == INTERCEPT_MODE), None
        )
        finished = parse_time(evaluation.get("finished_at"))
        rate = number(mode.get("score")) if mode else None
        if mode is None or finished is None or rate is None or not 0.0 <= rate <= 1.0:
            continue
        points.append(
            InterceptPoint(
                finished=finished,
                rate=rate,
                items=_count(mode.get("items")),
                intercepted=_count(mode.get("passed")),
                critic=names(mode.get("critic")),
                published_by=str(evaluation.get("published_by") or DASH),
            )
        )
    return sorted(points, key=lambda p: p.finished)
