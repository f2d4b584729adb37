"""Results of an evaluation: per-mode figures, then JSON, a Markdown table and a PNG plot.

Columns (the README explains them too):

* ``score``: mean item score (HumanEval: pass@1, the share of problems whose output passes
  the problem's own ``check``; text: the share of items that contain every required fact
  and none of the forbidden claims);
* ``judge``: the rubric judge's mean (0..1), when a judge was configured;
* ``rounds``: mean rounds per item (``single``: 1);
* ``tokens``: mean input + output tokens per item; ``cost``: total USD over the items
  (models without a price entry count 0);
* ``p50``/``p95``: latency per item in seconds (``single``: the Actor call; loops: from the
  run's creation to its end);
* ``escalations``: runs that ended escalated; ``person``: the share of items whose output a
  person had to see (the run escalated, failed or paused for a review).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crosscheck.eval.harness import MODES, Outcome

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
PLOT_PNG = "score_vs_cost.png"


def percentile(values: list[float], share: float) -> float | None:
    """Linear interpolation between the closest ranks (``None`` for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(mode: str, outcomes: list[Outcome]) -> dict[str, Any]:
    n = len(outcomes)
    judged = [o.judge for o in outcomes if o.judge is not None]
    latencies = [o.latency_s for o in outcomes]
    passed = sum(1 for o in outcomes if o.score >= 1.0)
    return {
        "mode": mode,
        "items": n,
        "passed": passed,
        "score": sum(o.score for o in outcomes) / n if n else None,
        "judge": sum(judged) / len(judged) if judged else None,
        "rounds": sum(o.rounds for o in outcomes) / n if n else None,
        "tokens": sum(o.tokens for o in outcomes) / n if n else None,
        "tokens_total": sum(o.tokens for o in outcomes),
        "cost_usd": sum(o.cost_usd for o in outcomes),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p95_s": percentile(latencies, 0.95),
        "escalations": None if mode == "single" else sum(o.escalated for o in outcomes),
        "seen_by_person": None
        if mode == "single"
        else sum(o.seen_by_person for o in outcomes) / n
        if n
        else None,
        "actor": sorted(
            {f"{o.actor.get('provider')}/{o.actor.get('model')}" for o in outcomes if o.actor}
        ),
        "critic": sorted(
            {f"{o.critic.get('provider')}/{o.critic.get('model')}" for o in outcomes if o.critic}
        ),
    }


def commit() -> str | None:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def document(
    set_name: str,
    config: dict[str, Any],
    results: dict[str, list[Outcome]],
    *,
    started: datetime | None = None,
) -> dict[str, Any]:
    """Everything about one evaluation, with the configuration that made it; ``date`` is
    when it finished, ``started`` when its first run was sent."""
    return {
        "set": set_name,
        "started": started.isoformat(timespec="seconds") if started else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": {
            "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}",
            "cores": os.cpu_count(),
        },
        "config": config,
        "modes": {
            mode: {"summary": summarise(mode, outcomes), "items": [o.as_dict() for o in outcomes]}
            for mode, outcomes in results.items()
        },
    }


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "-"
    if kind == "share":
        return f"{value:.1%}"
    if kind == "usd":
        return f"${value:.4f}"
    if kind == "s":
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


COLUMNS = (
    ("mode", "mode", ""),
    ("items", "items", ""),
    ("score", "score", "share"),
    ("judge", "judge", "share"),
    ("rounds", "rounds", ""),
    ("tokens/item", "tokens", "int"),
    ("cost", "cost_usd", "usd"),
    ("p50 s", "latency_p50_s", "s"),
    ("p95 s", "latency_p95_s", "s"),
    ("escalations", "escalations", ""),
    ("person", "seen_by_person", "share"),
)


def rows(doc: dict[str, Any]) -> list[list[str]]:
    table = []
    for mode in _ordered(doc["modes"]):
        summary = doc["modes"][mode]["summary"]
        row = []
        for _, key, kind in COLUMNS:
            value = summary.get(key)
            row.append(
                str(round(value)) if kind == "int" and value is not None else _fmt(value, kind)
            )
        table.append(row)
    return table


def _ordered(modes: Iterable[str]) -> list[str]:
    known = [m for m in MODES if m in modes]
    return known + sorted(m for m in modes if m not in MODES)


def markdown(doc: dict[str, Any]) -> str:
    config = doc["config"]
    lines = [
        f"# crosscheck eval {doc['set']}",
        "",
        f"{doc['date']}, commit {doc.get('commit') or 'unknown'}; "
        + ", ".join(f"{k} {v}" for k, v in config.items() if k not in ("url",) and v is not None),
        "",
        "| " + " | ".join(title for title, _, _ in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(doc)]
    lines.append("")
    for mode in _ordered(doc["modes"]):
        summary = doc["modes"][mode]["summary"]
        actor = ", ".join(summary["actor"]) or "-"
        critic = ", ".join(summary["critic"]) or "-"
        lines.append(f"- {mode}: Actor {actor}; Critic {critic}")
    lines.append("")
    lines.append(f"Score against cost: ![score against cost]({PLOT_PNG})")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    """Score (y) against cost per item (x), one point per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        for mode in _ordered(doc["modes"]):
            summary = doc["modes"][mode]["summary"]
            items = summary["items"] or 1
            x, y = summary["cost_usd"] / items, summary["score"] or 0.0
            axes.scatter([x], [y], s=60)
            axes.annotate(mode, (x, y), textcoords="offset points", xytext=(6, 6))
        axes.set_xlabel("cost per item (USD)")
        axes.set_ylabel("score")
        axes.set_ylim(-0.05, 1.05)
        axes.set_title(f"crosscheck eval {doc['set']}: score against cost")
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)


def write(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / RESULTS_JSON, "markdown": out / RESULTS_MD, "plot": out / PLOT_PNG}
    paths["json"].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(doc), encoding="utf-8")
    plot(doc, paths["plot"])
    return paths


class ReportError(ValueError):
    """Result files that cannot be combined."""


def combine(paths: list[Path]) -> dict[str, Any]:
    """One document from several evaluations of the same set (e.g. ``self`` run against its
    own platform): the modes side by side, each with the configuration that made it."""
    docs = []
    for path in paths:
        source = path / RESULTS_JSON if path.is_dir() else path
        try:
            docs.append(json.loads(source.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ReportError(f"cannot read {source}: {exc}") from None
    sets = {d.get("set") for d in docs}
    if len(sets) != 1:
        raise ReportError(f"these results are of different sets: {', '.join(map(str, sets))}")
    combined: dict[str, Any] = {
        "set": docs[0]["set"],
        "started": min((d["started"] for d in docs if d.get("started")), default=None),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "finished": max((d["date"] for d in docs if d.get("date")), default=None),
        "commit": docs[-1].get("commit"),
        "machine": docs[-1].get("machine"),
        "config": {"combined_from": [str(p) for p in paths]},
        "modes": {},
    }
    for path, doc in zip(paths, docs, strict=True):
        for mode, body in doc["modes"].items():
            combined["modes"][mode] = {**body, "config": doc.get("config"), "source": str(path)}
    return combined
