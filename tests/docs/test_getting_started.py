"""Every command on the getting-started page (and in the README) is real: each make target
exists and dry-runs, and each `crosscheck` command line parses as the CLI would parse it
(the command, every flag, every value, every file named), and its --help answers."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import typer
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError
from typer.core import TyperGroup
from typer.testing import CliRunner

from crosscheck.cli import app
from tests.docs.conftest import DOCS, REPO

PAGES = [DOCS / "getting-started.md", REPO / "README.md"]
BASH = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def commands(page: Path) -> list[str]:
    """The commands of a page's bash blocks: continuations joined, comments dropped."""
    found = []
    for block in BASH.findall(page.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                found.append(line)
    return found


def parse_crosscheck(args: list[str]) -> Context:
    """Parse a command line as `crosscheck` does, without running the command: an unknown
    command or flag, a bad value or a missing file raises click's UsageError (typer ships its
    own copy of click, hence the imports from ``typer._click``)."""
    command: Command = typer.main.get_command(app)
    ctx = Context(command, info_name="crosscheck")
    rest = list(args)
    name: str | None = "crosscheck"
    while isinstance(command, TyperGroup):
        assert rest, "a command group without its command"
        name, found, rest = command.resolve_command(ctx, rest)
        assert found is not None, f"no command {name}"
        command = found
        if isinstance(command, TyperGroup):
            ctx = Context(command, info_name=name, parent=ctx)
    return command.make_context(name or "", rest, parent=ctx)


def check(command: str) -> None:
    words = shlex.split(re.sub(r"<[^>]+>", "PLACEHOLDER", command))
    if words[0] == "make":
        assert len(words) == 2, command
        dry = subprocess.run(
            ["make", "-n", words[1]], cwd=REPO, capture_output=True, text=True, check=False
        )
        assert dry.returncode == 0, f"{command}: {dry.stderr}"
        return
    assert words[:3] == ["uv", "run", "crosscheck"], f"not a command this test knows: {command}"
    ctx = parse_crosscheck(words[3:])
    path = ctx.command_path.split()[1:]
    shown = CliRunner().invoke(app, [*path, "--help"])
    assert shown.exit_code == 0, shown.output


class TestGettingStarted:
    def test_each_task_is_one_command(self) -> None:
        found = commands(DOCS / "getting-started.md")
        assert "make run" in found
        assert "make test" in found
        assert len(found) >= 8
        for command in found:
            assert ";" not in command
            assert "&&" not in command
            assert "|" not in command

    @pytest.mark.parametrize(
        "command",
        sorted({c for page in PAGES for c in commands(page)}),
    )
    def test_command_is_real(self, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(REPO)  # the files the commands name are relative to the checkout
        monkeypatch.setenv("CROSSCHECK_NEW_PASSWORD", "a password to parse")  # no prompt
        check(command)


class TestTheCheck:
    """The check refuses what the CLI would refuse."""

    @pytest.mark.parametrize(
        "command",
        [
            "uv run crosscheck run task --no-such-flag",
            "uv run crosscheck run task --review sometimes",
            "uv run crosscheck run task --tests-file examples/no_such_tests.py",
            "uv run crosscheck no-such-command",
        ],
    )
    def test_a_command_the_cli_refuses(self, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(REPO)
        with pytest.raises(UsageError):
            check(command)

    def test_a_make_target_that_does_not_exist(self) -> None:
        with pytest.raises(AssertionError, match="No rule to make target"):
            check("make no-such-target")
