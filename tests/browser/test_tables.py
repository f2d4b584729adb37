"""The console's tables in a real browser at 1280 px: the Queue, Escalations, Runs, Lessons
and Metrics pages (with its Latest evaluation tab) show their tables and charts without the
page scrolling sideways (a wide table scrolls inside its own frame), and a run picked in the
Runs table opens its timeline; the browser logs no error and asks nothing of another host."""

from __future__ import annotations

import time
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from tests.browser.conftest import Platform, keep_artifact, screenshot
from tests.support.chromium import CHROMIUM_ARGS

USERNAME, PASSWORD = "tess.tables", "a-long-password-for-tess"
WIDTH = 1280


def idle(page: Page) -> None:
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def sideways(page: Page) -> list[str]:
    """The page's scroll containers that are wider than the window (none should be)."""
    wide: list[str] = page.evaluate(
        """() => [document.documentElement, ...document.querySelectorAll(
               '[data-testid="stMain"], [data-testid="stAppViewContainer"]')]
             .filter(e => e.scrollWidth > e.clientWidth + 1)
             .map(e => `${e.dataset.testid || e.tagName}: ${e.scrollWidth} > ${e.clientWidth}`)"""
    )
    return wide


def wait_for_status(platform: Platform, run_id: str, statuses: set[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if platform.api.get(f"/v1/runs/{run_id}").json()["status"] in statuses:
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not reach {statuses}")


def open_page(page: Page, title: str, heading: str) -> None:
    """Follow the sidebar link; once more if the queue's one-second tick swallowed the click."""
    target = page.get_by_role("heading", name=heading, exact=True)
    for _ in range(3):
        page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
        try:
            expect(target).to_be_visible(timeout=5_000)
            break
        except AssertionError:
            continue
    expect(target).to_be_visible()
    idle(page)


def test_tables_fit_at_1280_px(chromium: Path, platform: Platform, tmp_path: Path) -> None:
    created = platform.api.post(
        "/v1/accounts", json={"username": USERNAME, "password": PASSWORD, "role": "reviewer"}
    )
    assert created.status_code == 201, created.text
    long_task = "Explain the tides to a ten-year-old, " + "with the Moon and the Sun, " * 8
    paused = platform.api.post(
        "/v1/runs", json={"task": long_task, "policy": {"review": "before_critique"}}
    ).json()["id"]
    stopped = platform.api.post(
        "/v1/runs", json={"task": "Explain tides.", "policy": {"max_rounds": 1}}
    ).json()["id"]
    wait_for_status(platform, paused, {"awaiting_review"})
    wait_for_status(platform, stopped, {"escalated"})
    from tests.orchestrator.test_evaluations import SUMMARY

    published = platform.api.post("/v1/evaluations", json=SUMMARY)
    assert published.status_code == 201, published.text

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        page.set_default_timeout(15_000)
        base = platform.console_url
        outside: list[str] = []
        errors: list[str] = []
        page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route(lambda url: not url.startswith(base), lambda r: r.abort())
        try:
            page.goto(platform.console_url)
            idle(page)
            page.locator(".st-key-login-username input").fill(USERNAME)
            page.locator(".st-key-login-password-input input").fill(PASSWORD)
            page.locator(".st-key-login-submit button").click()
            expect(page.get_by_role("heading", name="Review queue")).to_be_visible(timeout=10_000)
            expect(page.locator(".st-key-queue-table canvas").first).to_be_visible(timeout=10_000)
            idle(page)
            page.wait_for_timeout(500)  # the table draws on its canvas after the run
            problems = {"queue": sideways(page)}
            screenshot(page, tmp_path / "console-tables-queue.png")

            open_page(page, "Escalations", "Escalations")
            expect(page.locator(".st-key-esc-open-table")).to_be_visible()
            problems["escalations"] = sideways(page)
            screenshot(page, tmp_path / "console-tables-escalations.png")

            open_page(page, "Runs", "Runs")
            table = page.locator(".st-key-runs-table")
            expect(table).to_be_visible()
            problems["runs"] = sideways(page)
            box = table.bounding_box()
            assert box is not None
            page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)  # the first row's selector
            expect(page.get_by_role("heading", name="Timeline")).to_be_visible(timeout=10_000)
            idle(page)
            problems["runs timeline"] = sideways(page)
            screenshot(page, tmp_path / "console-tables-runs.png")

            open_page(page, "Lessons", "Lessons")
            problems["lessons"] = sideways(page)

            open_page(page, "Metrics", "Metrics")
            expect(page.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
            problems["metrics"] = sideways(page)
            screenshot(page, tmp_path / "console-tables-metrics.png")

            page.get_by_role("tab", name="Latest evaluation").click()
            expect(page.get_by_text("cross: score")).to_be_visible()
            expect(page.get_by_text("+25.0 pts")).to_be_visible()
            idle(page)
            page.wait_for_timeout(500)  # the table draws on its canvas after the run
            problems["evaluation"] = sideways(page)
            screenshot(page, tmp_path / "console-tables-evaluation.png")
        finally:
            browser.close()
    for name in ("queue", "escalations", "runs", "metrics", "evaluation"):
        keep_artifact(tmp_path / f"console-tables-{name}.png")
    assert {k: v for k, v in problems.items() if v} == {}
    assert outside == []  # nothing asked of another host
    assert errors == []  # and the browser console logged no error
