"""Check the citations of an output against the evidence it was given (pure, no I/O).

An output cites ``[n]`` in its text and ends with a reference list, one line per number::

    The bridge opened in 1932 [1].

    References
    [1] https://example.org/bridge

A reference line is ``[n] ...`` (or ``[n]: ...``) holding the source's URL; a heading above
the list (References, Sources, ...) is optional. :func:`validate_citations` reports:

* ``unknown_number``: a marker ``[n]`` with no reference line for ``n``;
* ``url_not_in_evidence``: a reference URL that is none of the evidence's URLs;
* ``several_urls``: a number with more than one URL (on one line or over several lines);
* ``missing_url``: a reference line with no URL;
* ``uncited_claim`` (only with ``require_citations``): a factual sentence (it holds a number
  or a name) that is new against ``previous`` and cites nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

_MARKER = re.compile(r"\[(\d{1,4})\]")
_REF_LINE = re.compile(r"^\s*\[(\d{1,4})\]:?\s*(.*)$")
_URL = re.compile(r"(?:https?|file)://[^\s<>\"'\])]+")
_HEADING = re.compile(
    r"^\s*(?:#+\s*)?\**(?:references|sources|citations|bibliography|works cited)\**:?\s*$",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_DIGIT = re.compile(r"\d")
_NAME = re.compile(r"(?<=\s)[A-Z][a-z]+")
_SPACE = re.compile(r"\s+")


class ProblemKind(StrEnum):
    unknown_number = "unknown_number"
    url_not_in_evidence = "url_not_in_evidence"
    several_urls = "several_urls"
    missing_url = "missing_url"
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
        lines = ["Fix the citations: cite [n] only with the evidence's URLs, one URL each."]
        lines += [f"- {p.message}" for p in self.problems]
        return "\n".join(lines)


def _clean_url(url: str) -> str:
    return url.rstrip(".,;:")


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


def _key(sentence: str) -> str:
    return _SPACE.sub(" ", _MARKER.sub("", sentence)).strip().casefold()


def looks_factual(sentence: str) -> bool:
    """A sentence stating a checkable fact: it holds a digit or a capitalised name past its
    first word (a cheap, deterministic stand-in for a claim detector)."""
    bare = _MARKER.sub("", sentence)
    return bool(_DIGIT.search(bare) or _NAME.search(" " + bare.strip()[1:]))


def validate_citations(
    output: str,
    evidence_urls: Iterable[str],
    *,
    previous: str | None = None,
    require_citations: bool = False,
) -> CitationReport:
    """Check ``output``'s markers and reference list against ``evidence_urls``; with
    ``require_citations``, also flag new factual sentences (against ``previous``) that cite
    nothing."""
    allowed = {_clean_url(u) for u in evidence_urls}
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
            if url not in allowed:
                problems.append(
                    CitationProblem(
                        kind=ProblemKind.url_not_in_evidence,
                        number=number,
                        url=url,
                        message=f"reference [{number}] cites {url}, which is not in the evidence",
                    )
                )
    if require_citations:
        before = {_key(s) for s in _sentences(previous or "")}
        for sentence in _sentences(body):
            if _MARKER.search(sentence) or _key(sentence) in before:
                continue
            if looks_factual(sentence):
                problems.append(
                    CitationProblem(
                        kind=ProblemKind.uncited_claim,
                        sentence=sentence,
                        message=f"new factual sentence without a citation: {sentence[:200]!r}",
                    )
                )
    return CitationReport(cited=cited, references=references, problems=problems)
