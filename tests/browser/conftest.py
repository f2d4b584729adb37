"""The whole platform as real processes (fake model, Actor, Critic, Orchestrator on SQLite,
Streamlit console) and Debian's Chromium driven by the ``playwright`` package."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Page

from crosscheck.launcher import PORT_PREFIXES, Supervisor, plan, tail
from tests.support.chromium import CHROMIUM
from tests.support.fakemodel import FakeModel
from tests.support.servers import free_port

# how long a service may take to answer its health check: on a loaded 2-core machine the
# services' imports alone took over 60 s (seen with several test runs sharing it)
START_S = 120
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "artifacts"


class Platform:
    """Running services: their URLs, an admin API client, the fake model's control API."""

    def __init__(self, workdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        for prefix in PORT_PREFIXES:
            env[f"{prefix}_PORT"] = str(free_port())
        env.update(
            {
                "DATABASE_URL": f"sqlite:///{workdir}/crosscheck.sqlite",
                "CROSSCHECK_LOG_LEVEL": "WARNING",
                "ORCHESTRATOR_REVIEW_SWEEP_S": "0.5",
            }
        )
        self.plan = plan(env, with_sandbox=False, with_console=True)
        self.supervisor = Supervisor(self.plan, workdir / "logs")
        urls = {s.name: s.url(self.plan.env) for s in self.plan.services}
        self.console_url = urls["console"]
        self.fake = FakeModel(urls["fakemodel"])
        self.admin_token = self.plan.env["CROSSCHECK_ADMIN_TOKEN"]
        self.api = httpx.Client(
            base_url=urls["orchestrator"],
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=60,  # a bound, not a pace: a loaded machine answers slowly
            # no idle keep-alive: the server may close one just as the test reuses it
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def start(self) -> None:
        # start everything at once, then wait: the console's Streamlit start is the slow part
        started = [self.supervisor.start(spec) for spec in self.plan.services]
        for running in started:
            problem = self.supervisor.wait_healthy(running, timeout_s=START_S)
            if problem:
                raise RuntimeError(
                    f"{running.spec.name} did not start: {problem}\n{tail(running.log_path)}"
                )

    def stop(self) -> None:
        self.api.close()
        self.fake.close()
        self.supervisor.stop()

    def logs(self, lines: int = 25) -> str:
        return "\n".join(
            f"----- {r.spec.name} ({r.log_path})\n{tail(r.log_path, lines)}"
            for r in self.supervisor.running
        )


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; CI installs it (scripts/bootstrap.sh --dev), so absence is a failure."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`scripts/bootstrap.sh --dev` "
            "does it; never `playwright install`)",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture
def platform(tmp_path) -> Iterator[Platform]:
    running = Platform(tmp_path)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def _blank(path: Path) -> bool:
    """All one colour (the all-white frame)."""
    with Image.open(path) as image:
        extrema = image.convert("L").getextrema()
    return extrema[0] == extrema[1]


def screenshot(page: Page, path: Path) -> Path:
    """A screenshot of what the page shows; retried while headless Chromium hands back an
    all-white frame (seen now and then on a loaded machine)."""
    page.bring_to_front()
    for _ in range(10):
        page.screenshot(path=path)
        if not _blank(path):
            break
        page.wait_for_timeout(300)
    return path


DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "assets" / "screenshots"
# read at import: every test's environment is cleaned of CROSSCHECK_* (tests/conftest.py)
DOCS_SCREENSHOTS_ON = os.environ.get("CROSSCHECK_DOCS_SCREENSHOTS") == "1"


def for_docs(path: Path, name: str, *, whole: bool = False) -> None:
    """With CROSSCHECK_DOCS_SCREENSHOTS=1, a copy for the reviewer's guide in
    docs/assets/screenshots/: the top 1280x800 of the page (or, ``whole``, the page shrunk to
    fit in it), in 256 colours to keep the repository small. Off by default, so that a test
    run never changes the tree."""
    if not DOCS_SCREENSHOTS_ON:
        return
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with Image.open(path) as image:
        if whole:
            small = image.convert("RGB")
            small.thumbnail((1280, 800))
        else:
            small = image.convert("RGB").crop(
                (0, 0, min(image.width, 1280), min(image.height, 800))
            )
        small.quantize(colors=256).save(DOCS_SCREENSHOTS / name, optimize=True)


def report(message: str) -> None:
    """A line for whoever runs the test (shown with -s, and with a failure's captured output)."""
    print(message, flush=True)  # noqa: T201


def keep_artifact(path: Path) -> Path:
    """Copy a file to var/artifacts/ (gitignored), where people and CI can find it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / path.name
    shutil.copyfile(path, target)
    return target
