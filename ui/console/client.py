"""The console's only way to the backend: a small sync client for the orchestrator API.

Pages never build HTTP requests themselves; they call :func:`get_client`, which returns the
client kept in ``st.session_state["client"]`` (tests put an in-memory fake there) or builds
one from the token kept in ``st.session_state["token"]``.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from typing import Any

import httpx

from shared.evaluations import INTERCEPT_DATASET

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 10.0


class ApiError(Exception):
    """A non-2xx answer (or no answer) from the orchestrator, with its ``detail`` message."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"{error} ({status}): {detail}" if status else f"{error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def _detail_text(detail: Any) -> str:
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):  # FastAPI validation errors
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = [str(p) for p in item.get("loc", [])]
                if where[:1] == ["body"]:  # the request body itself (a field may be named body)
                    where = where[1:]
                loc = ".".join(where)
                parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", "")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


class ConsoleClient:
    """Sync client for the orchestrator API; the token goes only into the Authorization header."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url or os.environ.get("CROSSCHECK_URL") or DEFAULT_URL).rstrip("/")
        self._token = token
        self._transport = transport
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=TIMEOUT_S, transport=transport
        )

    def __repr__(self) -> str:  # never show the token
        return f"ConsoleClient({self.base_url!r}, authenticated={self._token is not None})"

    def with_token(self, token: str) -> ConsoleClient:
        """A client for the same server that sends ``token``."""
        return ConsoleClient(self.base_url, token, transport=self._transport)

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ plumbing
    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        try:
            try:
                resp = self._http.request(method, path, params=clean, json=json, headers=headers)
            except httpx.RemoteProtocolError:
                # The server closed an idle keep-alive connection as we reused it: a read is
                # safe to send again on a fresh one (a write is not, it may have arrived).
                if method != "GET":
                    raise
                resp = self._http.request(method, path, params=clean, json=json, headers=headers)
        except httpx.HTTPError as exc:
            raise ApiError(0, "Unreachable", f"{self.base_url}: {exc.__class__.__name__}") from exc
        if resp.status_code >= 400:
            error, detail = resp.reason_phrase or "Error", resp.text[:500]
            try:
                body = resp.json()
            except ValueError:
                body = None
            if isinstance(body, dict):
                error = str(body.get("error") or error)
                detail = _detail_text(body.get("detail", detail))
            raise ApiError(resp.status_code, error, detail)
        return resp

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    # ------------------------------------------------------------------ auth
    def login(self, username: str, password: str) -> dict[str, Any]:
        """``{"token", "name", "role"}``; raises :class:`ApiError` (401) on bad credentials."""
        body = {"username": username, "password": password}
        result: dict[str, Any] = self._json("POST", "/v1/auth/login", json=body)
        return result

    def who_am_i(self) -> dict[str, Any]:
        """Whose token this client sends: ``{"id", "name", "role"}`` (``GET /v1/auth/me``).
        Raises :class:`ApiError` (401) when the token is refused. The id is the token's (a
        login session's own id for a password login): the one a claim is held by."""
        me: dict[str, Any] = self._json("GET", "/v1/auth/me")
        return me

    def info(self) -> dict[str, Any]:
        """``GET /v1/info`` (no token needed, no secret in it): ``model_mode`` says what
        answers the model calls (``demo``, ``local`` or ``providers``)."""
        result: dict[str, Any] = self._json("GET", "/v1/info")
        return result

    # ------------------------------------------------------------------ reviews
    def list_reviews(
        self,
        status: str | None = None,
        kind: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        params = {"status": status, "kind": kind, "run_id": run_id, "limit": limit}
        params["cursor"] = cursor
        result: dict[str, Any] = self._json("GET", "/v1/reviews", params=params)
        return result

    def get_review(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/reviews/{review_id}")
        return result

    def claim(self, review_id: str, lease_s: int = 300) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "POST", f"/v1/reviews/{review_id}/claim", json={"lease_s": lease_s}
        )
        return result

    def release(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("POST", f"/v1/reviews/{review_id}/release")
        return result

    def decide(
        self,
        review_id: str,
        *,
        action: str,
        idempotency_key: str,
        comment: str | None = None,
        output: str | None = None,
        finish: bool = False,
        rounds: int | None = None,
        lesson: bool = False,
        lesson_scope: str = "global",
        points: list[str] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"action": action}
        if comment:
            body["comment"] = comment
        if points and action == "comment":
            body["points"] = points
        if lesson:
            body["lesson"] = True
            body["lesson_scope"] = lesson_scope
        if action == "edit":
            body["output"] = output
            body["finish"] = finish
        if action == "retry" and rounds is not None:
            body["rounds"] = rounds
        result: dict[str, Any] = self._json(
            "POST",
            f"/v1/reviews/{review_id}/decision",
            json=body,
            headers={"Idempotency-Key": idempotency_key},
        )
        return result

    # ------------------------------------------------------------------ runs and events
    def list_runs(
        self,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        q: str | None = None,
    ) -> dict[str, Any]:
        """A page of runs; ``q`` matches a run id exactly or the task text (any case)."""
        params = {"status": status, "limit": limit, "cursor": cursor, "q": (q or "").strip()}
        result: dict[str, Any] = self._json("GET", "/v1/runs", params=params)
        return result

    def get_run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/runs/{run_id}")
        return result

    def events(
        self, since: int = 0, limit: int = 500, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Events after ``since``, oldest first; ``run_id`` keeps those of one run."""
        params = {"since": since, "limit": limit, "run_id": run_id}
        result: list[dict[str, Any]] = self._json("GET", "/v1/events", params=params)
        return result

    # ------------------------------------------------------------------ stats and lessons
    def stats(self, since: datetime | None = None) -> dict[str, Any]:
        """Aggregates of runs created at or after ``since`` (all runs when None)."""
        params = {"since": since.isoformat() if since is not None else None}
        result: dict[str, Any] = self._json("GET", "/v1/stats", params=params)
        return result

    def latest_evaluation(self) -> dict[str, Any] | None:
        """The evaluation of the loop that finished last (``GET /v1/evaluations/latest``, any
        set but the Critic's intercept set); None when none has been published yet."""
        try:
            result: dict[str, Any] = self._json(
                "GET", "/v1/evaluations/latest", params={"exclude": INTERCEPT_DATASET}
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    def intercept_history(self, limit: int = 100) -> list[dict[str, Any]]:
        """The intercept rates ``crosscheck eval intercept`` published, newest first."""
        params = {"dataset": INTERCEPT_DATASET, "limit": limit}
        result: list[dict[str, Any]] = self._json("GET", "/v1/evaluations", params=params)
        return result

    def list_lessons(
        self, scope: str | None = None, include_retired: bool = False
    ) -> list[dict[str, Any]]:
        params = {"scope": (scope or "").strip(), "include_retired": include_retired or None}
        result: list[dict[str, Any]] = self._json("GET", "/v1/lessons", params=params)
        return result

    def retire_lesson(self, lesson_id: str) -> dict[str, Any]:
        """Stop offering a lesson to new runs (needs the reviewer role)."""
        result: dict[str, Any] = self._json("POST", f"/v1/lessons/{lesson_id}/retire")
        return result

    # ------------------------------------------------------------------ knowledge
    def list_knowledge(
        self,
        kind: str | None = None,
        profile: str | None = None,
        include_retired: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Knowledge entries, newest first (``GET /v1/knowledge``); ``profile`` keeps those for
        that profile and those for every profile."""
        params = {
            "kind": kind,
            "profile": (profile or "").strip(),
            "include_retired": include_retired or None,
            "limit": limit,
        }
        result: list[dict[str, Any]] = self._json("GET", "/v1/knowledge", params=params)
        return result

    def search_knowledge(self, q: str, profile: str | None = None) -> list[dict[str, Any]]:
        """What the Critic would receive for a task with this text: ``[{"entry", "score"}]``,
        best first."""
        params = {"q": q, "profile": (profile or "").strip()}
        result: list[dict[str, Any]] = self._json("GET", "/v1/knowledge/search", params=params)
        return result

    def get_knowledge(self, entry_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/knowledge/{entry_id}")
        return result

    def create_knowledge(
        self,
        *,
        kind: str,
        title: str,
        body: str,
        profiles: list[str] | None = None,
        weight: float = 1.0,
    ) -> dict[str, Any]:
        """Add an entry (needs the admin role; a 422 names the field it refuses)."""
        doc: dict[str, Any] = {"kind": kind, "title": title, "body": body}
        doc.update(profiles=profiles or [], weight=weight)
        result: dict[str, Any] = self._json("POST", "/v1/knowledge", json=doc)
        return result

    def update_knowledge(self, entry_id: str, **fields: Any) -> dict[str, Any]:
        """Change the fields given (``kind``, ``title``, ``body``, ``profiles``, ``weight``,
        ``retired``; needs the admin role)."""
        result: dict[str, Any] = self._json("PATCH", f"/v1/knowledge/{entry_id}", json=fields)
        return result

    def retire_knowledge(self, entry_id: str) -> dict[str, Any]:
        """Retire an entry: no new call receives it (needs the admin role)."""
        result: dict[str, Any] = self._json("DELETE", f"/v1/knowledge/{entry_id}")
        return result

    # ------------------------------------------------------------------ judgements, datasets
    def judge_critic(self, review_id: str, judgements: list[dict[str, Any]]) -> list[Any]:
        """Agree with or dismiss Critic issues (``{"issue", "verdict", "reason"}``, issue
        from 0); every judgement of the item comes back."""
        result: list[Any] = self._json(
            "POST", f"/v1/reviews/{review_id}/judgements", json={"judgements": judgements}
        )
        return result

    def export_dataset(self, kind: str = "chat", **filters: Any) -> bytes:
        """``GET /v1/datasets/export`` as JSONL bytes (filters: since, until, profile, tag,
        decision; None or empty: no filter)."""
        return self._request("GET", "/v1/datasets/export", params={"kind": kind, **filters}).content


def get_client() -> Any:
    """The client every page uses: an injected one, else one built from the session's token."""
    import streamlit as st

    client = st.session_state.get("client")
    if client is None:
        client = ConsoleClient(token=st.session_state.get("token"))
        st.session_state["client"] = client
    return client
