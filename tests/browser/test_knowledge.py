"""An admin in a real browser on the whole platform: logs in, opens the Knowledge page, writes
a new entry in its form and sees it listed (the orchestrator has it, written by that admin); a
title the API refuses shows its message beside the form. The browser logs no error and asks
nothing of any other host."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from playwright.sync_api import Page, ViewportSize, expect, sync_playwright

from tests.browser.conftest import Platform, keep_artifact, screenshot
from tests.browser.test_console import idle, settled
from tests.support.chromium import CHROMIUM_ARGS

ADMIN, PASSWORD = "ada.admin", "a-long-password-for-admins"
WAIT_MS = 30_000  # a login hashes with argon2 and the page reruns: slow on a loaded machine


@pytest.mark.timeout(600)  # the whole platform starts first: minutes on a loaded machine
def test_an_admin_creates_a_knowledge_entry_and_sees_it_listed(
    chromium: Path, platform: Platform, tmp_path: Path
) -> None:
    created = platform.api.post(
        "/v1/accounts", json={"username": ADMIN, "password": PASSWORD, "role": "admin"}
    )
    assert created.status_code == 201, created.text
    base = platform.console_url
    title = f"Cite the statute's jurisdiction ({uuid.uuid4().hex[:6]})"
    outside: list[str] = []
    errors: list[str] = []

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        viewport: ViewportSize = {"width": 1280, "height": 1400}
        context = browser.new_context(viewport=viewport)
        context.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
        context.on(
            "response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        context.route(lambda url: not url.startswith(base), lambda route: route.abort())
        page: Page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_default_timeout(15_000)
        try:
            page.goto(f"{base}/knowledge")
            idle(page)
            page.locator(".st-key-login-username input").fill(ADMIN)
            page.locator(".st-key-login-password-input input").fill(PASSWORD)
            page.locator(".st-key-login-submit button").click()
            expect(page.get_by_role("heading", name="Knowledge", exact=True)).to_be_visible(
                timeout=WAIT_MS
            )
            settled(page)

            page.locator(".st-key-knowledge-new-open label").click()
            form = page.locator(".st-key-knowledge-new-title input")
            expect(form).to_be_visible(timeout=WAIT_MS)
            # a blank title: the API's 422 beside the form, nothing created
            form.fill("   ")
            page.locator(".st-key-knowledge-new-body textarea").fill(
                "A statute named without its jurisdiction is ambiguous: name the state."
            )
            page.locator(".st-key-knowledge-create button").click()
            expect(
                page.get_by_text("title: String should have at least 1 character")
            ).to_be_visible(timeout=WAIT_MS)
            idle(page)

            page.locator(".st-key-knowledge-new-title input").fill(title)
            page.locator(".st-key-knowledge-new-profiles input").fill("legal")
            page.locator(".st-key-knowledge-create button").click()
            expect(page.get_by_text("Created kn_")).to_be_visible(timeout=WAIT_MS)
            idle(page)
            listed = page.locator('[class*="st-key-knowledge-kn_"]').filter(has_text=title)
            expect(listed).to_have_count(1, timeout=WAIT_MS)  # listed once, as its own card
            expect(listed.get_by_text(title, exact=True)).to_be_visible(timeout=WAIT_MS)
            expect(listed.get_by_text("rule anchor · profiles legal")).to_be_visible(
                timeout=WAIT_MS
            )
            # the form is empty again for the next entry
            expect(page.locator(".st-key-knowledge-new-title input")).to_have_value("")
            keep_artifact(screenshot(page, tmp_path / "console-knowledge.png"))
        finally:
            context.close()
            browser.close()

    [entry] = [e for e in platform.api.get("/v1/knowledge").json() if e["title"] == title]
    assert (entry["title"], entry["profiles"], entry["author"]) == (title, ["legal"], ADMIN)
    assert entry["weight"] == 1.0  # the form's default, left untouched
    assert outside == []
    # the one 422 is the API answering the console's server, never the browser
    assert errors == [], errors
