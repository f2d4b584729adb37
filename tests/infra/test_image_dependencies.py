"""Each image installs only its service's locked dependencies; is that enough to import it?

The development venv holds the whole workspace, so a service that imports a library it never
declared still works there and fails only in its image. This resolves, from uv.lock, exactly
what `uv sync --frozen --no-dev --package <dist>` installs, and checks every import in the
service's source against it (stdlib aside; imports under ``if TYPE_CHECKING:`` or guarded by
``except ImportError`` aside). It also pins the sandbox image's keylessness down: no provider
SDK is in its closure at all.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.infra._support import (
    ENTRYPOINT_SCRIPTS,
    REPO,
    dockerfiles,
    exec_form,
    load_dockerfile,
    member_for_package,
    package_dir,
    served_package,
    workspace_members,
)

PROVIDER_SDKS = {"openai", "anthropic"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _lock() -> dict[str, dict]:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    return {_normalise(p["name"]): p for p in lock["package"]}


def locked_closure(dist: str) -> set[str]:
    """Distributions `uv sync --no-dev --package dist` installs (markers ignored: a superset)."""
    lock = _lock()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(_normalise(dist), ())]
    while todo:
        name, extras = todo.pop()
        if name not in lock or (name, extras) in seen:
            continue
        seen.add((name, extras))
        package = lock[name]
        deps = list(package.get("dependencies", []))
        for extra in extras:
            deps += package.get("optional-dependencies", {}).get(extra, [])
        todo += [(_normalise(d["name"]), tuple(d.get("extra", []))) for d in deps]
    return {name for name, _ in seen}


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside ``if TYPE_CHECKING:`` or a ``try`` that catches ImportError."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test):
            return True
        if isinstance(parent, ast.Try) and child in parent.body:
            caught = " ".join(ast.unparse(h.type) for h in parent.handlers if h.type is not None)
            if "ImportError" in caught or "ModuleNotFoundError" in caught:
                return True
        child, parent = parent, parents.get(parent)
    return False


def imported_top_levels(package: Path) -> dict[str, str]:
    """Top-level module name -> first file importing it, for unguarded absolute imports
    (``package`` may also be a single file)."""
    found: dict[str, str] = {}
    paths = [package] if package.is_file() else sorted(package.rglob("*.py"))
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            if _guarded(node, parents):
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def service_packages() -> list[tuple[str, str]]:
    """(import package, distribution) for every service an image under infra/docker runs."""
    result: list[tuple[str, str]] = []
    for path in dockerfiles():
        df = load_dockerfile(path)
        for stage in df.service_stages():
            module = served_package(exec_form(stage.all("ENTRYPOINT")[-1].args))
            member = member_for_package(module) if module else None
            if module is not None and member is not None:
                result.append((module, member.dist))
    return sorted(set(result))


def missing_imports(package: Path, dist: str) -> list[str]:
    """Imports in ``package`` that the image of ``dist`` could not satisfy."""
    closure = locked_closure(dist)
    first_party = {Path(p).name: m.dist for m in workspace_members().values() for p in m.packages}
    providers = packages_distributions()
    problems = []
    for name, where in sorted(imported_top_levels(package).items()):
        if name in sys.stdlib_module_names or name == "__future__":
            continue
        candidates = {first_party[name]} if name in first_party else set()
        candidates |= {_normalise(d) for d in providers.get(name, [])}
        if not candidates:
            problems.append(f"{where}: imports {name!r}, which no installed distribution provides")
        elif not candidates & closure:
            problems.append(
                f"{where}: imports {name!r} ({', '.join(sorted(candidates))}), which "
                f"{dist} does not depend on: its image would fail to import it"
            )
    return problems


SERVICES = service_packages()


def test_every_service_image_is_covered():
    assert {module for module, _ in SERVICES} >= {
        "actor",
        "critic",
        "sandbox",
        "fakemodel",
        "orchestrator",
        "console",
    }


@pytest.mark.parametrize(("module", "dist"), SERVICES, ids=[m for m, _ in SERVICES])
def test_a_service_imports_only_what_its_image_installs(module: str, dist: str):
    member = member_for_package(module)
    assert member is not None
    assert missing_imports(package_dir(member, module), dist) == []


def test_the_sandbox_image_has_no_provider_sdk():
    closure = locked_closure("crosscheck-sandbox")
    assert "crosscheck-sandbox" in closure
    assert "crosscheck-shared" in closure
    assert not closure & PROVIDER_SDKS, sorted(closure & PROVIDER_SDKS)


def test_the_orchestrator_image_has_no_provider_sdk():
    """It reaches models through the actor and the critic only; shared comes without the
    `providers` extra."""
    closure = locked_closure("crosscheck-orchestrator")
    assert {"crosscheck-orchestrator", "crosscheck-shared"} <= closure
    assert not closure & PROVIDER_SDKS, sorted(closure & PROVIDER_SDKS)


def test_the_orchestrator_image_has_what_it_loads_by_name():
    """What no import statement shows: SQLAlchemy and DBOS load the psycopg (3) driver for a
    postgresql:// DATABASE_URL by dialect name, alembic renders migrations through mako, and
    ``python -m orchestrator`` serves with uvicorn."""
    closure = locked_closure("crosscheck-orchestrator")
    for needed in ("psycopg", "psycopg-binary", "sqlalchemy", "alembic", "mako", "dbos", "uvicorn"):
        assert needed in closure, needed


def test_the_orchestrator_migrations_ship_in_its_package():
    """The image installs a wheel (--no-editable): alembic's script_location is the
    package's own migrations/ folder, so it must be inside the package."""
    member = member_for_package("orchestrator")
    assert member is not None
    migrations = package_dir(member, "orchestrator") / "migrations"
    assert (migrations / "env.py").is_file()
    assert (migrations / "script.py.mako").is_file()
    assert list((migrations / "versions").glob("*.py"))


