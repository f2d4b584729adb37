"""Stats API: what the console's Metrics page charts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from orchestrator.deps import Reader, SessionDep
from orchestrator.stats.service import StatsService
from shared.orchestration import Role, StatsPublic

router = APIRouter(prefix="/v1/stats", tags=["stats"])
service = StatsService()


@router.get("", response_model=StatsPublic)
def get_stats(
    caller: Reader,
    session: SessionDep,
    since: Annotated[
        datetime | None,
        Query(
            description="Only runs created at or after this ISO 8601 time (no offset: UTC).",
            examples=["2025-01-31T00:00:00Z"],
        ),
    ] = None,
) -> StatsPublic:
    """Runs by status and stop reason, rounds per run, adoption, and per-provider calls,
    latency, tokens and cost, computed from the database (so they survive restarts). A
    service token gets the figures of its own runs; reviewers and admins of every run."""
    owner = caller.id if caller.role is Role.service else None
    return service.compute(session, since, owner)
