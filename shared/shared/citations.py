"""Check the citations of an output against the evidence it was given (pure, no I/O).

An output cites ``[n]`` in its text and ends with a reference list, one line per number::

    The bridge opened in 1932 [1].

    References
    [1] https://example.org/bridge

A reference line is ``[n] ...`` (or ``[n]: ...``) holding the source's URL; a heading above
the list (References, Sources, ...) is optional. ``[n]`` is bound to evidence ``n``: its
reference line must give evidence ``n``'s own URL, so the text, the list and the evidence
the reviewer is shown name one source. :func:`validate_citations` reports:

* ``unknown_number``: a marker ``[n]`` with no reference line for ``n``;
* ``url_not_in_evidence``: a reference URL that is none of the evidence's URLs;
* ``wrong_source``: a reference ``[n]`` whose URL is another evidence's (``[1]`` listing
  evidence 2's URL);
* ``several_urls``: a number with more than one URL (on one line or over several lines);
* ``missing_url``: a reference line with no URL;
* ``uncited_reference``: a reference line whose number the text never cites;
* ``uncited_claim`` (only with ``require_citations``): a factual sentence (see
  :func:`factual_reason`) that is new against ``previous`` and cites nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

_MARKER = re.compile(r"\[(\d{1,4})\]")
_REF_LINE = re.compile(r"^\s*\[(\d{1,4})\]:?\s*(.*)$")
_URL = re.compile(r"(?:https?|file)://[^\s<>\"'\])]+")
_HEADING = re.compile(
    r"^\s*(?:#+\s*)?\**(?:references|sources|citations|bibliography|works cited)\**:?\s*$",
    re.IGNORECASE,
)
_MARKDOWN_HEADING = re.compile(r"^\s*#{1,6}\s")
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[^\W\d_]+")  # letters only: "Moon's" is "Moon" and "s"
_QUOTED = re.compile(
    r"\"[^\"\n]*\w[^\"\n]*\"|“[^”\n]*\w[^”\n]*”|«[^»\n]*\w[^»\n]*»"
    r"|(?<!\w)['‘][^'‘’\n]*\w[^'‘’\n]*['’](?!\w)"
)
_SPACE = re.compile(r"\s+")

NUMBER_WORDS = frozenset(
    "zero two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred hundreds thousand thousands million millions billion billions "
    "trillion trillions dozen dozens".split()
)  # not "one": mostly a pronoun ("no one", "one of them")
MONTHS = frozenset("january february april june july september october november december".split())
MONTHS_IF_CAPITALISED = frozenset({"may", "march", "august"})  # also verbs and adjectives
WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
# words written capitalised for other reasons than being a name (a sentence after a colon,
# a title-cased heading): never a name on their own
COMMON_WORDS = frozenset(
    "a about after all also an and any are as at be been before between both but by can "
    "could did do does each for from had has have he her here his how if in into is it its "
    "may might more most must no not note of on one or our over she should so some such than "
    "that the their then there these they this those to too under very was we were what when "
    "where which who why will with would yes you your".split()
)


class ProblemKind(StrEnum):
    unknown_number = "unknown_number"
    url_not_in_evidence = "url_not_in_evidence"
    wrong_source = "wrong_source"
    several_urls = "several_urls"
    missing_url = "missing_url"
    uncited_reference = "uncited_reference"
    uncited_claim = "uncited_claim"


class CitationProblem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ProblemKind
    message: str
    number: int | None = None
    url: str | None = None
    sentence: str | None = None


class CitationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cited: list[int] = []
    references: dict[int, list[str]] = {}
    problems: list[CitationProblem] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    def reflection(self) -> str:
        """The problems as one instruction for the next revision ("" when none)."""
        if not self.problems:
            return ""
        lines = [
            "Fix the citations: each [n] in the text needs the reference line `[n] URL` with "
            "evidence n's own URL (one URL each), every listed reference must be cited in the "
            "text, and every new factual sentence must cite its evidence."
        ]
        lines += [f"- {p.message}" for p in self.problems]
        return "\n".join(lines)


def _clean_url(url: str) -> str:
    return url.rstrip(".,;:")


def numbered_urls(evidence: Sequence[str] | Mapping[int, str]) -> dict[int, str]:
    """Evidence number -> URL: a mapping as it is, a sequence numbered from 1 in order (the
    way the research step numbers its evidence)."""
    if isinstance(evidence, Mapping):
        return {int(n): _clean_url(u) for n, u in evidence.items()}
    return {i + 1: _clean_url(u) for i, u in enumerate(evidence)}


def split_references(text: str) -> tuple[str, dict[int, list[str]], list[int]]:
    """The body, the reference list (number -> URLs in order) and the numbers of reference
    lines without a URL. The list is the trailing run of reference lines (blank lines and
    one heading allowed); a ``[n]`` inside the body is a marker, not a reference."""
    lines = text.splitlines()
    cut = len(lines)
    i = len(lines) - 1
    saw_ref = False
    while i >= 0:
        line = lines[i]
        if not line.strip():
            i -= 1
            continue
        if _REF_LINE.match(line):
            saw_ref = True
            cut = i
            i -= 1
            continue
        if saw_ref and _HEADING.match(line):
            cut = i
        break
    references: dict[int, list[str]] = {}
    no_url: list[int] = []
    for line in lines[cut:]:
        match = _REF_LINE.match(line)
        if not match:
            continue
        number = int(match.group(1))
        urls = [_clean_url(u) for u in _URL.findall(match.group(2))]
        if not urls:
            no_url.append(number)
        bucket = references.setdefault(number, [])
        bucket.extend(u for u in urls if u not in bucket)
    return "\n".join(lines[:cut]), references, no_url


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _squash(text: str) -> str:
    return _SPACE.sub(" ", _MARKER.sub("", text)).strip().casefold()


_key = _squash


def _name_like(word: str) -> bool:
    return len(word) > 1 and word[0].isupper() and word.casefold() not in COMMON_WORDS


def known_names(*texts: str) -> frozenset[str]:
    """The names a text makes known (casefolded): words it writes capitalised past the first
    word of a sentence and never in lower case (so a title-cased heading's ordinary words,
    written in lower case elsewhere, are no names)."""
    names: set[str] = set()
    for text in texts:
        capitalised: set[str] = set()
        lower: set[str] = set()
        for sentence in _sentences(text or ""):
            words = _WORD.findall(sentence)
            lower.update(w for w in words if w.islower())
            capitalised.update(w.casefold() for w in words[1:] if _name_like(w))
        names |= capitalised - lower
    return frozenset(names)


def factual_reason(
    sentence: str,
    *,
    names: Iterable[str] = (),
    flagged: Iterable[str] = (),
) -> str | None:
    """Why ``sentence`` states a checkable fact, or ``None``: it holds a number (digits or a
    number word), a date (a month or weekday name; years are digits), a name (a capitalised
    word past its first, or one of ``names`` in any case: those the task or the evidence make
    known), a quotation, or a span the Critic flagged (``flagged``: the previous critique's
    quotes). Cheap and deterministic: a stand-in for a claim detector that errs on the side
    of asking for a citation."""
    bare = _MARKER.sub("", sentence)
    if _MARKDOWN_HEADING.match(bare):
        return None  # a heading states nothing
    words = _WORD.findall(bare)
    folded = [w.casefold() for w in words]
    if _DIGIT.search(bare) or any(w in NUMBER_WORDS for w in folded):
        return "a number"
    if any(w in MONTHS or w in WEEKDAYS for w in folded) or any(
        w[0].isupper() and w.casefold() in MONTHS_IF_CAPITALISED for w in words
    ):
        return "a date"
    if any(_name_like(w) for w in words[1:]):
        return "a name"
    known = set(names)
    if known and any(w in known for w in folded):
        return "a name known from the task or the evidence"
    if _QUOTED.search(bare):
        return "a quotation"
    key = _squash(bare)
    for quote in flagged:
        span = _squash(quote)
        if span and (span in key or (len(key) >= 10 and key in span)):
            return "a span the critic flagged"
    return None


def looks_factual(sentence: str, *, names: Iterable[str] = (), flagged: Iterable[str] = ()) -> bool:
    """Whether ``sentence`` states a checkable fact (:func:`factual_reason`)."""
    return factual_reason(sentence, names=names, flagged=flagged) is not None


def validate_citations(
    output: str,
    evidence: Sequence[str] | Mapping[int, str],
    *,
    previous: str | None = None,
    require_citations: bool = False,
    task: str = "",
    sources: Iterable[str] = (),
    flagged: Iterable[str] = (),
) -> CitationReport:
    """Check ``output``'s markers and reference list against ``evidence`` (its URLs by
    number, or in order from 1); with ``require_citations``, also flag new factual sentences
    (against ``previous``) that cite nothing: names are known from ``task`` and the
    evidence's texts (``sources``), ``flagged`` are the Critic's quotes."""
    by_number = numbered_urls(evidence)
    owner: dict[str, int] = {}
    for number, url in sorted(by_number.items()):
        owner.setdefault(url, number)
    body, references, no_url = split_references(output)
    cited = sorted({int(m) for m in _MARKER.findall(body)})
    problems: list[CitationProblem] = []
    for number in cited:
        if number not in references:
            problems.append(
                CitationProblem(
                    kind=ProblemKind.unknown_number,
                    number=number,
                    message=f"[{number}] is cited but the reference list has no entry {number}",
                )
            )
    for number in sorted(set(no_url)):
        if not references.get(number):
            problems.append(
                CitationProblem(
                    kind=ProblemKind.missing_url,
                    number=number,
                    message=f"reference [{number}] gives no URL",
                )
            )
    for number, urls in sorted(references.items()):
        if len(urls) > 1:
            problems.append(
                CitationProblem(
                    kind=ProblemKind.several_urls,
                    number=number,
                    message=f"reference [{number}] has {len(urls)} URLs; give exactly one",
                )
            )
        for url in urls:
            if url not in owner:
                problems.append(
                    CitationProblem(
                        kind=ProblemKind.url_not_in_evidence,
                        number=number,
                        url=url,
                        message=f"reference [{number}] cites {url}, which is not in the evidence",
                    )
                )
        if len(urls) == 1 and urls[0] in owner and owner[urls[0]] != number:
            problems.append(_wrong_source(number, urls[0], owner[urls[0]], by_number))
        if number not in cited:
            problems.append(
                CitationProblem(
                    kind=ProblemKind.uncited_reference,
                    number=number,
                    url=urls[0] if len(urls) == 1 else None,
                    message=f"reference [{number}] is listed but the text never cites "
                    f"[{number}]: cite it where its claim is, or drop the line",
                )
            )
    if require_citations:
        names = known_names(task, *sources)
        quotes = [q for q in flagged if q and q.strip()]
        before = {_key(s) for s in _sentences(previous or "")}
        for sentence in _sentences(body):
            if _MARKER.search(sentence) or _key(sentence) in before:
                continue
            why = factual_reason(sentence, names=names, flagged=quotes)
            if why is not None:
                problems.append(
                    CitationProblem(
                        kind=ProblemKind.uncited_claim,
                        sentence=sentence,
                        message=f"new factual sentence ({why}) without a citation: "
                        f"{sentence[:200]!r}",
                    )
                )
    return CitationReport(cited=cited, references=references, problems=problems)


def _wrong_source(number: int, url: str, owner: int, by_number: dict[int, str]) -> CitationProblem:
    own = by_number.get(number)
    if own is None:
        message = (
            f"[{number}] lists evidence [{owner}]'s URL {url}, and there is no evidence "
            f"[{number}]: cite that source as [{owner}]"
        )
    else:
        message = (
            f"[{number}] lists evidence [{owner}]'s URL {url}, but evidence [{number}] is "
            f"{own}: cite [{owner}] for that source, or give [{number}] its own URL"
        )
    return CitationProblem(kind=ProblemKind.wrong_source, number=number, url=url, message=message)
