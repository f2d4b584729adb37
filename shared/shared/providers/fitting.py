"""Schemas fitted to the output-token cap, for servers that enforce the schema with a grammar.

A local server (llama.cpp, vLLM) turns ``response_format: json_schema`` into a grammar the
model cannot leave: a string's ``maxLength`` ends it, an array's ``maxItems`` closes it. A small
model that rambles fills a 2,000-character field until the cap cuts the JSON off mid-string,
and the retry with a larger cap ends the same way (seen on SmolLM2-135M: every critique cut
off at 1,024 tokens). So before such a request the schema's string lengths (and, if that is
not enough, its array lengths) are scaled down until the longest reply the grammar allows fits
the cap: the reply then always closes. The fitted schema is only ever stricter than the
model's own, so a reply that fits it fits the model too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

# Characters counted per output token: the grammar bounds characters, the cap counts tokens.
# English runs about 4 characters a token; digits one each (SmolLM2 wrote 2,048 tokens of
# dates into a field fitted at 3). The provider keeps the fitted schema for its one retry at
# twice the cap, which leaves room for one character a token.
CHARS_PER_TOKEN = 2.0
CAP_SHARE = 0.85  # of the cap, for the reply; the rest is margin (whitespace, escapes)
LONG_TEXT_FLOOR = 128  # a free-text field keeps room for a justification (120 characters)
SHORT_TEXT_FLOOR = 24
LONG_TEXT = 400  # a field allowed this many characters or more is free text
ARRAY_FLOOR = 3
NUMBER_CHARS = 8
FALLBACK_STRING_CHARS = 2_000  # a string without maxLength, as the cap would end it
# llama.cpp's schema-to-grammar drops a bound above 2,000 repetitions (MAX_REPETITION_THRESHOLD
# in common/json-schema-to-grammar.cpp): a `maxLength` of 2,823 is no bound at all there
# (seen: an 8,225-character draft cut off by its cap). So no fitted bound is above it.
GRAMMAR_MAX_REPEAT = 2_000


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            return target
    return node


def longest(node: Any, defs: dict[str, Any], depth: int = 0) -> float:
    """The most characters a reply following ``node`` can have (recursion cut at depth 8)."""
    if not isinstance(node, dict) or depth > 8:
        return NUMBER_CHARS
    node = _resolve(node, defs)
    if "anyOf" in node:
        return max((longest(o, defs, depth + 1) for o in node["anyOf"]), default=4)
    if "enum" in node:
        return max((len(json.dumps(v)) for v in node["enum"]), default=4)
    if "const" in node:
        return len(json.dumps(node["const"]))
    kind = node.get("type")
    if kind == "string":
        return float(node.get("maxLength", FALLBACK_STRING_CHARS)) + 2.0
    if kind == "array":
        items = int(node.get("maxItems", 10))
        return 2 + items * (longest(node.get("items"), defs, depth + 1) + 2)
    if kind == "object":
        return 2 + sum(
            len(name) + 4 + longest(sub, defs, depth + 1)
            for name, sub in (node.get("properties") or {}).items()
        )
    if kind == "boolean":
        return 5
    return NUMBER_CHARS


def _nodes(node: Any, wanted: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Every schema node under ``node`` (itself included) that ``wanted`` picks."""
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if wanted(current):
                found.append(current)
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return found


def _strings(node: Any) -> list[dict[str, Any]]:
    return _nodes(
        node, lambda n: n.get("type") == "string" and "enum" not in n and "const" not in n
    )


def _arrays(node: Any) -> list[dict[str, Any]]:
    return _nodes(node, lambda n: n.get("type") == "array")


def budget_chars(max_tokens: int) -> int:
    return int(max_tokens * CHARS_PER_TOKEN * CAP_SHARE)


def fit_schema(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``schema`` with its longest reply within ``max_tokens`` and every bound one a grammar
    keeps (at most ``GRAMMAR_MAX_REPEAT``); the same object when both hold already. The widest
    arrays lose items down to ``ARRAY_FLOOR`` each, then string lengths shrink in proportion,
    never below a floor (free text keeps ``LONG_TEXT_FLOOR``), then, if it still does not
    fit, arrays lose items down to one (never below their ``minItems``)."""
    budget = budget_chars(max_tokens)
    defs = schema.get("$defs") or {}
    if longest(schema, defs) <= budget and not _over_grammar_limit(schema):
        return schema
    fitted = copy.deepcopy(schema)
    defs = fitted.get("$defs") or {}
    arrays = _arrays(fitted)
    strings = _strings(fitted)
    original = [int(s.get("maxLength", FALLBACK_STRING_CHARS)) for s in strings]

    def shrink_arrays(keep: int) -> None:
        while longest(fitted, defs) > budget:
            shrinkable = [a for a in arrays if _items(a) > max(keep, int(a.get("minItems", 0)))]
            if not shrinkable:
                return
            widest = max(shrinkable, key=lambda a: _items(a) * longest(a.get("items"), defs))
            widest["maxItems"] = _items(widest) - 1

    def floor(length: int) -> int:
        return min(length, LONG_TEXT_FLOOR if length >= LONG_TEXT else SHORT_TEXT_FLOOR)

    def scale(share: float) -> None:
        for node, length in zip(strings, original, strict=True):
            node["maxLength"] = max(floor(length), int(length * share))

    shrink_arrays(ARRAY_FLOOR)  # a few items each (a critique's issues, a reviewer's points)
    low, high = 0.0, 1.0
    for _ in range(30):  # then the share of every string's length that fits
        middle = (low + high) / 2
        scale(middle)
        if longest(fitted, defs) <= budget:
            low = middle
        else:
            high = middle
    scale(low)
    shrink_arrays(1)  # every string at its floor and still too long: fewer items
    for node in strings:  # a bound the grammar keeps
        node["maxLength"] = min(int(node["maxLength"]), GRAMMAR_MAX_REPEAT)
    for array in arrays:
        array["maxItems"] = min(_items(array), GRAMMAR_MAX_REPEAT)
    return fitted


def _over_grammar_limit(schema: dict[str, Any]) -> bool:
    strings, arrays = _strings(schema), _arrays(schema)
    return any(
        int(s.get("maxLength", FALLBACK_STRING_CHARS + 1)) > GRAMMAR_MAX_REPEAT for s in strings
    ) or any(_items(a) > GRAMMAR_MAX_REPEAT for a in arrays)


def _items(array: dict[str, Any]) -> int:
    return int(array.get("maxItems", 10))
