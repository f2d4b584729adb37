"""The diff lock: a revision changes what the critique asked for and nothing else.

After each revision the orchestrator diffs it against the previous version, line by line
(each distinct line becomes one integer, and rapidfuzz's bit-parallel Indel alignment gives
the opcodes: a few milliseconds for 50 KB, where ``difflib`` is quadratic). Neighbouring
changed lines form one hunk. A hunk is

* reverted with reason ``locked`` when it touches a region the task locks (the run's
  ``locked`` texts, as found in the previous version), always;
* kept when the change cannot be bounded: the lock is off (``policy.diff_lock``), the
  previous critique quoted nothing it can be located by (no issues, or an issue without a
  quote found in the previous version: a whole-text issue may ask for a change anywhere),
  the previous version failed its evaluation (a failing test may need a fix anywhere), or a
  person asked for changes (a reviewer's open binding points or comments: a person may ask
  for a change anywhere);
* otherwise kept when it overlaps a line the critique quoted or a line the Actor named in
  an ``applied`` answer's ``where`` (found in the previous version or in the revision);
* otherwise reverted with reason ``outside_flagged``.

Everything here is a pure function of its arguments, so a replayed step decides the same.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz.distance import Indel

OFF_LOOP_CHARS = 8_000  # longer pairs are diffed on a worker thread, off the event loop
RECORD_CHARS = 4_000  # a reverted hunk's before/after as recorded on the round

Span = tuple[int, int]


@dataclass(frozen=True)
class Hunk:
    """Previous lines ``[a_start, a_end)`` became revision lines ``[b_start, b_end)``."""

    a_start: int
    a_end: int
    b_start: int
    b_end: int
    a_chars: Span  # the same ranges as character offsets
    b_chars: Span
    before: str
    after: str


@dataclass(frozen=True)
class Diff:
    previous: list[str]
    revision: list[str]
    hunks: list[Hunk]


def split_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _offsets(lines: list[str]) -> list[int]:
    out = [0]
    for line in lines:
        out.append(out[-1] + len(line))
    return out


def diff(previous: str, revision: str) -> Diff:
    """The hunks that turn ``previous`` into ``revision`` (line granularity)."""
    a, b = split_lines(previous), split_lines(revision)
    ids: dict[str, int] = {}
    ha = [ids.setdefault(line, len(ids)) for line in a]
    hb = [ids.setdefault(line, len(ids)) for line in b]
    oa, ob = _offsets(a), _offsets(b)
    hunks: list[Hunk] = []
    pending: list[int] | None = None  # [a_start, a_end, b_start, b_end]
    for op in Indel.opcodes(ha, hb):
        if op.tag == "equal":
            if pending is not None:
                hunks.append(_hunk(a, b, oa, ob, *pending))
                pending = None
            continue
        if pending is None:
            pending = [op.src_start, op.src_end, op.dest_start, op.dest_end]
        else:
            pending[1], pending[3] = op.src_end, op.dest_end
    if pending is not None:
        hunks.append(_hunk(a, b, oa, ob, *pending))
    return Diff(a, b, hunks)


def _hunk(
    a: list[str], b: list[str], oa: list[int], ob: list[int], s1: int, e1: int, s2: int, e2: int
) -> Hunk:
    return Hunk(
        s1, e1, s2, e2, (oa[s1], oa[e1]), (ob[s2], ob[e2]), "".join(a[s1:e1]), "".join(b[s2:e2])
    )


def apply(found: Diff, keep: Iterable[int]) -> str:
    """The previous version with the hunks whose indexes are in ``keep`` applied."""
    kept = set(keep)
    pieces: list[str] = []
    cursor = 0
    for index, hunk in enumerate(found.hunks):
        pieces.extend(found.previous[cursor : hunk.a_start])
        if index in kept:
            pieces.extend(found.revision[hunk.b_start : hunk.b_end])
        else:
            pieces.extend(found.previous[hunk.a_start : hunk.a_end])
        cursor = hunk.a_end
    pieces.extend(found.previous[cursor:])
    return "".join(pieces)


def find_spans(text: str, needles: Iterable[str]) -> list[Span]:
    """Every occurrence of every non-empty needle in ``text``."""
    spans: list[Span] = []
    for needle in needles:
        if not needle:
            continue
        start = text.find(needle)
        while start >= 0:
            spans.append((start, start + len(needle)))
            start = text.find(needle, start + 1)
    return spans


def _line_spans(lines: list[str], spans: list[Span]) -> list[Span]:
    """Each span widened to the whole lines it touches (the diff's granularity)."""
    starts = _offsets(lines)
    out: list[Span] = []
    for start, end in spans:
        first = max(bisect_right(starts, start) - 1, 0)
        last = max(bisect_right(starts, max(end - 1, start)) - 1, 0)
        out.append((starts[first], starts[min(last + 1, len(lines))]))
    return out


def _touches(chars: Span, span: Span) -> bool:
    """A change overlaps a span; an insertion or deletion point touches it at its edges."""
    s, e = chars
    a, b = span
    if s == e:
        return a <= s <= b
    return s < b and a < e


def _inside(chars: Span, span: Span) -> bool:
    """A change modifies a locked span (an insertion at its edge leaves it whole)."""
    s, e = chars
    a, b = span
    if s == e:
        return a < s < b
    return s < b and a < e


@dataclass(frozen=True)
class LockRules:
    """What bounds a revision, gathered by the act step before it asks the Actor."""

    enabled: bool = True  # policy.diff_lock
    quotes: list[str] | None = None  # the previous critique's spans; None: it cannot bound
    locked: list[str] = field(default_factory=list)  # the run's locked texts

    def as_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "quotes": self.quotes, "locked": self.locked}


