"""What an open Queue tab costs: N console Queue tabs in headless Chromium on a running
platform, and per tab per minute the requests the console sends the orchestrator, their bytes
(both ways), the websocket bytes between the tab and the console, and the CPU seconds of the
orchestrator and the console processes (utime + stime from /proc/<pid>/stat).

The platform is started here (fake model, Actor, Critic, Orchestrator on SQLite, console), with
a few items waiting in the queue and nothing else happening: the steady cost of the live
queue (its fragment polls the cheap events feed every five seconds once the queue has been
quiet for 30 s, every second while it moves). The console reaches
the orchestrator through a counting TCP proxy in this process, so every request is seen. The
same is measured first with no tab open (the platform's own idle cost), and the per-tab
figures are given both as measured and above that idle cost.

  uv run --frozen python -m bench.queue_tab --tabs 1 4 --seconds 60

Chromium is Debian's (/usr/bin/chromium, never `playwright install`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, Page, WebSocket, sync_playwright
from rich.console import Console
from rich.table import Table

from bench.procstat import cpu_seconds
from crosscheck.launcher import PORT_PREFIXES, Supervisor, plan
from tests.support.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.support.servers import free_port

console = Console()
ADMIN = "bench-admin-token-0123456789abcdef"
REVIEWER, PASSWORD = "bench.reviewer", "a-long-password-for-the-bench"
REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+) HTTP/1\.[01]")
AN_ID = re.compile(r"/[a-z]+_[0-9a-zA-Z]{8,}")


class CountingProxy:
    """A TCP proxy in front of the orchestrator: bytes each way, and requests by path (read
    from the request lines the console sends; keep-alive connections carry several)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self.lock = threading.Lock()
        self.sent = 0  # console -> orchestrator
        self.received = 0  # orchestrator -> console
        self.paths: Counter[str] = Counter()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self.loop
        ).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": sum(self.paths.values()),
                "bytes": self.sent + self.received,
                "paths": dict(self.paths),
            }

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._pipe(reader, up_writer, upstream=True),
            self._pipe(up_reader, writer, upstream=False),
        )

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        pending = b""
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
                with self.lock:
                    if not upstream:
                        self.received += len(data)
                        continue
                    self.sent += len(data)
                    lines = (pending + data).split(b"\r\n")
                    pending = lines.pop()[-8192:]  # a request line is short; bodies are not
                    for line in lines:
                        if found := REQUEST_LINE.fullmatch(line):
                            path = found.group(2).decode(errors="replace").split("?", 1)[0]
                            self.paths[f"{found.group(1).decode()} {AN_ID.sub('/{id}', path)}"] += 1
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()


class QueuePlatform:
    """The services as real processes on loopback; the console talks to the orchestrator
    through the counting proxy."""

    def __init__(self, workdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        for prefix in PORT_PREFIXES:
            env[f"{prefix}_PORT"] = str(free_port())
        env.update(
            {
                "CROSSCHECK_ADMIN_TOKEN": ADMIN,
                "DATABASE_URL": f"sqlite:///{workdir}/crosscheck.sqlite",
                "CROSSCHECK_LOG_LEVEL": "WARNING",
            }
        )
        self.plan = plan(env, with_sandbox=False, with_console=True)
        by_name = {s.name: s for s in self.plan.services}
        orchestrator = by_name["orchestrator"]
        self.url = orchestrator.url(self.plan.env)
        self.proxy = CountingProxy(
            orchestrator.host(self.plan.env), orchestrator.port(self.plan.env)
        )
        self.plan.services = [
            dataclasses.replace(s, overrides=(*s.overrides, ("CROSSCHECK_URL", self.proxy.url)))
            if s.name == "console"
            else s
            for s in self.plan.services
        ]
        self.console_url = by_name["console"].url(self.plan.env)
        self.supervisor = Supervisor(self.plan, workdir / "logs")
        self.pids: dict[str, int] = {}

    def __enter__(self) -> QueuePlatform:
        self.proxy.start()
        try:
            started = [self.supervisor.start(spec) for spec in self.plan.services]
            for running in started:
                problem = self.supervisor.wait_healthy(running, timeout_s=180)
                if problem:
                    raise RuntimeError(f"{running.spec.name} did not start: {problem}")
                self.pids[running.spec.name] = running.pid
        except BaseException:
            self.supervisor.stop()
            self.proxy.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.supervisor.stop()
        self.proxy.stop()

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(self.pids[name]) for name in ("orchestrator", "console")}

    def fill_queue(self, items: int) -> None:
        """An account for the tabs, and ``items`` runs paused for review."""
        with httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        ) as api:
            api.post(
                "/v1/accounts",
                json={"username": REVIEWER, "password": PASSWORD, "role": "reviewer"},
            ).raise_for_status()
            runs = [
                api.post(
                    "/v1/runs",
                    json={
                        "task": f"Explain the tides, part {n + 1}.",
                        "policy": {"review": "before_critique"},
                    },
                ).json()["id"]
                for n in range(items)
            ]
            deadline = time.monotonic() + 60
            while any(api.get(f"/v1/runs/{r}").json()["status"] != "awaiting_review" for r in runs):
                if time.monotonic() > deadline:
                    raise RuntimeError("the runs did not pause for review in 60 s")
                time.sleep(0.2)


