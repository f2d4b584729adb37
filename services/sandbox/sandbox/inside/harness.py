"""Run one job's code and tests, reporting each test as it goes.

Stdlib only: this file runs under the system ``/usr/bin/python3 -I`` inside the sandbox, in
the child the zygote forks for each job (the service's own interpreter imports it only to
unit-test it). Records are JSON lines on ``result_fd``:

- ``{"t": "plan", "tests": [...]}``: every test known before running (assertions, functions);
- ``{"t": "begin", "id": ...}`` / ``{"t": "end", "id": ..., "status": ...}`` as tests run;
- ``{"t": "done", "status": ..., "tests": [...], ...}``: the final word.

The service rebuilds a partial report from plan/begin/end when a limit kills the job before
``done``. Three styles of ``tests`` are recognised:

- HumanEval: ``def check(candidate)`` called with the entry point. Each ``assert`` (at any
  depth) becomes its own test: it is rewritten to record its outcome and carry on, so one
  run reports every assertion, with the left and right values of a failed comparison.
- pytest-like: ``test_*`` functions, ``Test*`` classes and ``unittest.TestCase`` subclasses,
  one result per test; a tiny ``pytest`` stand-in offers ``raises``, ``approx``, ``fail``,
  ``skip``, ``mark.parametrize``/``skip``/``skipif``/``xfail`` and simple fixtures.
- a script: top-level statements; each top-level ``assert`` is its own test.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import itertools
import json
import linecache
import math
import os
import re
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

SOLUTION_FILE = "solution.py"
TESTS_FILE = "tests.py"
HELPER = "__crosscheck__"
MAX_REPR = 300
MAX_MESSAGE = 2000
MAX_SOURCE = 300
MAX_TESTS = 500

PASSED, FAILED, ERROR, SKIPPED, NOT_RUN, RUNNING = (
    "passed",
    "failed",
    "error",
    "skipped",
    "not_run",
    "running",
)
_SEVERITY = {NOT_RUN: 0, RUNNING: 1, SKIPPED: 2, PASSED: 3, FAILED: 4, ERROR: 5}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "... [truncated]"


def _repr(value: Any) -> str:
    try:
        return _clip(repr(value), MAX_REPR)
    except Exception as exc:  # a hostile __repr__ must not break the report
        return f"<repr failed: {type(exc).__name__}>"


class Reporter:
    """Writes records to the result pipe; a closed pipe (the host stopped reading) is ignored."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def emit(self, record: dict[str, Any]) -> None:
        if self.fd is None:
            return
        data = (json.dumps(record, default=str, ensure_ascii=False) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        except OSError:
            self.fd = None


@dataclasses.dataclass
class Entry:
    id: str
    name: str
    kind: str
    line: int | None = None
    source: str | None = None
    status: str = NOT_RUN
    message: str = ""
    runs: int = 0
    failures: int = 0
    duration_ms: float = 0.0

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "line": self.line,
            "source": self.source,
            "status": self.status,
            "message": self.message,
            "runs": self.runs,
            "failures": self.failures,
            "duration_ms": round(self.duration_ms, 3),
        }


class StopRun(BaseException):
    """Raised by the recorder in fail-fast mode to abandon the rest of ``check``."""


