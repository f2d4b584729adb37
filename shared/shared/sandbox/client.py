"""``SandboxClient``: the sandbox's HTTP API, typed, as the orchestrator calls it.

It speaks through a ``JsonPeer`` (in production the orchestrator's pooled ``Peer``, which
sends the idempotency key and the step's deadline, and raises ``PeerUnavailable`` for an
unreachable or slow sandbox, a 429 or a 5xx, ``PeerRejected`` for a 4xx). On top of that it
treats as unavailable what a sandbox can answer with a 200 and still not have run the job: an
``environment`` failure of its own, or a body that is not an ``ExecuteResult``.
"""

from __future__ import annotations

from pydantic import ValidationError

from shared.contracts import ErrorClass
from shared.peers import JsonPeer, PeerUnavailable
from shared.sandbox.schemas import ExecuteRequest, ExecuteResult

PEER = "sandbox"
EXECUTE = "/v1/execute"


class SandboxClient:
    def __init__(self, peer: JsonPeer) -> None:
        self.peer = peer

    async def execute(self, request: ExecuteRequest, *, key: str) -> ExecuteResult:
        """Run ``request`` once per ``key``. Only the fields the caller set are sent: the
        sandbox applies its own defaults."""
        body = request.model_dump(mode="json", exclude_unset=True)
        try:
            result = ExecuteResult.model_validate(await self.peer.post(EXECUTE, body, key))
        except ValueError as exc:  # not JSON (a proxy's page), or JSON that is no result
            raise PeerUnavailable(
                f"{PEER} answered a malformed body on {EXECUTE}: {_malformed(exc)}",
                peer=PEER,
                path=EXECUTE,
                key=key,
            ) from exc
        if result.error_class is ErrorClass.environment:
            reason = result.message or result.stderr or "no detail"
            raise PeerUnavailable(f"{PEER} could not run the job: {reason[:300]}")
        return result


def invalid_fields(exc: ValidationError) -> str:
    """One line for a DTO that did not validate: how many fields, and the first one."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(root)"
    return f"{exc.error_count()} field error(s), first {where}: {first['msg']}"[:300]


def _malformed(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return invalid_fields(exc)
    return f"not JSON ({exc})"[:300]
