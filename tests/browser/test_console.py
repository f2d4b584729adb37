"""Reviewers in a real browser on the whole platform: log in, open an item from the queue and
comment in a few clicks (the run goes on with the comment as a binding human reflection);
a reload, a new tab and a shared link keep the reviewer on the item; a second reviewer reads a
claimed item without a decision panel; a code output keeps its lines with the Critic's quotes
marked; an edit shows beside the original; a reject needs a reason and a confirmation. The
page never scrolls sideways at 1280 px, logs no error, and asks nothing of any other host."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, ViewportSize, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from console.views.login import COOKIE
from tests.browser.conftest import (
    Platform,
    for_docs,
    keep_artifact,
    report,
    screenshot,
)
from tests.support.chromium import CHROMIUM_ARGS
from tests.support.fakemodel import user_text

RITA, BOB = "rita.reviewer", "bob.reviewer"
PASSWORD = "a-long-password-for-reviewers"
COMMENT = "Mention the Moon and say why there are two high tides a day."
# The queue polls every second: a new item shows within this, with no reload (on a loaded
# CI machine a tick can be seconds late).
LIVE_MS = 15_000
WIDTH = 1280
# screenshot -> (its name in docs/assets/screenshots/, shrunk whole rather than its top cut)
DOCS_SHOTS = {
    "console-queue.png": ("queue.png", False),
    "console-decide-1280x800.png": ("review.png", False),
    "console-review.png": ("review-points.png", True),
    "console-code-review.png": ("code-review.png", True),
}
# the output in the Review page's first tab, "Quotes marked"
MARKED = ".st-key-output-marked"
CODE = (
    "def high_tides(days):\n"
    '    """High tides in a number of days."""\n'
    "    if days < 0:\n"
    "        return  -1\n"
    "\n"
    "    return 2 * days\n"
)
QUOTE = "if days < 0:\n        return  -1"
# text from models, reviewers and users that Markdown would turn into a fetch, a link, styling
EVIL = "http://evil.example"
TASK_NOTE = f"Keep it short ![task]({EVIL}/task.png) **now**"
DIMENSION = f"style [docs]({EVIL}/dimension) :material/home:"
SUGGESTION = f"Name the factor ![pixel]({EVIL}/suggestion.png) _please_"
REFLECTION = f"Negative days are an error. ![r]({EVIL}/reflection.png) see www.evil.example"
REASON = f"Off topic ![reason]({EVIL}/reason.png) **for** this queue."
TOKEN_NAME = f"ci **bot** ![t]({EVIL}/token.png)"


def idle(page: Page) -> None:
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def settled(page: Page) -> None:
    """Idle, and done writing the session cookie after a login: the browser holds the cookie
    (a link opened before that asks to log in again, as it would for a person who opens one
    within the first moment). The cookie is HttpOnly and SameSite=Strict: set by the console's
    route, so no script on the page can read the token."""
    deadline = time.monotonic() + 15
    while not (found := [c for c in page.context.cookies() if c.get("name") == COOKIE]):
        assert time.monotonic() < deadline, "the session cookie was not written in 15 s"
        page.wait_for_timeout(100)
    assert (found[0].get("httpOnly"), found[0].get("sameSite")) == (True, "Strict"), found
    assert COOKIE not in page.evaluate("document.cookie")
    idle(page)


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


def item_of(platform: Platform, run_id: str) -> dict[str, Any]:
    items = platform.api.get("/v1/reviews", params={"run_id": run_id}).json()["items"]
    return dict(items[0])


def log_in(page: Page, username: str) -> None:
    page.locator(".st-key-login-username input").fill(username)
    page.locator(".st-key-login-password-input input").fill(PASSWORD)
    page.locator(".st-key-login-submit button").click()


def shows_literally(page: Page, text: str) -> None:
    """The text is on the page character for character (invisible word joiners aside), and
    nothing on the page links to, or loads from, the host it names."""
    found = page.evaluate("t => document.body.innerText.replace(/\u2060/g, '').includes(t)", text)
    assert found, f"not shown as typed: {text!r}"
    assert page.locator('img[src*="evil.example"], a[href*="evil.example"]').count() == 0


def no_sideways_scroll(page: Page, where: str) -> None:
    wide = page.evaluate(
        """() => [document.documentElement, ...document.querySelectorAll(
               '[data-testid="stMain"], [data-testid="stAppViewContainer"]')]
             .filter(e => e.scrollWidth > e.clientWidth + 1)
             .map(e => `${e.dataset.testid || e.tagName}: ${e.scrollWidth} > ${e.clientWidth}`)"""
    )
    assert wide == [], f"{where} scrolls sideways at {WIDTH} px: {wide}"


class Clicks:
    """Counts what the reviewer does in the timed flow."""

    def __init__(self) -> None:
        self.clicks = 0
        self.entries = 0

    def click(self, action: Callable[[], None]) -> None:
        self.clicks += 1
        action()

    def fill(self, action: Callable[[], None]) -> None:
        self.entries += 1
        action()


def queue_drawn(page: Page, rows: int) -> None:
    """The queue's table drawn with its header and ``rows`` rows (the grid is a canvas: it
    shows empty while it lays out, and a screenshot then would show an empty box)."""
    canvas = page.locator(".st-key-queue-table canvas").first
    canvas.wait_for()
    deadline = time.monotonic() + 15
    while (box := canvas.bounding_box()) is None or box["height"] < 35 * (rows + 1):
        assert time.monotonic() < deadline, f"the queue's table was not drawn in 15 s: {box}"
        page.wait_for_timeout(100)
    idle(page)


def open_by_selecting_the_row(page: Page, review_id: str, done: Clicks) -> None:
    """Select the queue's first row (its row marker, left of the Item link): the page opens the
    item in this tab. The click waits for the table drawn and the script idle; a click the
    grid lost (it was still laying out) leaves the queue showing, so it is tried once more."""
    table = page.locator(".st-key-queue-table")
    table.locator("canvas").first.wait_for()
    for attempt in range(2):
        idle(page)
        box = table.bounding_box()
        assert box is not None
        done.click(partial(page.mouse.click, box["x"] + 16, box["y"] + 35 + 17))
        try:
            page.wait_for_url(f"**/review?review={review_id}*", timeout=15_000)
            return
        except PlaywrightTimeout:
            assert attempt == 0, "selecting the row twice did not open the item"
            expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
            report("\nthe first row click was lost: selecting it again")


def decision_beside_output(page: Page) -> None:
    """At 1280x800 the output and the decision panel's Send button both show, unscrolled."""
    page.set_viewport_size({"width": WIDTH, "height": 800})
    try:
        idle(page)
        send = page.locator(".st-key-decision-submit button").first.bounding_box()
        output = page.locator(f"{MARKED} pre.cc-out").bounding_box()
        assert send is not None
        assert output is not None
        assert send["y"] + send["height"] <= 800, f"Send is below the fold: {send}"
        assert output["y"] + 40 <= 800, f"the output starts below the fold: {output}"
    finally:
        page.set_viewport_size({"width": WIDTH, "height": 1400})


