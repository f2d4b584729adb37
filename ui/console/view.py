"""Pure helpers the pages share: time formatting, diffs, highlighting (no Streamlit, no I/O)."""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


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


def side_by_side(
    previous: str | None,
    current: str,
    *,
    before: str = "previous round",
    after: str = "this round",
) -> str:
    """``previous`` and ``current`` in two columns, changed lines marked (escaped HTML)."""
    table = difflib.HtmlDiff(tabsize=4, wrapcolumn=70).make_table(
        (previous or "").splitlines(),
        current.splitlines(),
        fromdesc=html.escape(before),
        todesc=html.escape(after),
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


# the claim is a 5-minute lease: the Review page renews it while the reviewer is at it
RENEW_WITHIN_S = 120  # renew when less than this is left
ACTIVE_S = 30 * 60  # "at it": the page reran for them (a click, a key) this recently


def renew_due(expires_at: Any, active_at: float, now: float) -> bool:
    """Renew when the lease nears its end and the reviewer used the page lately."""
    left = seconds_left(expires_at)
    return left is not None and 0 < left < RENEW_WITHIN_S and now - active_at < ACTIVE_S


# ---------------------------------------------------------------- plain-words time
def _amount(seconds: float) -> str:
    s = int(abs(seconds))
    if s < 60:
        return "less than a minute"
    if s < 3600:
        m = round(s / 60)
        return f"{m} minute{'s' if m != 1 else ''}"
    if s < 86400:
        h, m = s // 3600, s % 3600 // 60
        return f"{h} hour{'s' if h != 1 else ''}" + (f" {m} min" if m else "")
    d = s // 86400
    return f"{d} day{'s' if d != 1 else ''}"


def time_left(value: Any, now: datetime | None = None) -> str:
    """``for 4 more minutes`` (or ``until now`` once it passed)."""
    left = seconds_left(value, now)
    if left is None:
        return "until further notice"
    if left <= 0:
        return "until now (the lease has lapsed)"
    if left < 60:
        return "for less than a minute more"
    if left < 3600:
        minutes = round(left / 60)
        return f"for {minutes} more minute{'s' if minutes != 1 else ''}"
    return f"for {_amount(left)} more"


def ago(value: Any, now: datetime | None = None) -> str:
    """``3 minutes ago`` / ``in 2 minutes``."""
    left = seconds_left(value, now)
    if left is None:
        return "at an unknown time"
    return f"in {_amount(left)}" if left > 0 else f"{_amount(left)} ago"


_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def friendly_detail(text: str, now: datetime | None = None) -> str:
    """An API message with its ISO timestamps said in words ("until 18:40:05+00:00" becomes
    "for 4 more minutes")."""

    def until(match: re.Match[str]) -> str:
        return time_left(match.group(1), now)

    def other(match: re.Match[str]) -> str:
        return ago(match.group(0), now)

    text = re.sub(r"until (" + _ISO.pattern + ")", until, text)
    return _ISO.sub(other, text)


# ---------------------------------------------------------------- output with quotes marked
OUTPUT_CSS = """<style>
.cc-out { border: 1px solid rgba(128,128,128,.35); border-radius: .4rem; padding: .5rem .7rem;
  max-height: 36rem; overflow: auto; font-size: .9rem; line-height: 1.45; margin: 0; }
.cc-code { font-family: "Source Code Pro", ui-monospace, monospace; white-space: pre-wrap;
  overflow-wrap: anywhere; }
.cc-text { white-space: pre-wrap; overflow-wrap: anywhere; }
.cc-ln { display: inline-block; width: 2.6em; color: #999; user-select: none;
  text-align: right; padding-right: .8em; }
.cc-out mark { background: #ffe58a; color: inherit; padding: 0; border-radius: 2px; }
.cc-out sup.cc-q { font-size: .7em; font-weight: 700; color: #8a4b00; padding: 0 .15em; }
.cc-out a.cc-cite { text-decoration: none; font-weight: 600; }
.cc-out .cc-cite-bad { color: #b42318; text-decoration: underline wavy #b42318; font-weight: 700; }
</style>"""


def quote_spans(text: str, quotes: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """``(start, end, number)`` of each quote's first place in ``text``, overlaps dropped."""
    spans: list[tuple[int, int, int]] = []
    for number, quote in quotes:
        if not quote:
            continue
        start = text.find(quote)
        if start == -1:
            start = text.find(quote.strip()) if quote.strip() else -1
            quote = quote.strip()
        if start != -1:
            spans.append((start, start + len(quote), number))
    spans.sort()
    kept: list[tuple[int, int, int]] = []
    for span in spans:
        if kept and span[0] < kept[-1][1]:
            continue
        kept.append(span)
    return kept


def marked_output(
    text: str,
    quotes: list[tuple[int, str]],
    *,
    code: bool,
    decorate: Callable[[str], str] | None = None,
    lines: bool = False,
) -> str:
    """The output as it ships, escaped, with each quote in a numbered ``<mark>``: code keeps
    its lines and indentation and gets line numbers; text keeps its paragraphs. ``decorate``
    rewrites each piece of escaped text (the citation links of console.evidence). ``lines``
    wraps each line in ``<span class="cc-l" data-line="n">`` (where a selection starts and
    ends, for console.quoting)."""
    spans = quote_spans(text, quotes)

    def escape(piece: str) -> str:
        return decorate(html.escape(piece)) if decorate else html.escape(piece)

    shown: list[str] = []
    pos = 0
    for number, line in enumerate(text.split("\n"), start=1):
        start, end = pos, pos + len(line)
        pos = end + 1
        out, cursor = [], start
        for s, e, n in spans:
            if e <= start or s >= end and not (s == e == start):
                continue
            a, b = max(s, start), min(e, end)
            if a == b and s < start:
                continue
            if a > cursor:
                out.append(escape(text[cursor:a]))
            label = f'<sup class="cc-q">{n}</sup>' if s >= start else ""
            out.append(f'<mark data-issue="{n}">{label}{escape(text[a:b])}</mark>')
            cursor = b
        if cursor < end:
            out.append(escape(text[cursor:end]))
        body = "".join(out)
        last = start == len(text) and number > 1  # the empty line after a final newline
        if code and not last:
            body = f'<span class="cc-ln">{number}</span>{body}'
        if lines:
            body = f'<span class="cc-l" data-line="{number}">{body}</span>'
        shown.append(body)
    kind = "cc-code" if code else "cc-text"
    return f'{OUTPUT_CSS}<pre class="cc-out {kind}">' + "\n".join(shown) + "</pre>"


# ---------------------------------------------------------------- a point that quotes the output
MAX_QUOTE_CHARS = 400
NEWLINE_MARK = " \u23ce "  # ⏎: a quote of several lines on the point's one line


def picked_quote(output: str, first: Any, last: Any, text: Any = "") -> dict[str, Any] | None:
    """What a reviewer picked in the output (lines ``first`` to ``last``, and the text they
    selected there, if any) as ``{"quote", "first", "last"}``, or None when it names no line
    of the output. The browser says what was picked, so the quote is taken from the output
    itself: the selected text where it is in those lines, else the lines whole."""
    try:
        a, b = int(first), int(last)
    except (TypeError, ValueError):
        return None
    rows = output.split("\n")
    a, b = min(a, b), max(a, b)
    if a < 1 or a > len(rows):
        return None
    b = min(b, len(rows))
    block = "\n".join(rows[a - 1 : b])
    wanted = text.strip() if isinstance(text, str) else ""
    at = block.find(wanted) if wanted else -1
    if at == -1:
        wanted, at = block.strip(), block.find(block.strip())
    if not wanted:
        return None
    start = a + block[:at].count("\n")
    return {"quote": wanted, "first": start, "last": start + wanted.count("\n")}


def quoted_point(picked: dict[str, Any], instruction: str) -> str:
    """A point that quotes the output: ``On line 3, “if days < 0:”: raise ValueError.``
    (lines of a longer quote joined by ⏎, a long quote cut), so the point carries its quote
    wherever points go (the Actor's and the Critic's prompts, the run, the datasets)."""
    a, b = picked["first"], picked["last"]
    where = f"line {a}" if a == b else f"lines {a}-{b}"
    quote = NEWLINE_MARK.join(r.strip() for r in str(picked["quote"]).split("\n") if r.strip())
    if len(quote) > MAX_QUOTE_CHARS:
        quote = quote[: MAX_QUOTE_CHARS - 1] + "\u2026"
    return f"On {where}, \u201c{quote}\u201d: {instruction.strip()}"


# ---------------------------------------------------------------- decisions in plain words
RUN_NEXT = {
    "succeeded": "The run finished: succeeded.",
    "failed": "The run finished: failed.",
    "cancelled": "The run finished: cancelled.",
    "escalated": "The run stopped and waits for a person.",
    "revising": "The run continues: the Actor revises next.",
    "drafting": "The run continues: the Actor drafts again.",
    "critiquing": "The run continues: the Critic checks the edited version next.",
    "awaiting_review": "The run waits for a reviewer again.",
}
DONE = {
    "comment": "Your comment is recorded.",
    "approve": "You approved the output.",
    "edit": "Your edit is recorded.",
    "reject": "You rejected the run.",
    "retry": "You gave the run more rounds.",
}


def decision_banner(result: dict[str, Any]) -> str:
    status = str(result.get("run_status") or "")
    then = RUN_NEXT.get(status, f"The run is {status.replace('_', ' ')}.")
    return f"{DONE.get(str(result.get('action')), 'Decision recorded.')} {then}"


# ---------------------------------------------------------------- tables (queue, escalations, runs)
def span_words(seconds: float) -> str:
    """``40 s``, ``12 min``, ``2 h 5 min``, ``23 h``, ``3 days``: a duration in plain words."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 10 * 3600:
        h, m = s // 3600, s % 3600 // 60
        return f"{h} h {m} min" if m else f"{h} h"
    if s < 2 * 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} days"


EXPIRY_WORDS = {"continue": "continue with the AI critic", "escalate": "escalate"}


def deadline_words(value: Any, now: datetime | None = None, on_expiry: str | None = None) -> str:
    """``in 23 h, then continue with the AI critic``; ``soon: in 4 min, then escalate``;
    ``overdue by 2 min, then escalate``; ``none: waits for a person``."""
    left = seconds_left(value, now)
    if left is None:
        return "none: waits for a person"
    then = f", then {EXPIRY_WORDS.get(on_expiry or '', on_expiry)}" if on_expiry else ""
    if left < 0:
        return f"overdue by {span_words(left)}{then}"
    return f"{'soon: ' if left < 600 else ''}in {span_words(left)}{then}"


def waited_words(value: Any, now: datetime | None = None) -> str | None:
    left = seconds_left(value, now)
    return None if left is None else span_words(left)


KIND_NAME = {"pre_critique": "pre-critique", "escalation": "escalation"}
WHY_WORDS = {
    "before_critique": "the policy pauses the run here, before the Critic reads this round",
    "low_confidence": "the Critic is unsure of this round (its confidence is under the "
    "policy's threshold): a person decides before anyone revises",
}


def why_words(item: dict[str, Any]) -> str:
    """Why an item waits, in a sentence (the stop reason's name for an escalation)."""
    reason = str(item.get("reason") or "")
    if item.get("kind") == "escalation":
        return f"the run stopped ({reason}) and waits for a person" if reason else "the run stopped"
    return WHY_WORDS.get(reason, reason.replace("_", " "))


def kind_words(item: dict[str, Any]) -> str:
    """What a review item is, with why it exists: ``escalation: max_rounds``,
    ``low confidence``, ``pre-critique (first round)`` or ``pre-critique (every round)``.

    A pause before the critique carries the reason ``before_critique`` under both review
    modes; the first round's pause is the one ``first_round`` makes, later rounds' only
    ``before_critique`` (every round) makes."""
    reason = str(item.get("reason") or "")
    if item.get("kind") == "escalation":
        return f"escalation: {reason}" if reason else "escalation"
    if "confidence" in reason:
        return "low confidence"
    return "pre-critique (first round)" if item.get("round") == 1 else "pre-critique (every round)"


def short_id(value: str | None, keep: int = 8) -> str:
    """``run_…a1b2c3d4``: the prefix and the random tail of an id (the full one is copyable)."""
    if not value:
        return ""
    prefix, _, rest = value.partition("_")
    if not rest or len(rest) <= keep:
        return value
    return f"{prefix}_…{rest[-keep:]}"


# a LinkColumn shows the id's last 8 characters; copying the cell copies the link with the full id
SHORT_ID_REGEX = r"=(?:[^&]*?)([^&_]{1,8})$"


# ---------------------------------------------------------------- untrusted text
WORD_JOINER = "\u2060"  # invisible, and not a word character: breaks the transforms' patterns
NBSP = "\u00a0"
_LEADING_BLANKS = re.compile(r"^[ \t]+", re.MULTILINE)
_MD_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
_MD_TRANSFORMED = re.compile(
    r"(?<=\\:)(?=\\?[\w/+-])"  # :emoji:, :material/icon:, http:// (read after the escapes)
    r"|(?<=\\@)(?=\\?[\w-])"  # name@host.tld as a mailto link
    r"|(?<=www)(?=\\\.)",  # www.host.tld as a link
    re.IGNORECASE,
)


def md_literal(value: Any) -> str:
    """``value`` (text from a model, a reviewer or a user) for a Streamlit slot that reads
    Markdown (alerts, captions, labels, a line mixing it with the console's own bold): it shows
    as the same characters and renders nothing, no link, image, emphasis, colour, badge, math,
    list or heading.

    Every ASCII punctuation character is backslash-escaped (CommonMark reads each as itself).
    Streamlit also rewrites text after parsing, when the escapes are already gone: bare URLs
    and e-mail addresses become links, ``:name:`` an emoji and ``:material/name:`` an icon
    font. An invisible word joiner (U+2060) after such a colon or ``@`` and after ``www``
    keeps those patterns from matching; a line's leading blanks become no-break spaces (four
    spaces would start a code block). Prose that needs no Markdown goes to ``st.text``."""
    escaped = _MD_PUNCTUATION.sub(r"\\\1", str(value))
    escaped = _MD_TRANSFORMED.sub(WORD_JOINER, escaped)
    # a line's leading spaces would make an indented code block: no-break spaces show the same
    return _LEADING_BLANKS.sub(
        lambda m: m.group(0).replace("\t", "    ").replace(" ", NBSP), escaped
    )


# ---------------------------------------------------------------- a reviewer's points, later
def _match(point: str, index: int, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry that answers ``point``: the one naming it word for word (spaces aside), else
    the ``index``-th (the Actor and the Critic answer the points in the order given)."""
    wanted = " ".join(point.split()).casefold()
    for entry in entries:
        if " ".join(str(entry.get("point") or "").split()).casefold() == wanted:
            return entry
    return entries[index] if index < len(entries) else None


def round_points(rnd: dict[str, Any]) -> list[dict[str, Any]]:
    """One round's answers to a reviewer's points (those its revision answered, else those its
    critique checked), shaped as :func:`point_outcomes` says."""
    answers = [a for a in rnd.get("responses") or [] if isinstance(a, dict) and a.get("point")]
    checks = [
        c for c in (rnd.get("critique") or {}).get("binding_checks") or [] if isinstance(c, dict)
    ]
    points = [str(a["point"]) for a in answers] or [str(c.get("point") or "") for c in checks]
    return point_outcomes(points, int(rnd.get("number") or 0) - 1, [rnd])


def point_outcomes(
    points: list[str], after_round: int, rounds: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What became of each of a reviewer's ``points`` given on round ``after_round``: the
    first later round whose revision answered it (``answered_in``, ``action``, ``where``) and
    the latest round whose critique checked it (``checked_in``, ``satisfied``, ``quote``);
    None for what has not happened yet."""
    later = sorted(
        (r for r in rounds if int(r.get("number") or 0) > after_round),
        key=lambda r: int(r.get("number") or 0),
    )
    out = []
    for i, point in enumerate(points):
        found: dict[str, Any] = {
            "point": point,
            "answered_in": None,
            "action": None,
            "where": "",
            "reason": "",
            "checked_in": None,
            "satisfied": None,
            "quote": "",
        }
        for rnd in later:
            number = int(rnd.get("number") or 0)
            answers = [
                a for a in rnd.get("responses") or [] if isinstance(a, dict) and a.get("point")
            ]
            answer = _match(point, i, answers)
            if answer is not None and found["answered_in"] is None:
                found.update(
                    answered_in=number,
                    action=str(answer.get("action") or "?"),
                    where=str(answer.get("where") or ""),
                    reason=str(answer.get("reason") or ""),
                )
            checks = [
                c
                for c in (rnd.get("critique") or {}).get("binding_checks") or []
                if isinstance(c, dict)
            ]
            check = _match(point, i, checks)
            if check is not None:
                found.update(
                    checked_in=number,
                    satisfied=bool(check.get("satisfied")),
                    quote=str(check.get("quote") or ""),
                )
        out.append(found)
    return out


def answer_words(outcome: dict[str, Any]) -> str:
    """``Applied in round 2, at: “...”`` / ``Declined in round 2: <reason>`` / ``Not answered
    yet: the Actor revises next.``"""
    if outcome.get("answered_in") is None:
        return "The Actor has not answered it yet."
    action = str(outcome.get("action") or "?")
    words = f"The Actor {action} it in round {outcome['answered_in']}"
    if outcome.get("where"):
        words += f", at “{outcome['where']}”"
    if action != "applied" and outcome.get("reason"):
        words += f": {outcome['reason']}"
    return words + "."


def check_words(outcome: dict[str, Any]) -> str:
    """``The Critic found it applied in round 2: “...”`` / ``...not applied...`` / ``not yet``."""
    if outcome.get("satisfied") is None:
        return "The Critic has not checked it yet."
    verdict = "applied" if outcome["satisfied"] else "NOT applied"
    words = f"The Critic found it {verdict} in round {outcome['checked_in']}"
    return words + (f": “{outcome['quote']}”." if outcome.get("quote") else ".")
