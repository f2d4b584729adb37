"""`crosscheck corpus add/list/remove`: through a real Research service on loopback (its API,
with the service token), and with --db through the service's app in the CLI's own process;
every corpus on SQLite and on the test Postgres server."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner, Result

from crosscheck.cli import app
from research.app import create_app
from research.corpora import open_corpus
from tests.research import conftest as research_fixtures
from tests.research.conftest import corpus_settings
from tests.research.test_corpus import write_sample_files
from tests.support.apps import uvicorn_serving
from tests.support.servers import free_port

# an empty corpus on each store (a SQLite file, a fresh Postgres database): the research tests'
corpus_target = research_fixtures.corpus_target


def flat(text: str) -> str:
    """The words a user reads, without line breaks and the frames of typer's error panels."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The served app logs on this process; --db configures logging for the CLI's: both
    are put back, so neither reaches another test's output."""
    root = logging.getLogger()
    handlers, level, config = list(root.handlers), root.level, structlog.get_config()
    logging.getLogger("research").setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    root.handlers, root.level = handlers, level
    structlog.configure(**config)


@pytest.fixture
def files(tmp_path) -> Path:
    return write_sample_files(tmp_path / "docs")


@pytest.fixture
async def research_url(service_token, corpus_target) -> AsyncIterator[str]:
    """A Research service on loopback, on an empty corpus of each store."""
    async with uvicorn_serving(create_app(corpus_settings(service_token, corpus_target))) as url:
        yield url


async def corpus(*args: str, env: dict[str, Any] | None = None) -> Result:
    """`crosscheck corpus ...` in a worker thread: the service answers on this loop."""
    return await asyncio.to_thread(CliRunner().invoke, app, ["corpus", *args], env=env)


def through(url: str, token: str) -> list[str]:
    return ["--research-url", url, "--token", token]


