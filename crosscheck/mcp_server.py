"""``crosscheck mcp``: the platform as tools for MCP hosts (agent apps, IDEs, chat clients).

Tools, each a call to the orchestrator's HTTP API with the caller's own token (a caller sees
and starts only what that token may):

- ``check``: start a run on a text or code task, wait for its end, and return the output that
  shipped, or the escalation (why, the review item and its page in the reviewer console), or,
  past ``wait_s``, the run id to ask ``get_run`` about later.
- ``get_run``: one run's status, stop reason, rounds and final output.
- ``list_escalations``: the review items that wait for a person, as the token sees them.
- ``request_review``: put a text before a person (a run whose first version is the text,
  ``given_output``: no model drafts it) and wait for their decision: approved (the text
  ships), edited (their edit ships), rejected, or commented (the Actor revises by their
  points and the run goes on to what ships then); past ``wait_s``, the run id to ask
  ``get_run`` about later. With ``critic_first`` the Critic critiques the text before the
  person decides; the text never ships without the person's approval.

Transports (the official ``mcp`` package): stdio, where the token is the CLI's (``--token``,
``CROSSCHECK_TOKEN`` or ``var/crosscheck.env``), and streamable HTTP, where every request
carries ``Authorization: Bearer <a Crosscheck token>``: a request without one, or with one
the orchestrator does not know, is answered 401 before any tool runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Literal, TypeVar

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from crosscheck.client import (
    AsyncCrosscheck,
    CrosscheckError,
    NeedHumanIntervention,
    RunFailed,
    RunTimeout,
)
from shared.contracts import MAX_OUTPUT_CHARS, MAX_TASK_CHARS
from shared.orchestration import (
    FINAL_STATUSES,
    ReviewKind,
    ReviewStatus,
    ReviewSummary,
    RunPublic,
    RunStatus,
)

_caller: ContextVar[str | None] = ContextVar("crosscheck_mcp_caller", default=None)
T = TypeVar("T")

INSTRUCTIONS = (
    "Crosscheck checks LLM output before it ships: an Actor drafts and revises, a Critic on "
    "another model provider critiques, and a person decides what the machines cannot. Use "
    "`check` for a text or code task; an escalated result names the review item a person "
    "will decide. Use `request_review` to have a person decide on a text you already have."
)
MAX_WAIT_S = 3600.0
REVIEW_TASK = "Review this text before it is used."
POLL_S = (0.2, 2.0)  # request_review re-reads the run this often: from the first to the longest
OPEN = (ReviewStatus.pending, ReviewStatus.claimed)


class CheckResult(BaseModel):
    """What became of a checked task."""

    status: Literal["succeeded", "escalated", "awaiting_review", "failed", "cancelled", "running"]
    run_id: str
    output: str | None = Field(default=None, description="The version that shipped.")
    stop_reason: str | None = None
    rounds: int = 0
    detail: str | None = Field(default=None, description="Why a failed run failed.")
    review_id: str | None = Field(default=None, description="The item a person decides.")
    review_url: str | None = Field(default=None, description="Its page in the console.")
    message: str = Field(description="One sentence for the model to read.")


class RunView(BaseModel):
    """One run as ``get_run`` shows it."""

    run_id: str
    status: str
    kind: str
    task: str
    stop_reason: str | None = None
    rounds: int
    final_output: str | None = None
    last_verdict: str | None = Field(default=None, description="The last critique's verdict.")
    detail: str | None = None


class Escalation(BaseModel):
    review_id: str
    run_id: str
    kind: str
    status: str
    reason: str | None = None
    task: str
    round: int
    review_url: str


Outcome = Literal[
    "approved", "edited", "revised", "rejected", "waiting", "running", "failed", "cancelled"
]


class ReviewResult(BaseModel):
    """What a person decided on a text put before them, and what shipped."""

    outcome: Outcome = Field(
        description="approved: the text shipped as given; edited: the person's edit shipped; "
        "revised: the Actor's revision (by the person's comment) shipped; rejected; waiting: "
        "a person has yet to decide (see review_url); running: the machines are still working."
    )
    run_id: str
    status: str = Field(description="The run's status.")
    decision: str | None = Field(
        default=None, description="The person's last decision: approve, edit, reject, comment."
    )
    decided_by: str | None = None
    comment: str | None = Field(default=None, description="Their comment, or why they rejected.")
    output: str | None = Field(default=None, description="The version that shipped.")
    shipped_by: str | None = None
    review_id: str | None = Field(default=None, description="The item a person decides next.")
    review_url: str | None = Field(default=None, description="Its page in the console.")
    message: str = Field(description="One sentence for the model to read.")


def _refusal(response: httpx.Response) -> str:
    """The API's refusal in one line: its detail, or each field a 422 names."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text[:500]
    if isinstance(detail, list):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', [])[1:]) or 'body'}: {e.get('msg')}"
            for e in detail
            if isinstance(e, dict)
        )
    return f"the orchestrator refused the run ({response.status_code}): {detail}"