def test_the_console_image_has_streamlit_and_no_provider_sdk():
    """The console talks to the orchestrator API only (httpx); shared comes without the
    `providers` extra. ``streamlit run`` is started by name, not imported by the app."""
    closure = locked_closure("crosscheck-ui")
    assert {"crosscheck-ui", "crosscheck-shared", "streamlit", "httpx"} <= closure
    assert not closure & PROVIDER_SDKS, sorted(closure & PROVIDER_SDKS)


@pytest.mark.parametrize("script", sorted(ENTRYPOINT_SCRIPTS))
def test_an_entrypoint_script_imports_only_the_stdlib_and_its_package(script: str):
    """The scripts run in the image, beside the venv: nothing but the stdlib and the package
    they serve (and what that package's image installs)."""
    source, package = ENTRYPOINT_SCRIPTS[script]
    member = member_for_package(package)
    assert member is not None
    imported = set(imported_top_levels(REPO / source))
    assert imported - set(sys.stdlib_module_names) - {"__future__"} <= {package}
    assert missing_imports(REPO / source, member.dist) == []


def test_the_actor_and_critic_images_have_both_provider_sdks():
    for dist in ("crosscheck-actor", "crosscheck-critic"):
        assert locked_closure(dist) >= PROVIDER_SDKS, dist


def test_the_check_catches_an_undeclared_import(tmp_path, monkeypatch):
    """fakemodel does not depend on structlog (shared does): importing it must be caught,
    while guarded imports and the stdlib are not."""
    assert "structlog" not in locked_closure("crosscheck-fakemodel")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import json\nimport structlog\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import openai\n"
        "try:\n    import anthropic\nexcept ImportError:\n    anthropic = None\n"
    )
    assert set(imported_top_levels(package)) == {"json", "structlog", "typing"}
    problems = missing_imports(package, "crosscheck-fakemodel")
    assert len(problems) == 1
    assert "'structlog'" in problems[0]
    assert missing_imports(package, "crosscheck-actor") == []
