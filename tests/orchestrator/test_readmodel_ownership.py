"""``orchestrator.readmodel`` is the one reader and writer of runs, rounds, reflections,
model calls and events: a module elsewhere that builds one of their rows, takes their Core
table, queries them, or changes a column of a run or round row it loaded (or was given)
fails here, naming the file and line. The stats page and the dataset export are no
exception: their queries are the read model's too (``readmodel/aggregates.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "services" / "orchestrator" / "orchestrator"
OWNED = {"Run", "Round", "Reflection", "ModelCall", "Event"}
ROWS = OWNED - {"Run"}  # a Run is built as a value by its creator, then stored by insert_run
EXEMPT = ("readmodel/", "migrations/", "tables.py")


def _owned_imports(tree: ast.Module) -> set[str]:
    """The owned models this module imports from ``orchestrator.tables`` (by local name)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "orchestrator.tables":
            names |= {a.asname or a.name for a in node.names if a.name in OWNED}
    return names


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


# what hands out ORM rows of the owned tables (their changes go back through the read model)
LOADERS = {"load_run", "load_round", "load_visible", "all_rounds", "created_with_key"}


def _row_names(function: ast.FunctionDef | ast.AsyncFunctionDef, owned: set[str]) -> set[str]:
    """Names in ``function`` that hold an owned ORM row: parameters annotated with an owned
    model, and what a loader returned."""
    names = {
        a.arg
        for a in function.args.args + function.args.kwonlyargs
        if a.annotation is not None and _mentions(a.annotation, owned)
    }
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
            if name in LOADERS:
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _mutations(tree: ast.Module, owned: set[str], path: str) -> list[str]:
    found: list[str] = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        rows = _row_names(function, owned)
        for node in ast.walk(function):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                for each in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(each, ast.Attribute)
                        and isinstance(each.value, ast.Name)
                        and each.value.id in rows
                    ):
                        found.append(f"{path}:{each.lineno} changes {each.value.id}.{each.attr}")
    return found


def violations(source: str, path: str) -> list[str]:
    """Each place in ``source`` that reads or writes an owned table outside the read model."""
    tree = ast.parse(source)
    owned = _owned_imports(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        where = f"{path}:{node.lineno}"
        if isinstance(func, ast.Name) and name in owned & ROWS:
            found.append(f"{where} builds a {name} row")
        elif name == "table_of" and _mentions(node, owned):
            found.append(f"{where} takes an owned table for Core statements")
        elif name in ("insert", "update", "delete") and _mentions(node, owned):
            found.append(f"{where} writes an owned table")
        elif name == "select" and _mentions(node, owned):
            found.append(f"{where} queries an owned table")
    return found + _mutations(tree, owned | {"Run"}, path)


def test_only_the_read_model_touches_runs_rounds_reflections_calls_and_events() -> None:
    found: list[str] = []
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(PACKAGE).as_posix()
        if path.startswith(EXEMPT):
            continue
        found += violations(file.read_text(encoding="utf-8"), path)
    assert found == [], "go through orchestrator.readmodel:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("snippet", "path", "what"),
    [
        ("from orchestrator.tables import Round\nRound(run_id='r')", "reviews/x.py", "builds"),
        ("from orchestrator.tables import Event\nEvent(type='t')", "engine/x.py", "builds"),
        ("from orchestrator.tables import Run\nselect(Run.id)", "runs/x.py", "queries"),
        ("from orchestrator.tables import Run as R\nselect(R)", "runs/x.py", "queries"),
        ("from orchestrator.tables import ModelCall\ntable_of(ModelCall)", "a.py", "Core"),
        ("from orchestrator.tables import Run\nsa.update(Run)", "knowledge/x.py", "writes"),
        ("from orchestrator.tables import Run\nsa.update(Run)", "stats/x.py", "writes"),
        ("from orchestrator.tables import Run\nselect(Run.status)", "stats/x.py", "queries"),
        ("from orchestrator.tables import Round\nselect(Round)", "datasets/x.py", "queries"),
        ("def f():\n    run = load_run(s, i)\n    run.rounds = 2", "reviews/x.py", "run.rounds"),
        ("def f():\n    run = load_visible(s, p, i)\n    run.rounds += 1", "runs/x.py", "rounds"),
        (
            "from orchestrator.tables import Round\ndef f(row: Round):\n    row.output = ''",
            "engine/x.py",
            "row.output",
        ),
    ],
)
def test_the_check_finds_each_kind_of_trespass(snippet: str, path: str, what: str) -> None:
    found = violations(snippet, path)
    assert len(found) == 1
    assert what in found[0]
    assert found[0].startswith((path + ":2", path + ":3"))


def test_the_check_lets_the_read_models_callers_be() -> None:
    snippet = (
        "from orchestrator.tables import Run, ReviewItem\n"
        "from orchestrator.readmodel.runs import insert_run\n"
        "run = Run(id='r')\ninsert_run(session, run)\nselect(ReviewItem)\n"
    )
    assert violations(snippet, "runs/service.py") == []
    assert violations("import x\nfold.add(usage)", "stats/s.py") == []
