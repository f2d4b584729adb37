"""The evidence panel in a real browser (Streamlit's own HTML sanitizer in the way): each
``[n]`` of the output is a link that scrolls to the evidence its own reference line names and
highlights it (``[4]``, listing evidence 1's URL, leads there and says so beside it), the
invalid ``[2]`` and ``[7]`` are marked, and the hostile evidence (a ``javascript:`` URL, markup
in its title and snippet) shows as text: no dialog opens, no image loads, no link leads
anywhere but the page itself and the evidence's http(s) URL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import Dialog, Request, sync_playwright

from tests.browser.conftest import START_S, keep_artifact, screenshot
from tests.support.chromium import CHROMIUM_ARGS
from tests.support.servers import free_port
from tests.ui.test_evidence import HOSTILE_SNIPPET, HOSTILE_TITLE, NO_URL

PAGE = Path(__file__).with_name("evidence_page.py")


def test_citations_link_to_their_evidence_and_hostile_evidence_is_text(
    chromium: Path, tmp_path: Path
) -> None:
    port = free_port()
    log = (tmp_path / "streamlit.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(PAGE),
            "--server.address=127.0.0.1",
            f"--server.port={port}",
            "--server.headless=true",
            "--client.toolbarMode=viewer",
            "--browser.gatherUsageStats=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "streamlit.log").read_text()
            time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            dialogs: list[str] = []
            elsewhere: list[str] = []

            def on_dialog(dialog: Dialog) -> None:
                dialogs.append(dialog.message)
                dialog.dismiss()

            def on_request(request: Request) -> None:
                if not request.url.startswith(url):
                    elsewhere.append(request.url)

            page.on("dialog", on_dialog)
            page.on("request", on_request)
            page.goto(url)
            page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(
                timeout=START_S * 1000
            )
            page.locator("#cc-ev-2-3").wait_for()
            cites = page.eval_on_selector_all(
                "a.cc-cite", "els => els.map(e => e.getAttribute('href'))"
            )
            assert cites == ["#cc-ev-2-1", "#cc-ev-2-3", "#cc-ev-2-1", "#cc-ev-2-3"]
            bad = page.eval_on_selector_all(
                ".cc-cite-bad", "els => els.map(e => e.getAttribute('title'))"
            )
            assert bad == [NO_URL, "[7] has no reference line", NO_URL]
            mismatched = page.eval_on_selector_all(
                "a.cc-cite-mismatch",
                "els => els.map(e => [e.dataset.cite, e.getAttribute('href'),"
                " e.nextElementSibling.textContent])",
            )
            assert mismatched == [["4", "#cc-ev-2-1", " (lists evidence [1])"]] * 2
            hrefs = page.eval_on_selector_all(
                "a[href]", "els => els.map(e => e.getAttribute('href'))"
            )
            assert [h for h in hrefs if not h.startswith("#")] == [
                "https://example.org/golden-gate"
            ]
            assert page.locator("img").count() == 0
            cards = page.locator(".cc-ev")
            assert cards.nth(1).inner_text().count(HOSTILE_TITLE) == 1
            assert HOSTILE_SNIPPET in cards.nth(1).inner_text()
            target = page.locator("#cc-ev-2-3")
            box = target.bounding_box()
            assert box is not None
            assert box["y"] > 900  # below the fold before the click
            page.locator("a.cc-cite[href='#cc-ev-2-3']").first.click()
            page.wait_for_function(
                "() => { const r = document.querySelector('#cc-ev-2-3').getBoundingClientRect();"
                " return r.top >= 0 && r.bottom <= window.innerHeight; }"
            )
            outline = target.evaluate("e => getComputedStyle(e).outlineStyle")
            assert outline == "solid"  # :target highlights the evidence the link led to
            keep_artifact(screenshot(page, tmp_path / "evidence-panel.png"))
            assert dialogs == []
            assert elsewhere == []
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
