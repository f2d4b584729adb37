"""The built-in scripted behaviour: pure functions from a prompt to a structured answer.

The Actor and the Critic send their prompts with XML-like tagged sections (``<task>``,
``<kind>``, ``<entry_point>``, ``<previous_output>``, ``<reflections>``,
``<candidate_output>``). :func:`parse_sections` reads them; :func:`actor_output` and
:func:`critique` answer them deterministically:

* **primes** (a code task mentioning "prime"): the draft is trial division, the revision a
  Sieve of Eratosthenes; the Critic asks for the sieve and passes it once it is there.
* **generic text**: a short multi-sentence draft; the revision ends with a ``(revised)`` line,
  which the Critic passes.
* **generic code**: a valid Python function; the revision carries a ``# revised`` comment,
  which the Critic passes.
* **bench** (``[bench:N]`` or ``[bench:N:SIZE]`` in the task): version k says so; the Critic
  passes version N; SIZE pads every version to about that many characters.
* **binding points** (a human reviewer's ``<binding_points>``, in any scenario): the revision
  adds one ``Reviewer point applied: <point>`` line per point (a comment in code) and answers
  each point ``applied``; the Critic reports a point satisfied exactly when the candidate
  contains its text, quoting that line.
* **critic issues** (the numbered ``<critic_issues>`` of a revise prompt, in any scenario):
  the revision answers each issue by its id, ``applied``, with ``where`` naming the output;
  so does a scripted revision that has no ``responses`` field (:func:`scripted_actor`).

Every quote a critique emits is an exact substring of the candidate output.

* **research** (generic text): the draft proposes one search query, the task's first words;
  a revision given ``<evidence>`` adds one sentence from source 1, cites it ``[1]`` and ends
  with the reference line ``[1] URL``, as the revise prompt asks.

The Research service's distillation (schema ``distillation``, stage ``distill``) answers
with the ``<passage>``'s sentences that share a word with the ``<query>``.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any, Literal

Stage = Literal["draft", "revise", "critique", "distill"]
Role = Literal["actor", "critic", "researcher"]
Kind = Literal["text", "code"]
Scenario = Literal["primes", "text", "code", "bench"]

ACTOR_SCHEMA_NAME = "actor_output"
CRITIC_SCHEMA_NAME = "critique"
DISTILL_SCHEMA_NAME = "distillation"
REVISED_TEXT_MARKER = "(revised)"
REVISED_CODE_MARKER = "# revised"
DEFAULT_PRIMES_NAME = "primes_up_to"
DEFAULT_CODE_NAME = "solution"

_SUMMARY_CHARS = 160
_REFLECTION_CHARS = 200
_MAX_REFLECTIONS_ECHOED = 3


# ------------------------------------------------------------------ prompt parsing


@dataclass(frozen=True)
class Source:
    """One numbered source of an ``<evidence>`` block."""

    n: int
    title: str
    url: str
    text: str


@dataclass(frozen=True)
class PromptSections:
    """The tagged sections of a prompt; an absent tag is ``None``."""

    task: str = ""
    kind: Kind = "text"
    entry_point: str | None = None
    previous_output: str | None = None
    reflections: str | None = None
    candidate_output: str | None = None
    binding_points: tuple[str, ...] = ()
    critic_issues: tuple[str, ...] = ()
    query: str | None = None
    passage: str | None = None
    evidence: tuple[Source, ...] = ()

    @property
    def is_code(self) -> bool:
        return self.kind == "code"


def extract_tag(text: str, tag: str) -> str | None:
    """The content between the first ``<tag>`` and the next ``</tag>``; ``None`` if absent."""
    opening = f"<{tag}>"
    start = text.find(opening)
    if start < 0:
        return None
    start += len(opening)
    end = text.find(f"</{tag}>", start)
    if end < 0:
        return None
    return text[start:end]


def _trim_block(value: str | None) -> str | None:
    """Drop the line breaks that wrap a block, keep everything else verbatim."""
    return None if value is None else value.strip("\r\n")


def parse_sections(text: str) -> PromptSections:
    """Parse the tagged sections of a user message."""
    task = (extract_tag(text, "task") or "").strip()
    entry_point = (extract_tag(text, "entry_point") or "").strip() or None
    raw_kind = (extract_tag(text, "kind") or "").strip().lower()
    kind: Kind
    if raw_kind in ("text", "code"):
        kind = "code" if raw_kind == "code" else "text"
    else:
        kind = "code" if entry_point else "text"
    return PromptSections(
        task=task,
        kind=kind,
        entry_point=entry_point,
        previous_output=_trim_block(extract_tag(text, "previous_output")),
        reflections=_trim_block(extract_tag(text, "reflections")),
        candidate_output=_trim_block(extract_tag(text, "candidate_output")),
        binding_points=tuple(
            re.sub(r"^\s*\d+[.)]\s*", "", line).strip()
            for line in (extract_tag(text, "binding_points") or "").splitlines()
            if line.strip()
        ),
        critic_issues=issue_ids(extract_tag(text, "critic_issues")),
        query=_trim_block(extract_tag(text, "query")),
        passage=_trim_block(extract_tag(text, "passage")),
        evidence=parse_evidence(extract_tag(text, "evidence")),
    )


_SOURCE_LINE = re.compile(r"^\[(\d+)\]\s+(.*?)\s*(\S+)$")


def parse_evidence(block: str | None) -> tuple[Source, ...]:
    """The sources of an ``<evidence>`` block: ``[n] title url`` lines, each followed by the
    source's claims or snippet."""
    sources: list[Source] = []
    lines = (block or "").splitlines()
    for i, line in enumerate(lines):
        match = _SOURCE_LINE.match(line.strip())
        if match and "://" in match.group(3):
            text = lines[i + 1].strip() if i + 1 < len(lines) else ""
            sources.append(Source(int(match.group(1)), match.group(2), match.group(3), text))
    return tuple(sources)


