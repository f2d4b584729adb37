"""The docs site: the strict build passes, and the pages it generates cover the code."""

from __future__ import annotations

import html
import importlib
import importlib.util
import logging
import re
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tests.docs.conftest import DOCS, REPO, build_site


def settings_classes() -> list[type[BaseSettings]]:
    """Each deployable's settings class, found on disk: a new service's is found too."""
    modules = [
        ".".join(path.relative_to(path.parents[1]).with_suffix("").parts)
        for path in sorted(REPO.glob("services/*/*/settings.py"))
    ] + ["crosscheck.anthropic_adapter"]
    found = []
    for name in modules:
        for value in vars(importlib.import_module(name)).values():
            if isinstance(value, type) and issubclass(value, BaseSettings):
                if value.__module__ == name:
                    found.append(value)
    return found


def variables(cls: type[BaseSettings], name: str) -> set[str]:
    """The environment variables pydantic-settings reads a field from."""
    alias = cls.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        upper = {c for c in alias.choices if isinstance(c, str) and c.isupper()}
        if upper:
            return upper
    prefix = str(cls.model_config.get("env_prefix", ""))
    return {(prefix + name).upper()}


def page_text(site: Path, page: str) -> str:
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def load_hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
class TestStrictBuild:
    def test_builds_strict_and_generates_configuration_and_api_pages(self, tmp_path: Path) -> None:
        site = tmp_path / "site"
        built = build_site(site)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "WARNING" not in built.stderr, built.stderr

        # configuration: every field of every service's settings class, in that class's table
        configuration = page_text(site, "configuration")
        classes = settings_classes()
        assert len(classes) >= 7
        for cls in classes:
            caption = re.search(
                rf"Generated from\s+{re.escape(f'{cls.__module__}.{cls.__name__}')}\s*:",
                configuration,
            )
            assert caption is not None, f"{cls.__name__} has no table"
            table = configuration[caption.end() :].split("Generated from", 1)[0]
            for name in cls.model_fields:
                assert variables(cls, name) & set(re.findall(r"[A-Z][A-Z0-9_]+", table)), (
                    f"{cls.__name__}.{name} is not on the configuration page"
                )
        assert "(undocumented)" not in configuration

        # the HTTP API: every operation of the orchestrator's OpenAPI document
        reference = page_text(site, "api/reference")
        spec = (site / "api" / "openapi.json").read_text(encoding="utf-8")
        operations = re.findall(r'^    "(/[^"]*)": \{', spec, flags=re.MULTILINE)
        assert "/v1/runs" in operations
        for path in operations:
            assert path in reference, f"{path} is not in the API reference"

        # nothing from outside: no web font, no script or stylesheet from another host
        for page in site.rglob("*.html"):
            text = page.read_text(encoding="utf-8")
            outside = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', text)
            assert outside == [], f"{page.relative_to(site)} loads {outside}"


class TestConfigurationHook:
    """A setting without a description fails the strict build: the hook warns about it."""

    def test_warns_about_a_field_without_description(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        hook = load_hook("configuration")

        class NewSettings(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="NEWSERVICE_")
            documented: int = Field(default=1, description="Says what it does.")
            forgotten: int = 2

        with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.configuration"):
            table = hook.settings_table(NewSettings, set())
        assert "`NEWSERVICE_DOCUMENTED` | `1` | int | Says what it does. |" in table
        assert [r.getMessage() for r in caplog.records] == [
            "configuration: NewSettings.forgotten (NEWSERVICE_FORGOTTEN) has no description and "
            "no note in docs/hooks/configuration.py"
        ]

    def test_every_note_names_a_variable_a_service_reads(self) -> None:
        hook = load_hook("configuration")
        read = {
            v for cls in settings_classes() for n in cls.model_fields for v in variables(cls, n)
        }
        assert set(hook.NOTES) - read == set()


def test_every_orchestrator_folder_and_module_is_in_the_architecture_table() -> None:
    """A newcomer finds each top-level part of the orchestrator in docs/architecture.md's
    folder table (a new folder or module without a row fails here)."""
    package = REPO / "services" / "orchestrator" / "orchestrator"
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    start = page.index("## The orchestrator, folder by folder")
    table = page[start : page.index("\n## ", start + 1)]
    listed = set(re.findall(r"`([a-z_]+(?:/|\.py))`", table))
    parts = {
        p.name + "/" if p.is_dir() else p.name
        for p in package.iterdir()
        if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")
    }
    assert parts - listed == set()
