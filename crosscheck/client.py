"""The Python client of the Orchestrator's runs API: :class:`Crosscheck` (sync) and
:class:`AsyncCrosscheck` (asyncio), with typed errors; ``CrosscheckClient`` is the CLI's.

Where the URL and token come from, in order: explicit values (``--url``/``--token``), the
environment (``CROSSCHECK_URL``/``CROSSCHECK_TOKEN``), then ``var/crosscheck.env`` that
``crosscheck up`` writes in the working directory. Every failure a user can cause or fix
becomes a :class:`CrosscheckError` with a one-line message.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, overload

import httpx
from pydantic import ValidationError
from websockets.asyncio.client import connect as async_ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect as ws_connect

from crosscheck._core import (
    CONNECT_S,
    ERRORS_BY_NAME,
    ERRORS_BY_STATUS,
    MAX_PREFER_WAIT_S,
    OUTCOME_STATUSES,
    SAFETY_POLL_S,
    ApiError,
    BadRequest,
    Conflict,
    Core,
    CrosscheckError,
    Driver,
    Effect,
    Flow,
    Forbidden,
    InvalidModelOutput,
    Listen,
    MethodNotAllowed,
    Model,
    NeedHumanIntervention,
    NotFound,
    PayloadTooLarge,
    Receive,
    RunFailed,
    RunTimeout,
    Send,
    ServerError,
    Settings,
    Sleep,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
    ValidationFailed,
    api_error,
    decode,
    ends_live_view,
    error_class,
    parse,
    run_body,
)
from crosscheck.launcher import CREDENTIALS_FILE
from shared.evaluations import EvaluationCreate, EvaluationPublic
from shared.orchestration import (
    AccountCreate,
    AccountPublic,
    CriticJudgement,
    DecisionAction,
    EventPublic,
    ExportKind,
    JudgementPublic,
    Policy,
    ReviewPublic,
    ReviewStatus,
    ReviewSummary,
    RunCreate,
    RunCreated,
    RunPublic,
    Trajectory,
)

__all__ = [
    "CREDENTIALS_PATH",
    "DEFAULT_CONSOLE_URL",
    "DEFAULT_URL",
    "ERRORS_BY_NAME",
    "ERRORS_BY_STATUS",
    "MAX_PREFER_WAIT_S",
    "NO_TOKEN",
    "OUTCOME_STATUSES",
    "SAFETY_POLL_S",
    "ApiError",
    "AsyncCrosscheck",
    "BadRequest",
    "Conflict",
    "Crosscheck",
    "CrosscheckClient",
    "CrosscheckError",
    "Forbidden",
    "InvalidModelOutput",
    "MethodNotAllowed",
    "Model",
    "NeedHumanIntervention",
    "NotFound",
    "PayloadTooLarge",
    "RunFailed",
    "RunTimeout",
    "ServerError",
    "Settings",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "ValidationFailed",
    "api_error",
    "console_base",
    "decode",
    "ends_live_view",
    "error_class",
    "parse",
    "read_env_file",
    "resolve_settings",
    "run_body",
]


DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_CONSOLE_URL = "http://127.0.0.1:8501"
CREDENTIALS_PATH = Path("var") / CREDENTIALS_FILE
NO_TOKEN = "no API token: run `crosscheck up` first, or set CROSSCHECK_TOKEN"

# How long a websocket may keep failing (consecutive attempts) before we poll instead.
WS_ATTEMPTS = 3
TOKEN_ENDED_CODES = (4401, 1008)  # the server closed the socket because its token ended
WS_BACKOFF_S = (0.2, 0.5, 1.0)
WS_RECV_TICK_S = 1.0  # wake up this often while waiting, so Ctrl-C is prompt
POLL_S = 0.5

T = TypeVar("T")


# ------------------------------------------------------------------ settings


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines, comments and ``export`` prefixes are allowed."""
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def resolve_settings(
    url: str | None = None,
    token: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Options, else environment, else ``var/crosscheck.env``, else the default URL."""
    env = os.environ if environ is None else environ
    path = (cwd or Path.cwd()) / CREDENTIALS_PATH
    from_file: dict[str, str] = {}
    if path.is_file():
        try:
            from_file = read_env_file(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise CrosscheckError(f"cannot read {path}: {exc}") from exc
    candidates = (
        ("--token", token),
        ("CROSSCHECK_TOKEN", env.get("CROSSCHECK_TOKEN")),
        (str(CREDENTIALS_PATH), from_file.get("CROSSCHECK_TOKEN")),
    )
    found = next(((source, value) for source, value in candidates if value), None)
    if found is None:
        raise CrosscheckError(NO_TOKEN)
    chosen = url or env.get("CROSSCHECK_URL") or from_file.get("CROSSCHECK_URL") or DEFAULT_URL
    return Settings(url=_checked_url(chosen), token=found[1], token_source=found[0])


def _checked_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise CrosscheckError(
            f"{url!r} is not an orchestrator URL: use http://HOST:PORT, e.g. {DEFAULT_URL}"
        )
    return url.rstrip("/")


def _library_settings(url: str | None, token: str | None) -> Settings:
    settings = resolve_settings(url, token)
    if token:  # named as a library user passed it, in authentication errors
        return replace(settings, token_source="the token argument")
    return settings


def console_base(
    console_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """The argument, else ``CROSSCHECK_CONSOLE_URL``, else what ``crosscheck up`` wrote to
    ``var/crosscheck.env``, else the default."""
    env = os.environ if environ is None else environ
    from_file = ""
    path = (cwd or Path.cwd()) / CREDENTIALS_PATH
    if not (console_url or env.get("CROSSCHECK_CONSOLE_URL")) and path.is_file():
        try:
            from_file = read_env_file(path).get("CROSSCHECK_CONSOLE_URL", "")
        except (OSError, UnicodeDecodeError):
            from_file = ""
    chosen = console_url or env.get("CROSSCHECK_CONSOLE_URL") or from_file or DEFAULT_CONSOLE_URL
    return chosen.rstrip("/")


# ------------------------------------------------------------------ the shells' I/O


class _SyncShell:
    """Performs flows' effects with blocking I/O (``httpx.Client``, the sync websocket)."""

    def __init__(self, timeout: float, transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=CONNECT_S), transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _drive(self, flow: Flow[T]) -> T:
        driver = Driver(flow)
        for effect in driver:
            try:
                driver.answer(self._perform(effect))
            except BaseException as exc:  # the flow's to handle, or to raise again
                driver.fail(exc)
        return driver.result

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Send):
            return self._http.send(effect.request)
        if isinstance(effect, Listen):
            return ws_connect(  # closed by the flow's Hangup, not by a `with`
                effect.url,
                additional_headers=effect.headers,
                open_timeout=5,
                close_timeout=2,
                legacy=True,
            )
        if isinstance(effect, Receive):
            return effect.socket.recv(timeout=effect.timeout)
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
        else:
            effect.socket.close()
        return None


