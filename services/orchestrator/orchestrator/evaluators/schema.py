"""JSON schemas from runs: checked when a run is created, evaluated in worker processes.

A run's schema is untrusted input. It is refused at ``POST /v1/runs`` when its JSON is larger
than a limit or has more nodes than a limit (checked first: every later check costs time in
proportion to them), when it is not a valid Draft 2020-12 schema, holds a pattern that crosses
a limit or that RE2 cannot match (``evaluators.patterns``), refers outside itself, refers to
nothing, or refers in a circle that never consumes the value. Evaluations run in killable
worker processes with a memory cap and a time limit (``evaluators.pool``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from orchestrator.evaluators.patterns import OFFLINE, PatternLimits, PatternRefused, compile_pattern
from shared.errors import AppError

# In-place keywords: they apply their subschema to the same value, so a cycle through them
# (and $ref) never ends.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")


@dataclass(frozen=True)
class SchemaLimits:
    max_bytes: int = 65_536  # of the schema's JSON (compact)
    max_nodes: int = 2_000  # objects, arrays and values in it
    patterns: PatternLimits = field(default_factory=PatternLimits)


class InvalidSchema(AppError):
    """The run's ``json_schema`` cannot be used; the message names the problem."""

    status_code = 422


def _format_checker(limits: PatternLimits) -> FormatChecker:
    """The meta-schema's formats, with ``regex`` (pattern, patternProperties keys) checked by
    the bounded RE2 compile the evaluation uses, not by Python's ``re``."""
    checker = FormatChecker()
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)

    def is_regex(instance: object) -> bool:
        if isinstance(instance, str):
            compile_pattern(instance, limits)
        return True

    checker.checks("regex", raises=PatternRefused)(is_regex)
    return checker


def _printable(text: str) -> str:
    """Lone surrogates (JSON allows "\\ud800" in a key) written as escapes: a message must
    encode as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _where(path: list[str | int]) -> str:
    return _printable("/" + "/".join(str(p) for p in path)) if path else "(root)"


def _subschemas(node: Any, path: list[str | int]) -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """Every object in the schema that is a schema (approximately: every dict), with its path."""
    if isinstance(node, dict):
        yield node, path
        for key, value in node.items():
            if key in ("const", "enum", "default", "examples"):
                continue  # values, not schemas
            yield from _subschemas(value, [*path, key])
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _subschemas(value, [*path, index])


def _pointer(path: list[str | int]) -> str:
    """A JSON pointer (RFC 6901), as a local $ref writes it after the '#'."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def check_schema(schema: dict[str, Any], limits: SchemaLimits | None = None) -> None:
    """Raise ``InvalidSchema`` naming the first problem of a run's schema."""
    limits = limits or SchemaLimits()
    try:
        _check_size(schema, limits)
        _check(schema, limits.patterns)
    except RecursionError:
        raise InvalidSchema("json_schema is nested too deeply to be checked") from None


def _check_size(schema: dict[str, Any], limits: SchemaLimits) -> None:
    nodes = 0
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise InvalidSchema(
                f"json_schema has more than {limits.max_nodes} nodes (objects, arrays and "
                "values), the limit"
            )
        if isinstance(node, dict):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise InvalidSchema(
            f"json_schema is {size} bytes of JSON, above the limit of {limits.max_bytes}"
        )


def _check(schema: dict[str, Any], limits: PatternLimits) -> None:
    try:
        Draft202012Validator.check_schema(schema, format_checker=_format_checker(limits))
    except jsonschema.SchemaError as exc:
        reason = exc.message
        if isinstance(exc.cause, PatternRefused):
            reason += f": {exc.cause}"
        raise InvalidSchema(
            f"json_schema is not a valid JSON Schema (2020-12) at {_where(list(exc.path))}: "
            f"{reason}"
        ) from None
    resolver = OFFLINE.resolver_with_root(DRAFT202012.create_resource(schema))
    edges: dict[str, list[str]] = {}
    anchors: dict[str, str] = {}  # "#name" refers to the schema with that $anchor
    for sub, path in _subschemas(schema, []):
        for keyword in ("$anchor", "$dynamicAnchor"):
            if isinstance(sub.get(keyword), str):
                anchors[sub[keyword]] = _pointer(path)
        here = _where(path)
        # Patterns the meta-schema does not see (under unknown keywords a $ref can reach)
        patterns: list[str] = []
        if isinstance(sub.get("pattern"), str):
            patterns.append(sub["pattern"])
        if isinstance(sub.get("patternProperties"), dict):
            patterns.extend(sub["patternProperties"])
        for patrn in patterns:
            try:
                compile_pattern(patrn, limits)
            except PatternRefused as exc:
                raise InvalidSchema(
                    f"json_schema at {here}: the pattern {patrn!r} cannot be used: {exc}"
                ) from None
        targets: list[str] = []
        for keyword in ("$ref", "$dynamicRef"):
            ref = sub.get(keyword)
            if not isinstance(ref, str):
                continue
            if not ref.startswith("#"):
                raise InvalidSchema(
                    f"json_schema at {here}: {keyword} {ref!r} points outside the schema; only "
                    "references inside it ('#/$defs/...') are allowed, nothing is fetched"
                )
            try:
                resolver.lookup(ref)
            except (Unresolvable, ValueError, TypeError, KeyError, IndexError):
                raise InvalidSchema(
                    f"json_schema at {here}: {keyword} {ref!r} points to nothing in the schema"
                ) from None
            targets.append(unquote(ref[1:]))
        for keyword in _IN_PLACE_LISTS:
            if isinstance(sub.get(keyword), list):
                targets.extend(_pointer([*path, keyword, i]) for i in range(len(sub[keyword])))
        for keyword in _IN_PLACE_ONE:
            if isinstance(sub.get(keyword), dict):
                targets.append(_pointer([*path, keyword]))
        edges[_pointer(path)] = targets
    edges = {
        node: [t if not t or t.startswith("/") else anchors.get(t, t) for t in targets]
        for node, targets in edges.items()
    }
    cycle = _find_cycle(edges)
    if cycle is not None:
        shown = _printable(" -> ".join("#" + node for node in cycle))
        raise InvalidSchema(
            f"json_schema refers to itself in a circle that never looks inside the value "
            f"({shown}); it would never finish"
        )


def _find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle in the graph of in-place applications, as the list of its nodes."""
    done: set[str] = set()
    for start in edges:
        if start in done:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(edges.get(start, [])))]
        on_path = [start]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.pop()
                done.add(node)
                continue
            if child in on_path:
                return [*on_path[on_path.index(child) :], child]
            if child not in done:
                stack.append((child, iter(edges.get(child, []))))
                on_path.append(child)
    return None
