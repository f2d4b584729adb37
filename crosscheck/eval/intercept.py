"""``crosscheck eval intercept`` as an evaluation like the others: a ``results.json`` under
``var/eval/`` (the record), whose summary ``publish.publish`` sends to the orchestrator as the
dataset ``intercept`` with one mode, ``critic``, scored by the intercept rate. The console's
Metrics page draws their history, and ``/metrics`` exposes the latest for the alert."""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosscheck.eval.report import RESULTS_JSON, commit, percentile
from shared.contracts import Usage
from shared.evaluations import INTERCEPT_DATASET, INTERCEPT_MODE

if TYPE_CHECKING:
    from critic.intercept import InterceptReport


def document(
    outcome: InterceptReport,
    usage: list[Usage],
    *,
    config: dict[str, Any],
    started: datetime,
    finished: datetime,
) -> dict[str, Any]:
    """The report with what made it: the Critic's models, tokens, cost and latency per item
    (``usage``, in the items' order), the options, when it ran and the commit."""
    latencies = [u.latency_ms / 1000 for u in usage]
    summary = {
        "mode": INTERCEPT_MODE,
        "items": outcome.items,
        "passed": outcome.intercepted,
        "score": outcome.rate if outcome.items else None,
        "tokens": sum(u.input_tokens + u.output_tokens for u in usage) / len(usage)
        if usage
        else None,
        "tokens_total": sum(u.input_tokens + u.output_tokens for u in usage),
        "cost_usd": sum(u.cost_usd or 0.0 for u in usage),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p95_s": percentile(latencies, 0.95),
        "critic": sorted({f"{u.provider}/{u.model}" for u in usage}),
    }
    profiles = {p.profile: p.model_dump(exclude={"profile"}) for p in outcome.profiles}
    return {
        "set": INTERCEPT_DATASET,
        "started": started.isoformat(timespec="seconds"),
        "date": finished.isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": {
            "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}",
            "cores": os.cpu_count(),
        },
        "config": {
            **config,
            "items": outcome.items,
            "target": outcome.target,
            "met": outcome.met,
            "by_profile": profiles,
        },
        "modes": {
            INTERCEPT_MODE: {
                "summary": summary,
                "items": [r.model_dump(mode="json") for r in outcome.results],
            }
        },
    }


def write(doc: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_JSON
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path