class _AsyncShell:
    """Performs flows' effects with asyncio (``httpx.AsyncClient``, the asyncio websocket)."""

    def __init__(self, timeout: float, transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=CONNECT_S), transport=transport
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _drive(self, flow: Flow[T]) -> T:
        driver = Driver(flow)
        for effect in driver:
            try:
                driver.answer(await self._perform(effect))
            except BaseException as exc:  # a cancellation too: the flow closes its socket
                driver.fail(exc)
        return driver.result

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Send):
            return await self._http.send(effect.request)
        if isinstance(effect, Listen):
            return await async_ws_connect(
                effect.url, additional_headers=effect.headers, open_timeout=5, close_timeout=2
            )
        if isinstance(effect, Receive):
            return await asyncio.wait_for(effect.socket.recv(), timeout=effect.timeout)
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
        else:
            await effect.socket.close()
        return None


# ------------------------------------------------------------------ client


class CrosscheckClient(_SyncShell):
    """Runs, trajectories and events over HTTP; live events over the websocket."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._core = Core(settings, timeout=timeout)
        super().__init__(timeout, transport)

    def create_run(self, request: RunCreate, *, idempotency_key: str | None = None) -> RunCreated:
        """Start a run. A retried request carries the same Idempotency-Key, so it runs once."""
        return self._drive(self._core.create_run(request, idempotency_key))

    def create_account(self, request: AccountCreate) -> AccountPublic:
        return self._drive(self._core.create_account(request))

    def get_run(self, run_id: str) -> RunPublic:
        return self._drive(self._core.get_run(run_id))

    def publish_evaluation(self, summary: EvaluationCreate) -> EvaluationPublic:
        """Keep an evaluation's summary on the orchestrator (service or admin token), where
        the console's Metrics page reads the latest one. Not retried: a summary sent twice
        would be kept twice."""
        return self._drive(self._core.publish_evaluation(summary))

    def trajectory(self, run_id: str) -> Trajectory:
        return self._drive(self._core.trajectory(run_id))

    def export_dataset(
        self,
        kind: ExportKind = ExportKind.chat,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        profile: str | None = None,
        tag: str | None = None,
        decision: DecisionAction | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Reviewed runs as dataset records, one dict per JSONL line, streamed as they come:
        ``chat``, ``preference`` or ``critique`` (``GET /v1/datasets/export``)."""
        request = self._core.export_request(
            kind, since=since, until=until, profile=profile, tag=tag, decision=decision
        )
        try:
            response = self._http.send(request, stream=True)
            try:
                if response.is_error:
                    response.read()
                    raise api_error(response, self.settings)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
            finally:
                response.close()
        except httpx.TransportError as exc:
            raise self._core.transport_error(exc) from exc

    def judge_critic(
        self, review_id: str, judgements: list[CriticJudgement]
    ) -> list[JudgementPublic]:
        """Agree with or dismiss the Critic's issues on a review item you hold or decided."""
        return self._drive(self._core.judge_critic(review_id, judgements))

    def cancel_run(self, run_id: str) -> RunCreated:
        """Cancel a run (service or admin token): a paused one ends at once."""
        return self._drive(self._core.cancel_run(run_id))

    def events(self, since: int = 0, run_id: str | None = None) -> list[EventPublic]:
        """Stored events after ``since``, oldest first (one page)."""
        return self._drive(self._core.events(since, run_id))

    # -------------------------------------------------------------- live events

    def follow(
        self,
        run_id: str,
        since: int = 0,
        *,
        on_notice: Callable[[str], None] | None = None,
    ) -> Iterator[EventPublic]:
        """A run's events after ``since``, live, ending with the one that ends the live view.

        Reads the websocket and reconnects from the last sequence number seen, so nothing
        is lost or repeated; after repeated websocket failures it polls ``GET /v1/events``.
        """
        notice = on_notice or (lambda _message: None)
        last = since
        failures = 0
        while failures < WS_ATTEMPTS:
            url = self._core.events_url(run_id, last)
            try:
                with ws_connect(
                    url, additional_headers=self._core.auth, open_timeout=5, close_timeout=2
                ) as ws:
                    while True:
                        try:
                            raw = ws.recv(timeout=WS_RECV_TICK_S)
                        except TimeoutError:
                            continue
                        event = EventPublic.model_validate_json(raw)
                        if event.seq <= last:
                            continue
                        last, failures = event.seq, 0
                        yield event
                        if ends_live_view(event):
                            return
            except InvalidStatus as exc:
                # The server refused the handshake (auth, proxy): polling tells the reason.
                notice(f"websocket refused ({exc.response.status_code}); polling instead")
                break
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code in TOKEN_ENDED_CODES:
                    # the token was revoked or expired: reconnecting is refused; the poll
                    # below raises the API's own 401 with its message
                    notice(f"websocket closed: {exc.rcvd.reason or 'token no longer valid'}")
                    break
                failures += 1
                if failures >= WS_ATTEMPTS:
                    notice(f"websocket unavailable ({type(exc).__name__}); polling instead")
                    break
                time.sleep(WS_BACKOFF_S[min(failures, len(WS_BACKOFF_S)) - 1])
            except (WebSocketException, OSError, ValidationError) as exc:
                failures += 1
                if failures >= WS_ATTEMPTS:
                    notice(f"websocket unavailable ({type(exc).__name__}); polling instead")
                    break
                time.sleep(WS_BACKOFF_S[min(failures, len(WS_BACKOFF_S)) - 1])
        yield from self._poll(run_id, last)

    def _poll(self, run_id: str, since: int) -> Iterator[EventPublic]:
        last = since
        while True:
            batch = self.events(since=last, run_id=run_id)
            for event in batch:
                if event.seq <= last:
                    continue
                last = event.seq
                yield event
                if ends_live_view(event):
                    return
            if not batch:
                time.sleep(POLL_S)


