"""The diff lock: a revision changes what the critique asked for, what that fix needs, and
nothing cosmetic besides.

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
* kept when it overlaps a line the critique quoted or a line the Actor named in an
  ``applied`` answer's ``where`` (found in the previous version or in the revision; a
  ``where`` of fewer than ``MIN_WHERE_CHARS`` characters names nothing);
* in a code run, kept when it defines or imports a name a kept hunk uses (in a scope that
  sees it), to a fixpoint: the import a kept helper needs is kept too. Otherwise it is
  reverted with reason ``outside_flagged``. A revision that does not parse gets no such
  keep; a locked version that no longer parses while the revision does is not shipped: the
  revision is (locked regions still reverted), and each undone revert says why
  (``overridden``);
* in a text run, reverted only when its change is cosmetic: whitespace, punctuation, case,
  the same words in another order, or a swap of at most ``WORDING_WORDS`` words that changes
  no number, date, name or negation (``cosmetic_*`` reasons), unless a kept hunk makes the
  same substitution (a consistent rename). Anything else (new or removed content, a changed
  number, date or name) is substantive and kept.

Each reverted hunk records its ``reason`` and the ``rule`` behind it in one sentence.
Everything here is a pure function of its arguments, so a replayed step decides the same.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz.distance import Indel

from orchestrator.engine import offloop

RECORD_CHARS = 4_000  # a reverted hunk's before/after as recorded on the round
MIN_WHERE_CHARS = 4  # a shorter ``where`` ("e", " ") would justify every line holding it
WORDING_WORDS = 3  # a swap of more words than this is a rewrite, not a cosmetic change

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
    kind: str = "text"  # the run's kind: which rules tell a needed change from a cosmetic one

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "quotes": self.quotes,
            "locked": self.locked,
            "kind": self.kind,
        }


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


# ----------------------------------------------------------------------- reasons and rules

LOCKED = "locked"
OUTSIDE_FLAGGED = "outside_flagged"
_OUTSIDE = "outside the lines the critique quoted or the Actor named"
RULES: dict[str, str] = {
    LOCKED: "It changed a region the task locks, which no revision may change.",
    OUTSIDE_FLAGGED: f"It changed code {_OUTSIDE}, and no kept change uses a name it defines "
    "or imports.",
    "cosmetic_whitespace": f"It only changed white space, {_OUTSIDE}.",
    "cosmetic_punctuation": f"It only changed punctuation, {_OUTSIDE}.",
    "cosmetic_case": f"It only changed letter case, {_OUTSIDE}.",
    "cosmetic_reorder": f"It only reordered the same words, {_OUTSIDE}.",
    "cosmetic_wording": f"It swapped at most {WORDING_WORDS} words (no number, date, name or "
    f"negation) {_OUTSIDE}, and no kept change makes the same swap.",
}
REASONS = tuple(RULES)  # every reason a reverted hunk can give
UNPARSED_RULE = (
    f"It changed code {_OUTSIDE}, and the revision does not parse, so what the kept changes "
    "need cannot be told."
)

_PENDING = "pending"  # a hunk nobody asked for: the run kind's rules decide

# Why a revert was undone (``overridden.reason`` on a reverted hunk).
UNPARSABLE = "unparsable"
FAILED_TESTS = "failed_tests"


@dataclass
class Locked:
    output: str
    reverted: list[dict[str, Any]]
    hunks: int
    overridden: str | None = None  # why the reverts were undone: the locked version broke


def _record(hunk: Hunk, reason: str, rule: str | None = None) -> dict[str, Any]:
    return {
        "line": hunk.a_start + 1,
        "before": hunk.before[:RECORD_CHARS],
        "after": hunk.after[:RECORD_CHARS],
        "reason": reason,
        "rule": rule or RULES[reason],
        "truncated": len(hunk.before) > RECORD_CHARS or len(hunk.after) > RECORD_CHARS,
    }


def mark_overridden(
    reverted: list[dict[str, Any]], reason: str, detail: str
) -> list[dict[str, Any]]:
    """The reverted hunks with every revert but a locked region's marked as undone."""
    mark = {"reason": reason, "detail": detail}
    return [h if h.get("reason") == LOCKED else {**h, "overridden": mark} for h in reverted]


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
        named = [w.strip() for w in wheres if len(w.strip()) >= MIN_WHERE_CHARS]
        flagged = _line_spans(found.previous, find_spans(previous, [*rules.quotes, *named]))
        justified = _line_spans(found.revision, find_spans(revision, named))
    # per hunk: None (kept), a reason, or _PENDING (unrequested: the kind's rules decide)
    decisions: list[str | None] = []
    for hunk in found.hunks:
        if any(_inside(hunk.a_chars, span) for span in locked_spans):
            decisions.append(LOCKED)
        elif (
            not bounded
            or any(_touches(hunk.a_chars, span) for span in flagged)
            or any(_touches(hunk.b_chars, span) for span in justified)
        ):
            decisions.append(None)
        else:
            decisions.append(_PENDING)
    parsed, unparsed_rule = False, None
    if _PENDING in decisions and rules.kind == "code":
        decisions, parsed = _code_decisions(found, revision, decisions)
        unparsed_rule = None if parsed else UNPARSED_RULE
    elif _PENDING in decisions:
        decisions = _text_decisions(found, previous, revision, decisions)
    reverted = [
        _record(h, d, unparsed_rule if d == OUTSIDE_FLAGGED else None)
        for h, d in zip(found.hunks, decisions, strict=True)
        if d
    ]
    if not reverted:
        return Locked(revision, [], len(found.hunks))
    output = apply(found, [i for i, d in enumerate(decisions) if d is None])
    if parsed and any(d != LOCKED for d in decisions if d) and (error := _syntax_error(output)):
        detail = (
            f"The locked version does not parse ({error}) while the Actor's revision does: the "
            "revision ships as written, locked regions still reverted."
        )
        relaxed = apply(found, [i for i, d in enumerate(decisions) if d != LOCKED])
        return Locked(
            relaxed, mark_overridden(reverted, UNPARSABLE, detail), len(found.hunks), detail
        )
    return Locked(output, reverted, len(found.hunks))


