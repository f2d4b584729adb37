"""Publishing an evaluation's summary to the orchestrator it ran against.

The files under ``var/eval/`` are the record of an evaluation; the orchestrator keeps its
summary (per-mode figures and the configuration, not the items) so the console's Metrics page,
which may run on another machine, shows the latest one. Publishing never loses a result: any
failure comes back as a message for a warning, and the files stay where they were written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from crosscheck.client import CrosscheckClient, CrosscheckError, Settings
from shared.evaluations import EvaluationCreate, EvaluationMode

_MODE_FIELDS = set(EvaluationMode.model_fields) - {"config"}
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
# Not published: where the harness reached the orchestrator (the orchestrator knows itself,
# and a URL may carry credentials), and each mode's source folder in a combined report (its
# ``combined_from`` names them already).
_PRIVATE = ("url", "source")


def _public_config(config: dict[str, Any] | None) -> dict[str, Any] | None:
    if config is None:
        return None
    return {k: v for k, v in config.items() if k not in _PRIVATE}


def _agreed(doc: dict[str, Any], key: str) -> Any:
    """A setting of the whole evaluation: its own, else the one every mode agrees on (a
    combined report keeps each mode's configuration)."""
    config = doc.get("config") or {}
    if config.get(key) is not None:
        return config[key]
    values = [
        body["config"].get(key)
        for body in doc["modes"].values()
        if isinstance(body.get("config"), dict)
    ]
    return values[0] if values and all(v == values[0] for v in values) else None


def summary(doc: dict[str, Any]) -> EvaluationCreate:
    """The summary of a ``results.json`` document; ``ValidationError`` when it does not fit."""
    modes = []
    for mode, body in doc["modes"].items():
        figures = {k: v for k, v in body["summary"].items() if k in _MODE_FIELDS}
        modes.append({**figures, "mode": mode, "config": _public_config(body.get("config"))})
    items = _agreed(doc, "items")
    if items is None:
        items = max(
            (body["summary"].get("items") or 0 for body in doc["modes"].values()), default=0
        )
    commit = doc.get("commit")
    config = _public_config(doc.get("config")) or {}
    if doc.get("machine"):
        config = {**config, "machine": doc["machine"]}
    return EvaluationCreate.model_validate(
        {
            "dataset": doc["set"],
            "items": items,
            "limit": _agreed(doc, "limit"),
            "seed": _agreed(doc, "seed"),
            "modes": modes,
            "config": config,
            "commit": commit if isinstance(commit, str) and _COMMIT.match(commit) else None,
            "started_at": doc.get("started"),
            "finished_at": doc.get("finished") or doc["date"],
        }
    )


@dataclass(frozen=True)
class Published:
    id: str | None  # None: not published
    message: str


def publish(settings: Settings, doc: dict[str, Any]) -> Published:
    """Send the summary; a refusal or an unreachable orchestrator is a message, not an error."""
    try:
        body = summary(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return Published(None, f"the summary does not fit the API ({where}: {first['msg']})")
    try:
        with CrosscheckClient(settings, timeout=15.0) as client:
            kept = client.publish_evaluation(body)
    except CrosscheckError as exc:
        return Published(None, str(exc))
    return Published(kept.id, f"published to {settings.url} as {kept.id}")
