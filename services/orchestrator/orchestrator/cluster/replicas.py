"""Replicas sharing one Postgres: a heartbeat each, one leader, failover of dead replicas.

Each replica keeps one dedicated connection (autocommit) for the whole of its life and
holds two kinds of session-level advisory locks on it:

* its **own** lock, keyed by its executor id, taken before DBOS launches. A second process
  started with the same id cannot take it and refuses to start, and Postgres drops it the
  moment the replica's connection goes (``kill -9``, a crash; TCP keepalives bound how long
  a vanished machine keeps it).
* the **leader** lock, which one replica at a time holds. The leader sweeps review deadlines
  and, every heartbeat, looks for replicas whose heartbeat is older than the timeout (or
  that stopped). It recovers such a replica's pending workflows with DBOS's own recovery
  for that executor id, but only after taking the replica's own lock, which proves its
  session is gone: a replica that is slow to beat but still connected keeps its work, so a
  live workflow is never run twice.

DBOS recovers a workflow by putting it back on its internal queue; whichever live replica
dequeues it first becomes its executor (the row's ``executor_id`` changes), so the dead
replica does not resume it again when it comes back, and finished steps are not repeated.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from dbos import DBOS
from psycopg.conninfo import conninfo_to_dict

from orchestrator.db import libpq_url
from orchestrator.settings import OrchestratorSettings
from shared.logging import get_logger

log = get_logger("crosscheck.cluster")

LEADER_LOCK_KEY = 7_261_003

Recover = Callable[[str], Awaitable[int]]


class ClusterError(RuntimeError):
    """This replica cannot join the cluster (its executor id is held by a live replica)."""


def replica_lock_key(executor_id: str) -> int:
    """The advisory-lock key a replica holds for as long as it lives."""
    digest = hashlib.sha256(f"crosscheck-replica:{executor_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def recover_with_dbos(executor_id: str) -> int:
    """Hand a dead executor's pending workflows back to DBOS's queue; return how many."""
    handles = await asyncio.to_thread(DBOS._recover_pending_workflows, [executor_id])
    return len(handles)


def connection_kwargs(database_url: str, timeout_s: float) -> tuple[str, dict[str, Any]]:
    """Conninfo and keyword arguments of a long-lived control connection.

    TCP keepalives on both ends make a vanished peer (a machine that lost power) drop the
    session, and its advisory locks, within about ``timeout_s`` instead of hours.
    """
    conninfo = libpq_url(database_url)
    idle = max(1, int(timeout_s / 2))
    interval = max(1, int(timeout_s / 6))
    count = 3
    server = (
        f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
        f"-c tcp_keepalives_count={count} -c statement_timeout={int(timeout_s * 1000)}"
    )
    existing = str(conninfo_to_dict(conninfo).get("options") or "")
    return conninfo, {
        "autocommit": True,
        "connect_timeout": max(2, int(timeout_s)),
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": count,
        "options": f"{existing} {server}".strip(),
        "application_name": "crosscheck-orchestrator-cluster",
    }


_UPSERT = """
INSERT INTO replicas (executor_id, hostname, address, pid, leader, started_at, heartbeat_at,
                      stopped_at, recovered_at, recovered_workflows)
VALUES (%(id)s, %(hostname)s, %(address)s, %(pid)s, %(leader)s, now(), now(), NULL, NULL, 0)
ON CONFLICT (executor_id) DO UPDATE SET
    hostname = EXCLUDED.hostname, address = EXCLUDED.address, pid = EXCLUDED.pid,
    leader = EXCLUDED.leader, started_at = now(), heartbeat_at = now(), stopped_at = NULL
"""
_BEAT = """
UPDATE replicas SET heartbeat_at = now(), leader = %(leader)s, stopped_at = NULL
WHERE executor_id = %(id)s
"""
_DEAD = """
SELECT executor_id FROM replicas
WHERE executor_id <> %(id)s
  AND (stopped_at IS NOT NULL OR heartbeat_at < now() - make_interval(secs => %(timeout)s))
  AND (recovered_at IS NULL OR recovered_at < heartbeat_at)
