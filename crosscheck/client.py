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
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, overload
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from websockets.asyncio.client import connect as async_ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect as ws_connect

from crosscheck.launcher import CREDENTIALS_FILE
from shared.evaluations import EvaluationCreate, EvaluationPublic
from shared.orchestration import (
    FINAL_STATUSES,
    AccountCreate,
    AccountPublic,
    CriticJudgement,
    DecisionAction,
    EventPublic,
    ExportKind,
    JudgementPublic,
    JudgementsRequest,
    Policy,
    ReviewPage,
    ReviewPublic,
    ReviewStatus,
    ReviewSummary,
    RunCreate,
    RunCreated,
    RunPublic,
    RunStatus,
    Trajectory,
)

DEFAULT_URL = "http://127.0.0.1:8000"
CREDENTIALS_PATH = Path("var") / CREDENTIALS_FILE
NO_TOKEN = "no API token: run `crosscheck up` first, or set CROSSCHECK_TOKEN"

# How long a websocket may keep failing (consecutive attempts) before we poll instead.
WS_ATTEMPTS = 3
TOKEN_ENDED_CODES = (4401, 1008)  # the server closed the socket because its token ended
WS_BACKOFF_S = (0.2, 0.5, 1.0)
WS_RECV_TICK_S = 1.0  # wake up this often while waiting, so Ctrl-C is prompt
POLL_S = 0.5

Model = TypeVar("Model", bound=BaseModel)
_EVENTS = TypeAdapter(list[EventPublic])


class CrosscheckError(Exception):
    """Base of every error this client raises; the CLI reports it as one line (exit code 1).

    Messages never contain the API token.
    """


class ApiError(CrosscheckError):
    """The Orchestrator answered with an error (``{"error": ..., "detail": ...}``).

    ``error`` is the server's error class name, ``detail`` its detail (a message, or a list of
    ``{loc, msg, type}`` for a validation error), ``status_code`` the HTTP status.
    """

    def __init__(self, status_code: int, error: str, detail: Any, *, hint: str = "") -> None:
        self.status_code = status_code
        self.error = error
        self.detail = detail
        message = f"{error} (HTTP {status_code}): {_describe(detail)}"
        super().__init__(f"{message} ({hint})" if hint else message)


class BadRequest(ApiError):
    """400: a request the server cannot use as sent (a bad cursor, a bad option)."""


class Unauthorized(ApiError):
    """401: no token, or one that is unknown or revoked."""


class Forbidden(ApiError):
    """403: the token's role may not do this (e.g. a reviewer token creating runs)."""


class NotFound(ApiError):
    """404: no such run, review or route."""


class MethodNotAllowed(ApiError):
    """405."""


class Conflict(ApiError):
    """409: e.g. an Idempotency-Key reused with another body, or cancelling a finished run."""


class PayloadTooLarge(ApiError):
    """413: the request body is over the server's limit."""


class ValidationFailed(ApiError):
    """422: the server refused the input; ``detail`` lists where and why."""


class InvalidModelOutput(ValidationFailed):
    """422: a model's structured output stayed invalid after the repair re-ask."""


class ServerError(ApiError):
    """5xx the server did not attribute to a peer."""


class UpstreamError(ServerError):
    """502: a peer (model provider, sandbox, another service) answered with an error."""


class UpstreamUnavailable(UpstreamError):
    """503: a peer could not be reached or kept failing past the retry budget."""


class UpstreamTimeout(UpstreamError):
    """504: a peer did not answer in time."""


class NeedHumanIntervention(CrosscheckError):
    """The run escalated, or waits for a person: a reviewer decides in the console.

    Mirrors ``shared.errors.NeedHumanIntervention`` on the client side. ``review_id`` is the
    escalation or pending review item, ``console_url`` its page in the reviewer console and
    ``context`` what the reviewer sees (the escalation context); ``run`` is the whole run.
    """

    def __init__(
        self,
        run: RunPublic,
        *,
        review_id: str | None,
        console_url: str | None,
        context: dict[str, Any],
    ) -> None:
        self.run = run
        self.run_id = run.id
        self.status = run.status
        self.stop_reason = run.stop_reason
        self.error_class = run.error_class
        self.review_id = review_id
        self.console_url = console_url
        self.context = context
        why = f"escalated ({run.stop_reason})" if run.stop_reason else "waits for review"
        where = f": review {review_id} at {console_url}" if review_id else ""
        super().__init__(f"run {run.id} {why}, a person decides next{where}")