def comment_from_the_queue(
    page: Page, review_id: str, next_id: str, first_line: str, shot: Callable[[Page, str], None]
) -> None:
    """Queue to a submitted comment: select the row, claim by key, select the output's first
    line (a point quoting it starts in the comment form), say what should change, send and
    open the next item by key."""
    done = Clicks()
    started = time.monotonic()
    open_by_selecting_the_row(page, review_id, done)
    expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
    idle(page)
    page.locator('[data-testid="stMain"]').hover()  # the shortcut goes to the page
    page.keyboard.press("Alt+K")  # claim
    expect(page.locator(".st-key-decision-comment textarea")).to_be_visible(timeout=10_000)
    idle(page)
    elapsed = time.monotonic() - started
    started = time.monotonic()
    # a triple click selects the output's first line: a point quoting it starts
    line = page.locator(f'{MARKED} .cc-l[data-line="1"]')
    done.click(lambda: line.click(click_count=3))
    quoted = page.locator(".st-key-decision-quoted-0")
    expect(quoted).to_be_visible(timeout=10_000)
    label = quoted.locator("label").inner_text().replace("\u2060", "")
    assert label.startswith(f"Line 1: \u201c{first_line[:20]}"), label
    done.fill(lambda: quoted.locator("input").fill(COMMENT))
    idle(page)
    decision_beside_output(page)
    page.set_viewport_size({"width": WIDTH, "height": 800})
    shot(page, "console-decide-1280x800.png")
    page.set_viewport_size({"width": WIDTH, "height": 1400})
    page.keyboard.press("Control+Shift+Enter")  # send, and open the queue's next item
    page.wait_for_url(f"**/review?review={next_id}*", timeout=15_000)
    expect(page.get_by_text("Your comment is recorded.").first).to_be_visible(timeout=10_000)
    report(
        f"\nqueue to a sent comment and the next item: {done.clicks} clicks, 2 keys, "
        f"{done.entries} text entry, {elapsed + time.monotonic() - started:.1f} s "
        "(screenshots aside)"
    )
    assert (done.clicks, done.entries) <= (2, 1)
    expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
    idle(page)