class Recorder:
    """The ``__crosscheck__`` object the rewritten tests call."""

    def __init__(self, reporter: Reporter, *, fail_fast: bool = False) -> None:
        self.reporter = reporter
        self.fail_fast = fail_fast
        self.entries: dict[str, Entry] = {}
        self.memory_error = False

    # -- registry
    def add(self, entry: Entry) -> Entry:
        if entry.id in self.entries:
            return self.entries[entry.id]
        self.entries[entry.id] = entry
        return entry

    def plan(self) -> None:
        self.reporter.emit({"t": "plan", "tests": [e.public() for e in self.listed()]})

    def listed(self) -> list[Entry]:
        return list(self.entries.values())[:MAX_TESTS]

    # -- outcomes
    def _update(self, entry: Entry, status: str, message: str = "") -> None:
        if _SEVERITY[status] > _SEVERITY[entry.status]:
            entry.status = status
            if message:
                entry.message = _clip(message, MAX_MESSAGE)
            self.reporter.emit({"t": "end", "id": entry.id, "status": status, "message": message})

    def begin(self, key: str) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry.status == NOT_RUN:
            entry.status = RUNNING
            self.reporter.emit({"t": "begin", "id": key})

    def passed(self, key: str) -> None:
        entry = self.entries[key]
        entry.runs += 1
        self._update(entry, PASSED)

    def failed(self, key: str, message: Any, left: Any = None, right: Any = None) -> None:
        entry = self.entries[key]
        entry.runs += 1
        entry.failures += 1
        self._update(entry, FAILED, explain(entry.source or "assert", message, left, right))
        if self.fail_fast:
            raise StopRun

    def error(self, key: str, exc: BaseException) -> None:
        entry = self.entries[key]
        entry.runs += 1
        entry.failures += 1
        if isinstance(exc, MemoryError):
            self.memory_error = True
        where = f"{entry.source}: " if entry.source else ""
        self._update(entry, ERROR, f"{where}raised {describe_exception(exc)}")
        if self.fail_fast:
            raise StopRun

    # -- used by rewritten asserts inside pytest-style test functions
    def explain(self, source: str, message: Any, left: Any = None, right: Any = None) -> str:
        return explain(source, message, left, right)


_MISSING = object()


def explain(source: str, message: Any, left: Any = _MISSING, right: Any = _MISSING) -> str:
    text = source
    if message is not None and message is not _MISSING:
        text += f" ({_clip(str(message), 500)})"
    if left is not _MISSING and right is not _MISSING and (left is not None or right is not None):
        text += f": left was {_repr(left)}, right was {_repr(right)}"
    return text


def describe_exception(exc: BaseException) -> str:
    """``Type: message (file:line in func)`` with the innermost frame of the job's own code."""
    text = f"{type(exc).__name__}: {_clip(str(exc), 500)}".rstrip(": ")
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if f.filename in (SOLUTION_FILE, TESTS_FILE)
    ]
    if frames:
        last = frames[-1]
        text += f" ({last.filename}:{last.lineno} in {last.name})"
    return text


# --------------------------------------------------------------------------- AST rewriting


def _name(node_id: str, ctx: ast.expr_context) -> ast.Name:
    return ast.Name(id=node_id, ctx=ctx)


def _helper_call(method: str, *args: ast.expr) -> ast.Expr:
    func = ast.Attribute(value=_name(HELPER, ast.Load()), attr=method, ctx=ast.Load())
    return ast.Expr(value=ast.Call(func=func, args=list(args), keywords=[]))


def _const(value: Any) -> ast.Constant:
    return ast.Constant(value=value)


