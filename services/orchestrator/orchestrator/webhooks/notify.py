"""Notifications: escalations and review items sent to people where they are, through Apprise
(Slack, Teams, email, Matrix, ntfy and the rest of its list, or ``json://`` to any receiver).

They ride the webhook outbox: one delivery row per event and channel, written in the event's
own transaction (a notification is queued if and only if its event commits), sent by the
delivery worker with the same leases, retries, backoff and dead letters as a webhook, and
marked delivered once a channel accepted it, so a restart does not send it again. The channel
URLs carry credentials: they stay in ``ORCHESTRATOR_NOTIFY_URLS``; a row names its channel by
number (``notify:1``), and no URL reaches the database, a log line or a response. Apprise's
own logger is kept quiet for the same reason (it prints an unparseable URL whole).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
from typing import Any
from urllib.parse import urlencode

PREFIX = "notify:"
_SPLIT = re.compile(r"[\s,]+")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$", re.IGNORECASE)
TITLE_CHARS = 120
TASK_CHARS = 300


def notify_channels(text: str) -> list[str]:
    """The channel URLs of ``ORCHESTRATOR_NOTIFY_URLS`` (spaces or commas between them); a bad
    one is named by its number, never echoed."""
    urls = [part for part in _SPLIT.split(text.strip()) if part]
    for number, url in enumerate(urls, start=1):
        if not _SCHEME.match(url):
            raise ValueError(
                f"ORCHESTRATOR_NOTIFY_URLS: channel {number} is not an Apprise URL "
                "(scheme://..., for example slack://... or json://host/path)"
            )
    return urls


def channel_url(number: int) -> str:
    """What a delivery row holds for channel ``number`` (1-based): a name, not the URL."""
    return f"{PREFIX}{number}"


def channel_number(url: str) -> int | None:
    if not url.startswith(PREFIX):
        return None
    digits = url[len(PREFIX) :]
    return int(digits) if digits.isdigit() else None


def _review_link(console_url: str, review_id: object) -> str:
    return f"{console_url.rstrip('/')}/review?{urlencode({'review': str(review_id)})}"


def _clip(text: object, limit: int) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 3] + "..."


def message(body: str, console_url: str) -> tuple[str, str, str]:
    """Title, text and Apprise notify type of an outbox body (the webhook's JSON)."""
    envelope: dict[str, Any] = json.loads(body)
    kind = envelope.get("type", "")
    data: dict[str, Any] = envelope.get("data") or {}
    run_id = data.get("run_id", "?")
    if kind == "run.escalated":
        context = data.get("context") or {}
        reason = data.get("stop_reason") or "escalated"
        title = f"Crosscheck: run {run_id} needs a person ({reason})"
        lines = [
            f"Task: {_clip(context.get('task'), TASK_CHARS)}" if context.get("task") else "",
            f"Stopped after round {data.get('final_round')}: {reason}.",
            f"Decide: {_review_link(console_url, data.get('review_id'))}",
        ]
        return _clip(title, TITLE_CHARS), "\n".join(line for line in lines if line), "warning"
    if kind == "review.created":
        waiting = "before its critique" if data.get("kind") == "pre_critique" else "a decision"
        title = f"Crosscheck: run {run_id} waits for review ({waiting})"
        lines = [
            f"Round {data.get('round')}" + (f": {data['reason']}" if data.get("reason") else "."),
            f"Deadline: {data['deadline']}" if data.get("deadline") else "",
            f"Open: {_review_link(console_url, data.get('review_id'))}",
        ]
        return _clip(title, TITLE_CHARS), "\n".join(line for line in lines if line), "info"
    if kind == "review.decided":
        title = f"Crosscheck: {data.get('author')} decided on run {run_id} ({data.get('action')})"
        text = f"The run is now {data.get('run_status')}."
        return _clip(title, TITLE_CHARS), text, "info"
    status = data.get("status", "finished")
    title = f"Crosscheck: run {run_id} {status}"
    text = f"Stop reason: {data.get('stop_reason')}; rounds: {data.get('rounds')}."
    return _clip(title, TITLE_CHARS), text, "success" if status == "succeeded" else "info"


class Notifier:
    """Sends one outbox row to its channel. Apprise is imported on the first send (its plugins
    take about two seconds to load), never by a process without channels."""

    def __init__(self, urls: list[str], console_url: str, timeout_s: float) -> None:
        self._urls = urls
        self._console_url = console_url
        self._timeout_s = timeout_s

    async def load(self) -> Any:
        """Apprise, imported once. Its plugins take seconds to import on a loaded machine:
        on a worker thread, not the event loop, where every request of this process would
        wait for them, and before a send's timeout starts, which is the channel's alone."""
        apprise = await asyncio.to_thread(importlib.import_module, "apprise")
        logging.getLogger("apprise").setLevel(logging.CRITICAL + 1)
        return apprise

    async def send(self, url: str, body: str) -> str | None:
        """None once the channel accepted it; else why not (never with the channel's URL)."""
        number = channel_number(url)
        if number is None or not 1 <= number <= len(self._urls):
            return f"channel {url} is no longer configured (ORCHESTRATOR_NOTIFY_URLS changed?)"
        apprise = await self.load()
        service = apprise.Apprise()
        if not service.add(self._urls[number - 1]):
            return f"channel {number}: Apprise does not know this kind of URL"
        title, text, kind = message(body, self._console_url)
        result = await service.async_notify(
            body=text, title=title, notify_type=kind, timeout=self._timeout_s
        )
        if result:
            return None
        return f"channel {number}: not delivered ({result.status.name.lower()})"
