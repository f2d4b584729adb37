"""``GET /v1/cluster``: the replicas sharing this database, their heartbeats and the leader."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlmodel import select

from orchestrator.deps import Admin, SessionDep
from orchestrator.settings import OrchestratorSettings
from orchestrator.tables import Replica, utcnow

router = APIRouter(tags=["ops"])


class ReplicaPublic(BaseModel):
    executor_id: str
    hostname: str
    address: str
    pid: int
    started_at: datetime
    last_heartbeat: datetime
    alive: bool = Field(description="Heartbeat within the replica timeout and not stopped.")
    leader: bool = Field(description="Holds the leader lock: sweeps deadlines, recovers.")
    stopped_at: datetime | None = None
    recovered_at: datetime | None = Field(
        default=None, description="When the leader last recovered this replica's runs."
    )
    recovered_workflows: int = 0
    this: bool = Field(description="The replica that answered this request.")


class ClusterPublic(BaseModel):
    database: str = Field(description="'sqlite' (one process) or 'postgresql' (replicas).")
    replica: str = Field(description="Executor id of the replica that answered.")
    leader: str | None
    heartbeat_s: float
    replica_timeout_s: float
    replicas: list[ReplicaPublic]


@router.get("/v1/cluster", response_model=ClusterPublic)
def cluster_status(admin: Admin, session: SessionDep, request: Request) -> ClusterPublic:
    """Every replica that ever joined this database, live ones first (admin only)."""
    settings: OrchestratorSettings = request.app.state.settings
    me = settings.executor_id

    def answer(database: str, leader: str | None, replicas: list[ReplicaPublic]) -> ClusterPublic:
        return ClusterPublic(
            database=database,
            replica=me,
            leader=leader,
            heartbeat_s=settings.heartbeat_s,
            replica_timeout_s=settings.replica_timeout_s,
            replicas=replicas,
        )

    if session.get_bind().dialect.name != "postgresql":
        # One process owns a SQLite database: it is the whole cluster and always leads.
        now = utcnow()
        started: datetime = request.app.state.started_at
        alone = ReplicaPublic(
            executor_id=me,
            hostname=request.app.state.hostname,
            address=settings.address,
            pid=request.app.state.pid,
            started_at=started,
            last_heartbeat=now,
            alive=True,
            leader=True,
            this=True,
        )
        return answer("sqlite", me, [alone])
    now = session.exec(select(sa.func.now())).one()
    cutoff = now - timedelta(seconds=settings.replica_timeout_s)
    replicas = []
    for row in session.exec(select(Replica)):
        alive = row.stopped_at is None and row.heartbeat_at >= cutoff
        replicas.append(
            ReplicaPublic(
                executor_id=row.executor_id,
                hostname=row.hostname,
                address=row.address,
                pid=row.pid,
                started_at=row.started_at,
                last_heartbeat=row.heartbeat_at,
                alive=alive,
                leader=alive and row.leader,
                stopped_at=row.stopped_at,
                recovered_at=row.recovered_at,
                recovered_workflows=row.recovered_workflows,
                this=row.executor_id == me,
            )
        )
    replicas.sort(key=lambda r: (not r.alive, r.executor_id))
    leader = next((r.executor_id for r in replicas if r.leader), None)
    return answer("postgresql", leader, replicas)