class AssertRewriter(ast.NodeTransformer):
    """Rewrites ``assert`` statements.

    ``record`` mode (HumanEval ``check`` and scripts): each assertion reports its outcome
    to the recorder and execution carries on. ``raise`` mode (pytest-style test functions):
    a failing assertion still raises ``AssertionError``, with the compared values in it.
    """

    def __init__(self, source: str, recorder: Recorder | None, mode: str) -> None:
        self.source = source
        self.recorder = recorder
        self.mode = mode
        self.scopes: list[str] = []

    def _scoped(self, node: Any) -> Any:
        self.scopes.append(node.name)
        try:
            return self.generic_visit(node)
        finally:
            self.scopes.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def _source(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.source, node) or "assert ..."
        return _clip(" ".join(text.split()), MAX_SOURCE)

    def visit_Assert(self, node: ast.Assert) -> Any:
        source = self._source(node)
        if self.mode == "raise":
            return self._raising(node, source)
        assert self.recorder is not None
        scope = self.scopes[-1] if self.scopes else "tests"
        key = f"L{node.lineno}"
        if key in self.recorder.entries:
            key = f"L{node.lineno}:{node.col_offset}"
        self.recorder.add(
            Entry(
                id=key,
                name=f"{scope}:{node.lineno}",
                kind="assert",
                line=node.lineno,
                source=source,
            )
        )
        return self._recording(node, key)

    @staticmethod
    def _evaluate(test: ast.expr) -> tuple[list[ast.stmt], ast.expr, bool]:
        """Statements computing ``__cc_ok``; single comparisons keep their operands."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            stmts: list[ast.stmt] = [
                ast.Assign(targets=[_name("__cc_l", ast.Store())], value=test.left),
                ast.Assign(targets=[_name("__cc_r", ast.Store())], value=test.comparators[0]),
            ]
            compare = ast.Compare(
                left=_name("__cc_l", ast.Load()),
                ops=test.ops,
                comparators=[_name("__cc_r", ast.Load())],
            )
            return stmts, compare, True
        return [], test, False

    def _recording(self, node: ast.Assert, key: str) -> list[ast.stmt]:
        stmts, test, has_operands = self._evaluate(node.test)
        not_not = ast.UnaryOp(op=ast.Not(), operand=ast.UnaryOp(op=ast.Not(), operand=test))
        body: list[ast.stmt] = [
            _helper_call("begin", _const(key)),
            *stmts,
            ast.Assign(targets=[_name("__cc_ok", ast.Store())], value=not_not),
        ]
        message_value: ast.expr = node.msg if node.msg is not None else _const(None)
        message = ast.Try(
            body=[ast.Assign(targets=[_name("__cc_m", ast.Store())], value=message_value)],
            handlers=[
                ast.ExceptHandler(
                    type=_name("Exception", ast.Load()),
                    name="__cc_e",
                    body=[
                        ast.Assign(
                            targets=[_name("__cc_m", ast.Store())],
                            value=ast.Call(
                                func=_name("repr", ast.Load()),
                                args=[_name("__cc_e", ast.Load())],
                                keywords=[],
                            ),
                        )
                    ],
                )
            ],
            orelse=[],
            finalbody=[],
        )
        operands = (
            [_name("__cc_l", ast.Load()), _name("__cc_r", ast.Load())] if has_operands else []
        )
        on_result = ast.If(
            test=_name("__cc_ok", ast.Load()),
            body=[_helper_call("passed", _const(key))],
            orelse=[
                message,
                _helper_call("failed", _const(key), _name("__cc_m", ast.Load()), *operands),
            ],
        )
        wrapped = ast.Try(
            body=body,
            handlers=[
                ast.ExceptHandler(
                    type=_name("Exception", ast.Load()),
                    name="__cc_e",
                    body=[_helper_call("error", _const(key), _name("__cc_e", ast.Load()))],
                )
            ],
            orelse=[on_result],
            finalbody=[],
        )
        return [ast.copy_location(wrapped, node)]

    def _raising(self, node: ast.Assert, source: str) -> list[ast.stmt]:
        stmts, test, has_operands = self._evaluate(node.test)
        args: list[ast.expr] = [
            _const(source),
            node.msg if node.msg is not None else _const(None),
        ]
        if has_operands:
            args += [_name("__cc_l", ast.Load()), _name("__cc_r", ast.Load())]
        explanation = ast.Call(
            func=ast.Attribute(value=_name(HELPER, ast.Load()), attr="explain", ctx=ast.Load()),
            args=args,
            keywords=[],
        )
        raise_ = ast.Raise(
            exc=ast.Call(func=_name("AssertionError", ast.Load()), args=[explanation], keywords=[]),
            cause=None,
        )
        check = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=test), body=[raise_], orelse=[])
        return [ast.copy_location(stmt, node) for stmt in [*stmts, check]]


def detect_style(tree: ast.Module) -> str:
    """``pytest`` when the tests define test functions or classes, ``check`` for HumanEval."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    if any(n.startswith("test") for n in names) or any(n.startswith("Test") for n in names):
        return "pytest"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            (isinstance(b, ast.Attribute) and b.attr == "TestCase")
            or (isinstance(b, ast.Name) and b.id == "TestCase")
            for b in node.bases
        ):
            return "pytest"
    if "check" in names:
        return "check"
    return "script"


