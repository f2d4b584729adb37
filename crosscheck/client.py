"""A small synchronous client for the Orchestrator's runs API, used by the CLI.

Where the URL and token come from, in order: explicit values (``--url``/``--token``), the
environment (``CROSSCHECK_URL``/``CROSSCHECK_TOKEN``), then ``var/crosscheck.env`` that
``crosscheck up`` writes in the working directory. Every failure a user can cause or fix
becomes a :class:`CrosscheckError` with a one-line message.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect as ws_connect

from crosscheck.launcher import CREDENTIALS_FILE
from shared.orchestration import (
    AccountCreate,
    AccountPublic,
    EventPublic,
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
WS_BACKOFF_S = (0.2, 0.5, 1.0)
WS_RECV_TICK_S = 1.0  # wake up this often while waiting, so Ctrl-C is prompt
POLL_S = 0.5

Model = TypeVar("Model", bound=BaseModel)
_EVENTS = TypeAdapter(list[EventPublic])


class CrosscheckError(Exception):
    """A failure the CLI reports as one line, with exit code 1."""


class ApiError(CrosscheckError):
    """The Orchestrator answered with an error (``{"error": ..., "detail": ...}``)."""

    def __init__(self, status_code: int, error: str, detail: Any) -> None:
        self.status_code = status_code
        self.error = error
        self.detail = detail
        super().__init__(f"{error} (HTTP {status_code}): {_describe(detail)}")


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
    token: str
    token_source: str  # where the token came from, named in authentication errors

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

    def _request(
        self,
        method: str,
        path: str,
        *,
        retries: int = 1,
        **kwargs: Any,
    ) -> Any:
        """The decoded JSON body; transient transport errors are retried ``retries`` times."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise self._unreachable() from exc
            except httpx.TransportError as exc:
                if attempt >= retries:
                    raise CrosscheckError(
                        f"the orchestrator at {self.settings.url} did not answer: {exc!r}"
                    ) from exc
                attempt += 1
                time.sleep(0.2 * attempt)
        if response.is_error:
            raise self._api_error(response)
        try:
            return response.json()
        except ValueError as exc:
            raise CrosscheckError(
                f"the orchestrator at {self.settings.url} sent a response that is not JSON "
                f"(HTTP {response.status_code}): is this URL the orchestrator?"
            ) from exc

    def _api_error(self, response: httpx.Response) -> CrosscheckError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "error" in body:
            error = ApiError(response.status_code, str(body["error"]), body.get("detail"))
        else:
            text = " ".join(response.text.split())[:200] or response.reason_phrase
            error = ApiError(response.status_code, "HTTPError", text)
        if response.status_code == 401:
            return CrosscheckError(f"{error} (the token came from {self.settings.token_source})")
        return error

    def _parse(self, model: type[Model], body: Any) -> Model:
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise CrosscheckError(
                f"unexpected {model.__name__} from the orchestrator: {exc.errors()[0]['msg']}"
            ) from exc

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

    def trajectory(self, run_id: str) -> Trajectory:
        return self._parse(Trajectory, self._request("GET", f"/v1/runs/{run_id}/trajectory"))

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
            except (ConnectionClosed, WebSocketException, OSError, ValidationError) as exc:
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