# ------------------------------------------------------------------ the public client


class _Public:
    """What :class:`Crosscheck` and :class:`AsyncCrosscheck` share besides the core."""

    settings: Settings
    _core: Core

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.settings.url!r})"

    def _review_page(self, review_id: str) -> str:
        return self._core.review_page(review_id)


class Crosscheck(_Public, _SyncShell):
    """The Orchestrator's runs API, synchronous.

    ``url`` and ``token`` default to ``CROSSCHECK_URL``/``CROSSCHECK_TOKEN``, then
    ``var/crosscheck.env`` (what ``crosscheck up`` writes); ``console_url`` (for links to a
    review) to ``CROSSCHECK_CONSOLE_URL``, then http://127.0.0.1:8501.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        console_url: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = _library_settings(url, token)
        self.console_url = console_base(console_url)
        self._core = Core(self.settings, timeout=timeout, console_url=self.console_url)
        super().__init__(timeout, transport)

    # -------------------------------------------------------------- runs

    @overload
    def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: Literal[True] = True,
        timeout: float = 600,
    ) -> RunPublic: ...

    @overload
    def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: Literal[False],
        timeout: float = 600,
    ) -> RunCreated: ...

    @overload
    def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool,
        timeout: float = 600,
    ) -> RunPublic | RunCreated: ...

    def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool = True,
        timeout: float = 600,
    ) -> RunPublic | RunCreated:
        """Start a run; with ``wait`` (default) return it once it succeeded.

        Raises :class:`NeedHumanIntervention` when it escalated or waits for a person,
        :class:`RunFailed` when it failed or was cancelled, :class:`RunTimeout` after
        ``timeout`` seconds. With ``wait=False`` it returns ``{id, status}`` at once.
        Retries carry one Idempotency-Key, so the run starts once.
        """
        body = run_body(
            task,
            kind=kind,
            tests=tests,
            entry_point=entry_point,
            policy=policy,
            tags=tags,
            callback_url=callback_url,
        )
        return self._drive(self._core.run(body, idempotency_key, wait=wait, timeout=timeout))

    def wait(self, run_id: str, timeout: float = 600) -> RunPublic:
        """The run once it succeeded; raises as :meth:`run` does.

        Wakes on the run's websocket events (re-reading the run) and polls without one.
        """
        return self._drive(self._core.wait(run_id, timeout))

    def get(self, run_id: str) -> RunPublic:
        """A run with every round, its reflections and its usage."""
        return self._drive(self._core.get_run(run_id))

    def cancel(self, run_id: str) -> RunCreated:
        """Ask a run to stop before its next model or sandbox call."""
        return self._drive(self._core.cancel_run(run_id))

    # -------------------------------------------------------------- reviews

    def reviews(
        self,
        *,
        run_id: str | None = None,
        status: ReviewStatus | str | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[ReviewSummary]:
        """Review items, newest first (one page)."""
        return self._drive(self._core.reviews(run_id, status, kind, limit))

    def review(self, review_id: str) -> ReviewPublic:
        """One review item with its context."""
        return self._drive(self._core.review(review_id))


class AsyncCrosscheck(_Public, _AsyncShell):
    """:class:`Crosscheck` for asyncio: the same methods, awaited."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        console_url: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = _library_settings(url, token)
        self.console_url = console_base(console_url)
        self._core = Core(self.settings, timeout=timeout, console_url=self.console_url)
        super().__init__(timeout, transport)

    # -------------------------------------------------------------- runs

    @overload
    async def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: Literal[True] = True,
        timeout: float = 600,
    ) -> RunPublic: ...

    @overload
    async def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: Literal[False],
        timeout: float = 600,
    ) -> RunCreated: ...

    @overload
    async def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool,
        timeout: float = 600,
    ) -> RunPublic | RunCreated: ...

    async def run(
        self,
        task: str,
        *,
        kind: str = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        tags: list[str] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool = True,
        timeout: float = 600,
    ) -> RunPublic | RunCreated:
        """See :meth:`Crosscheck.run`."""
        body = run_body(
            task,
            kind=kind,
            tests=tests,
            entry_point=entry_point,
            policy=policy,
            tags=tags,
            callback_url=callback_url,
        )
        return await self._drive(self._core.run(body, idempotency_key, wait=wait, timeout=timeout))

    async def wait(self, run_id: str, timeout: float = 600) -> RunPublic:
        """See :meth:`Crosscheck.wait`."""
        return await self._drive(self._core.wait(run_id, timeout))

    async def get(self, run_id: str) -> RunPublic:
        return await self._drive(self._core.get_run(run_id))

    async def cancel(self, run_id: str) -> RunCreated:
        return await self._drive(self._core.cancel_run(run_id))

    # -------------------------------------------------------------- reviews

    async def reviews(
        self,
        *,
        run_id: str | None = None,
        status: ReviewStatus | str | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[ReviewSummary]:
        return await self._drive(self._core.reviews(run_id, status, kind, limit))

    async def review(self, review_id: str) -> ReviewPublic:
        return await self._drive(self._core.review(review_id))