# --------------------------------------------------------------------------- pytest stand-in


class Skipped(Exception):
    pass


class XFailed(Exception):
    pass


class Failed(AssertionError):
    pass


class _Raises:
    def __init__(self, expected: Any, match: str | None) -> None:
        self.expected = expected
        self.match = match
        self.value: BaseException | None = None

    def __enter__(self) -> _Raises:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc_type is None:
            raise Failed(f"DID NOT RAISE {self.expected!r}")
        if not issubclass(exc_type, self.expected):
            return False
        if self.match is not None and exc is not None and not re.search(self.match, str(exc)):
            raise Failed(f"regex {self.match!r} did not match {str(exc)!r}")
        self.value = exc
        return True


class _Approx:
    def __init__(self, expected: Any, rel: float | None, abs_: float | None) -> None:
        self.expected = expected
        self.rel = 1e-6 if rel is None else rel
        self.abs = 1e-12 if abs_ is None else abs_

    def _close(self, a: Any, b: Any) -> bool:
        if isinstance(b, dict):
            return (
                isinstance(a, dict)
                and a.keys() == b.keys()
                and all(self._close(a[k], b[k]) for k in b)
            )
        if isinstance(b, list | tuple):
            return (
                isinstance(a, list | tuple)
                and len(a) == len(b)
                and all(self._close(x, y) for x, y in zip(a, b, strict=True))
            )
        try:
            return bool(a == b) or math.isclose(a, b, rel_tol=self.rel, abs_tol=self.abs)
        except TypeError:
            return False

    def __eq__(self, other: object) -> bool:
        return self._close(other, self.expected)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"approx({self.expected!r})"