def _open_item(items: list[ReviewSummary]) -> ReviewSummary | None:
    return next((item for item in items if item.status in OPEN), None)


def _outcome(run: RunPublic, action: str | None) -> Outcome:
    if run.status is RunStatus.succeeded:
        if action in ("approve", "edit"):
            return "approved" if action == "approve" else "edited"
        return "revised"
    if run.stop_reason == "review_rejected":
        return "rejected"
    return "cancelled" if run.status is RunStatus.cancelled else "failed"


def _rounds(run: RunPublic) -> int:
    return len(run.rounds)


def _finished(run: RunPublic) -> CheckResult:
    return CheckResult(
        status="succeeded",
        run_id=run.id,
        output=run.final_output,
        stop_reason=run.stop_reason,
        rounds=_rounds(run),
        message=f"run {run.id} succeeded after {_rounds(run)} round(s): the output passed.",
    )


def _escalated(exc: NeedHumanIntervention) -> CheckResult:
    return CheckResult(
        status="awaiting_review" if exc.status == "awaiting_review" else "escalated",
        run_id=exc.run_id,
        output=None,
        stop_reason=exc.stop_reason,
        rounds=_rounds(exc.run),
        review_id=exc.review_id,
        review_url=exc.console_url,
        message=str(exc),
    )


def _failed(exc: RunFailed) -> CheckResult:
    return CheckResult(
        status="cancelled" if exc.status == "cancelled" else "failed",
        run_id=exc.run_id,
        stop_reason=exc.stop_reason,
        rounds=_rounds(exc.run),
        detail=exc.detail,
        message=str(exc),
    )


def _view(run: RunPublic) -> RunView:
    verdicts = [r.critique.get("verdict") for r in run.rounds if r.critique]
    return RunView(
        run_id=run.id,
        status=run.status,
        kind=run.kind,
        task=run.task,
        stop_reason=run.stop_reason,
        rounds=_rounds(run),
        final_output=run.final_output,
        last_verdict=str(verdicts[-1]) if verdicts else None,
        detail=run.detail,
    )