# three browser windows through one whole review flow: 60-80 s alone on this 2-core machine,
# past the suite's 120 s default when the machine is loaded
@pytest.mark.timeout(300)
def test_reviewers_in_the_browser(chromium: Path, platform: Platform, tmp_path: Path) -> None:
    for name in (RITA, BOB):
        created = platform.api.post(
            "/v1/accounts", json={"username": name, "password": PASSWORD, "role": "reviewer"}
        )
        assert created.status_code == 201, created.text
    task = f"Explain the tides to a ten-year-old (browser check {uuid.uuid4().hex[:8]})."
    base = platform.console_url
    outside: list[str] = []
    errors: list[str] = []
    shots: list[Path] = []

    def watch(context: BrowserContext) -> None:
        context.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
        context.on("page", lambda p: watch_page(p))
        context.on(
            "response",
            lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )
        # hermetic: whatever asks for another host is refused (and recorded above)
        context.route(lambda url: not url.startswith(base), lambda route: route.abort())

    def watch_page(page: Page) -> None:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

    def shot(page: Page, name: str) -> None:
        shots.append(screenshot(page, tmp_path / name))
        if name in DOCS_SHOTS:  # the reviewer's guide's pictures (CROSSCHECK_DOCS_SCREENSHOTS=1)
            docs_name, whole = DOCS_SHOTS[name]
            for_docs(shots[-1], docs_name, whole=whole)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        viewport: ViewportSize = {"width": WIDTH, "height": 1400}
        rita = browser.new_context(viewport=viewport)
        bob = browser.new_context(viewport=viewport)
        watch(rita)
        watch(bob)
        page = rita.new_page()
        page.set_default_timeout(15_000)
        try:
            # ---- log in on the queue; a run paused for review shows up live
            page.goto(base)
            idle(page)
            no_sideways_scroll(page, "the login page")
            shot(page, "console-login.png")
            log_in(page, RITA)
            # a wait on the login, not a pace: a loaded machine takes seconds to answer it
            expect(page.get_by_role("heading", name="Review queue")).to_be_visible(timeout=15_000)
            settled(page)
            expect(page.get_by_text(f"Signed in as {RITA} (reviewer)")).to_be_visible()
            # `crosscheck up` without keys: the orchestrator says demo, the sidebar shows it
            sidebar = page.locator('[data-testid="stSidebar"]')
            expect(sidebar.get_by_text("Models: demo (scripted fake model)")).to_be_visible()
            # ---- a code task escalates with the Critic's quote spanning two lines (first: the
            # queue lists the newest first, so it is the item after the README's)
            platform.fake.script(
                {"stage": "draft", "response": {"output": CODE, "uncertainties": []}},
                {
                    "stage": "critique",
                    "response": {
                        "verdict": "revise",
                        "confidence": 0.5,
                        "issues": [
                            {
                                "dimension": "correctness",
                                "severity": "critical",
                                "quote": QUOTE,
                                "suggestion": "Raise ValueError for negative days.",
                            },
                            {
                                "dimension": DIMENSION,
                                "severity": "minor",
                                "quote": "return 2 * days",
                                "suggestion": SUGGESTION,
                            },
                        ],
                        "binding_checks": [],
                        "reflection": REFLECTION,
                        "error_class": "logic",
                    },
                },
            )
            code_run = platform.api.post(
                "/v1/runs",
                json={
                    "task": "Write high_tides(days): how many high tides in that many days.\n"
                    + TASK_NOTE,
                    "kind": "code",
                    "policy": {"max_rounds": 1, "review": "on_escalation"},
                },
            ).json()["id"]
            wait_for_run(platform, code_run, lambda run: run["status"] == "escalated")
            code_item = item_of(platform, code_run)
            link = f"{base}/review?review={code_item['id']}"

            # the README's walk-through: one critiqued round, then a person (an escalation)
            response = platform.api.post(
                "/v1/runs",
                json={"task": task, "policy": {"max_rounds": 1, "review": "on_escalation"}},
            )
            assert response.status_code == 201, response.text
            run_id = response.json()["id"]
            wait_for_run(platform, run_id, lambda run: run["status"] == "escalated")
            item = item_of(platform, run_id)
            output = platform.api.get(f"/v1/reviews/{item['id']}").json()["context"]["output"]
            first_line = output.split("\n")[0].strip()
            point = f"On line 1, \u201c{first_line}\u201d: {COMMENT}"
            # both escalations listed, live (no reload): the newest, the README's, first
            expect(page.get_by_text("2 items: escalations first")).to_be_visible(timeout=LIVE_MS)
            queue_drawn(page, rows=2)
            no_sideways_scroll(page, "the queue")
            shot(page, "console-queue.png")

            # ---- the timed flow: from the queue to a sent comment, and on to the next item
            comment_from_the_queue(page, item["id"], code_item["id"], first_line, shot)
            # what became of the point: back on the first item (its link), the page follows
            # the run and shows the Actor's answer and the Critic's check
            reviewed = page
            reviewed.goto(f"{base}/review?review={item['id']}")
            expect(reviewed.get_by_text("status resolved")).to_be_visible()
            outcomes = reviewed.locator(".st-key-point-outcomes")
            expect(outcomes.get_by_text("The Actor applied it in round 2")).to_be_visible(
                timeout=30_000
            )
            expect(outcomes.get_by_text("The Critic found it applied in round 2")).to_be_visible(
                timeout=30_000
            )
            no_sideways_scroll(reviewed, "a decided review")
            shot(reviewed, "console-review.png")

            # ---- a shared link in the same browser: logged in, on the item
            page.goto(link)
            expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            idle(page)
            # what a reviewer sees first: the "Quotes marked" tab (the other tabs' outputs
            # are in the page too, hidden until their tab is chosen)
            expect(page.get_by_role("tab", name="Quotes marked")).to_have_attribute(
                "aria-selected", "true"
            )
            code_view = page.locator(f"{MARKED} pre.cc-code")
            expect(code_view).to_be_visible()
            shown = code_view.evaluate(
                """pre => {
                    const copy = pre.cloneNode(true);
                    copy.querySelectorAll('.cc-ln, sup').forEach(e => e.remove());
                    return copy.textContent;
                }"""
            )
            assert shown == CODE  # every line, its indentation and the double space kept
            cut = page.evaluate(
                "() => [...document.querySelectorAll('pre.cc-out')]"
                ".filter(e => e.checkVisibility() && e.scrollWidth > e.clientWidth + 1).length"
            )
            assert cut == 0, "a code line runs past its box"
            marks = code_view.locator('mark[data-issue="1"]')
            assert marks.count() == 2  # the quote's two lines
            expect(
                page.get_by_text("Suggestion: Raise ValueError for negative days.")
            ).to_be_visible()
            # what the model and the task's author wrote shows as text: no fetch, no link
            for text in (TASK_NOTE, DIMENSION, f"Suggestion: {SUGGESTION}", REFLECTION):
                shows_literally(page, text)
            page.locator(".st-key-review-claim button").click()
            expect(page.locator(".st-key-decision-action")).to_be_visible(timeout=10_000)
            idle(page)
            # clicking a line's number quotes that line in a new point; dropped again
            page.locator(f'{MARKED} .cc-l[data-line="3"] .cc-ln').click()
            quoted = page.locator(".st-key-decision-quoted-0")
            expect(quoted.locator("label")).to_contain_text("Line 3:")
            assert quoted.locator("label").inner_text().replace("\u2060", "") == (
                "Line 3: \u201cif days < 0:\u201d"
            )
            idle(page)
            no_sideways_scroll(page, "a code review")
            shot(page, "console-code-review.png")
            page.locator(".st-key-decision-drop-quotes button").click()
            expect(quoted).to_have_count(0)
            idle(page)

            # ---- a reload keeps the reviewer logged in, on the item, holding it
            page.reload()
            expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            idle(page)  # drawn to its end first: a loaded machine takes seconds to render it
            expect(page.locator(".st-key-decision-action")).to_be_visible()
            assert f"review={code_item['id']}" in page.url
            idle(page)
            shot(page, "console-reload.png")
            # ---- and so does a new tab on the shared link
            tab = rita.new_page()
            tab.goto(link)
            expect(tab.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            expect(tab.locator(".st-key-decision-action")).to_be_visible()
            expect(tab.get_by_text(f"Signed in as {RITA} (reviewer)")).to_be_visible()
            idle(tab)
            shot(tab, "console-new-tab.png")
            tab.close()

            # ---- a second reviewer opens the shared link: login, then the item, read-only
            other = bob.new_page()
            other.set_default_timeout(15_000)
            other.goto(link)
            idle(other)
            expect(other.get_by_text(f"Log in to open review {code_item['id']}.")).to_be_visible()
            log_in(other, BOB)
            expect(other.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            settled(other)
            expect(other.get_by_text(f"{RITA} holds this item for")).to_be_visible()
            idle(other)
            assert other.locator(".st-key-decision-action").count() == 0
            assert other.locator(".st-key-release").count() == 0
            no_sideways_scroll(other, "a read-only review")
            shot(other, "console-read-only.png")

            # ---- rita edits: the editor holds the output; the edit shows beside the original
            # by key: an escalation's decisions are comment, retry, approve, edit, reject
            page.locator('[data-testid="stMain"]').hover()
            page.keyboard.press("Alt+4")
            editor = page.locator(".st-key-decision-output textarea")
            expect(editor).to_have_value(CODE)
            fixed = CODE.replace("return  -1", 'raise ValueError("days < 0")')
            editor.fill(fixed)
            page.locator(".st-key-decision-finish label").click()
            page.locator(".st-key-decision-submit button").first.click()
            expect(
                page.get_by_text("Your edit is recorded. The run finished: succeeded.")
            ).to_be_visible(timeout=10_000)
            expect(page.get_by_role("heading", name=f"Edited by {RITA} (round 2)")).to_be_visible()
            expect(page.get_by_role("strong").filter(has_text="Original (round 1)")).to_be_visible()
            # the changed lines, the original's beside the edit's, across the page
            changed = page.locator(".st-key-edit-beside table.diff")
            expect(changed.get_by_role("columnheader", name="Original (round 1)")).to_be_visible()
            expect(changed.locator(".diff_sub, .diff_chg").first).to_be_visible()
            assert "return\u00a0\u00a0-1" in changed.inner_text()
            assert 'raise\u00a0ValueError("days\u00a0<\u00a00")' in changed.inner_text()
            beside = page.locator(".st-key-edit-beside")
            box = beside.bounding_box()
            main = page.locator('[data-testid="stMainBlockContainer"]').bounding_box()
            assert box is not None
            assert main is not None
            # the main column's whole width (about 820 px at 1280), not a third of it
            assert box["width"] >= main["width"] - 2 * 80 - 1, (box, main)
            idle(page)
            beside.scroll_into_view_if_needed()
            shot(page, "console-edit.png")

            # ---- bob rejects a paused run: the reason is required, and he confirms
            reject_run = platform.api.post(
                "/v1/runs",
                json={"task": "Explain neap tides.", "policy": {"review": "before_critique"}},
            ).json()["id"]
            wait_for_run(platform, reject_run, lambda run: run["status"] == "awaiting_review")
            other.goto(f"{base}/review?review={item_of(platform, reject_run)['id']}")
            idle(other)
            other.locator(".st-key-review-claim button").click()
            other.locator(".st-key-decision-action").get_by_text("reject", exact=True).click()
            idle(other)
            other.locator(".st-key-decision-submit button").first.click()
            expect(other.get_by_text("A reject needs the reason")).to_be_visible()
            other.locator(".st-key-decision-reason textarea").fill(REASON)
            other.locator(".st-key-decision-submit button").first.click()
            expect(other.get_by_text("Reject this run?")).to_be_visible()
            idle(other)
            shows_literally(other, f"Your reason: {REASON}")
            no_sideways_scroll(other, "a reject's confirmation")
            shot(other, "console-reject-confirm.png")
            assert wait_for_run(platform, reject_run, lambda run: True)["status"] == (
                "awaiting_review"
            )
            other.locator(".st-key-decision-reject-confirm button").click()
            expect(
                other.get_by_text("You rejected the run. The run finished: failed.")
            ).to_be_visible()
            idle(other)

            # ---- a reviewer's API token (its name written by a person) claims an item; a
            # reload keeps the claim theirs; another reviewer sees the token's name as text
            token = platform.api.post("/v1/tokens", json={"name": TOKEN_NAME, "role": "reviewer"})
            assert token.status_code == 201, token.text
            spring_run = platform.api.post(
                "/v1/runs",
                json={"task": "Explain spring tides.", "policy": {"review": "before_critique"}},
            ).json()["id"]
            wait_for_run(platform, spring_run, lambda run: run["status"] == "awaiting_review")
            spring = f"{base}/review?review={item_of(platform, spring_run)['id']}"
            tok = browser.new_context(viewport=viewport)
            watch(tok)
            bot = tok.new_page()
            bot.set_default_timeout(15_000)
            bot.goto(spring)
            idle(bot)
            bot.get_by_role("tab", name="Token").click()
            bot.locator(".st-key-login-token-input input").fill(token.json()["token"])
            bot.locator(".st-key-token-submit button").click()
            expect(bot.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            settled(bot)
            bot.locator(".st-key-review-claim button").click()
            expect(bot.locator(".st-key-decision-action")).to_be_visible(timeout=10_000)
            bot.reload()
            expect(bot.get_by_role("heading", name="Review", exact=True)).to_be_visible()
            expect(bot.locator(".st-key-decision-action")).to_be_visible()
            idle(bot)
            shows_literally(bot, f"Signed in with the API token “{TOKEN_NAME}” (reviewer)")
            other.goto(spring)
            idle(other)
            expect(other.get_by_text("holds this item for")).to_be_visible()
            shows_literally(other, f"{TOKEN_NAME} holds this item for")
            assert other.locator(".st-key-decision-action").count() == 0
            no_sideways_scroll(other, "an item a token holds")
            shot(other, "console-token-holder.png")

            # ---- logging out clears the HttpOnly cookie (only the console's route can):
            # a reload then shows the login, not the session
            bot.locator(".st-key-logout button").click()
            login_page = bot.get_by_role("heading", name="Crosscheck reviewer console")
            expect(login_page).to_be_visible()
            deadline = time.monotonic() + 15
            while any(c.get("name") == COOKIE for c in tok.cookies()):
                assert time.monotonic() < deadline, "the session cookie outlived the logout"
                bot.wait_for_timeout(100)
            bot.reload()
            expect(login_page).to_be_visible()
            idle(bot)
            assert bot.locator(".st-key-logout").count() == 0
        except BaseException:
            try:
                for i, open_page in enumerate([p for c in browser.contexts for p in c.pages]):
                    failed = screenshot(open_page, tmp_path / f"console-failed-{i}.png")
                    report(f"\nscreenshot of the failure: {keep_artifact(failed)}")
            finally:
                report("\nbrowser errors:\n" + "\n".join(errors))
                report(f"\nservice logs:\n{platform.logs()}")
            raise
        finally:
            browser.close()
    for path in shots:
        report(f"screenshot: {keep_artifact(path)}")
    assert outside == [], f"requests left {base}: {outside}"
    # no console error and no failed request, reloads and shared links included
    assert errors == []
    failed_run = platform.api.get(f"/v1/runs/{reject_run}").json()
    assert (failed_run["status"], failed_run["stop_reason"]) == ("failed", "review_rejected")
    assert failed_run["detail"] == REASON

    # the commented run goes past the review: its revision applies the comment
    run = wait_for_run(platform, run_id, lambda run: len(run["rounds"]) >= 2)
    resolved = platform.api.get(f"/v1/reviews/{item['id']}").json()
    assert resolved["decision"]["action"] == "comment"
    assert resolved["decision"]["points"] == [point]  # the point carries its quote
    human = [r for r in run["reflections"] if r["source"] == "human"]
    assert [(r["content"], r["author"]) for r in human] == [(point, RITA)]
    calls = [c for c in platform.fake.requests() if COMMENT in user_text(c)]
    assert calls, "the revision's prompt carries the comment"
    revise_prompt = user_text(calls[0])
    assert "[BINDING: human reviewer" in revise_prompt[: revise_prompt.index(COMMENT)]
    assert f"<binding_points>\n1. {point}\n</binding_points>" in revise_prompt
    assert f"Reviewer point applied: {point}" in run["rounds"][1]["output"]
