"""JSON schemas from runs: checked when a run is created, evaluated off the event loop.

A run's schema is untrusted input. It is refused at ``POST /v1/runs`` when it is not a valid
Draft 2020-12 schema, holds a pattern that does not compile, refers outside itself, refers to
nothing, or refers in a circle that never consumes the value. Patterns are matched with the
``regex`` module and a per-match timeout (it needs no exponential backtracking for classic
cases such as ``^(a+)+$``), and a whole evaluation runs on its own small thread pool with a
time limit, so no schema can hold the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import jsonschema
import regex
from jsonschema import Draft202012Validator, ValidationError, validators
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

from shared.errors import AppError

# One pattern match on one value; past it the value counts as not matching, with a reason.
MATCH_TIMEOUT_S = 0.25
# A whole evaluation (every keyword, every value).
EVALUATION_TIMEOUT_S = 5.0
# In-place keywords: they apply their subschema to the same value, so a cycle through them
# (and $ref) never ends.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")


class InvalidSchema(AppError):
    """The run's ``json_schema`` cannot be used; the message names the problem."""

    status_code = 422


class SchemaTimeout(Exception):
    """An evaluation took longer than its limit."""


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class


# No $ref is ever fetched: without this jsonschema would fetch http(s) references.
OFFLINE: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _search(pattern: str, text: str) -> bool:
    return regex.search(pattern, text, timeout=MATCH_TIMEOUT_S) is not None


def _pattern(
    validator: Any, patrn: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = _search(patrn, instance)
    except TimeoutError:
        yield ValidationError(
            f"matching {patrn!r} took longer than {MATCH_TIMEOUT_S:g} s; counted as no match"
        )
        return
    if not matched:
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            try:
                matched = _search(patrn, key)
            except TimeoutError:
                yield ValidationError(
                    f"matching {patrn!r} against the key {key!r} took longer than "
                    f"{MATCH_TIMEOUT_S:g} s"
                )
                continue
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


SafeValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)


def _where(path: list[str | int]) -> str:
    return "/" + "/".join(str(p) for p in path) if path else "(root)"


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


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ``InvalidSchema`` naming the first problem of a run's schema."""
    try:
        _check(schema)
    except RecursionError:
        raise InvalidSchema("json_schema is nested too deeply to be checked") from None


def _check(schema: dict[str, Any]) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidSchema(
            f"json_schema is not a valid JSON Schema (2020-12) at {_where(list(exc.path))}: "
            f"{exc.message}"
        ) from None
    resolver = OFFLINE.resolver_with_root(DRAFT202012.create_resource(schema))
    edges: dict[str, list[str]] = {}
    anchors: dict[str, str] = {}  # "#name" refers to the schema with that $anchor
    for sub, path in _subschemas(schema, []):
        for keyword in ("$anchor", "$dynamicAnchor"):
            if isinstance(sub.get(keyword), str):
                anchors[sub[keyword]] = _pointer(path)
        here = _where(path)
        patterns: list[str] = []
        if isinstance(sub.get("pattern"), str):
            patterns.append(sub["pattern"])
        if isinstance(sub.get("patternProperties"), dict):
            patterns.extend(sub["patternProperties"])
        for patrn in patterns:
            try:
                regex.compile(patrn)
            except regex.error as exc:
                raise InvalidSchema(
                    f"json_schema at {here}: the pattern {patrn!r} does not compile: {exc}"
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
        shown = " -> ".join("#" + node for node in cycle)
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


def schema_violations(schema: dict[str, Any], document: Any) -> list[ValidationError]:
    """Every violation, in path order (blocking: call it off the event loop)."""
    validator = SafeValidator(schema, registry=OFFLINE)
    return sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.path])


class SchemaRunner:
    """Evaluations on two threads of their own, each bounded in time."""

    def __init__(self, timeout_s: float = EVALUATION_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="json-schema")

    async def violations(self, schema: dict[str, Any], document: Any) -> list[ValidationError]:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, schema_violations, schema, document)
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            raise SchemaTimeout(
                f"the schema evaluation took longer than {self.timeout_s:g} s"
            ) from None

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