class TestThroughTheService:
    async def test_add_every_format_once_list_and_remove(
        self, files, research_url, service_token, corpus_target
    ):
        service = through(research_url, service_token)
        first = await corpus("add", str(files), *service)
        assert first.exit_code == 0, first.output
        assert "added 4 document(s)" in first.output
        again = await corpus("add", str(files / "bridge.md"), *service)
        assert again.exit_code == 0, again.output
        assert "added 1 document(s)" in again.output
        assert "; 4 in" in again.output  # replaced, not duplicated
        listed = await corpus("list", "--json", *service)
        rows = [json.loads(line) for line in listed.output.splitlines() if line.startswith("{")]
        assert sorted(r["url"] for r in rows) == sorted(
            (files / name).resolve().as_uri()
            for name in ("bridge.md", "notes.txt", "page.html", "report.pdf")
        )
        assert {r["kind"] for r in rows} == {"markdown", "text", "html", "pdf"}
        removed = await corpus("remove", str(files / "notes.txt"), *service)
        assert removed.exit_code == 0, removed.output
        unwrapped = "".join(removed.output.split())  # the console wraps a long URL
        assert f"removed{(files / 'notes.txt').resolve().as_uri()}" in unwrapped
        missing = await corpus("remove", str(files / "notes.txt"), *service)
        assert missing.exit_code == 1
        assert "no document file://" in flat(missing.output)
        index = open_corpus(corpus_target)  # what the service wrote is its store's
        try:
            assert index.count() == 3
            assert index.search("Tides Moon", 5) == []
            assert len(index.search("Golden Gate", 5)) == 1
        finally:
            index.close()

    async def test_the_table_names_the_services_corpus(self, files, research_url, service_token):
        service = through(research_url, service_token)
        await corpus("add", str(files / "bridge.md"), "--url", "https://example.org/gg", *service)
        listed = await corpus("list", *service)
        assert listed.exit_code == 0, listed.output
        assert "https://example.org/gg" in listed.output
        assert "The Golden Gate" in listed.output
        assert "1 document(s) in" in flat(listed.output)

    async def test_a_file_the_service_refuses_is_skipped_with_its_reason(
        self, tmp_path, research_url, service_token
    ):
        docs = tmp_path / "mixed"
        docs.mkdir()
        (docs / "good.md").write_text("# Good\n\nThe Hoover Dam is in Nevada.\n")
        (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a pdf")
        (docs / "blank.txt").write_text("   \n")
        result = await corpus("add", str(docs), *through(research_url, service_token))
        assert result.exit_code == 0, result.output
        out = flat(result.output)
        assert "added 1 document(s)" in out
        assert "broken.pdf: not a readable PDF" in out
        assert "blank.txt: no text found in it" in out

    async def test_nothing_added_is_exit_code_1(self, files, research_url, service_token):
        result = await corpus(
            "add", str(files / "image.png"), *through(research_url, service_token)
        )
        assert result.exit_code == 1
        assert "unsupported format .png" in flat(result.output)

    async def test_a_wrong_token_is_the_services_refusal(self, research_url):
        result = await corpus("list", *through(research_url, "not-the-service-token-42"))
        assert result.exit_code == 1
        assert "error:" in result.output
        assert "Traceback" not in result.output

    async def test_the_service_and_token_come_from_the_environment(
        self, files, research_url, service_token
    ):
        env = {"RESEARCH_URL": research_url, "CROSSCHECK_SERVICE_TOKEN": service_token}
        result = await corpus("add", str(files / "bridge.md"), env=env)
        assert result.exit_code == 0, result.output
        assert "added 1 document(s)" in result.output


class TestWithoutAService:
    async def test_no_service_is_a_clear_error_that_says_what_to_do(self, service_token):
        url = f"http://127.0.0.1:{free_port()}"
        result = await corpus("list", *through(url, service_token))
        assert result.exit_code == 1
        out = flat(result.output)
        assert f"the Research service at {url} is unreachable" in out
        assert "crosscheck up" in out
        assert "--db" in out

    async def test_no_token_is_a_clear_error(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)  # no var/crosscheck.env here
        monkeypatch.delenv("CROSSCHECK_SERVICE_TOKEN", raising=False)
        result = await corpus("list")
        assert result.exit_code == 2
        assert "no service token" in flat(result.output)

    async def test_with_db_the_commands_work_on_that_corpus(self, files, corpus_target):
        db = ["--db", corpus_target]
        first = await corpus("add", str(files), *db)
        assert first.exit_code == 0, first.output
        assert "added 4 document(s)" in first.output
        listed = await corpus("list", "--json", *db)
        assert len([line for line in listed.output.splitlines() if "file://" in line]) == 4
        removed = await corpus("remove", str(files / "notes.txt"), *db)
        assert removed.exit_code == 0, removed.output
        again = await corpus("remove", str(files / "notes.txt"), *db)
        assert again.exit_code == 1
        assert "no document" in flat(again.output)
        index = open_corpus(corpus_target)
        try:
            assert index.count() == 3
        finally:
            index.close()

    async def test_with_db_list_json_prints_only_json(self, files, tmp_path):
        db = ["--db", str(tmp_path / "c.sqlite")]
        await corpus("add", str(files / "bridge.md"), *db)
        listed = await corpus("list", "--json", *db)
        assert [json.loads(line)["title"] for line in listed.stdout.splitlines()] == [
            "The Golden Gate"
        ]

    async def test_an_unreachable_postgres_corpus_is_a_clear_error_without_the_password(self):
        url = f"postgresql://corpus:s3cr3t-pw@127.0.0.1:{free_port()}/corpus"
        result = await corpus("list", "--db", url)
        assert result.exit_code == 1
        out = flat(result.output)
        assert "cannot be reached" in out
        assert "corpus:***@127.0.0.1" in out
        assert "s3cr3t-pw" not in result.output

    async def test_a_db_url_that_is_not_postgres_is_refused(self):
        result = await corpus("list", "--db", "mysql://x@host/db")
        assert result.exit_code == 2
        assert "postgresql://" in flat(result.output)

    async def test_a_folder_without_documents_is_refused(self, tmp_path):
        empty = tmp_path / "empty"
        empty.mkdir()
        result = await corpus("add", str(empty), "--db", str(tmp_path / "x.sqlite"))
        assert result.exit_code == 2
        assert "no Markdown, text, HTML or PDF file" in flat(result.output)

    async def test_a_path_that_does_not_exist_is_refused_before_anything(self, tmp_path):
        result = await corpus("add", str(tmp_path / "nope"), "--db", str(tmp_path / "x.sqlite"))
        assert result.exit_code == 2
        assert "no such file or folder" in flat(result.output)
        assert not (tmp_path / "x.sqlite").exists()
