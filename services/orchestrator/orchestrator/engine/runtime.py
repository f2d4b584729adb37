"""What the durable steps need at run time. DBOS is one per process, and so is this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.db import Database
from orchestrator.evaluators.base import Evaluator
from orchestrator.events.hub import EventHub
from orchestrator.knowledge.service import KnowledgeService
from orchestrator.metrics import Metrics
from orchestrator.peers.http import ActorPeer, CriticPeer
from orchestrator.settings import OrchestratorSettings
from shared.contracts import ResearchRequest, ResearchResult


class ResearchPeer(Protocol):
    """What the research step needs of the Research service (see ``engine.research``)."""

    async def research(self, request: ResearchRequest) -> ResearchResult: ...


@dataclass
class Runtime:
    settings: OrchestratorSettings
    db: Database
    actor: ActorPeer
    critic: CriticPeer
    evaluators: dict[str, Evaluator]
    hub: EventHub
    metrics: Metrics
    knowledge: KnowledgeService = field(default_factory=KnowledgeService)
    research: ResearchPeer | None = None  # None: ORCHESTRATOR_RESEARCH_URL is empty


_current: Runtime | None = None


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime


def current() -> Runtime:
    if _current is None:
        raise RuntimeError("the orchestrator runtime is not installed (is the app started?)")
    return _current