def _mark_decorator(kind: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    def decorate(func: Any) -> Any:
        marks = list(getattr(func, "__cc_marks__", []))
        marks.append((kind, args, kwargs))
        func.__cc_marks__ = marks
        return func

    return decorate


class _Mark:
    def parametrize(self, argnames: Any, argvalues: Any, **kwargs: Any) -> Callable[[Any], Any]:
        return _mark_decorator("parametrize", argnames, argvalues, **kwargs)

    def skip(self, *args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]) and not kwargs:
            return _mark_decorator("skip")(args[0])
        return _mark_decorator("skip", *args, **kwargs)

    def skipif(self, condition: Any, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        return _mark_decorator("skipif", condition, *args, **kwargs)

    def xfail(self, *args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]) and not kwargs:
            return _mark_decorator("xfail")(args[0])
        return _mark_decorator("xfail", *args, **kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def unknown(*args: Any, **kwargs: Any) -> Any:
            if args and callable(args[0]) and len(args) == 1 and not kwargs:
                return args[0]
            return lambda func: func

        return unknown


def make_pytest_module() -> types.ModuleType:
    """A stand-in for the parts of ``pytest`` generated tests use most."""
    module = types.ModuleType("pytest")

    def raises(expected: Any, *args: Any, match: str | None = None) -> Any:
        if args:  # the legacy call form: raises(Exc, func, *args)
            with _Raises(expected, match) as ctx:
                args[0](*args[1:])
            return ctx
        return _Raises(expected, match)

    def approx(expected: Any, rel: float | None = None, abs: float | None = None) -> _Approx:
        return _Approx(expected, rel, abs)

    def fail(reason: str = "", pytrace: bool = True) -> None:
        raise Failed(reason)

    def skip(reason: str = "") -> None:
        raise Skipped(reason)

    def fixture(*args: Any, **kwargs: Any) -> Any:
        def decorate(func: Any) -> Any:
            func.__cc_fixture__ = True
            return func

        if args and callable(args[0]):
            return decorate(args[0])
        return decorate

    module.raises = raises  # type: ignore[attr-defined]
    module.approx = approx  # type: ignore[attr-defined]
    module.fail = fail  # type: ignore[attr-defined]
    module.skip = skip  # type: ignore[attr-defined]
    module.fixture = fixture  # type: ignore[attr-defined]
    module.mark = _Mark()  # type: ignore[attr-defined]
    return module


# --------------------------------------------------------------------------- pytest-style run


@dataclasses.dataclass
class Case:
    entry: Entry
    func: Callable[..., Any]
    params: dict[str, Any]
    owner: type | None = None
    marks: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = dataclasses.field(
        default_factory=list
    )


def _param_sets(
    marks: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
) -> list[tuple[str, dict[str, Any]]]:
    """Expand stacked ``parametrize`` marks into ``(id, {arg: value})`` pairs."""
    axes: list[list[tuple[str, dict[str, Any]]]] = []
    for kind, args, kwargs in marks:
        if kind != "parametrize":
            continue
        names_arg, values = args[0], list(args[1])
        names = (
            [n.strip() for n in names_arg.split(",") if n.strip()]
            if isinstance(names_arg, str)
            else list(names_arg)
        )
        ids = kwargs.get("ids")
        axis: list[tuple[str, dict[str, Any]]] = []
        for index, value in enumerate(values):
            row = value if len(names) > 1 else (value,)
            label = str(ids[index]) if isinstance(ids, list | tuple) and index < len(ids) else None
            if label is None:
                label = "-".join(_short(v) for v in row)
            axis.append((label, dict(zip(names, row, strict=False))))
        axes.append(axis)
    if not axes:
        return [("", {})]
    out: list[tuple[str, dict[str, Any]]] = []
    for combo in itertools.product(*reversed(axes)):
        label = "-".join(c[0] for c in combo)
        merged: dict[str, Any] = {}
        for _, values_ in combo:
            merged.update(values_)
        out.append((label, merged))
    return out


def _short(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        return _clip(str(value), 40)
    return type(value).__name__


def collect(namespace: dict[str, Any]) -> list[Case]:
    cases: list[Case] = []

    def add(name: str, func: Callable[..., Any], owner: type | None) -> None:
        marks = list(getattr(func, "__cc_marks__", []))
        code = getattr(func, "__code__", None)
        line = code.co_firstlineno if code is not None else None
        for label, params in _param_sets(marks):
            full = f"{name}[{label}]" if label else name
            cases.append(
                Case(
                    entry=Entry(id=full, name=full, kind="function", line=line),
                    func=func,
                    params=params,
                    owner=owner,
                    marks=marks,
                )
            )

    import unittest

    for name, value in list(namespace.items()):
        if isinstance(value, type) and issubclass(value, unittest.TestCase):
            if not _defined_in_tests(value):
                continue
            for method in unittest.TestLoader().getTestCaseNames(value):
                full = f"{name}.{method}"
                func = getattr(value, method)
                code = getattr(func, "__code__", None)
                line = code.co_firstlineno if code is not None else None
                cases.append(
                    Case(
                        entry=Entry(id=full, name=full, kind="function", line=line),
                        func=func,
                        params={},
                        owner=value,
                        marks=[("unittest", (), {})],
                    )
                )
        elif isinstance(value, type) and name.startswith("Test"):
            if "__init__" in vars(value) or not _defined_in_tests(value):
                continue
            for attr in sorted(vars(value), key=lambda a: _line_of(getattr(value, a, None))):
                method = getattr(value, attr)
                if attr.startswith("test") and callable(method):
                    add(f"{name}.{attr}", method, value)
        elif name.startswith("test") and inspect.isfunction(value):
            if value.__code__.co_filename == TESTS_FILE:
                add(name, value, None)
    return cases


def _defined_in_tests(cls: type) -> bool:
    return any(
        getattr(getattr(member, "__code__", None), "co_filename", None) == TESTS_FILE
        for member in vars(cls).values()
    )


def _line_of(func: Any) -> int:
    code = getattr(func, "__code__", None)
    return code.co_firstlineno if code is not None else 0


class FixtureError(Exception):
    pass


class Fixtures:
    """Function-scoped fixtures by name: the job's own ``@pytest.fixture`` and ``tmp_path``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.values: dict[str, Any] = {}
        self.teardown: list[Iterator[Any]] = []

    def resolve(self, name: str, depth: int = 0) -> Any:
        if name in self.values:
            return self.values[name]
        if depth > 20:
            raise FixtureError(f"fixture {name!r}: dependency cycle")
        if name == "tmp_path":
            import pathlib

            value: Any = pathlib.Path(tempfile.mkdtemp(prefix="tmp_path-", dir=os.getcwd()))
        else:
            func = self.namespace.get(name)
            if not callable(func) or not getattr(func, "__cc_fixture__", False):
                raise FixtureError(
                    f"fixture {name!r} not found (only tmp_path and the tests' own fixtures)"
                )
            args = {p: self.resolve(p, depth + 1) for p in inspect.signature(func).parameters}
            value = func(**args)
            if inspect.isgenerator(value):
                generator = value
                value = next(generator)
                self.teardown.append(generator)
        self.values[name] = value
        return value

    def close(self) -> None:
        for generator in reversed(self.teardown):
            with contextlib.suppress(StopIteration):
                next(generator)


def run_case(case: Case, namespace: dict[str, Any]) -> tuple[str, str]:
    marks = {kind: (args, kwargs) for kind, args, kwargs in case.marks}
    if "unittest" in marks:
        return _run_unittest(case)
    if "skip" in marks:
        args, kwargs = marks["skip"]
        return SKIPPED, str(kwargs.get("reason", args[0] if args else "skipped"))
    for kind, args, kwargs in case.marks:
        if kind == "skipif" and args and args[0]:
            return SKIPPED, str(kwargs.get("reason", "skipif condition true"))
    fixtures = Fixtures(namespace)
    try:
        target: Callable[..., Any] = case.func
        instance = None
        if case.owner is not None:
            instance = case.owner()
            target = getattr(instance, case.func.__name__)
            setup = getattr(instance, "setup_method", None)
            if callable(setup):
                setup(target)
        kwargs_: dict[str, Any] = {}
        for param in inspect.signature(target).parameters:
            kwargs_[param] = case.params[param] if param in case.params else fixtures.resolve(param)
        try:
            outcome = target(**kwargs_)
            if inspect.iscoroutine(outcome):
                import asyncio

                asyncio.run(outcome)
        finally:
            teardown = getattr(instance, "teardown_method", None) if instance else None
            if callable(teardown):
                teardown(target)
    except Skipped as exc:
        return SKIPPED, str(exc) or "skipped"
    except (AssertionError, Failed) as exc:
        if "xfail" in marks:
            return SKIPPED, f"xfail: {exc}"
        return FAILED, _assertion_message(exc)
    except FixtureError as exc:
        return ERROR, str(exc)
    except BaseException as exc:
        if isinstance(exc, MemoryError):
            raise
        if "xfail" in marks:
            return SKIPPED, f"xfail: {describe_exception(exc)}"
        return FAILED, f"raised {describe_exception(exc)}"
    finally:
        fixtures.close()
    return PASSED, ""


def _assertion_message(exc: BaseException) -> str:
    text = str(exc) or "assertion failed"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == TESTS_FILE]
    if frames:
        text += f" ({TESTS_FILE}:{frames[-1].lineno})"
    return text


def _run_unittest(case: Case) -> tuple[str, str]:
    import unittest

    assert case.owner is not None
    result = unittest.TestResult()
    case.owner(case.func.__name__).run(result)
    if result.errors:
        return FAILED, _clip(result.errors[0][1].strip().splitlines()[-1], MAX_MESSAGE)
    if result.failures:
        return FAILED, _clip(result.failures[0][1].strip().splitlines()[-1], MAX_MESSAGE)
    if result.skipped:
        return SKIPPED, result.skipped[0][1]
    if result.expectedFailures:
        return SKIPPED, "expected failure"
    if result.unexpectedSuccesses:
        return FAILED, "unexpected success"
    return PASSED, ""


# --------------------------------------------------------------------------- the job


def _register_source(filename: str, source: str) -> None:
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)


def _infer_entry_point(program: str) -> tuple[str | None, str]:
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return None, "the code does not parse"
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(functions) == 1:
        return functions[0], ""
    if not functions:
        return None, "the code defines no top-level function and no entry_point was given"
    return (
        None,
        f"entry_point is required: the code defines several functions ({', '.join(functions)})",
    )


class Job:
    def __init__(self, payload: dict[str, Any], reporter: Reporter) -> None:
        self.program = str(payload.get("prompt") or "") + str(payload.get("code") or "")
        self.tests = str(payload.get("tests") or "")
        self.entry_point: str | None = payload.get("entry_point") or None
        self.fail_fast = bool(payload.get("fail_fast", False))
        self.reporter = reporter
        self.recorder = Recorder(reporter, fail_fast=self.fail_fast)
        self.started = time.perf_counter()

    def done(self, status: str, *, stage: str = "", message: str = "") -> int:
        tests = [e.public() for e in self.recorder.listed()]
        self.reporter.emit(
            {
                "t": "done",
                "status": status,
                "stage": stage,
                "message": _clip(message, MAX_MESSAGE),
                "tests": tests,
                "tests_total": len(self.recorder.entries),
                "memory_error": self.recorder.memory_error,
                "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
            }
        )
        return 0

    def fail_stage(self, stage: str, exc: BaseException) -> int:
        if isinstance(exc, MemoryError):
            self.recorder.memory_error = True
        if isinstance(exc, SystemExit):
            message = f"the {stage} called exit({exc.code!r})"
        else:
            message = describe_exception(exc)
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        return self.done(ERROR, stage=stage, message=message)

    def run(self) -> int:
        _register_source(SOLUTION_FILE, self.program)
        _register_source(TESTS_FILE, self.tests)
        try:
            tests_tree = ast.parse(self.tests, TESTS_FILE)
        except SyntaxError as exc:
            return self.done(ERROR, stage="tests", message=f"the tests do not parse: {exc}")
        except (MemoryError, RecursionError, ValueError) as exc:
            return self.fail_stage("tests", exc)
        style = detect_style(tests_tree)
        mode = "raise" if style == "pytest" else "record"
        try:
            tests_tree = ast.fix_missing_locations(
                AssertRewriter(self.tests, self.recorder, mode).visit(tests_tree)
            )
            tests_code = compile(tests_tree, TESTS_FILE, "exec")
        except (MemoryError, RecursionError, SyntaxError, ValueError) as exc:
            return self.fail_stage("tests", exc)
        if style == "check":
            self.recorder.add(Entry(id="check", name="check", kind="check"))
        if style != "pytest":
            self.recorder.plan()

        try:
            code = compile(self.program, SOLUTION_FILE, "exec")
        except SyntaxError as exc:
            return self.done(ERROR, stage="compile", message=f"the code does not parse: {exc}")
        except (MemoryError, RecursionError, ValueError) as exc:
            return self.fail_stage("compile", exc)

        module = types.ModuleType("solution")
        module.__file__ = SOLUTION_FILE
        sys.modules["solution"] = module
        sys.modules.setdefault("pytest", make_pytest_module())
        namespace = module.__dict__
        try:
            exec(code, namespace)
        except BaseException as exc:
            return self.fail_stage("code", exc)

        namespace[HELPER] = self.recorder
        if style == "check":
            return self._run_check(tests_code, namespace)
        if style == "pytest":
            return self._run_pytest(tests_code, namespace)
        return self._run_script(tests_code, namespace)

    def _run_script(self, tests_code: types.CodeType, namespace: dict[str, Any]) -> int:
        if self.tests.strip():
            module_entry = self.recorder.add(Entry(id="tests", name="tests", kind="module"))
            try:
                exec(tests_code, namespace)
            except StopRun:
                pass
            except BaseException as exc:
                if isinstance(exc, MemoryError):
                    self.recorder.memory_error = True
                self.recorder._update(module_entry, ERROR, f"raised {describe_exception(exc)}")
            if module_entry.status in (NOT_RUN, RUNNING):
                if any(e.kind == "assert" for e in self.recorder.entries.values()):
                    del self.recorder.entries["tests"]  # the assertions are the report
                else:
                    module_entry.status = PASSED
                    module_entry.runs = 1
        return self.done(self._verdict())

    def _run_check(self, tests_code: types.CodeType, namespace: dict[str, Any]) -> int:
        check_entry = self.recorder.entries["check"]
        try:
            exec(tests_code, namespace)
        except StopRun:
            return self.done(self._verdict())
        except BaseException as exc:
            return self.fail_stage("tests", exc)
        entry_point = self.entry_point
        if entry_point is None:
            entry_point, why = _infer_entry_point(self.program)
            if entry_point is None:
                return self.done(ERROR, stage="tests", message=why)
        if entry_point not in namespace:
            return self.done(
                ERROR, stage="tests", message=f"the code does not define {entry_point!r}"
            )
        check = namespace.get("check")
        if not callable(check):
            return self.done(ERROR, stage="tests", message="the tests' check is not callable")
        self.recorder.begin("check")
        start = time.perf_counter()
        try:
            check(namespace[entry_point])
        except StopRun:
            pass
        except BaseException as exc:
            if isinstance(exc, MemoryError):
                self.recorder.memory_error = True
            self.recorder._update(check_entry, ERROR, f"check raised {describe_exception(exc)}")
        check_entry.duration_ms = (time.perf_counter() - start) * 1000
        check_entry.runs = 1
        asserts = [e for e in self.recorder.entries.values() if e.kind == "assert"]
        if check_entry.status != ERROR:
            if asserts:  # the assertions are the report; "check" only matters when it fails
                del self.recorder.entries["check"]
            else:
                check_entry.status = PASSED
        return self.done(self._verdict())

    def _run_pytest(self, tests_code: types.CodeType, namespace: dict[str, Any]) -> int:
        try:
            exec(tests_code, namespace)
        except BaseException as exc:
            return self.fail_stage("tests", exc)
        cases = collect(namespace)
        for case in cases:
            self.recorder.add(case.entry)
        self.recorder.plan()
        if not cases:
            return self.done(ERROR, stage="tests", message="no tests found in the tests")
        for case in cases:
            self.recorder.begin(case.entry.id)
            start = time.perf_counter()
            try:
                status, message = run_case(case, namespace)
            except MemoryError as exc:
                self.recorder.memory_error = True
                status, message = FAILED, f"raised {describe_exception(exc)}"
            case.entry.duration_ms = (time.perf_counter() - start) * 1000
            case.entry.runs = 1
            if status in (FAILED, ERROR):
                case.entry.failures = 1
            self.recorder._update(case.entry, status, message)
            sys.stdout.flush()
            if self.fail_fast and status in (FAILED, ERROR):
                break
        return self.done(self._verdict())

    def _verdict(self) -> str:
        statuses = {e.status for e in self.recorder.entries.values()}
        return FAILED if statuses & {FAILED, ERROR} else PASSED


def run(payload: dict[str, Any], result_fd: int | None) -> int:
    """Run one job; returns the process exit code the zygote's child should use."""
    reporter = Reporter(result_fd)
    job = Job(payload, reporter)
    try:
        return job.run()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