def build_server(url: str, token: str | None = None, console_url: str | None = None) -> MCPServer:
    """The MCP server over the orchestrator at ``url``. ``token`` is the stdio caller's; over
    HTTP each request's own bearer token is used (see :class:`BearerTokens`)."""
    server: MCPServer = MCPServer(name="crosscheck", instructions=INSTRUCTIONS)

    def client() -> AsyncCrosscheck:
        caller = _caller.get() or token
        if not caller:
            raise ToolError("no Crosscheck token: pass --token or set CROSSCHECK_TOKEN")
        return AsyncCrosscheck(url, caller, console_url=console_url)

    async def guarded(call: Callable[[AsyncCrosscheck], Awaitable[T]]) -> T:
        try:
            async with client() as api:
                return await call(api)
        except (NeedHumanIntervention, RunFailed, RunTimeout):
            raise
        except CrosscheckError as exc:  # the API's refusal or an unreachable orchestrator
            raise ToolError(str(exc)) from exc

    @server.tool(
        description="Check a task's output before it ships: the Actor drafts, the Critic (another "
        "provider) critiques, the Actor revises, until the Critic passes it, a stop rule ends the "
        "run, or a person must decide. kind 'code' runs `tests` (pytest-style functions or a "
        "check(candidate) function) against `entry_point` in a sandbox. Waits up to wait_s."
    )
    async def check(
        task: str,
        kind: Literal["text", "code"] = "text",
        tests: str | None = None,
        entry_point: str | None = None,
        max_rounds: int | None = Field(default=None, ge=1, le=10),
        wait_s: float = Field(default=600.0, gt=0, le=MAX_WAIT_S),
    ) -> CheckResult:
        policy: dict[str, Any] = {} if max_rounds is None else {"max_rounds": max_rounds}

        async def start(api: AsyncCrosscheck) -> CheckResult:
            try:
                run = await api.run(
                    task,
                    kind=kind,
                    tests=tests,
                    entry_point=entry_point,
                    policy=policy or None,
                    timeout=wait_s,
                )
            except NeedHumanIntervention as exc:
                return _escalated(exc)
            except RunFailed as exc:
                return _failed(exc)
            except RunTimeout as exc:
                return CheckResult(
                    status="running",
                    run_id=exc.run_id,
                    message=f"{exc}; ask get_run with this run_id later",
                )
            return _finished(run)

        return await guarded(start)

    @server.tool(description="One run: status, stop reason, rounds, final output, last verdict.")
    async def get_run(run_id: str) -> RunView:
        async def read(api: AsyncCrosscheck) -> RunView:
            return _view(await api.get(run_id))

        return await guarded(read)

    @server.tool(
        description="Review items waiting for a person (escalations, and runs paused for review "
        "before their critique) that this token may see, newest first."
    )
    async def list_escalations(
        limit: int = Field(default=20, ge=1, le=100),
        include_pre_critique: bool = False,
    ) -> list[Escalation]:
        async def read(api: AsyncCrosscheck) -> list[Escalation]:
            items = []
            for status in (ReviewStatus.pending, ReviewStatus.claimed):
                items += await api.reviews(status=status, limit=limit)
            wanted = [
                item for item in items if include_pre_critique or item.kind is ReviewKind.escalation
            ]
            wanted.sort(key=lambda item: item.created_at, reverse=True)
            return [
                Escalation(
                    review_id=item.id,
                    run_id=item.run_id,
                    kind=item.kind,
                    status=item.status,
                    reason=item.reason,
                    task=item.task,
                    round=item.round,
                    review_url=api._review_page(item.id),
                )
                for item in wanted[:limit]
            ]

        return await guarded(read)

    @server.tool(
        description="Put a text before a person and wait for their decision: approve (the text "
        "ships as it is), edit (their edit ships), reject, or comment (the Actor revises the text "
        "by their points and the Critic checks the revision). `task` tells the person what the "
        "text is for. critic_first: the Critic critiques the text before the person decides. The "
        "text never ships without the person's approval. Waits up to wait_s; then returns the "
        "run id to ask get_run about later."
    )
    async def request_review(
        text: str = Field(min_length=1, max_length=MAX_OUTPUT_CHARS),
        task: str = Field(default=REVIEW_TASK, min_length=1, max_length=MAX_TASK_CHARS),
        critic_first: bool = False,
        wait_s: float = Field(default=600.0, gt=0, le=MAX_WAIT_S),
    ) -> ReviewResult:
        caller = _caller.get() or token
        if not caller:
            raise ToolError("no Crosscheck token: pass --token or set CROSSCHECK_TOKEN")
        body = {"task": task, "given_output": text, "critic_first": critic_first}
        try:  # the client has no given_output (yet): the API directly, with the caller's token
            async with httpx.AsyncClient(
                base_url=url, timeout=30, headers={"Authorization": f"Bearer {caller}"}
            ) as http:
                created = await http.post("/v1/runs", json=body)
        except httpx.HTTPError as exc:
            raise ToolError(f"cannot reach the orchestrator at {url}: {exc}") from exc
        if created.is_error:
            raise ToolError(_refusal(created))
        run_id = str(created.json()["id"])

        async def wait(api: AsyncCrosscheck) -> ReviewResult:
            return await _await_decision(api, run_id, wait_s)

        return await guarded(wait)

    return server


