"""A run's events in words, for the Runs page's event list (no Streamlit, no I/O).

Event data comes from the API and is read defensively: a missing or odd field shows as ``?``,
never as an error. The words go into a table cell, which renders no Markdown.
"""

from __future__ import annotations

from typing import Any

from shared.orchestration import int_or_none, retry_summary, retry_wait_words

PEER_RETRY = "peer.retry"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value else None  # NaN: unknown


# the words of a retry are the CLI's too (shared.orchestration)
peer_retry_words = retry_summary
wait_words = retry_wait_words


def _round(data: dict[str, Any]) -> str:
    number = int_or_none(data.get("round"))
    return f"round {number}: " if number is not None else ""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def event_words(event: dict[str, Any]) -> tuple[str, str]:
    """``(what happened, detail)`` for one event; an unknown type shows as its name."""
    kind = str(event.get("type") or "?")
    raw = event.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    at = _round(data)
    if kind == PEER_RETRY:
        return peer_retry_words(data), str(data.get("reason") or "")
    if kind == "run.created":
        return "run created", str(data.get("kind") or "")
    if kind == "run.status":
        return f"{at}status {data.get('status') or '?'}", str(data.get("stop_reason") or "")
    if kind == "run.finished":
        what = f"finished: {data.get('status') or '?'}"
        if data.get("stop_reason"):
            what += f", stop reason {data['stop_reason']}"
        return what, str(data.get("detail") or "")
    if kind == "run.cancel_requested":
        return "cancellation requested", ""
    if kind == "run.resumed":
        return f"{at}resumed at {data.get('stage') or '?'}", ""
    if kind == "round.output":
        chars = int_or_none(data.get("chars"))
        size = f" ({chars} chars)" if chars is not None else ""
        return f"{at}{data.get('stage') or 'output'}{size}", ""
    if kind == "round.evaluation":
        summary = str(data.get("summary") or "").strip().split("\n", 1)[0]
        return f"{at}evaluation {'passed' if data.get('passed') else 'failed'}", summary
    if kind == "round.critique":
        what = f"{at}critique {data.get('verdict') or '?'}"
        confidence = _number(data.get("confidence"))
        if confidence is not None:
            what += f", confidence {confidence:.2f}"
        issues = int_or_none(data.get("issues"))
        if issues is not None:
            what += f", {_plural(issues, 'issue')}"
        return what, str(data.get("error_class") or "")
    if kind == "round.critique_retried":
        attempt = int_or_none(data.get("attempt"))
        return f"{at}critique asked again (attempt {'?' if attempt is None else attempt})", ""
    if kind == "review.created":
        return f"{at}review item opened ({data.get('kind') or 'review'})", ""
    return f"{at}{kind}", ""


def retries(events: list[dict[str, Any]]) -> int:
    """How many times a peer call was retried."""
    return sum(1 for e in events if e.get("type") == PEER_RETRY)
