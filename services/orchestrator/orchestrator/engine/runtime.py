"""What the durable steps need at run time. DBOS is one per process, and so is this."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db import Database
from orchestrator.evaluators.base import Evaluator
from orchestrator.events.hub import EventHub
from orchestrator.metrics import Metrics
from orchestrator.peers.http import ActorPeer, CriticPeer
from orchestrator.settings import OrchestratorSettings


@dataclass
class Runtime:
    settings: OrchestratorSettings
    db: Database
    actor: ActorPeer
    critic: CriticPeer
    evaluators: dict[str, Evaluator]
    hub: EventHub
    metrics: Metrics


_current: Runtime | None = None


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime


def current() -> Runtime:
    if _current is None:
        raise RuntimeError("the orchestrator runtime is not installed (is the app started?)")
    return _current