async def enforce_off_loop(
    rules: LockRules, previous: str, revision: str, wheres: list[str]
) -> Locked:
    """``enforce``: on the event loop for short texts, on a worker thread for long ones
    (``offloop.LOCK_CHARS``, by kind: code is parsed, which costs about twice as much)."""
    limit = offloop.LOCK_CHARS["code" if rules.kind == "code" else "text"]
    size = len(previous) + len(revision)
    return await offloop.sized(size, limit, enforce, rules, previous, revision, wheres)


# ----------------------------------------------------------------------------- code

Scope = tuple[int, ...]  # the enclosing function and class scopes, outermost first


@dataclass(frozen=True)
class _Binding:
    name: str
    scope: Scope
    first: int  # revision lines [first, last), 0-based
    last: int

    def visible_from(self, scope: Scope) -> bool:
        return scope[: len(self.scope)] == self.scope


class _Names(ast.NodeVisitor):
    """Where the revision binds each name (import, def, class, assignment, other targets)
    and where it reads each one, with the scope of both."""

    def __init__(self) -> None:
        self.bindings: list[_Binding] = []
        self.uses: list[tuple[str, Scope, int]] = []  # name, scope, 0-based line
        self.scope: Scope = ()
        self.scopes = 0

    def bind(self, name: str, node: ast.AST, first: int | None = None) -> None:
        start = first if first is not None else node.lineno  # type: ignore[attr-defined]
        end = getattr(node, "end_lineno", None) or start
        self.bindings.append(_Binding(name, self.scope, start - 1, end))

    def enter(self, args: ast.arguments | None, body: Iterable[ast.AST]) -> None:
        self.scopes += 1
        outer, self.scope = self.scope, (*self.scope, self.scopes)
        if args is not None:
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            for arg in every:
                self.bind(arg.arg, arg)
        for node in body:
            self.visit(node)
        self.scope = outer

    def outside(self, args: ast.arguments) -> None:
        """Defaults and annotations are evaluated in the enclosing scope."""
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        for node in [*args.defaults, *args.kw_defaults, *(a.annotation for a in every if a)]:
            if node is not None:
                self.visit(node)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        self.bind(node.name, node, first)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.outside(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self.enter(node.args, node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.outside(node.args)
        self.enter(node.args, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bind(node.name, node, min([node.lineno, *(d.lineno for d in node.decorator_list)]))
        for outer in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(outer)
        self.enter(None, node.body)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.bind(alias.asname or alias.name.partition(".")[0], alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.bind(alias.asname or alias.name, alias)

    def assignment(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> None:
        """The whole statement binds its names: a change to a multi-line value is one."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    self.bind(name.id, node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.assignment(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.assignment(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.assignment(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:  # the ``except ... as name`` line, not the handler's body
            self.bindings.append(_Binding(node.name, self.scope, node.lineno - 1, node.lineno))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.uses.append((node.id, self.scope, node.lineno - 1))
        elif isinstance(node.ctx, ast.Store):
            self.bind(node.id, node)


def _syntax_error(source: str) -> str | None:
    """Why ``source`` does not parse as Python, or None when it does."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"{exc.msg} at line {exc.lineno}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return type(exc).__name__
    return None


def _code_decisions(
    found: Diff, revision: str, decisions: list[str | None]
) -> tuple[list[str | None], bool]:
    """Pending hunks a kept hunk depends on (they bind a name it reads) are kept, to a
    fixpoint; the rest are reverted ``outside_flagged``. Also whether the revision parsed
    (a revision that does not parse keeps no pending hunk)."""
    names = _Names()
    try:
        names.visit(ast.parse(revision))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [OUTSIDE_FLAGGED if d == _PENDING else d for d in decisions], False
    hunks = found.hunks
    starts = [h.b_start for h in hunks]
    uses: list[set[tuple[str, Scope]]] = [set() for _ in hunks]
    for name, scope, line in names.uses:
        index = bisect_right(starts, line) - 1
        if index >= 0 and hunks[index].b_start <= line < hunks[index].b_end:
            uses[index].add((name, scope))
    binds: list[list[_Binding]] = [[] for _ in hunks]
    for binding in names.bindings:
        for index in range(max(bisect_right(starts, binding.first) - 1, 0), len(hunks)):
            hunk = hunks[index]
            if hunk.b_start >= binding.last:
                break
            if hunk.b_start == hunk.b_end:  # a deletion changes a binding it falls inside
                if binding.first < hunk.b_start:
                    binds[index].append(binding)
            elif hunk.b_end > binding.first:
                binds[index].append(binding)
    decided = list(decisions)
    pending = {i for i, d in enumerate(decided) if d == _PENDING}
    frontier = {i for i, d in enumerate(decided) if d is None}
    while frontier and pending:
        needed: dict[str, set[Scope]] = {}
        for name, scope in set().union(*(uses[i] for i in frontier)):
            needed.setdefault(name, set()).add(scope)
        frontier = {
            i
            for i in pending
            if any(b.visible_from(s) for b in binds[i] for s in needed.get(b.name, ()))
        }
        pending -= frontier
        for i in frontier:
            decided[i] = None
    return [OUTSIDE_FLAGGED if d == _PENDING else d for d in decided], True


# ----------------------------------------------------------------------------- text

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_NUMBER = re.compile(r"(?:(?<!\S)[-+−])?[$€£¥]?\d+(?:[.,:/-]\d+)*%?")
_SENTENCE_END = re.compile(r"[.!?…]")
_LINE_LEAD = re.compile(r"[\s*+•#>|\d.)(\[\]\"'“‘-]*")
NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred thousand million billion trillion dozen half quarter once twice "
    "thrice first second third fourth fifth sixth seventh eighth ninth tenth".split()
)
DATE_WORDS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday "
    "friday saturday sunday".split()
)
# Words that flip or bound a claim: swapping one is never a synonym swap.
POLARITY_WORDS = frozenset(
    "not no never none nor neither nothing nobody nowhere without cannot all every always "
    "only more less most least".split()
)


@dataclass(frozen=True)
class _Words:
    exact: list[str]
    folded: list[str]
    protected: list[bool]  # a number, date, name or polarity word: never cosmetic to change
    numbers: list[str]  # the numbers as written (3.5 and 3,5 differ)


def _tokens(text: str) -> list[tuple[str, bool]]:
    """Each word of ``text`` and whether it starts a sentence (or a line)."""
    out: list[tuple[str, bool]] = []
    end = 0
    for match in _WORD.finditer(text):
        gap = text[end : match.start()]
        line = gap.rpartition("\n")[2] if "\n" in gap or not out else None
        initial = (line is not None and _LINE_LEAD.fullmatch(line) is not None) or bool(
            out and _SENTENCE_END.search(gap)
        )
        out.append((match.group(), initial))
        end = match.end()
    return out


def names_in(*texts: str) -> frozenset[str]:
    """Words the texts write as names: capitalised inside a sentence, or capitalised and
    never written in lower case (a name that only ever starts a sentence)."""
    capitalised: set[str] = set()
    lower: set[str] = set()
    names: set[str] = set()
    for text in texts:
        for word, initial in _tokens(text):
            fold = word.casefold()
            if word[0].isupper() and word != "I":
                capitalised.add(fold)
                if not initial:
                    names.add(fold)
            elif word == fold:
                lower.add(fold)
    return frozenset(names | (capitalised - lower))


def _words(text: str, names: frozenset[str]) -> _Words:
    exact: list[str] = []
    folded: list[str] = []
    protected: list[bool] = []
    for word, initial in _tokens(text):
        fold = word.casefold()
        capital = word[0].isupper() and word != "I"
        exact.append(word)
        folded.append(fold)
        protected.append(
            any(c.isdigit() for c in word)
            or fold in NUMBER_WORDS
            or fold in POLARITY_WORDS
            or fold.endswith(("n't", "n’t"))
            or (capital and (not initial or fold in names or fold in DATE_WORDS))
        )
    return _Words(exact, folded, protected, _NUMBER.findall(text))


def _groups(a: list[str], b: list[str]) -> list[tuple[Span, Span]]:
    """The word ranges that differ, neighbouring insertions and deletions as one group."""
    ids: dict[str, int] = {}
    groups: list[tuple[Span, Span]] = []
    pending: list[int] | None = None
    ops = Indel.opcodes(
        [ids.setdefault(w, len(ids)) for w in a], [ids.setdefault(w, len(ids)) for w in b]
    )
    for op in ops:
        if op.tag == "equal":
            if pending is not None:
                groups.append(((pending[0], pending[1]), (pending[2], pending[3])))
                pending = None
        elif pending is None:
            pending = [op.src_start, op.src_end, op.dest_start, op.dest_end]
        else:
            pending[1], pending[3] = op.src_end, op.dest_end
    if pending is not None:
        groups.append(((pending[0], pending[1]), (pending[2], pending[3])))
    return groups


def _swaps(a: list[str], b: list[str]) -> set[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The word substitutions (neither side empty) that turn ``a`` into ``b``."""
    return {
        (tuple(a[s1:e1]), tuple(b[s2:e2]))
        for (s1, e1), (s2, e2) in _groups(a, b)
        if s1 < e1 and s2 < e2
    }


def _wording(a: _Words, b: _Words) -> bool:
    """A swap of a few words in place, the rest of the hunk unchanged, touching no
    protected word: no insertion or deletion of content."""
    groups = _groups(a.folded, b.folded)
    if not groups or any(s1 == e1 or s2 == e2 for (s1, e1), (s2, e2) in groups):
        return False
    removed = sum(e1 - s1 for (s1, e1), _ in groups)
    added = sum(e2 - s2 for _, (s2, e2) in groups)
    changed = max(removed, added)
    if changed > WORDING_WORDS or len(a.folded) - removed < changed:
        return False
    return not any(
        any(a.protected[s1:e1]) or any(b.protected[s2:e2]) for (s1, e1), (s2, e2) in groups
    )


def cosmetic(before: str, after: str, names: frozenset[str] = frozenset()) -> str | None:
    """The cosmetic kind of a change (a ``cosmetic_*`` reason), or None when it is
    substantive. ``names``: words the texts write as names (:func:`names_in`)."""
    if before.split() == after.split():
        return "cosmetic_whitespace"
    a, b = _words(before, names), _words(after, names)
    if a.numbers != b.numbers:
        return None
    if a.exact == b.exact:
        return "cosmetic_punctuation"
    if a.folded == b.folded:
        return "cosmetic_case"
    if Counter(a.folded) == Counter(b.folded):
        kept_order = [w for w, p in zip(a.folded, a.protected, strict=True) if p] == [
            w for w, p in zip(b.folded, b.protected, strict=True) if p
        ]
        return "cosmetic_reorder" if kept_order else None
    return "cosmetic_wording" if _wording(a, b) else None


def _text_decisions(
    found: Diff, previous: str, revision: str, decisions: list[str | None]
) -> list[str | None]:
    """Pending hunks are reverted when cosmetic, unless a kept hunk makes the same swap (a
    consistent rename: the same words, or the same change of case); the rest are kept."""
    names = names_in(previous, revision)
    decided: list[str | None] = [
        cosmetic(h.before, h.after, names) if d == _PENDING else d
        for h, d in zip(found.hunks, decisions, strict=True)
    ]
    renames: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
    for hunk, decision in zip(found.hunks, decided, strict=True):
        if decision is None:
            a, b = _words(hunk.before, names), _words(hunk.after, names)
            renames |= _swaps(a.folded, b.folded) | _swaps(a.exact, b.exact)
    if not renames:
        return decided
    for index, (hunk, decision) in enumerate(zip(found.hunks, decided, strict=True)):
        if decision in ("cosmetic_wording", "cosmetic_case"):
            a, b = _words(hunk.before, names), _words(hunk.after, names)
            fold = decision == "cosmetic_wording"
            swaps = _swaps(a.folded, b.folded) if fold else _swaps(a.exact, b.exact)
            if swaps and swaps <= renames:
                decided[index] = None
    return decided