class RunFailed(CrosscheckError):
    """The run ended ``failed`` or ``cancelled``; ``stop_reason`` and ``detail`` say why."""

    def __init__(self, run: RunPublic) -> None:
        self.run = run
        self.run_id = run.id
        self.status = run.status
        self.stop_reason = run.stop_reason
        self.error_class = run.error_class
        self.detail = run.detail
        reason = f" ({run.stop_reason})" if run.stop_reason else ""
        detail = f": {run.detail}" if run.detail else ""
        super().__init__(f"run {run.id} {run.status}{reason}{detail}")


class RunTimeout(CrosscheckError, TimeoutError):
    """The run had not ended after ``timeout`` seconds; it goes on (``wait`` again, or cancel)."""

    def __init__(self, run_id: str, timeout: float, status: RunStatus | None) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.last_status = status
        state = f" (still {status})" if status else ""
        super().__init__(f"run {run_id} did not end within {timeout:g} s{state}")


# The server's error class names (shared.errors and the request-validation handler).
ERRORS_BY_NAME: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "Conflict": Conflict,
    "PayloadTooLarge": PayloadTooLarge,
    "ValidationError": ValidationFailed,
    "InvalidModelOutput": InvalidModelOutput,
    "OutputTruncated": InvalidModelOutput,  # a model reply cut off by its cap, twice
    "ConfigurationError": ServerError,
    "UpstreamError": UpstreamError,
    "UpstreamUnavailable": UpstreamUnavailable,
    "UpstreamTimeout": UpstreamTimeout,
}
ERRORS_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationFailed,
    500: ServerError,
    502: UpstreamError,
    503: UpstreamUnavailable,
    504: UpstreamTimeout,
}


def error_class(status_code: int, error: str) -> type[ApiError]:
    """By the server's class name, else by status code (any other 5xx is a ServerError)."""
    by_name = ERRORS_BY_NAME.get(error)
    if by_name is not None:
        return by_name
    if status_code in ERRORS_BY_STATUS:
        return ERRORS_BY_STATUS[status_code]
    return ServerError if status_code >= 500 else ApiError


def _describe(detail: Any) -> str:
    """Validation errors as ``where: what``, anything else as compact text."""
    if isinstance(detail, list) and all(isinstance(d, dict) and "msg" in d for d in detail):
        parts = []
        for item in detail:
            where = ".".join(str(p) for p in item.get("loc", []) if p != "body")
            parts.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
        return "; ".join(parts)
    if isinstance(detail, str):
        return detail
    return json.dumps(detail, default=str)


# ------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Settings:
    url: str
    token: str = field(repr=False)  # never in a repr, a log line or an exception
    token_source: str = ""  # where the token came from, named in authentication errors

    @property
    def ws_url(self) -> str:
        if self.url.startswith("https://"):
            return "wss://" + self.url.removeprefix("https://")
        return "ws://" + self.url.removeprefix("http://")


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


# ------------------------------------------------------------------ events


def ends_live_view(event: EventPublic) -> bool:
    """A final status, or a run that waits for a person: nothing more happens on its own."""
    if event.type == "run.finished":
        return True
    return event.type == "run.status" and event.data.get("status") == RunStatus.awaiting_review


# ------------------------------------------------------------------ responses


def _scrub(text: str, settings: Settings) -> str:
    """The message without the token, should a server or a transport ever echo it."""
    token = settings.token
    return text.replace(token, "***") if len(token) >= 4 else text


def _no_answer(settings: Settings, exc: Exception) -> CrosscheckError:
    return CrosscheckError(
        _scrub(f"the orchestrator at {settings.url} did not answer: {exc!r}", settings)
    )


