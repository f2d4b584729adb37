"""``python -m tests.support.sealed_orchestrator``: the orchestrator as ``python -m
orchestrator`` serves it, sealed for fuzzing: webhook hosts resolve through an empty table
(no DNS query leaves the machine) and deliveries go to a transport that refuses every request
(a fuzzed public address literal is never contacted)."""

from __future__ import annotations

import httpx

from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from orchestrator.webhooks.targets import StaticResolver
from shared.runner import serve


def refuse(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, text="sealed: no delivery leaves this test")


def main() -> None:
    serve(
        "orchestrator",
        OrchestratorSettings(),
        lambda settings: create_app(
            settings,
            webhook_resolver=StaticResolver(),
            webhook_transport=httpx.MockTransport(refuse),
        ),
    )


if __name__ == "__main__":
    main()