def critique_quotes(
    critique: dict[str, Any] | None, previous: str, *, unbounded: bool
) -> list[str] | None:
    """The previous critique's quoted spans, or None when they cannot bound the revision:
    ``unbounded`` (a person asked for changes, or the evaluation failed), no critique, no
    issues, or an issue whose quote is missing or not in the previous version."""
    if unbounded or not critique:
        return None
    issues = critique.get("issues") or []
    if not issues:
        return None
    quotes: list[str] = []
    for issue in issues:
        quote = issue.get("original_text") or issue.get("quote")
        if not quote or quote not in previous:
            return None
        quotes.append(str(quote))
    return quotes


@dataclass
class Locked:
    output: str
    reverted: list[dict[str, Any]]
    hunks: int


def _record(hunk: Hunk, reason: str) -> dict[str, Any]:
    return {
        "line": hunk.a_start + 1,
        "before": hunk.before[:RECORD_CHARS],
        "after": hunk.after[:RECORD_CHARS],
        "reason": reason,
        "truncated": len(hunk.before) > RECORD_CHARS or len(hunk.after) > RECORD_CHARS,
    }


def enforce(rules: LockRules, previous: str, revision: str, wheres: list[str]) -> Locked:
    """The revision with the hunks the rules forbid reverted, and what was reverted."""
    if previous == revision:
        return Locked(revision, [], 0)
    locked_spans = find_spans(previous, rules.locked)
    bounded = rules.enabled and rules.quotes is not None
    if not locked_spans and not bounded:
        return Locked(revision, [], 0)
    found = diff(previous, revision)
    flagged: list[Span] = []
    justified: list[Span] = []
    if bounded:
        assert rules.quotes is not None
        flagged = _line_spans(found.previous, find_spans(previous, [*rules.quotes, *wheres]))
        justified = _line_spans(found.revision, find_spans(revision, wheres))
    keep: list[int] = []
    reverted: list[dict[str, Any]] = []
    for index, hunk in enumerate(found.hunks):
        if any(_inside(hunk.a_chars, span) for span in locked_spans):
            reverted.append(_record(hunk, "locked"))
        elif (
            not bounded
            or any(_touches(hunk.a_chars, span) for span in flagged)
            or any(_touches(hunk.b_chars, span) for span in justified)
        ):
            keep.append(index)
        else:
            reverted.append(_record(hunk, "outside_flagged"))
    if not reverted:
        return Locked(revision, [], len(found.hunks))
    return Locked(apply(found, keep), reverted, len(found.hunks))


async def enforce_off_loop(
    rules: LockRules, previous: str, revision: str, wheres: list[str]
) -> Locked:
    """``enforce``, on a worker thread for long texts (the event loop keeps serving)."""
    if len(previous) + len(revision) < OFF_LOOP_CHARS:
        return enforce(rules, previous, revision, wheres)
    return await asyncio.to_thread(enforce, rules, previous, revision, wheres)
