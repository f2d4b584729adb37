"""``orchestrator.readmodel`` is the one reader and writer of runs, rounds, reflections,
model calls and events: a module elsewhere that builds one of their rows, their Core table
or a query on them fails here, naming the file and line.

Two capabilities only read them, in aggregate, and stay outside: ``stats`` (the dashboard's
counts) and ``datasets`` (exports); neither may write them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "services" / "orchestrator" / "orchestrator"
OWNED = {"Run", "Round", "Reflection", "ModelCall", "Event"}
ROWS = OWNED - {"Run"}  # a Run is built as a value by its creator, then stored by insert_run
EXEMPT = ("readmodel/", "migrations/", "tables.py")
READ_ONLY = ("stats/", "datasets/")  # aggregate reads only


def _owned_imports(tree: ast.Module) -> set[str]:
    """The owned models this module imports from ``orchestrator.tables`` (by local name)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "orchestrator.tables":
            names |= {a.asname or a.name for a in node.names if a.name in OWNED}
    return names


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def violations(source: str, path: str) -> list[str]:
    """Each place in ``source`` that reads or writes an owned table outside the read model."""
    tree = ast.parse(source)
    owned = _owned_imports(tree)
    read_only = path.startswith(READ_ONLY)
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
        elif name == "select" and _mentions(node, owned) and not read_only:
            found.append(f"{where} queries an owned table")
        elif name == "add" and read_only and "session" in ast.unparse(func):
            found.append(f"{where} adds a row from a read-only capability")
    return found


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
        ("import x\nself.session.add(row)", "datasets/x.py", "read-only"),
    ],
)
def test_the_check_finds_each_kind_of_trespass(snippet: str, path: str, what: str) -> None:
    found = violations(snippet, path)
    assert len(found) == 1
    assert what in found[0]
    assert found[0].startswith(path + ":2")


def test_the_check_lets_the_read_models_callers_be() -> None:
    snippet = (
        "from orchestrator.tables import Run, ReviewItem\n"
        "from orchestrator.readmodel.runs import insert_run\n"
        "run = Run(id='r')\ninsert_run(session, run)\nselect(ReviewItem)\n"
    )
    assert violations(snippet, "runs/service.py") == []
    assert violations("from orchestrator.tables import Run\nselect(Run.id)", "stats/s.py") == []
    assert violations("import x\nfold.add(usage)", "stats/s.py") == []
