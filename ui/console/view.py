"""Pure helpers the pages share: time formatting, diffs, highlighting (no Streamlit, no I/O)."""

from __future__ import annotations

import difflib
import html
from datetime import UTC, datetime
from typing import Any

SEVERITY_ICON = {"critical": "🔴", "high": "🔴", "major": "🟠", "medium": "🟠", "minor": "🟡"}


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def seconds_left(value: Any, now: datetime | None = None) -> float | None:
    when = parse_time(value)
    if when is None:
        return None
    return (when - (now or datetime.now(UTC))).total_seconds()


def human_span(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    if s >= 86400:
        return f"{sign}{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{sign}{s // 3600}h {s % 3600 // 60}m"
    return f"{sign}{s // 60}m {s % 60:02d}s"


def claimer(item: dict[str, Any]) -> str:
    """Who holds the claim, by name when the API knows it."""
    return str(item.get("claimed_by_name") or item.get("claimed_by") or "—")


EXPIRY_LABEL = {"continue": "then the AI critic", "escalate": "then escalate"}


def deadline_label(value: Any, now: datetime | None = None, on_expiry: str | None = None) -> str:
    """``in 4m 10s, then escalate``: when the deadline falls and what happens then."""
    left = seconds_left(value, now)
    if left is None:
        return "—"
    then = f", {EXPIRY_LABEL.get(on_expiry, on_expiry)}" if on_expiry else ""
    if left < 0:
        return f"⛔ overdue {human_span(-left)}{then}"
    badge = "⚠️ " if left < 600 else ""
    return f"{badge}in {human_span(left)}{then}"


def unified_diff(previous: str | None, current: str) -> str:
    lines = difflib.unified_diff(
        (previous or "").splitlines(),
        current.splitlines(),
        fromfile="previous round",
        tofile="this round",
        lineterm="",
    )
    return "\n".join(lines)


SIDE_BY_SIDE_CSS = """<style>
table.diff { font-family: monospace; font-size: 0.85em; border-collapse: collapse; width: 100%; }
table.diff td { vertical-align: top; white-space: pre-wrap; word-break: break-word; }
table.diff th { font-weight: normal; color: #888; }
.diff_header { color: #888; padding: 0 .4em; text-align: right; }
td.diff_next { display: none; }
.diff_add { background: #d4f8d4; }
.diff_chg { background: #fff3b0; }
.diff_sub { background: #ffd6d6; }
</style>"""


def side_by_side(previous: str | None, current: str) -> str:
    """The previous round and this one in two columns, changed lines marked (escaped HTML)."""
    table = difflib.HtmlDiff(tabsize=4, wrapcolumn=70).make_table(
        (previous or "").splitlines(),
        current.splitlines(),
        fromdesc="previous round",
        todesc="this round",
    )
    return SIDE_BY_SIDE_CSS + table


def highlight(text: str, quotes: list[str]) -> str:
    """``text`` as escaped HTML in a <pre>, each quoted span wrapped in <mark>."""
    spans: list[tuple[int, int]] = []
    for quote in quotes:
        if not quote:
            continue
        start = text.find(quote)
        while start != -1:
            spans.append((start, start + len(quote)))
            start = text.find(quote, start + len(quote))
    spans.sort()
    out, pos = [], 0
    for start, end in spans:
        if start < pos:  # overlapping quotes: keep the first
            continue
        out.append(html.escape(text[pos:start]))
        out.append(f"<mark>{html.escape(text[start:end])}</mark>")
        pos = end
    out.append(html.escape(text[pos:]))
    return '<pre style="white-space: pre-wrap">' + "".join(out) + "</pre>"


def latest_confidence(critiques: list[dict[str, Any]]) -> float | None:
    for critique in reversed(critiques or []):
        if critique.get("confidence") is not None:
            return float(critique["confidence"])
    return None