async def _await_decision(api: AsyncCrosscheck, run_id: str, wait_s: float) -> ReviewResult:
    """Wait until the person decided and the run got somewhere: it ended, or a person must
    decide again (after their comment the revision escalated, say); or until ``wait_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    pause = POLL_S[0]
    while True:
        run = await api.get(run_id)
        # the machines stopped: the run ended, or waits for a person
        still = run.status in FINAL_STATUSES or run.status is RunStatus.awaiting_review
        items = await api.reviews(run_id=run_id) if still else []  # newest first
        decided = [item for item in items if item.status is ReviewStatus.resolved]
        open_item = _open_item(items)
        if decided and (open_item is None or open_item.created_at > decided[0].created_at):
            # the run as the decision left it: read before the items, it can predate it
            return await _result(api, await api.get(run_id), decided[0], open_item)
        if still and open_item is None and run.status in FINAL_STATUSES:
            return await _result(api, run, None, None)  # ended with no decision to report
        remaining = deadline - loop.time()
        if remaining <= 0:
            return _still(api, run, open_item)
        await asyncio.sleep(min(pause, remaining))
        pause = min(pause * 2, POLL_S[1])


async def _result(
    api: AsyncCrosscheck,
    run: RunPublic,
    decided: ReviewSummary | None,
    open_item: ReviewSummary | None,
) -> ReviewResult:
    decision = ((await api.review(decided.id)).decision or {}) if decided else {}
    action = decision.get("action")
    who = decision.get("author")
    said = {
        "decision": action,
        "decided_by": who,
        "comment": decision.get("comment"),
    }
    if open_item is not None:  # the person spoke; the run needs a person again
        return ReviewResult(
            outcome="waiting",
            run_id=run.id,
            status=run.status,
            review_id=open_item.id,
            review_url=api._review_page(open_item.id),
            message=f"{who} decided {action}; run {run.id} now waits for a person again "
            f"({open_item.reason or open_item.kind}): nothing shipped yet",
            **said,
        )
    outcome = _outcome(run, action)
    shipped = run.status is RunStatus.succeeded
    return ReviewResult(
        outcome=outcome,
        run_id=run.id,
        status=run.status,
        output=run.final_output if shipped else None,
        shipped_by=run.shipped_by if shipped else None,
        message=f"run {run.id}: {outcome}"
        + (f" by {who}" if who and outcome != "revised" else "")
        + ("; `output` is what shipped" if shipped else "; nothing shipped"),
        **said,
    )


def _still(api: AsyncCrosscheck, run: RunPublic, open_item: ReviewSummary | None) -> ReviewResult:
    person = open_item is not None
    return ReviewResult(
        outcome="waiting" if person else "running",
        run_id=run.id,
        status=run.status,
        review_id=open_item.id if open_item else None,
        review_url=api._review_page(open_item.id) if open_item else None,
        message=f"run {run.id} is still "
        + ("waiting for a person" if person else run.status)
        + "; ask get_run with this run_id later",
    )


class BearerTokens:
    """ASGI middleware for the streamable HTTP transport: a request without a bearer token, or
    with one the orchestrator refuses (``GET /v1/auth/me``), is answered 401; an accepted one is
    what the tools call the API with."""

    def __init__(
        self, app: ASGIApp, url: str, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.app = app
        self.url = url
        self.transport = transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            await _unauthorized(send, "send Authorization: Bearer <a Crosscheck token>")
            return
        try:  # asked each time: a token revoked a moment ago is refused at once
            async with httpx.AsyncClient(
                base_url=self.url, timeout=10, transport=self.transport
            ) as http:
                answer = await http.get(
                    "/v1/auth/me", headers={"Authorization": f"Bearer {token.strip()}"}
                )
        except httpx.HTTPError:
            await _unauthorized(send, "the orchestrator could not check the token", status=503)
            return
        if answer.status_code != 200:
            await _unauthorized(send, "the orchestrator does not accept this token")
            return
        reset = _caller.set(token.strip())
        try:
            await self.app(scope, receive, send)
        finally:
            _caller.reset(reset)


async def _unauthorized(send: Send, message: str, *, status: int = 401) -> None:
    body = ('{"error": "Unauthorized", "detail": "' + message + '"}').encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="crosscheck"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(server: MCPServer, url: str, *, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app at ``/mcp`` (``host``: what the SDK's DNS-rebinding guard
    expects in the Host header), behind :class:`BearerTokens`."""
    return BearerTokens(server.streamable_http_app(streamable_http_path="/mcp", host=host), url)
