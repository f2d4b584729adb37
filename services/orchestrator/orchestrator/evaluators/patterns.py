"""Regular expressions from run schemas, bounded before they are compiled, matched by RE2.

A JSON Schema ``pattern`` is untrusted input. Backtracking engines (Python's ``re``, the
``regex`` module) expand a counted repeat in memory when they compile it (``a{1000000000}``
asks for gigabytes) and can take exponential time to match (``^(a|aa)+$``). RE2 matches in
time linear in the text and keeps each pattern within a memory budget; what it cannot do in
linear time (lookaround, backreferences) it refuses. Before RE2 sees a pattern, its length,
its counted repeats and its group nesting are checked against limits, so every refusal names
the limit it crossed.

This module is imported by the schema worker processes too: it needs nothing of the service.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from referencing import Registry
from referencing.exceptions import NoSuchResource

# RE2 refuses a counted repeat above 1,000 (and nested repeats whose product is above it).
RE2_MAX_REPEAT = 1000


@dataclass(frozen=True)
class PatternLimits:
    max_length: int = 1000  # characters of one pattern
    max_repeat: int = RE2_MAX_REPEAT  # n and m of {n}, {n,}, {n,m}
    max_depth: int = 32  # groups inside groups
    max_mem_kb: int = 2048  # RE2's memory budget for one compiled pattern


class PatternRefused(ValueError):
    """A pattern crosses a limit or uses what RE2 cannot match; the message says which."""


_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
_UNSUPPORTED = (
    "lookaround ((?=, (?!, (?<=, (?<!) and backreferences (\\1, \\k<name>) are not supported: "
    "patterns are matched by RE2, in time linear in the text"
)


def bounded(pattern: str, limits: PatternLimits) -> str:
    """The pattern in RE2's syntax, or ``PatternRefused`` naming the limit it crosses.

    JSON Schema patterns are ECMA-262: ``\\uXXXX`` is rewritten as RE2's ``\\x{XXXX}``;
    everything else RE2 reads as ECMA-262 does, or refuses.
    """
    if len(pattern) > limits.max_length:
        raise PatternRefused(
            f"it is {len(pattern)} characters long, above the limit of {limits.max_length}"
        )
    out: list[str] = []
    depth = 0
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not in_class and (nxt in tuple("123456789") or pattern.startswith("k<", i + 1)):
                shown = pattern[i : i + 3] if nxt == "k" else pattern[i : i + 2]
                raise PatternRefused(f"{shown!r} is a backreference; {_UNSUPPORTED}")
            if nxt == "u" and _HEX4.fullmatch(pattern, i + 2, i + 6):
                out.append("\\x{" + pattern[i + 2 : i + 6] + "}")
                i += 6
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"  # a ']' first in a class is a literal (RE2, POSIX)
            out.append(pattern[i:j])
            i = j
            continue
        if c == "(":
            for operator in _LOOKAROUND:
                if pattern.startswith(operator, i):
                    raise PatternRefused(f"{operator!r} is a lookaround; {_UNSUPPORTED}")
            depth += 1
            if depth > limits.max_depth:
                raise PatternRefused(
                    f"its groups nest more than {limits.max_depth} deep (the limit)"
                )
        elif c == ")":
            depth = max(0, depth - 1)
        elif c == "{" and (m := _REPEAT.match(pattern, i)):
            for count in m.groups():
                if count and (len(count) > 9 or int(count) > limits.max_repeat):
                    raise PatternRefused(
                        f"the repeat {m.group(0)} counts above the limit of {limits.max_repeat}"
                    )
        out.append(c)
        i += 1
    return "".join(out)


def _options(limits: PatternLimits) -> re2.Options:
    options = re2.Options()
    options.max_mem = limits.max_mem_kb * 1024
    options.log_errors = False  # patterns are tenants' data: not for the service's stderr
    return options


def compile_pattern(pattern: str, limits: PatternLimits) -> Any:
    """The compiled pattern (RE2), or ``PatternRefused`` saying why not."""
    translated = bounded(pattern, limits)
    try:
        return re2.compile(translated, _options(limits))
    except UnicodeEncodeError:
        raise PatternRefused("it holds a lone surrogate (\\ud800-\\udfff), not text") from None
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        if "too large" in reason:
            reason = f"it needs more than the {limits.max_mem_kb} KB memory budget of a pattern"
        elif "repetition size" in reason:
            reason += f" (repeats inside repeats may not multiply to more than {RE2_MAX_REPEAT})"
        elif "invalid perl operator" in reason or "invalid escape sequence" in reason:
            reason += f"; {_UNSUPPORTED}"
        raise PatternRefused(reason) from None


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class


# No $ref is ever fetched: without this jsonschema would fetch http(s) references.
OFFLINE: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


@functools.cache
def validator_class(limits: PatternLimits) -> Any:
    """Draft 2020-12 with ``pattern`` and ``patternProperties`` matched by bounded RE2."""

    def search(patrn: str, text: str) -> bool | str:
        """Whether the pattern matches; a string says why it cannot be used."""
        try:
            compiled = compile_pattern(patrn, limits)
            # lone surrogates (JSON allows "\ud800") are not UTF-8: RE2 sees their bytes
            return compiled.search(text.encode("utf-8", "surrogatepass")) is not None
        except PatternRefused as exc:
            return f"the pattern {patrn!r} cannot be used: {exc}"

    def pattern(
        validator: Any, patrn: str, instance: Any, schema: dict[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "string"):
            return
        matched = search(patrn, instance)
        if isinstance(matched, str):
            yield ValidationError(matched)
        elif not matched:
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(
        validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                matched = search(patrn, key)
                if isinstance(matched, str):
                    yield ValidationError(matched)
                    break
                if matched:
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    return validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator, {"pattern": pattern, "patternProperties": pattern_properties}
    )


def schema_violations(
    schema: dict[str, Any], document: Any, limits: PatternLimits
) -> list[ValidationError]:
    """Every violation, in path order (blocking, unbounded in time: run it in a worker)."""
    validator = validator_class(limits)(schema, registry=OFFLINE)
    return sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.path])
