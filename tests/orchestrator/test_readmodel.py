"""The read model's writes as a user of the API depends on them, on SQLite and Postgres:
a model call stored once per key with every exchange as sent, and one event lock per unit
of work on Postgres that still announces every type it appended."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from orchestrator.db import create_db_engine, session_scope
from orchestrator.readmodel.calls import FailedCall, calls_of, record_call
from orchestrator.readmodel.events import EVENT_LOCK_KEY, EVENTS_CHANNEL, append_event, last_seq
from orchestrator.readmodel.runs import RunChanges, insert_run, read_run, update_run
from orchestrator.tables import Run
from shared.contracts import ModelExchange, Usage


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


def _run(engine: sa.Engine) -> str:
    run = Run(
        id="run_rm1",
        status="drafting",
        kind="text",
        task="t",
        evaluator="none",
        policy={},
        created_by="t",
    )
    with session_scope(engine) as session:
        insert_run(session, run)
    return run.id


EXCHANGES = [
    ModelExchange(
        request={"messages": [{"role": "user", "content": 'Tides: é \u2028 "quoted" \\ </x>'}]},
        response={"choices": [{"message": {"content": "Because of the moon."}}], "n": 1.5},
        status=200,
        latency_ms=12.25,
    ),
    ModelExchange(request={"messages": []}, error="cut off", status=None),
]


def test_a_call_is_stored_once_per_key_with_its_exchanges_as_sent(engine: sa.Engine) -> None:
    run_id = _run(engine)
    call = FailedCall(Usage(provider="p", model="m", input_tokens=7), EXCHANGES)
    kwargs = {"round": 1, "role": "actor", "stage": "draft", "key": f"{run_id}:1:actor"}
    with session_scope(engine) as session:
        first = record_call(session, run_id, result=call, **kwargs)  # type: ignore[arg-type]
    with session_scope(engine) as session:
        again = record_call(session, run_id, result=call, **kwargs)  # type: ignore[arg-type]
    assert first is not None
    assert first["input_tokens"] == 7
    assert again is None  # a replayed step bills nothing
    with Session(engine) as session:
        stored = calls_of(session, run_id)
    assert len(stored) == 1
    assert stored[0].exchanges == [e.model_dump(mode="json") for e in EXCHANGES]


def test_a_steps_write_keeps_what_was_billed_since_it_read_the_run(engine: sa.Engine) -> None:
    run_id = _run(engine)
    with Session(engine) as session:
        read_at_start = read_run(session, run_id)  # the step reads its run once
    failed = {"input_tokens": 40, "output_tokens": 0, "cost_usd": 0.25}
    with session_scope(engine) as session:  # mid-step: a failed call billed by the retry loop
        billed = RunChanges({})
        billed.bill(failed)
        update_run(session, read_run(session, run_id), billed)
    changes = RunChanges({"rounds": 1})
    changes.bill({"input_tokens": 100, "output_tokens": 30, "cost_usd": 0.5})
    as_the_step_sees_it = billed.on(read_at_start)  # the step's tally of its failed calls
    assert changes.tokens(as_the_step_sees_it) == 170  # what the budget rules compare
    assert changes.cost(as_the_step_sees_it) == 0.75
    with session_scope(engine) as session:
        update_run(session, read_at_start, changes)
    with Session(engine) as session:
        stored = read_run(session, run_id)
    assert (stored.input_tokens, stored.output_tokens, stored.rounds) == (140, 30, 1)
    assert stored.cost_usd == pytest.approx(0.75)


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_one_unit_takes_the_event_lock_once_and_announces_every_type(
    engine: sa.Engine, database_url: str
) -> None:
    run_id = _run(engine)
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    listener = psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True)
    listener.execute(f"LISTEN {EVENTS_CHANNEL}")
    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        with session_scope(engine) as session:
            append_event(session, run_id, "round.output", {"round": 1})
            append_event(session, run_id, "run.status", {"status": "critiquing"})
            append_event(session, run_id, "round.output", {"round": 1, "again": True})
            # held: another connection cannot take it until this unit commits
            with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as other:
                row = other.execute("SELECT pg_try_advisory_lock(%s)", (EVENT_LOCK_KEY,))
                assert row.fetchone() == (False,)
            session.commit()  # the same session's next transaction takes it again
            append_event(session, run_id, "run.finished", {})
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    locks = [s for s in statements if "pg_advisory_xact_lock" in s]
    assert len(locks) == 2  # once per transaction, not once per event
    announced = sorted(n.payload for n in listener.notifies(timeout=5, stop_after=3))
    listener.close()
    assert announced == ["round.output", "run.finished", "run.status"]
    with Session(engine) as session:
        assert last_seq(session) >= 4
