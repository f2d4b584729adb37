"""The sans-IO core both halves of the Python client share: what each call sends, what its
answer means, and when a wait is over.

Every call is a *flow*: a generator that yields an effect (send this request, sleep, open a
run's event socket, read from it, close it), gets back what the effect gave (or has thrown in
what it raised) and returns the call's value. Building requests, decoding answers, mapping
errors, retrying and the waiting decisions live here once; :mod:`crosscheck.client` has the
sync and async shells that only perform the effects, so the two halves cannot drift apart.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from websockets.exceptions import ConnectionClosed, WebSocketException

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

MAX_PREFER_WAIT_S = 60  # the server caps `Prefer: wait` here
SAFETY_POLL_S = 5.0  # while a websocket is open, re-read the run this often anyway
WAIT_POLL_S = 1.0  # without a websocket, re-read the run this often
CONNECT_S = 5.0
# sent with every API request, as an httpx client would send its defaults: answers may come
# compressed (decoded by httpx), and the orchestrator's logs name the client
BASE_HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "gzip, deflate",
    "User-Agent": f"crosscheck-client (httpx {httpx.__version__})",
}
# Where run() and wait() stop waiting: an end, or a run that waits for a person.
OUTCOME_STATUSES = FINAL_STATUSES | {RunStatus.awaiting_review}

Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")
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


# ------------------------------------------------------------------ effects


@dataclass(frozen=True)
class Send:
    """Send ``request``; gives the ``httpx.Response`` (transport errors are thrown in)."""

    request: httpx.Request


@dataclass(frozen=True)
class Sleep:
    """Sleep ``seconds``; gives nothing."""

    seconds: float


@dataclass(frozen=True)
class Listen:
    """Open the websocket at ``url``; gives the socket (the shell's own connection type)."""

    url: str
    headers: Mapping[str, str] = field(repr=False)  # carries the token


@dataclass(frozen=True)
class Receive:
    """One message from ``socket`` within ``timeout`` seconds (``TimeoutError`` if none)."""

    socket: Any
    timeout: float


@dataclass(frozen=True)
class Hangup:
    """Close ``socket``; gives nothing."""

    socket: Any


Effect = Send | Sleep | Listen | Receive | Hangup
Flow = Generator[Effect, Any, T]


class Driver(Generic[T]):
    """Steps a flow for a shell: iterate for the effects, answer or fail each, read ``result``.

    A shell hands back whatever its effect raised, ``BaseException`` included, so the flow
    closes what it opened (a socket) before a Ctrl-C or a cancellation goes on.
    """

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self._value: Any = None
        self._error: BaseException | None = None
        self.result: T

    def __iter__(self) -> Iterator[Effect]:
        while True:
            value, error, self._value, self._error = self._value, self._error, None, None
            try:
                effect = self._flow.send(value) if error is None else self._flow.throw(error)
            except StopIteration as stop:
                self.result = stop.value
                return
            yield effect

    def answer(self, value: Any) -> None:
        self._value = value

    def fail(self, error: BaseException) -> None:
        self._error = error


# ------------------------------------------------------------------ calls


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


def _without_none(params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in params.items() if value is not None}


def _settled(run: RunPublic) -> RunPublic:
    """A succeeded run; a failed or cancelled one raises (a person's case is the caller's)."""
    if run.status in (RunStatus.failed, RunStatus.cancelled):
        raise RunFailed(run)
    return run


class Core:
    """Every call the clients make, as a flow (see the module's docstring).

    ``timeout`` is a request's read timeout; ``console_url`` the reviewer console that
    :class:`NeedHumanIntervention` links to.
    """

    def __init__(self, settings: Settings, *, timeout: float, console_url: str = "") -> None:
        self.settings = settings
        self.console_url = console_url
        self.auth = {"Authorization": f"Bearer {settings.token}"}
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"Core(url={self.settings.url!r})"

    # -------------------------------------------------------------- one request

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Request:
        """The request, with the token; ``timeout`` (read) defaults to the client's."""
        read = self._timeout if timeout is None else timeout
        return httpx.Request(
            method,
            self.settings.url + path,
            params=params,
            json=body,
            headers={**BASE_HEADERS, **self.auth, **(headers or {})},
            extensions={"timeout": httpx.Timeout(read, connect=CONNECT_S).as_dict()},
        )

    def transport_error(self, exc: httpx.TransportError) -> CrosscheckError:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return CrosscheckError(
                f"cannot reach the orchestrator at {self.settings.url}: is `crosscheck up` running?"
            )
        return _no_answer(self.settings, exc)

    def send(self, request: httpx.Request, *, retries: int = 1) -> Flow[httpx.Response]:
        """The response, errors raised; transient transport errors are retried ``retries`` times."""
        attempt = 0
        while True:
            try:
                response: httpx.Response = yield Send(request)
                break
            except httpx.TransportError as exc:
                unreachable = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if unreachable or attempt >= retries:
                    raise self.transport_error(exc) from exc
            attempt += 1
            yield Sleep(0.2 * attempt)
        if response.is_error:
            raise api_error(response, self.settings)
        return response

    def fetch(self, request: httpx.Request, *, retries: int = 1) -> Flow[Any]:
        """The decoded JSON body."""
        return decode((yield from self.send(request, retries=retries)), self.settings)

    def read(
        self, model: type[Model], method: str, path: str, *, body: Any = None, retries: int = 1
    ) -> Flow[Model]:
        request = self.request(method, path, body=body)
        return parse(model, (yield from self.fetch(request, retries=retries)))

    # -------------------------------------------------------------- the calls

    def start(self, body: dict[str, Any], key: str) -> Flow[RunCreated]:
        """POST /v1/runs without waiting; retries carry the one Idempotency-Key."""
        headers = {"Idempotency-Key": key}
        answer = yield from self.fetch(
            self.request("POST", "/v1/runs", body=body, headers=headers), retries=2
        )
        return parse(RunCreated, answer)

    def create_run(self, request: RunCreate, key: str | None) -> Flow[RunCreated]:
        body = request.model_dump(mode="json", exclude_unset=True)
        return self.start(body, key or f"cli-{uuid.uuid4()}")

    def create_account(self, request: AccountCreate) -> Flow[AccountPublic]:
        return self.read(
            AccountPublic, "POST", "/v1/accounts", body=request.model_dump(mode="json")
        )

    def get_run(self, run_id: str) -> Flow[RunPublic]:
        return self.read(RunPublic, "GET", f"/v1/runs/{run_id}")

    def cancel_run(self, run_id: str) -> Flow[RunCreated]:
        return self.read(RunCreated, "POST", f"/v1/runs/{run_id}/cancel")

    def trajectory(self, run_id: str) -> Flow[Trajectory]:
        return self.read(Trajectory, "GET", f"/v1/runs/{run_id}/trajectory")

    def publish_evaluation(self, summary: EvaluationCreate) -> Flow[EvaluationPublic]:
        body = summary.model_dump(mode="json")  # not retried: it would be kept twice
        return self.read(EvaluationPublic, "POST", "/v1/evaluations", body=body, retries=0)

    def judge_critic(
        self, review_id: str, judgements: list[CriticJudgement]
    ) -> Flow[list[JudgementPublic]]:
        body = JudgementsRequest(judgements=judgements).model_dump(mode="json")
        answer = yield from self.fetch(
            self.request("POST", f"/v1/reviews/{review_id}/judgements", body=body)
        )
        return [parse(JudgementPublic, item) for item in answer]

    def events(self, since: int, run_id: str | None) -> Flow[list[EventPublic]]:
        params = _without_none({"since": since, "run_id": run_id})
        body = yield from self.fetch(self.request("GET", "/v1/events", params=params))
        try:
            return _EVENTS.validate_python(body)
        except ValidationError as exc:
            raise CrosscheckError(f"unexpected events from the orchestrator: {exc}") from exc

    def events_url(self, run_id: str, since: int) -> str:
        """The websocket of a run's events after ``since``."""
        return f"{self.settings.ws_url}/v1/events?{urlencode({'run_id': run_id, 'since': since})}"

    def reviews(
        self, run_id: str | None, status: ReviewStatus | str | None, kind: str | None, limit: int
    ) -> Flow[list[ReviewSummary]]:
        status_text = None if status is None else str(status)
        params = {"limit": limit, "run_id": run_id, "status": status_text, "kind": kind}
        page = yield from self.fetch(
            self.request("GET", "/v1/reviews", params=_without_none(params))
        )
        return parse(ReviewPage, page).items

    def review(self, review_id: str) -> Flow[ReviewPublic]:
        return self.read(ReviewPublic, "GET", f"/v1/reviews/{review_id}")

    def export_request(
        self,
        kind: ExportKind,
        *,
        since: datetime | None,
        until: datetime | None,
        profile: str | None,
        tag: str | None,
        decision: DecisionAction | None,
    ) -> httpx.Request:
        """GET /v1/datasets/export: streamed for as long as it takes (no read timeout)."""
        params: dict[str, str] = {"kind": ExportKind(kind).value}
        for name, value in (("since", since), ("until", until)):
            if value is not None:
                params[name] = value.isoformat()
        for name, text in (("profile", profile), ("tag", tag), ("decision", decision)):
            if text is not None:
                params[name] = str(text)
        request = self.request("GET", "/v1/datasets/export", params=params)
        request.extensions["timeout"] = httpx.Timeout(None, connect=CONNECT_S).as_dict()
        return request

    # -------------------------------------------------------------- waiting for a run

    def run(
        self, body: dict[str, Any], key: str | None, *, wait: bool, timeout: float
    ) -> Flow[RunPublic | RunCreated]:
        """Start a run; with ``wait``, its outcome: the server holds the request open
        (``Prefer: wait``) in chunks; a server without it, or the last second, goes to
        :meth:`wait`."""
        key = key or f"sdk-{uuid.uuid4()}"
        if not wait:
            return (yield from self.start(body, key))
        deadline = time.monotonic() + timeout
        created: RunCreated | None = None
        while True:
            remaining = deadline - time.monotonic()
            if created is not None and remaining < 1:
                return (yield from self.wait(created.id, max(remaining, 0.0)))
            chunk = max(1, min(MAX_PREFER_WAIT_S, int(remaining)))
            request = self.request(
                "POST",
                "/v1/runs",
                body=body,
                headers={"Idempotency-Key": key, "Prefer": f"wait={chunk}"},
                timeout=chunk + self._timeout,
            )
            response = yield from self.send(request, retries=2)
            answer = _created_or_run(response, self.settings)
            if isinstance(answer, RunPublic):
                return (yield from self.outcome(answer))
            created = answer
            if "preference-applied" not in response.headers:
                # A server without `Prefer: wait`: follow the run instead.
                remaining = deadline - time.monotonic()
                return (yield from self.wait(created.id, max(remaining, 0.0)))

    def wait(self, run_id: str, timeout: float) -> Flow[RunPublic]:
        """The run's outcome: woken by its websocket events (re-reading the run), else polled."""
        deadline = time.monotonic() + timeout
        run = yield from self.get_run(run_id)
        if run.status in OUTCOME_STATUSES:
            return (yield from self.outcome(run))
        socket = None
        try:
            socket = yield Listen(self.events_url(run_id, 0), self.auth)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RunTimeout(run_id, timeout, run.status)
                try:
                    raw = yield Receive(socket, min(remaining, SAFETY_POLL_S))
                except TimeoutError:
                    raw = None
                if raw is None or ends_live_view(EventPublic.model_validate_json(raw)):
                    run = yield from self.get_run(run_id)
                    if run.status in OUTCOME_STATUSES:
                        return (yield from self.outcome(run))
        except CrosscheckError:
            raise
        except (ConnectionClosed, WebSocketException, OSError, ValidationError):
            pass  # no websocket: poll
        finally:
            if socket is not None:
                yield Hangup(socket)
        while True:
            run = yield from self.get_run(run_id)
            if run.status in OUTCOME_STATUSES:
                return (yield from self.outcome(run))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RunTimeout(run_id, timeout, run.status)
            yield Sleep(min(remaining, WAIT_POLL_S))

    def outcome(self, run: RunPublic) -> Flow[RunPublic]:
        """A run that stopped waiting as a value, or as the error that says who acts next."""
        if run.status in (RunStatus.escalated, RunStatus.awaiting_review):
            item = _pick_review((yield from self.reviews(run.id, None, None, 50)))
            review = (yield from self.review(item.id)) if item else None
            raise self._intervention(run, review)
        return _settled(run)

    def _intervention(self, run: RunPublic, review: ReviewPublic | None) -> NeedHumanIntervention:
        if review is None:
            return NeedHumanIntervention(run, review_id=None, console_url=None, context={})
        return NeedHumanIntervention(
            run,
            review_id=review.id,
            console_url=self.review_page(review.id),
            context=review.context,
        )

    def review_page(self, review_id: str) -> str:
        """The review item's page in the reviewer console."""
        return f"{self.console_url}/review?{urlencode({'review': review_id})}"