class Tabs:
    """N Queue tabs of one logged-in browser, counting the websocket bytes of each."""

    def __init__(self, browser: Browser, base: str, n: int) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.base = base
        self.ws_bytes = 0
        self.errors: list[str] = []
        self.pages = [self._open(i == 0) for i in range(n)]

    def _count(self, payload: str | bytes) -> None:
        self.ws_bytes += len(payload.encode() if isinstance(payload, str) else payload)

    def _watch(self, ws: WebSocket) -> None:
        ws.on("framereceived", self._count)
        ws.on("framesent", self._count)

    def _open(self, log_in: bool) -> Page:
        page = self.context.new_page()
        page.set_default_timeout(60_000)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("websocket", self._watch)
        page.goto(self.base)
        if log_in:
            idle(page)
            page.locator(".st-key-login-username input").fill(REVIEWER)
            page.locator(".st-key-login-password-input input").fill(PASSWORD)
            page.locator(".st-key-login-submit button").click()
            page.get_by_role("heading", name="Review queue").wait_for()
            deadline = time.monotonic() + 30  # the session cookie, for the other tabs
            while not any(c.get("name") == "crosscheck_session" for c in self.context.cookies()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the session cookie was not written in 30 s")
                page.wait_for_timeout(100)
        page.locator(".st-key-queue-table").wait_for()
        idle(page)
        return page

    def close(self) -> None:
        self.context.close()


def idle(page: Page) -> None:
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


@contextmanager
def window(platform: QueuePlatform, tabs: Tabs | None) -> Iterator[dict[str, Any]]:
    """What the platform did while the block ran: requests, bytes, CPU, wall seconds."""
    cpu0, proxy0 = platform.cpu(), platform.proxy.snapshot()
    ws0 = tabs.ws_bytes if tabs else 0
    started = time.monotonic()
    out: dict[str, Any] = {}
    yield out
    cpu1, proxy1 = platform.cpu(), platform.proxy.snapshot()
    paths = Counter(proxy1["paths"])
    paths.subtract(proxy0["paths"])
    out.update(
        seconds=time.monotonic() - started,
        requests=proxy1["requests"] - proxy0["requests"],
        bytes=proxy1["bytes"] - proxy0["bytes"],
        ws_bytes=(tabs.ws_bytes if tabs else 0) - ws0,
        orchestrator_cpu_s=cpu1["orchestrator"] - cpu0["orchestrator"],
        console_cpu_s=cpu1["console"] - cpu0["console"],
        paths={k: v for k, v in paths.items() if v},
    )


def per_tab_per_min(tabs: int, got: dict[str, Any], idle_rate: dict[str, Any]) -> dict[str, Any]:
    minutes = got["seconds"] / 60
    each = tabs * minutes

    def above(key: str) -> float:
        return (got[key] - idle_rate[key] * got["seconds"]) / each

    return {
        "who": f"{tabs} tab{'s' if tabs != 1 else ''}",
        "tabs": tabs,
        "seconds": round(got["seconds"], 1),
        "requests_per_tab_min": round(got["requests"] / each, 1),
        "orchestrator_kb_per_tab_min": round(got["bytes"] / each / 1024, 1),
        "websocket_kb_per_tab_min": round(got["ws_bytes"] / each / 1024, 1),
        "orchestrator_cpu_per_tab_min_s": round(got["orchestrator_cpu_s"] / each, 3),
        "console_cpu_per_tab_min_s": round(got["console_cpu_s"] / each, 3),
        "orchestrator_cpu_above_idle_per_tab_min_s": round(above("orchestrator_cpu_s"), 3),
        "console_cpu_above_idle_per_tab_min_s": round(above("console_cpu_s"), 3),
        "requests_by_path_per_tab_min": {
            path: round(n / each, 1) for path, n in sorted(got["paths"].items())
        },
    }


def measure(tab_counts: list[int], seconds: float, idle_seconds: float, warmup: float) -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="crosscheck-queue-tab-") as tmp:
        with QueuePlatform(Path(tmp)) as platform:
            platform.fill_queue(3)
            console.print(f"no tab open: {idle_seconds:.0f} s ...")
            with window(platform, None) as quiet:
                time.sleep(idle_seconds)
            idle_rate = {
                k: quiet[k] / quiet["seconds"] for k in ("orchestrator_cpu_s", "console_cpu_s")
            }
            rows.append(
                {
                    "who": "no tab",
                    "tabs": 0,
                    "seconds": round(quiet["seconds"], 1),
                    "requests_per_min": round(quiet["requests"] / quiet["seconds"] * 60, 1),
                    "orchestrator_cpu_per_min_s": round(idle_rate["orchestrator_cpu_s"] * 60, 3),
                    "console_cpu_per_min_s": round(idle_rate["console_cpu_s"] * 60, 3),
                }
            )
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
                )
                try:
                    for n in tab_counts:
                        console.print(f"{n} Queue tab(s): opening, then {seconds:.0f} s ...")
                        tabs = Tabs(browser, platform.console_url, n)
                        try:
                            tabs.pages[0].wait_for_timeout(warmup * 1000)
                            with window(platform, tabs) as got:
                                tabs.pages[0].wait_for_timeout(seconds * 1000)
                            assert not tabs.errors, tabs.errors
                        finally:
                            tabs.close()
                        rows.append(per_tab_per_min(n, got, idle_rate))
                finally:
                    browser.close()
    table = Table(title="The live queue, per open tab per minute (idle platform, 3 items)")
    for column in (
        "tabs",
        "requests",
        "KB to/from orchestrator",
        "KB websocket",
        "orchestrator CPU s (above idle)",
        "console CPU s (above idle)",
    ):
        table.add_column(column)
    for r in rows[1:]:
        orchestrator = (
            f"{r['orchestrator_cpu_per_tab_min_s']} "
            f"({r['orchestrator_cpu_above_idle_per_tab_min_s']})"
        )
        table.add_row(
            str(r["tabs"]),
            str(r["requests_per_tab_min"]),
            str(r["orchestrator_kb_per_tab_min"]),
            str(r["websocket_kb_per_tab_min"]),
            orchestrator,
            f"{r['console_cpu_per_tab_min_s']} ({r['console_cpu_above_idle_per_tab_min_s']})",
        )
    console.print(table)
    quiet = rows[0]
    console.print(
        f"no tab open, per minute: {quiet['requests_per_min']} requests, orchestrator "
        f"{quiet['orchestrator_cpu_per_min_s']} CPU s, console {quiet['console_cpu_per_min_s']} "
        "CPU s"
    )
    for r in rows:
        print(json.dumps(r))  # noqa: T201


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tabs", type=int, nargs="+", default=[1, 4], help="tab counts, in turn")
    parser.add_argument("--seconds", type=float, default=60, help="measured, per tab count")
    parser.add_argument("--idle-seconds", type=float, default=20, help="measured with no tab")
    parser.add_argument("--warmup", type=float, default=5, help="after the tabs open")
    args = parser.parse_args()
    measure(args.tabs, args.seconds, args.idle_seconds, args.warmup)


if __name__ == "__main__":
    main()