def api_error(response: httpx.Response, settings: Settings) -> ApiError:
    """The typed error for an error response (the server's class name, else its status)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        name, detail = str(body["error"]), body.get("detail")
    else:
        name = "HTTPError"
        detail = " ".join(response.text.split())[:200] or response.reason_phrase
    if isinstance(detail, str):
        detail = _scrub(detail, settings)
    hint = f"the token came from {settings.token_source}" if response.status_code == 401 else ""
    error = error_class(response.status_code, name)(response.status_code, name, detail, hint=hint)
    if len(settings.token) >= 4 and settings.token in str(error):  # a structure echoed it
        error.args = (_scrub(str(error), settings),)
    return error


def decode(response: httpx.Response, settings: Settings) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise CrosscheckError(
            f"the orchestrator at {settings.url} sent a response that is not JSON "
            f"(HTTP {response.status_code}): is this URL the orchestrator?"
        ) from exc


def parse(model: type[Model], body: Any) -> Model:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise CrosscheckError(
            f"unexpected {model.__name__} from the orchestrator: {exc.errors()[0]['msg']}"
        ) from exc


# ------------------------------------------------------------------ client


class CrosscheckClient:
    """Runs, trajectories and events over HTTP; live events over the websocket."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._headers = {"Authorization": f"Bearer {settings.token}"}
        self._http = httpx.Client(
            base_url=settings.url,
            headers=self._headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
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

    # -------------------------------------------------------------- HTTP

    def _unreachable(self) -> CrosscheckError:
        return CrosscheckError(
            f"cannot reach the orchestrator at {self.settings.url}: is `crosscheck up` running?"
        )

    def _send(
        self,
        method: str,
        path: str,
        *,
        retries: int = 1,
        **kwargs: Any,
    ) -> httpx.Response:
        """The response, errors raised; transient transport errors are retried ``retries`` times."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise self._unreachable() from exc
            except httpx.TransportError as exc:
                if attempt >= retries:
                    raise _no_answer(self.settings, exc) from exc
                attempt += 1
                time.sleep(0.2 * attempt)
        if response.is_error:
            raise api_error(response, self.settings)
        return response

    def _request(self, method: str, path: str, *, retries: int = 1, **kwargs: Any) -> Any:
        """The decoded JSON body."""
        return decode(self._send(method, path, retries=retries, **kwargs), self.settings)

    def _parse(self, model: type[Model], body: Any) -> Model:
        return parse(model, body)

    def create_run(self, request: RunCreate, *, idempotency_key: str | None = None) -> RunCreated:
        """Start a run. A retried request carries the same Idempotency-Key, so it runs once."""
        key = idempotency_key or f"cli-{uuid.uuid4()}"
        body = self._request(
            "POST",
            "/v1/runs",
            json=request.model_dump(mode="json", exclude_unset=True),
            headers={"Idempotency-Key": key},
            retries=2,
        )
        return self._parse(RunCreated, body)

    def create_account(self, request: AccountCreate) -> AccountPublic:
        body = self._request("POST", "/v1/accounts", json=request.model_dump(mode="json"))
        return self._parse(AccountPublic, body)

    def get_run(self, run_id: str) -> RunPublic:
        return self._parse(RunPublic, self._request("GET", f"/v1/runs/{run_id}"))

    def publish_evaluation(self, summary: EvaluationCreate) -> EvaluationPublic:
        """Keep an evaluation's summary on the orchestrator (service or admin token), where
        the console's Metrics page reads the latest one. Not retried: a summary sent twice
        would be kept twice."""
        body = self._request(
            "POST",
            "/v1/evaluations",
            json=summary.model_dump(mode="json"),
            retries=0,
        )
        return self._parse(EvaluationPublic, body)

    def trajectory(self, run_id: str) -> Trajectory:
        return self._parse(Trajectory, self._request("GET", f"/v1/runs/{run_id}/trajectory"))

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
        params: dict[str, str] = {"kind": ExportKind(kind).value}
        for name, value in (("since", since), ("until", until)):
            if value is not None:
                params[name] = value.isoformat()
        for name, text in (("profile", profile), ("tag", tag), ("decision", decision)):
            if text is not None:
                params[name] = str(text)
        try:
            with self._http.stream(
                "GET",
                "/v1/datasets/export",
                params=params,
                timeout=httpx.Timeout(None, connect=5.0),
            ) as response:
                if response.is_error:
                    response.read()
                    raise api_error(response, self.settings)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._unreachable() from exc
        except httpx.TransportError as exc:
            raise _no_answer(self.settings, exc) from exc

    def judge_critic(
        self, review_id: str, judgements: list[CriticJudgement]
    ) -> list[JudgementPublic]:
        """Agree with or dismiss the Critic's issues on a review item you hold or decided."""
        body = self._request(
            "POST",
            f"/v1/reviews/{review_id}/judgements",
            json=JudgementsRequest(judgements=judgements).model_dump(mode="json"),
        )
        return [self._parse(JudgementPublic, item) for item in body]

    def cancel_run(self, run_id: str) -> RunCreated:
        """Cancel a run (service or admin token): a paused one ends at once."""
        return self._parse(RunCreated, self._request("POST", f"/v1/runs/{run_id}/cancel"))

    def events(self, since: int = 0, run_id: str | None = None) -> list[EventPublic]:
        """Stored events after ``since``, oldest first (one page)."""
        params: dict[str, str | int] = {"since": since}
        if run_id is not None:
            params["run_id"] = run_id
        body = self._request("GET", "/v1/events", params=params)
        try:
            return _EVENTS.validate_python(body)
        except ValidationError as exc:
            raise CrosscheckError(f"unexpected events from the orchestrator: {exc}") from exc

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
            query = urlencode({"run_id": run_id, "since": last})
            url = f"{self.settings.ws_url}/v1/events?{query}"
            try:
                with ws_connect(
                    url, additional_headers=self._headers, open_timeout=5, close_timeout=2
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

DEFAULT_CONSOLE_URL = "http://127.0.0.1:8501"
MAX_PREFER_WAIT_S = 60  # the server caps `Prefer: wait` here
SAFETY_POLL_S = 5.0  # while a websocket is open, re-read the run this often anyway
# Where run() and wait() stop waiting: an end, or a run that waits for a person.
OUTCOME_STATUSES = FINAL_STATUSES | {RunStatus.awaiting_review}


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


def run_body(
    task: str,
    *,
    kind: str,
    tests: str | None,
    entry_point: str | None,
    policy: Policy | Mapping[str, Any] | None,
    tags: list[str] | None,
    callback_url: str | None,
) -> dict[str, Any]:
    """The POST /v1/runs body, unvalidated: the server's 422 names what is wrong."""
    body: dict[str, Any] = {"task": task, "kind": kind}
    if tests is not None:
        body["tests"] = tests
    if entry_point is not None:
        body["entry_point"] = entry_point
    if policy is not None:
        body["policy"] = (
            policy.model_dump(mode="json", exclude_unset=True)
            if isinstance(policy, BaseModel)
            else dict(policy)
        )
    if tags is not None:
        body["tags"] = list(tags)
    if callback_url is not None:  # only when given: older servers do not know the field
        body["callback_url"] = callback_url
    return body


def _created_or_run(response: httpx.Response, settings: Settings) -> RunPublic | RunCreated:
    """A create answer: the whole run (200 after ``Prefer: wait``) or ``{id, status}``."""
    body = decode(response, settings)
    if response.status_code == 200 and isinstance(body, dict) and "rounds" in body:
        return parse(RunPublic, body)
    return parse(RunCreated, body)


def _pick_review(items: list[ReviewSummary]) -> ReviewSummary | None:
    """The item a person acts on: the newest open one, else the newest."""
    open_items = [i for i in items if i.status in (ReviewStatus.pending, ReviewStatus.claimed)]
    candidates = open_items or items
    return candidates[0] if candidates else None


def _review_params(
    run_id: str | None, status: ReviewStatus | str | None, kind: str | None, limit: int
) -> dict[str, str | int]:
    params: dict[str, str | int] = {"limit": limit}
    if run_id is not None:
        params["run_id"] = run_id
    if status is not None:
        params["status"] = str(status)
    if kind is not None:
        params["kind"] = kind
    return params


class _Outcome:
    """What both clients share: turning a run that stopped waiting into a value or an error."""

    settings: Settings
    console_url: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.settings.url!r})"

    def _review_page(self, review_id: str) -> str:
        return f"{self.console_url}/review?{urlencode({'review': review_id})}"

    def _intervention(self, run: RunPublic, review: ReviewPublic | None) -> NeedHumanIntervention:
        return NeedHumanIntervention(
            run,
            review_id=review.id if review else None,
            console_url=self._review_page(review.id) if review else None,
            context=review.context if review else {},
        )

    @staticmethod
    def _settled(run: RunPublic) -> RunPublic:
        """A succeeded run; a failed or cancelled one raises (a person's case is the caller's)."""
        if run.status in (RunStatus.failed, RunStatus.cancelled):
            raise RunFailed(run)
        return run


