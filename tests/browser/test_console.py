"""A reviewer in a real browser: log in, see a paused run arrive live, claim it, comment;
the run goes on with the comment as a binding human reflection."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect, sync_playwright

from tests.browser.conftest import CHROMIUM_ARGS, Platform, keep_artifact, report, screenshot
from tests.support.fakemodel import user_text

USERNAME = "rita.reviewer"
PASSWORD = "a-long-password-for-rita"
COMMENT = "Mention the Moon and say why there are two high tides a day."
LIVE_MS = 5_000  # the queue polls every second: a new item shows within this, with no reload


def idle(page: Page) -> None:
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def wait_for_run(
    platform: Platform, run_id: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 20
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run: dict[str, Any] = platform.api.get(f"/v1/runs/{run_id}").raise_for_status().json()
        if done(run):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} is {run['status']} after {timeout_s} s: {run}")
        time.sleep(0.1)


def review_in_browser(page: Page, platform: Platform, task: str, shots: Path) -> tuple[str, str]:
    """Drive the console as a reviewer; returns the run id and the review id it decided."""
    page.goto(platform.console_url)
    page.locator('[data-testid="stApp"]').wait_for()
    idle(page)

    # log in with a password; the console lands on the queue
    page.locator(".st-key-login-username input").fill(USERNAME)
    page.locator(".st-key-login-password-input input").fill(PASSWORD)
    page.locator(".st-key-login-submit button").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible(timeout=10_000)
    expect(page.get_by_text("Nothing waits for review.")).to_be_visible()
    expect(page.get_by_text(f"Signed in as {USERNAME} (reviewer)")).to_be_visible()

    # while the reviewer looks at the queue, a run pauses for review: it shows up live
    response = platform.api.post(
        "/v1/runs", json={"task": task, "policy": {"review": "before_critique"}}
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    wait_for_run(platform, run_id, lambda run: run["status"] == "awaiting_review")
    paused = time.monotonic()
    [item] = platform.api.get("/v1/reviews", params={"run_id": run_id}).json()["items"]
    expect(page.get_by_text(task)).to_be_visible(timeout=LIVE_MS)  # never page.reload()
    report(f"\nthe queue showed the paused run {time.monotonic() - paused:.1f} s after it paused")
    screenshot(page, shots / "console-queue.png")

    # open it from its row (a link: the queue keeps polling until the browser leaves), then
    # claim it on the review page
    page.locator(f'a[href*="review={item["id"]}"]').click()
    expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible(timeout=10_000)
    expect(page.get_by_text("status pending")).to_be_visible()
    page.locator(".st-key-review-claim button").click()
    expect(page.get_by_text("status claimed")).to_be_visible(timeout=10_000)
    assert platform.api.get(f"/v1/reviews/{item['id']}").json()["status"] == "claimed"

    # comment, and submit the decision
    page.locator(".st-key-decision-action").get_by_text("comment", exact=True).click()
    page.locator(".st-key-decision-comment textarea").fill(COMMENT)
    page.locator(".st-key-decision-submit button").click()
    expect(page.get_by_text("Decision 'comment' recorded")).to_be_visible(timeout=10_000)
    expect(page.get_by_text("status resolved")).to_be_visible()
    idle(page)
    return run_id, item["id"]


def test_a_reviewer_comments_in_the_browser_and_the_run_goes_on(
    chromium: Path, platform: Platform, tmp_path: Path
) -> None:
    created = platform.api.post(
        "/v1/accounts", json={"username": USERNAME, "password": PASSWORD, "role": "reviewer"}
    )
    assert created.status_code == 201, created.text
    task = f"Explain the tides to a ten-year-old (browser check {uuid.uuid4().hex[:8]})."

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        # tall enough that the review, its reflections and the decision show in one shot
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.set_default_timeout(15_000)
        errors: list[str] = []  # what the page logs as errors (Streamlit's crashes show here)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        # hermetic: the page may reach the console only (Streamlit tries a few outside hosts)
        page.route(lambda url: not url.startswith(platform.console_url), lambda r: r.abort())
        try:
            run_id, review_id = review_in_browser(page, platform, task, tmp_path)
            shot = screenshot(page, tmp_path / "console-review.png")
        except BaseException:
            try:
                failed = screenshot(page, tmp_path / "console-review-failed.png")
                report(f"\nscreenshot of the failure: {keep_artifact(failed)}")
            finally:
                report("\nbrowser errors:\n" + "\n".join(errors))
                report(f"\nservice logs:\n{platform.logs()}")
            raise
        finally:
            browser.close()
    # only the outside requests the route above refused may fail
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []
    keep_artifact(tmp_path / "console-queue.png")
    report(f"\nscreenshot: {shot}\ncopied to: {keep_artifact(shot)}")

    # the run goes past the review: critique, revision, and (before_critique) the next pause
    run = wait_for_run(platform, run_id, lambda run: len(run["rounds"]) >= 2)
    resolved = platform.api.get(f"/v1/reviews/{review_id}").json()
    assert resolved["status"] == "resolved"
    assert resolved["decision"]["action"] == "comment"
    assert resolved["decision"]["comment"] == COMMENT

    # (a) the comment is the run's human reflection, by the reviewer who logged in
    human = [r for r in run["reflections"] if r["source"] == "human"]
    assert [(r["content"], r["author"]) for r in human] == [(COMMENT, USERNAME)]

    # (b) the comment comes next: the Actor's revision leads with it as BINDING and applies
    # it (before_critique: the revision then waits for the next review, with its point open)
    calls = platform.fake.requests()
    assert [c["stage"] for c in calls][:2] == ["draft", "revise"]
    revise_prompt = user_text(calls[1])
    at = revise_prompt.index(COMMENT)
    assert "[BINDING: human reviewer" in revise_prompt[:at]
    assert f"<binding_points>\n1. {COMMENT}\n</binding_points>" in revise_prompt
    revision = run["rounds"][1]
    assert f"Reviewer point applied: {COMMENT}" in revision["output"]
    assert [(r["point"], r["action"]) for r in revision["responses"]] == [(COMMENT, "applied")]
