"""``python -m sandbox``: settings from the environment, then no secret left in it."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox import __main__ as entry
from sandbox.settings import SandboxSettings, usable_cpus
from tests.sandbox.conftest import TOKEN


def test_scrub_keeps_only_the_allowlist() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "SANDBOX_WORKERS": "2",
        "CROSSCHECK_LOG_LEVEL": "INFO",
        "CROSSCHECK_SERVICE_TOKEN": TOKEN,
        "OPENAI_API_KEY": "sk-secret-0123456789",
        "AWS_SECRET_ACCESS_KEY": "x",
        "DATABASE_URL": "postgres://u:p@h/db",
    }
    removed = entry.scrub_environment(env)
    assert set(env) == {"PATH", "HOME", "SANDBOX_WORKERS", "CROSSCHECK_LOG_LEVEL"}
    assert removed == sorted(
        ["CROSSCHECK_SERVICE_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"]
    )


def test_main_reads_the_token_then_scrubs_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-0123456789")
    monkeypatch.setenv("SANDBOX_PORT", "8999")
    served: dict[str, Any] = {}

    def fake_serve(name: str, settings: SandboxSettings, factory: Any) -> None:
        served.update(name=name, settings=settings, env=dict(os.environ))

    monkeypatch.setattr(entry, "serve", fake_serve)
    monkeypatch.setattr(entry, "make_undumpable", lambda: True)  # not the test process
    entry.main()
    assert served["name"] == "sandbox"
    assert served["settings"].port == 8999
    assert served["settings"].service_token.get_secret_value() == TOKEN
    assert "OPENAI_API_KEY" not in served["env"]
    assert "CROSSCHECK_SERVICE_TOKEN" not in served["env"]


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", TOKEN)
    settings = SandboxSettings()
    assert (settings.host, settings.port) == ("127.0.0.1", 8003)
    assert settings.workers == max(1, min(usable_cpus(), 16))
    assert settings.allow_weak_isolation is False


@pytest.mark.parametrize(("name", "value"), [("SANDBOX_WORKERS", "0"), ("SANDBOX_UID", "0")])
def test_bad_settings_fail_fast(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        SandboxSettings()
