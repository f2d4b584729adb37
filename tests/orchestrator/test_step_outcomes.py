"""Each step's typed outcome, and what DBOS records of it.

A workflow in flight when a release changes is recovered from what the older release
recorded, so the records of the untyped steps (dicts without a version) must still read as
the outcomes they meant, and a whole run recorded that way must replay to its end."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS

from orchestrator.db import system_database_url
from orchestrator.engine.steps import (
    ActOutcome,
    CritiqueOutcome,
    EvaluateOutcome,
    FinishOutcome,
    ResumeState,
)
from orchestrator.engine.steps.outcomes import OUTCOME_VERSION, StopInfo
from shared.orchestration import Policy
from tests.orchestrator.conftest import start, wait_for

POLICY = Policy(max_rounds=3).model_dump(mode="json")
CANCELLED = {"status": "cancelled", "reason": "cancelled"}

# What the steps of the release before typed outcomes returned (engine/steps.py), one of
# each shape, with the outcome each means.
OLD_RECORDS: list[tuple[type[Any], dict[str, Any], dict[str, Any]]] = [
    (
        ActOutcome,
        {
            "output_hash": "h1",
            "shrink": 0.1,
            "shrank": False,
            "stop": None,
            "policy": POLICY,
            "evaluator": "python_tests",
            "research": True,
            "run_tokens": 120,
            "run_cost": 0.002,
        },
        {"stopped": None, "output_hash": "h1", "research": True, "evaluator": "python_tests"},
    ),
    (ActOutcome, {"stop": CANCELLED}, {"stopped": "cancelled", "policy": None, "shrank": False}),
    (
        EvaluateOutcome,
        {
            "passed": False,
            "output_hash": "h2",
            "stop": None,
            "paused": False,
            "regressed": True,
            "summary": "1 of 3 tests failed",
        },
        {"regressed": True, "passed": False, "summary": "1 of 3 tests failed"},
    ),
    (
        EvaluateOutcome,
        {"stop": CANCELLED, "passed": None, "paused": False},
        {"stopped": "cancelled", "regressed": False},
    ),
    (  # guard.keep_better's result, read as the round's evaluation
        EvaluateOutcome,
        {"passed": True, "kept": "previous", "paused": True},
        {"stopped": None, "passed": True, "paused": True, "kept": "previous"},
    ),
    (
        CritiqueOutcome,
        {"stop": None, "signature": "s1", "verdict": "revise", "paused": False, "reopened": []},
        {"signature": "s1", "verdict": "revise", "retry": False, "reopened": []},
    ),
    (
        CritiqueOutcome,
        {"stop": None, "signature": None, "verdict": "revise", "retry": True},
        {"retry": True, "paused": False},
    ),
    (
        CritiqueOutcome,
        {"stop": None, "signature": "s2", "verdict": "revise", "reopened": ["[major] x: y"]},
        {"reopened": ["[major] x: y"]},
    ),
    (
        CritiqueOutcome,
        {"stop": {"status": "succeeded", "reason": "critic_pass"}, "signature": "s3"},
        {"stopped": "succeeded"},
    ),
    (
        FinishOutcome,
        {"stop": {"status": "escalated", "reason": "environment"}},
        {"stopped": "escalated"},
    ),
    (
        ResumeState,
        {
            "unevaluated": True,
            "research": False,
            "hashes": ["h1", "h2"],
            "signature": "s1",
            "passed": None,
            "reasked": False,
        },
        {"hashes": ["h1", "h2"], "unevaluated": True, "signature": "s1"},
    ),
]


@pytest.mark.parametrize(("kind", "record", "meaning"), OLD_RECORDS)
def test_a_record_of_the_untyped_steps_reads_as_the_outcome_it_meant(kind, record, meaning):
    outcome = kind.of(record)
    assert outcome.v == 1
    for field, value in meaning.items():
        assert getattr(outcome, field) == value, field


def test_the_policy_in_an_act_record_is_read_once_into_a_policy():
    outcome = ActOutcome.of(OLD_RECORDS[0][1])
    assert isinstance(outcome.policy, Policy)
    assert outcome.policy.max_rounds == 3


@pytest.mark.parametrize(
    "outcome",
    [
        ActOutcome(output_hash="h", policy=Policy(max_rounds=2), research=True, run_tokens=9),
        EvaluateOutcome(passed=True, output_hash="h", paused=True),
        CritiqueOutcome(stop=StopInfo(status="escalated", reason="no_progress"), verdict="fail"),
        FinishOutcome(stop=StopInfo(status="failed", reason="internal_error")),
        ResumeState(hashes=["a"], signature="s", passed=True),
    ],
)
def test_a_record_is_plain_json_with_its_version_and_reads_back_the_same(outcome):
    record = outcome.record()
    assert json.loads(json.dumps(record)) == record  # JSON types only: no class in the recording
    assert record["v"] == OUTCOME_VERSION
    again = type(outcome).of(record)
    assert again.model_dump(exclude={"v"}) == outcome.model_dump(exclude={"v"})


# ------------------------------------------------------------- a recorded run, replayed


def _outputs(database_url: str) -> tuple[sa.Engine, sa.Table]:
    url = system_database_url(database_url)
    engine = sa.create_engine(url)
    schema = None if url.startswith("sqlite") else "dbos"
    table = sa.Table("operation_outputs", sa.MetaData(schema=schema), autoload_with=engine)
    return engine, table


def _downgrade_records(database_url: str, workflow_id: str) -> int:
    """Rewrite the workflow's recorded step outcomes as the untyped release recorded them
    (no ``v``); returns how many were rewritten."""
    engine, outputs = _outputs(database_url)
    rewritten = 0
    with engine.begin() as conn:
        rows = conn.execute(
            sa.select(outputs.c.function_id, outputs.c.output, outputs.c.serialization).where(
                outputs.c.workflow_uuid == workflow_id
            )
        ).all()
        for function_id, output, serialization in rows:
            if output is None or serialization != "py_pickle":
                continue
            value = pickle.loads(base64.b64decode(output))
            if not isinstance(value, dict) or "v" not in value:
                continue
            old = {k: v for k, v in value.items() if k != "v"}
            conn.execute(
                outputs.update()
                .where(outputs.c.workflow_uuid == workflow_id)
                .where(outputs.c.function_id == function_id)
                .values(output=base64.b64encode(pickle.dumps(old)).decode())
            )
            rewritten += 1
    engine.dispose()
    return rewritten


def _mark_pending(database_url: str, workflow_id: str) -> None:
    """The workflow as a crash leaves it: pending, no result."""
    url = system_database_url(database_url)
    engine = sa.create_engine(url)
    schema = None if url.startswith("sqlite") else "dbos"
    status = sa.Table("workflow_status", sa.MetaData(schema=schema), autoload_with=engine)
    with engine.begin() as conn:
        conn.execute(
            status.update()
            .where(status.c.workflow_uuid == workflow_id)
            .values(status="PENDING", output=None)
        )
    engine.dispose()


async def test_a_run_recorded_by_the_untyped_steps_replays_to_its_end_without_a_call(
    api, fake_model, database_url
):
    run_id = await start(api, task="Explain how the Moon causes ocean tides.")
    done = await wait_for(api, run_id)
    assert done["status"] == "succeeded", done
    calls = len(fake_model.requests())
    # the run reads as finished once its last step committed; DBOS marks the workflow done
    # just after, and that write would undo the crash simulated below: wait for it
    await asyncio.wait_for(
        asyncio.to_thread(lambda: DBOS.retrieve_workflow(run_id).get_result()), timeout=60
    )
    # act, critique (and more): every outcome the run recorded, as the old release wrote it
    assert _downgrade_records(database_url, run_id) >= 2
    _mark_pending(database_url, run_id)

    [handle] = await asyncio.to_thread(DBOS._recover_pending_workflows, ["local"])
    result = await asyncio.wait_for(asyncio.to_thread(handle.get_result), timeout=60)

    assert result == "succeeded"  # the workflow read every old record to the same end
    assert len(fake_model.requests()) == calls  # replayed from the records: no model call
    again = (await api.get(f"/v1/runs/{run_id}")).json()
    assert again["status"] == "succeeded"
    assert [r["output_hash"] for r in again["rounds"]] == [r["output_hash"] for r in done["rounds"]]