class Crosscheck(_Outcome):
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
        self._api = CrosscheckClient(self.settings, timeout=timeout, transport=transport)
        self._request_timeout = timeout

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
        self._api.close()

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
        key = idempotency_key or f"sdk-{uuid.uuid4()}"
        if not wait:
            answer = self._api._request(
                "POST", "/v1/runs", json=body, headers={"Idempotency-Key": key}, retries=2
            )
            return parse(RunCreated, answer)
        deadline = time.monotonic() + timeout
        created: RunCreated | None = None
        while True:
            remaining = deadline - time.monotonic()
            if created is not None and remaining < 1:
                return self.wait(created.id, max(remaining, 0.0))
            chunk = max(1, min(MAX_PREFER_WAIT_S, int(remaining)))
            response = self._api._send(
                "POST",
                "/v1/runs",
                json=body,
                headers={"Idempotency-Key": key, "Prefer": f"wait={chunk}"},
                timeout=httpx.Timeout(chunk + self._request_timeout, connect=5.0),
                retries=2,
            )
            answer = _created_or_run(response, self.settings)
            if isinstance(answer, RunPublic):
                return self._outcome(answer)
            created = answer
            if "preference-applied" not in response.headers:
                # A server without `Prefer: wait`: follow the run instead.
                return self.wait(created.id, max(deadline - time.monotonic(), 0.0))

    def wait(self, run_id: str, timeout: float = 600) -> RunPublic:
        """The run once it succeeded; raises as :meth:`run` does.

        Wakes on the run's websocket events (re-reading the run) and polls without one.
        """
        deadline = time.monotonic() + timeout
        run = self.get(run_id)
        if run.status in OUTCOME_STATUSES:
            return self._outcome(run)
        query = urlencode({"run_id": run_id, "since": 0})
        try:
            with ws_connect(
                f"{self.settings.ws_url}/v1/events?{query}",
                additional_headers=self._api._headers,
                open_timeout=5,
                close_timeout=2,
            ) as ws:
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise RunTimeout(run_id, timeout, run.status)
                    try:
                        raw = ws.recv(timeout=min(remaining, SAFETY_POLL_S))
                    except TimeoutError:
                        raw = None
                    if raw is None or ends_live_view(EventPublic.model_validate_json(raw)):
                        run = self.get(run_id)
                        if run.status in OUTCOME_STATUSES:
                            return self._outcome(run)
        except CrosscheckError:
            raise
        except (ConnectionClosed, WebSocketException, OSError, ValidationError):
            pass  # no websocket: poll
        while True:
            run = self.get(run_id)
            if run.status in OUTCOME_STATUSES:
                return self._outcome(run)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RunTimeout(run_id, timeout, run.status)
            time.sleep(min(remaining, 1.0))

    def get(self, run_id: str) -> RunPublic:
        """A run with every round, its reflections and its usage."""
        return self._api.get_run(run_id)

    def cancel(self, run_id: str) -> RunCreated:
        """Ask a run to stop before its next model or sandbox call."""
        return parse(RunCreated, self._api._request("POST", f"/v1/runs/{run_id}/cancel"))

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
        params = _review_params(run_id, status, kind, limit)
        return parse(ReviewPage, self._api._request("GET", "/v1/reviews", params=params)).items

    def review(self, review_id: str) -> ReviewPublic:
        """One review item with its context."""
        return parse(ReviewPublic, self._api._request("GET", f"/v1/reviews/{review_id}"))

    def _outcome(self, run: RunPublic) -> RunPublic:
        if run.status in (RunStatus.escalated, RunStatus.awaiting_review):
            item = _pick_review(self.reviews(run_id=run.id))
            raise self._intervention(run, self.review(item.id) if item else None)
        return self._settled(run)