_ISSUE_LINE = re.compile(r"^\s*\[(i\d+)\]")


def issue_ids(block: str | None) -> tuple[str, ...]:
    """The ids (``i1``, ``i2``, ...) that open the lines of a ``<critic_issues>`` block."""
    found = (_ISSUE_LINE.match(line) for line in (block or "").splitlines())
    return tuple(match.group(1) for match in found if match)


# ------------------------------------------------------------------ role and stage


def _normalise_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def role_from_schema(name: str | None, schema: dict[str, Any] | None) -> Role | None:
    """Who is asking: by the structured-output name, else by the schema's properties."""
    if name:
        normalised = _normalise_name(name)
        if normalised == _normalise_name(ACTOR_SCHEMA_NAME):
            return "actor"
        if normalised == _normalise_name(CRITIC_SCHEMA_NAME):
            return "critic"
        if normalised == _normalise_name(DISTILL_SCHEMA_NAME):
            return "researcher"
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        if "verdict" in properties:
            return "critic"
        if "output" in properties:
            return "actor"
        if "claims" in properties:
            return "researcher"
    return None


def detect_stage(role: Role | None, sections: PromptSections) -> Stage:
    """``critique`` for the Critic; for the Actor ``revise`` when a previous output is given."""
    if role == "critic":
        return "critique"
    if role == "researcher":
        return "distill"
    if role is None and sections.candidate_output is not None:
        return "critique"
    return "revise" if sections.previous_output is not None else "draft"


_BENCH = re.compile(r"\[bench:(\d+)(?::(\d+))?\]")
_BENCH_VERSION = re.compile(r"^Bench answer version (\d+)\.")


def bench_rounds(task: str) -> int | None:
    """``[bench:N]`` in a task: the critic passes version N, so a run takes N rounds."""
    match = _BENCH.search(task)
    return int(match.group(1)) if match else None


def bench_size(task: str) -> int:
    """``[bench:N:SIZE]``: each version is padded to about SIZE characters (0: unpadded)."""
    match = _BENCH.search(task)
    return int(match.group(2)) if match and match.group(2) else 0


def bench_output(version: int, size: int = 0) -> str:
    points = " ".join(f"Point {i} is covered in version {version}." for i in range(1, version + 2))
    text = f"Bench answer version {version}. {points}"
    line = 0
    while len(text) < size:  # the same lines in every version, so a revision changes little
        line += 1
        text += f"\nBackground line {line}: the answer keeps this context as it is."
    return text


def bench_version(text: str) -> int:
    match = _BENCH_VERSION.match(text.strip())
    return int(match.group(1)) if match else 0


