"""Postgres: a unit that writes a run's row and appends an event takes the event lock first.

A cancel that wrote the run's row and then waited for the event lock deadlocked with a step
that held the lock and was about to write the same row (Postgres aborts one of them: a 500 for
the cancel). So while another transaction holds the event lock, a waiting cancel or engine
update must hold no lock on the run's row.
"""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from sqlmodel import Session, create_engine

from orchestrator.readmodel.events import EVENT_LOCK_KEY
from orchestrator.readmodel.runs import RunChanges, read_run, update_run
from tests.orchestrator.conftest import start, wait_for

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


async def until(condition, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await asyncio.to_thread(condition):
        assert loop.time() < deadline, "the condition never held"
        await asyncio.sleep(0.02)


def waiting_for_the_event_lock(url: str) -> bool:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND objid = %s",
            (EVENT_LOCK_KEY,),
        ).fetchone()
        return bool(row and row[0])


def row_is_free(blocker: psycopg.Connection, run_id: str) -> bool:
    """Whether the run's row can be locked at once (nobody else holds a lock on it)."""
    try:
        with blocker.transaction():  # a savepoint: the event lock stays held
            blocker.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE NOWAIT", (run_id,))
        return True
    except psycopg.errors.LockNotAvailable:
        return False


async def test_a_cancel_waits_for_the_event_lock_before_it_writes_the_run(api, database_url):
    run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
    await wait_for(api, run_id, {"awaiting_review"})
    with psycopg.connect(libpq(database_url)) as blocker:
        blocker.execute("SELECT pg_advisory_xact_lock(%s)", (EVENT_LOCK_KEY,))
        cancel = asyncio.create_task(api.post(f"/v1/runs/{run_id}/cancel"))
        await until(lambda: waiting_for_the_event_lock(database_url))
        assert row_is_free(blocker, run_id), "the cancel holds the run's row while it waits"
        blocker.rollback()  # the event lock goes: the cancel goes on
    response = await cancel
    assert response.status_code == 202, response.text
    assert (await wait_for(api, run_id))["status"] == "cancelled"


async def test_an_engine_update_waits_for_the_event_lock_before_it_writes_the_run(
    api, database_url
):
    run_id = await start(api, task="Explain tides.", policy={"review": "before_critique"})
    await wait_for(api, run_id, {"awaiting_review"})
    engine = create_engine(database_url)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with Session(engine) as session:
                run = read_run(session, run_id)
                update_run(session, run, RunChanges({"rounds": run.rounds}))
                session.commit()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    try:
        with psycopg.connect(libpq(database_url)) as blocker:
            blocker.execute("SELECT pg_advisory_xact_lock(%s)", (EVENT_LOCK_KEY,))
            writer = threading.Thread(target=write)
            writer.start()
            await until(lambda: waiting_for_the_event_lock(database_url))
            assert row_is_free(blocker, run_id), "the update holds the run's row while it waits"
            blocker.rollback()
        await asyncio.to_thread(writer.join, 20)
        assert not writer.is_alive()
        assert errors == []
    finally:
        engine.dispose()