class AsyncCrosscheck(_Outcome):
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
        self._headers = {"Authorization": f"Bearer {self.settings.token}"}
        self._request_timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self.settings.url,
            headers=self._headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
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

    async def _send(
        self, method: str, path: str, *, retries: int = 1, **kwargs: Any
    ) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise CrosscheckError(
                    f"cannot reach the orchestrator at {self.settings.url}: "
                    "is `crosscheck up` running?"
                ) from exc
            except httpx.TransportError as exc:
                if attempt >= retries:
                    raise _no_answer(self.settings, exc) from exc
                attempt += 1
                await asyncio.sleep(0.2 * attempt)
        if response.is_error:
            raise api_error(response, self.settings)
        return response

    async def _request(self, method: str, path: str, *, retries: int = 1, **kwargs: Any) -> Any:
        return decode(await self._send(method, path, retries=retries, **kwargs), self.settings)

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
        key = idempotency_key or f"sdk-{uuid.uuid4()}"
        if not wait:
            answer = await self._request(
                "POST", "/v1/runs", json=body, headers={"Idempotency-Key": key}, retries=2
            )
            return parse(RunCreated, answer)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        created: RunCreated | None = None
        while True:
            remaining = deadline - loop.time()
            if created is not None and remaining < 1:
                return await self.wait(created.id, max(remaining, 0.0))
            chunk = max(1, min(MAX_PREFER_WAIT_S, int(remaining)))
            response = await self._send(
                "POST",
                "/v1/runs",
                json=body,
                headers={"Idempotency-Key": key, "Prefer": f"wait={chunk}"},
                timeout=httpx.Timeout(chunk + self._request_timeout, connect=5.0),
                retries=2,
            )
            answer = _created_or_run(response, self.settings)
            if isinstance(answer, RunPublic):
                return await self._outcome(answer)
            created = answer
            if "preference-applied" not in response.headers:
                return await self.wait(created.id, max(deadline - loop.time(), 0.0))

    async def wait(self, run_id: str, timeout: float = 600) -> RunPublic:
        """See :meth:`Crosscheck.wait`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        run = await self.get(run_id)
        if run.status in OUTCOME_STATUSES:
            return await self._outcome(run)
        query = urlencode({"run_id": run_id, "since": 0})
        try:
            async with async_ws_connect(
                f"{self.settings.ws_url}/v1/events?{query}",
                additional_headers=self._headers,
                open_timeout=5,
                close_timeout=2,
            ) as ws:
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise RunTimeout(run_id, timeout, run.status)
                    try:
                        raw = await asyncio.wait_for(
                            ws.recv(), timeout=min(remaining, SAFETY_POLL_S)
                        )
                    except TimeoutError:
                        raw = None
                    if raw is None or ends_live_view(EventPublic.model_validate_json(raw)):
                        run = await self.get(run_id)
                        if run.status in OUTCOME_STATUSES:
                            return await self._outcome(run)
        except CrosscheckError:
            raise
        except (ConnectionClosed, WebSocketException, OSError, ValidationError):
            pass
        while True:
            run = await self.get(run_id)
            if run.status in OUTCOME_STATUSES:
                return await self._outcome(run)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RunTimeout(run_id, timeout, run.status)
            await asyncio.sleep(min(remaining, 1.0))

    async def get(self, run_id: str) -> RunPublic:
        return parse(RunPublic, await self._request("GET", f"/v1/runs/{run_id}"))

    async def cancel(self, run_id: str) -> RunCreated:
        return parse(RunCreated, await self._request("POST", f"/v1/runs/{run_id}/cancel"))

    # -------------------------------------------------------------- reviews

    async def reviews(
        self,
        *,
        run_id: str | None = None,
        status: ReviewStatus | str | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[ReviewSummary]:
        params = _review_params(run_id, status, kind, limit)
        return parse(ReviewPage, await self._request("GET", "/v1/reviews", params=params)).items

    async def review(self, review_id: str) -> ReviewPublic:
        return parse(ReviewPublic, await self._request("GET", f"/v1/reviews/{review_id}"))

    async def _outcome(self, run: RunPublic) -> RunPublic:
        if run.status in (RunStatus.escalated, RunStatus.awaiting_review):
            item = _pick_review(await self.reviews(run_id=run.id))
            raise self._intervention(run, await self.review(item.id) if item else None)
        return self._settled(run)