def detect_scenario(sections: PromptSections) -> Scenario:
    if bench_rounds(sections.task) is not None:
        return "bench"
    if sections.is_code and "prime" in sections.task.lower():
        return "primes"
    return "code" if sections.is_code else "text"


# ------------------------------------------------------------------ helpers


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one token per four characters, at least one."""
    return len(text) // 4 + 1


def summarise_task(task: str) -> str:
    """The task's first line, whitespace collapsed, markers removed, at most 160 characters."""
    first = next((line for line in task.splitlines() if line.strip()), "")
    summary = " ".join(first.split())
    summary = summary.replace(REVISED_TEXT_MARKER, "").replace("#", "").strip()
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[: _SUMMARY_CHARS - 3].rstrip() + "..."
    summary = summary.rstrip(" .!?;:")
    return summary or "the task"


def function_name(entry_point: str | None, default: str) -> str:
    """``entry_point`` when it is a usable Python identifier, else ``default``."""
    if entry_point and entry_point.isidentifier() and not keyword.iskeyword(entry_point):
        return entry_point
    return default


def split_reflections(reflections: str | None) -> list[str]:
    """The reflection lines without bullets, numbering or a leading ``[source]`` label."""
    if not reflections:
        return []
    items: list[str] = []
    for line in reflections.splitlines():
        cleaned = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line)
        cleaned = re.sub(r"^\[[^\]]*\]\s*", "", cleaned.strip()).strip()
        if cleaned:
            items.append(" ".join(cleaned.split()))
    return items


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` as exact substrings of it (no normalisation)."""
    sentences: list[str] = []
    for line in text.splitlines():
        for piece in re.split(r"(?<=[.!?])\s+", line):
            piece = piece.strip()
            if piece:
                sentences.append(piece)
    return sentences


def _strip_marker_line(text: str, marker: str) -> str:
    lines = text.rstrip().splitlines()
    while lines and lines[-1].strip() == marker:
        lines.pop()
    return "\n".join(lines).rstrip()


# ------------------------------------------------------------------ primes


def primes_trial_division(name: str = DEFAULT_PRIMES_NAME) -> str:
    return (
        f"def {name}(n):\n"
        '    """Return all primes <= n, in increasing order."""\n'
        "    primes = []\n"
        "    for k in range(2, n + 1):\n"
        "        is_prime = True\n"
        "        for d in range(2, k):\n"
        "            if k % d == 0:\n"
        "                is_prime = False\n"
        "                break\n"
        "        if is_prime:\n"
        "            primes.append(k)\n"
        "    return primes\n"
    )


def primes_sieve(name: str = DEFAULT_PRIMES_NAME) -> str:
    return (
        f"def {name}(n):\n"
        '    """Return all primes <= n, in increasing order."""\n'
        "    if n < 2:\n"
        "        return []\n"
        "    # Sieve of Eratosthenes: cross off the multiples of each prime p from p * p.\n"
        "    is_prime = [True] * (n + 1)\n"
        "    is_prime[0] = is_prime[1] = False\n"
        "    p = 2\n"
        "    while p * p <= n:\n"
        "        if is_prime[p]:\n"
        "            for multiple in range(p * p, n + 1, p):\n"
        "                is_prime[multiple] = False\n"
        "        p += 1\n"
        "    return [k for k in range(2, n + 1) if is_prime[k]]\n"
    )


def trial_division_line(candidate: str) -> str | None:
    """The innermost ``for ... in range(...)`` line of ``candidate``, without its indent."""
    best: tuple[int, str] | None = None
    for line in candidate.splitlines():
        stripped = line.strip()
        if re.match(r"for\s+\w+\s+in\s+range\(", stripped):
            indent = len(line) - len(line.lstrip())
            if best is None or indent > best[0]:
                best = (indent, stripped)
    return None if best is None else best[1]


def _first_line(candidate: str) -> str | None:
    return next((line.strip() for line in candidate.splitlines() if line.strip()), None)


# ------------------------------------------------------------------ generic text and code


def text_draft(task: str) -> str:
    summary = summarise_task(task)
    return (
        f"Here is a direct answer to: {summary}. "
        "It states the main point first and then the supporting detail. "
        "It does not yet spell out its assumptions or the edge cases."
    )


_REFERENCE_LINE = re.compile(r"^\s*\[\d+\]\s+\S+://\S+\s*$")
_QUERY_WORDS = 8


def search_query(task: str) -> str:
    """The demo draft's search query: the first words of the task (at most eight)."""
    return " ".join(re.findall(r"[\w'-]+", summarise_task(task))[:_QUERY_WORDS])


def _strip_references(text: str) -> str:
    lines = text.rstrip().splitlines()
    while lines and (_REFERENCE_LINE.match(lines[-1]) or not lines[-1].strip()):
        lines.pop()
    return "\n".join(lines)


def _cited_sentence(source: Source) -> str:
    claim = (split_sentences(source.text) or [source.title or "the source"])[0]
    if claim.startswith("#"):  # a passage that opens with its document's Markdown heading
        claim = re.sub(r"^#+\s*", "", claim)
        if source.title and claim.startswith(source.title + " "):
            claim = claim[len(source.title) :].strip()
    claim = claim[:_REFLECTION_CHARS].rstrip(" .!?;:")
    return f"According to {source.title or 'the source'}: {claim} [{source.n}]."


def text_revision(previous: str, reflections: list[str], evidence: tuple[Source, ...] = ()) -> str:
    previous = _strip_references(previous)
    base = _strip_marker_line(previous, REVISED_TEXT_MARKER) or "Here is a direct answer."
    addressed = "; ".join(r[:_REFLECTION_CHARS] for r in reflections[:_MAX_REFLECTIONS_ECHOED])
    lines = [base]
    if addressed:
        lines.append(f"This version addresses the feedback: {addressed}.")
    source = evidence[0] if evidence else None
    if source is not None and f"[{source.n}]" not in base:
        lines.append(_cited_sentence(source))
    lines.append("It now states its assumptions and covers the edge cases explicitly.")
    lines.append(REVISED_TEXT_MARKER)
    if source is not None:
        lines.extend(["", f"[{source.n}] {source.url}"])
    return "\n".join(lines)


def code_draft(task: str, name: str) -> str:
    summary = summarise_task(task)
    return (
        f"def {name}(*args):\n"
        f"    # Draft for: {summary}\n"
        "    result = None\n"
        "    for value in args:\n"
        "        result = value\n"
        "    return result\n"
    )


def code_revision(task: str, name: str, reflections: list[str]) -> str:
    summary = summarise_task(task)
    note = ""
    if reflections:
        note = " ".join(reflections[0].replace("#", "").split())[:_REFLECTION_CHARS]
    lines = [
        f"def {name}(*args):",
        f"    # Revision for: {summary}",
        f"    {REVISED_CODE_MARKER}: validates its inputs before using them.",
    ]
    if note:
        lines.append(f"    # Feedback addressed: {note}")
    lines += [
        "    if not args:",
        "        return None",
        "    return args[-1]",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the two roles


APPLIED_PREFIX = "Reviewer point applied: "


def apply_points(sections: PromptSections, answer: dict[str, Any]) -> dict[str, Any]:
    """Carry out each binding point in the output, and answer every point ``applied``."""
    whole = answer["output"].rstrip("\n")
    body = _strip_references(whole)  # the points go above a trailing reference list
    references = whole[len(body) :] if whole.startswith(body) else ""
    lines = [body if references else whole]
    responses = []
    for point in sections.binding_points:
        line = f"{'# ' if sections.is_code else ''}{APPLIED_PREFIX}{' '.join(point.split())}"
        lines.append(line)
        responses.append({"point": point, "action": "applied", "reason": "", "where": line})
    return {**answer, "output": "\n".join(lines) + references + "\n", "responses": responses}


def binding_checks(sections: PromptSections, candidate: str) -> list[dict[str, Any]]:
    checks = []
    for point in sections.binding_points:
        wanted = " ".join(point.split()).casefold()
        line = next((ln.strip() for ln in candidate.splitlines() if wanted in ln.casefold()), None)
        checks.append({"point": point, "satisfied": line is not None, "quote": line})
    return checks


def answer_issues(sections: PromptSections, answer: dict[str, Any]) -> dict[str, Any]:
    """Answer every numbered critic issue ``applied`` (the revision addressed them all)."""
    responses = [
        {
            "point": "",
            "issue": issue,
            "action": "applied",
            "reason": "",
            "where": "the revised output",
            "source": "",
        }
        for issue in sections.critic_issues
    ]
    return {**answer, "responses": [*answer["responses"], *responses]}


def scripted_actor(sections: PromptSections, stage: Stage, value: Any) -> Any:
    """A scripted revision without a ``responses`` field answers the prompt's critic issues
    ``applied`` (scripts written for other rules need not spell them out); one that has the
    field, even empty, is sent as it is."""
    if stage != "revise" or not sections.critic_issues:
        return value
    if not isinstance(value, dict) or "responses" in value:
        return value
    return answer_issues(sections, {**value, "responses": []})


def actor_output(sections: PromptSections, stage: Stage) -> dict[str, Any]:
    """The Actor's structured answer ``{"output", "uncertainties", "responses"}``."""
    answer = {"responses": [], **_actor_output(sections, stage)}
    if stage == "revise" and sections.binding_points:
        answer = apply_points(sections, answer)
    if stage == "revise" and sections.critic_issues:
        answer = answer_issues(sections, answer)
    return answer


def _actor_output(sections: PromptSections, stage: Stage) -> dict[str, Any]:
    scenario = detect_scenario(sections)
    revising = stage == "revise"
    reflections = split_reflections(sections.reflections)
    if scenario == "bench":
        version = bench_version(sections.previous_output or "") + 1 if revising else 1
        return {"output": bench_output(version, bench_size(sections.task)), "uncertainties": []}
    if scenario == "primes":
        name = function_name(sections.entry_point, DEFAULT_PRIMES_NAME)
        if revising:
            return {
                "output": primes_sieve(name),
                "uncertainties": ["The sieve allocates a list of n + 1 flags."],
            }
        return {
            "output": primes_trial_division(name),
            "uncertainties": ["Trial division is slow for large n."],
        }
    if scenario == "code":
        name = function_name(sections.entry_point, DEFAULT_CODE_NAME)
        if revising:
            return {"output": code_revision(sections.task, name, reflections), "uncertainties": []}
        return {
            "output": code_draft(sections.task, name),
            "uncertainties": ["The expected inputs are not fully specified."],
        }
    if revising:
        previous = sections.previous_output or text_draft(sections.task)
        output = text_revision(previous, reflections, sections.evidence)
        return {"output": output, "uncertainties": []}
    query = search_query(sections.task)
    return {
        "output": text_draft(sections.task),
        "uncertainties": ["The task may expect more detail than this short answer gives."],
        "search_queries": [query] if query else [],
    }


NO_ERROR_JUSTIFICATION = (
    "Checked every part of the task against the candidate output: each requirement is "
    "answered, nothing contradicts the task or itself, and no claim lacks support."
)


def _passing(confidence: float, reflection: str) -> dict[str, Any]:
    return {
        "verdict": "pass",
        "confidence": confidence,
        "issues": [],
        "reflection": reflection,
        "error_class": "none",
    }


def _record(verdict: dict[str, Any], error_type: str) -> dict[str, Any]:
    """The reflection record of a critique with issues: each issue's error type, the span
    again as ``original_text``, no replacement and the task as its evidence."""
    issues = [
        {
            **issue,
            "error_type": error_type,
            "original_text": issue.get("quote"),
            "corrected_text": None,
            "evidence_source": "task",
        }
        for issue in verdict["issues"]
    ]
    return {**verdict, "issues": issues, "no_error_found": False, "justification": ""}


ERROR_TYPES: dict[Scenario, str] = {
    "primes": "inefficient_algorithm",
    "code": "unhandled_edge_case",
    "text": "other",
    "bench": "other",
}


def reflection_record(sections: PromptSections, verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict as a reflection record: issues with their error type and evidence, or
    ``no_error_found`` with a justification."""
    if not verdict["issues"]:
        return {**verdict, "no_error_found": True, "justification": NO_ERROR_JUSTIFICATION}
    scenario = detect_scenario(sections) if (sections.candidate_output or "").strip() else None
    return _record(verdict, ERROR_TYPES[scenario] if scenario else "other")


def critique(sections: PromptSections) -> dict[str, Any]:
    candidate = sections.candidate_output or ""
    scenario = detect_scenario(sections)
    if not candidate.strip():
        return {
            "verdict": "revise",
            "confidence": 0.9,
            "issues": [
                {
                    "dimension": "completeness",
                    "severity": "critical",
                    "quote": None,
                    "suggestion": "Produce an answer; the output is empty.",
                }
            ],
            "reflection": "Strategy: answer the task directly before refining anything.",
            "error_class": "logic",
        }
    if scenario == "bench":
        version, wanted = bench_version(candidate), bench_rounds(sections.task) or 1
        if version >= wanted:
            return _passing(0.9, "Version is final.")
        return {
            "verdict": "revise",
            "confidence": 0.8,
            "issues": [
                {
                    "dimension": "completeness",
                    "severity": "minor",
                    "quote": f"Bench answer version {version}.",
                    "suggestion": f"Cover point {version + 2}.",
                }
            ],
            "reflection": f"Strategy: add point {version + 2} (round {version} of {wanted}).",
            "error_class": "logic",
        }
    if scenario == "primes":
        if "sieve" in candidate.lower():
            return _passing(
                0.93, "The sieve returns every prime <= n efficiently; nothing left to change."
            )
        return {
            "verdict": "revise",
            "confidence": 0.85,
            "issues": [
                {
                    "dimension": "complexity",
                    "severity": "major",
                    "quote": trial_division_line(candidate) or _first_line(candidate),
                    "suggestion": (
                        "Use the Sieve of Eratosthenes: mark the multiples of each prime "
                        "from p * p up to n instead of trial-dividing every number."
                    ),
                }
            ],
            "reflection": (
                "Strategy: replace per-number trial division with a Sieve of Eratosthenes "
                "over 0..n so each composite is crossed off once; keep the function name "
                "and return the primes <= n in increasing order."
            ),
            "error_class": "logic",
        }
    if scenario == "code":
        if REVISED_CODE_MARKER in candidate:
            return _passing(0.9, "The function handles its inputs; nothing left to change.")
        lines = [line.strip() for line in candidate.splitlines() if line.strip()]
        returns = [line for line in lines if line.startswith("return ")]
        quote = returns[-1] if returns else lines[-1]
        return {
            "verdict": "revise",
            "confidence": 0.8,
            "issues": [
                {
                    "dimension": "correctness",
                    "severity": "minor",
                    "quote": quote,
                    "suggestion": "Validate the inputs and handle the empty case explicitly.",
                }
            ],
            "reflection": (
                "Strategy: check the inputs first and make the empty case explicit, "
                "then return the value the task asks for."
            ),
            "error_class": "logic",
        }
    if REVISED_TEXT_MARKER in candidate:
        return _passing(0.9, "The answer is complete for the task; nothing left to change.")
    sentences = split_sentences(candidate)
    return {
        "verdict": "revise",
        "confidence": 0.8,
        "issues": [
            {
                "dimension": "completeness",
                "severity": "minor",
                "quote": sentences[-1],
                "suggestion": "State the assumptions and cover the edge cases explicitly.",
            }
        ],
        "reflection": (
            "Strategy: keep the structure, and add the assumptions and edge cases "
            "the answer leaves implicit."
        ),
        "error_class": "logic",
    }


# ------------------------------------------------------------------ research distillation


_QUERY_WORD = re.compile(r"\w{3,}")


def distillation(sections: PromptSections) -> dict[str, Any]:
    """The Research service's distillation ``{"claims", "relevant"}``: the passage's
    sentences that share a word of three letters or more with the query, verbatim (so
    each claim is a span of the passage), at most five."""
    words = {w.casefold() for w in _QUERY_WORD.findall(sections.query or "")}
    claims = [
        sentence
        for sentence in split_sentences(sections.passage or "")
        if words & {w.casefold() for w in _QUERY_WORD.findall(sentence)}
    ][:5]
    return {"claims": claims, "relevant": bool(claims)}


def structured_output(sections: PromptSections, stage: Stage) -> dict[str, Any]:
    """The built-in answer for ``stage``: a critique or an Actor output (with the empty
    ``queries`` / ``search_queries`` a strict-mode model sends when it has none)."""
    if stage == "distill":
        return distillation(sections)
    if stage == "critique":
        verdict = reflection_record(sections, critique(sections))
        return {
            "queries": [],
            **verdict,
            "binding_checks": binding_checks(sections, sections.candidate_output or ""),
        }
    return {"search_queries": [], **actor_output(sections, stage)}
