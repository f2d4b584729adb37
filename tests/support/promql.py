"""Evaluate the alert rules of infra/prometheus/crosscheck-alerts.yml on scraped samples.

promtool is not installed here, so this is a small evaluator of the PromQL the rules use:
selectors with label matchers (``=``, ``!=``), ``increase(selector[window])``, ``sum``, ``max``
and ``min`` without grouping, ``/ * + -``, the comparisons ``< > <= >= == !=`` (filters, as
in PromQL without ``bool``) and ``and``. ``increase`` over a window is the difference between
two scrapes (``before`` and ``after``); a series absent before counts from 0, as a counter
created during the window does. Anything else is a ``PromQLError``, so a rule that leaves
this form fails its test instead of being half understood.

A value is an instant vector: a dict from a series' label set to its value (``{}`` empty).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
Samples = dict[str, Vector]  # sample name (e.g. x_total) -> series


class PromQLError(ValueError):
    """An expression outside the supported form."""


def samples(exposition: str) -> Samples:
    """Every sample of a ``GET /metrics`` text, by sample name."""
    out: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
  | (?P<duration>\[\d+[smhdw]\])
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<op>>=|<=|==|!=|=~|!~|[-+*/<>(){},=])
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
)""",
    re.VERBOSE,
)


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    text = expr.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise PromQLError(f"cannot read {text[position : position + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        position = match.end()
    return out


@dataclass
class Selector:
    name: str
    matchers: list[tuple[str, str, str]]  # label, op, value
    window: str | None = None

    def matches(self, labels: Labels) -> bool:
        found = dict(labels)
        for label, op, value in self.matchers:
            if op == "=" and found.get(label, "") != value:
                return False
            if op == "!=" and found.get(label, "") == value:
                return False
        return True

    def select(self, scraped: Samples) -> Vector:
        return {k: v for k, v in scraped.get(self.name, {}).items() if self.matches(k)}


@dataclass
class Call:
    function: str
    argument: Node


@dataclass
class Binary:
    op: str
    left: Node
    right: Node


@dataclass
class Number:
    value: float


Node = Selector | Call | Binary | Number

# Lowest first, as PromQL binds them.
_LEVELS: list[set[str]] = [
    {"and"},
    {"<", ">", "<=", ">=", "==", "!="},
    {"+", "-"},
    {"*", "/"},
]
_AGGREGATIONS: dict[str, Callable[[Iterable[float]], float]] = {"sum": sum, "max": max, "min": min}


class _Parser:
    def __init__(self, expr: str) -> None:
        self.tokens = _tokens(expr)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise PromQLError(f"expected {value or 'more'}, found {token}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self.binary(0)
        if self.peek() is not None:
            raise PromQLError(f"unexpected {self.peek()}")
        return node

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while (token := self.peek()) is not None and token[1] in _LEVELS[level]:
            self.take()
            node = Binary(token[1], node, self.binary(level + 1))
        return node

    def unary(self) -> Node:
        kind, value = self.take()
        if kind == "number":
            return Number(float(value))
        if value == "(":
            node = self.binary(0)
            self.take(")")
            return node
        if kind != "name":
            raise PromQLError(f"unexpected {value!r}")
        if value in _AGGREGATIONS or value == "increase":
            self.take("(")
            argument = self.binary(0)
            self.take(")")
            return Call(value, argument)
        return self.selector(value)

    def selector(self, name: str) -> Selector:
        matchers: list[tuple[str, str, str]] = []
        if self.peek() == ("op", "{"):
            self.take("{")
            while self.peek() != ("op", "}"):
                label = self.take()[1]
                op = self.take()[1]
                if op not in ("=", "!="):
                    raise PromQLError(f"matcher {op!r} is not supported")
                kind, quoted = self.take()
                if kind != "string":
                    raise PromQLError(f"expected a quoted label value, found {quoted!r}")
                matchers.append((label, op, quoted[1:-1]))
                if self.peek() == ("op", ","):
                    self.take(",")
            self.take("}")
        window = None
        token = self.peek()
        if token is not None and token[0] == "duration":
            window = self.take()[1]
        return Selector(name, matchers, window)


def parse(expr: str) -> Node:
    return _Parser(expr).parse()


_OPS: dict[str, Callable[[float, float], float | bool]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a / b if b else (float("nan") if a == 0 else float("inf") * a),
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_COMPARISONS = {"<", ">", "<=", ">=", "==", "!="}


def evaluate(node: Node, after: Samples, before: Samples | None = None) -> Vector | float:
    """The value of ``node`` on the ``after`` scrape (``before``: the window's start)."""
    before = before or {}
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Selector):
        if node.window is not None:
            raise PromQLError("a range selector needs a function such as increase()")
        return node.select(after)
    if isinstance(node, Call):
        if node.function == "increase":
            selector = node.argument
            if not isinstance(selector, Selector) or selector.window is None:
                raise PromQLError("increase() takes a range selector")
            start = selector.select(before)
            return {k: v - start.get(k, 0.0) for k, v in selector.select(after).items()}
        inner = evaluate(node.argument, after, before)
        if not isinstance(inner, dict):
            raise PromQLError(f"{node.function}() takes a vector")
        return {frozenset(): _AGGREGATIONS[node.function](inner.values())} if inner else {}
    left = evaluate(node.left, after, before)
    right = evaluate(node.right, after, before)
    if node.op == "and":
        if not isinstance(left, dict) or not isinstance(right, dict):
            raise PromQLError("and joins two vectors")
        return {k: v for k, v in left.items() if k in right}
    apply = _OPS[node.op]
    if isinstance(left, float) and isinstance(right, float):
        return float(apply(left, right))
    if isinstance(left, dict) and isinstance(right, float):
        pairs = {k: (v, right) for k, v in left.items()}
    elif isinstance(left, float) and isinstance(right, dict):
        pairs = {k: (left, v) for k, v in right.items()}
    else:
        assert isinstance(left, dict)
        assert isinstance(right, dict)
        pairs = {k: (v, right[k]) for k, v in left.items() if k in right}
    if node.op in _COMPARISONS:  # a filter: keeps the vector's value where it holds
        keep = 1 if isinstance(left, float) else 0
        return {k: pair[keep] for k, pair in pairs.items() if apply(*pair)}
    return {k: float(apply(a, b)) for k, (a, b) in pairs.items()}