ORDER BY heartbeat_at
"""


class Cluster:
    """This replica's membership: call ``join`` before ``DBOS.launch()``, ``start`` after it,
    and ``leave`` after ``DBOS.destroy()``."""

    def __init__(
        self, settings: OrchestratorSettings, *, recover: Recover = recover_with_dbos
    ) -> None:
        self.executor_id = settings.executor_id
        self.heartbeat_s = settings.heartbeat_s
        self.timeout_s = settings.replica_timeout_s
        self.address = settings.address
        self._conninfo, self._connect_kwargs = connection_kwargs(
            settings.database_url, settings.replica_timeout_s
        )
        self._recover = recover
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._leader = False
        self._task: asyncio.Task[None] | None = None
        self._not_dead: set[str] = set()

    @property
    def is_leader(self) -> bool:
        return self._leader

    async def join(self) -> None:
        """Claim this executor id and write the first heartbeat."""
        await self._connect(wait_s=self.timeout_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever(), name="cluster-heartbeat")

    async def leave(self) -> None:
        """Stop beating and say so: the leader then recovers what is left at once."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        conn, self._conn = self._conn, None
        self._leader = False
        if conn is None:
            return
        try:
            await conn.execute(
                "UPDATE replicas SET stopped_at = now(), leader = false WHERE executor_id = %s",
                (self.executor_id,),
            )
        except psycopg.Error as exc:
            log.warning("could not mark this replica stopped", error=str(exc))
        finally:
            await conn.close()

    async def _connect(self, *, wait_s: float) -> None:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._connect_kwargs)
        try:
            key = replica_lock_key(self.executor_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            while not await self._try_lock(conn, key):
                if loop.time() >= deadline:
                    raise ClusterError(
                        f"ORCHESTRATOR_EXECUTOR_ID {self.executor_id!r} is held by another live "
                        "replica on this database; give every replica its own executor id"
                    )
                await asyncio.sleep(0.2)
            await conn.execute(_UPSERT, self._row(leader=False))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._leader = False

    def _row(self, *, leader: bool) -> dict[str, Any]:
        return {
            "id": self.executor_id,
            "hostname": socket.gethostname()[:255],
            "address": self.address,
            "pid": os.getpid(),
            "leader": leader,
        }

    @staticmethod
    async def _try_lock(conn: psycopg.AsyncConnection[Any], key: int) -> bool:
        row = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))).fetchone()
        return bool(row and row[0])

    async def _run_forever(self) -> None:
        first = True
        while True:
            if not first:
                await asyncio.sleep(self.heartbeat_s)
            first = False
            try:
                if self._conn is None or self._conn.closed:
                    await self._connect(wait_s=self.timeout_s)
                    log.warning("cluster connection re-established", replica=self.executor_id)
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Lost the connection, and with it both locks: not the leader any more.
                log.warning("cluster heartbeat failed", replica=self.executor_id, error=str(exc))
                self._leader = False
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()

    async def tick(self) -> None:
        """One heartbeat: try for the lead, beat, and (as leader) recover dead replicas."""
        conn = self._conn
        if conn is None:
            return
        if not self._leader and await self._try_lock(conn, LEADER_LOCK_KEY):
            self._leader = True
            await conn.execute(
                "UPDATE replicas SET leader = false WHERE executor_id <> %s", (self.executor_id,)
            )
            log.info("this replica leads the cluster", replica=self.executor_id)
        await conn.execute(_BEAT, {"id": self.executor_id, "leader": self._leader})
        if self._leader:
            await self._recover_dead(conn)

    async def _recover_dead(self, conn: psycopg.AsyncConnection[Any]) -> None:
        cursor = await conn.execute(_DEAD, {"id": self.executor_id, "timeout": self.timeout_s})
        stale = [str(row[0]) for row in await cursor.fetchall()]
        for executor_id in stale:
            key = replica_lock_key(executor_id)
            if not await self._try_lock(conn, key):
                if executor_id not in self._not_dead:
                    self._not_dead.add(executor_id)
                    log.warning(
                        "replica's heartbeat is stale but its session is alive; its runs stay "
                        "with it",
                        replica=executor_id,
                    )
                continue
            self._not_dead.discard(executor_id)
            try:
                count = await self._recover(executor_id)
                await conn.execute(
                    "UPDATE replicas SET recovered_at = now(), leader = false, "
                    "recovered_workflows = recovered_workflows + %s WHERE executor_id = %s",
                    (count, executor_id),
                )
                log.warning(
                    "recovered the runs of a dead replica", replica=executor_id, workflows=count
                )
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
