"""kill -9 of the orchestrator during a critique, then a restart: the run finishes and no
finished model call is repeated (real processes, SQLite and Postgres)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack

import httpx
import pytest

from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY
from tests.support.servers import free_port, service_process, wait_healthy

pytestmark = pytest.mark.slow


def start_orchestrator(env: dict[str, str], port: int, log) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator"],
        env={**env, "ORCHESTRATOR_HOST": "127.0.0.1", "ORCHESTRATOR_PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_healthy(f"http://127.0.0.1:{port}", process)
    return process


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_9_during_critique_resumes_without_repeating_finished_calls(
    fake_model, service_token, database_url, tmp_path
):
    env = {
        **os.environ,
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": fake_model.openai_base_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": fake_model.anthropic_base_url,
        "CROSSCHECK_LOG_LEVEL": "INFO",
    }
    # The first critique takes 4 s at the model: long enough to kill the orchestrator in it.
    fake_model.faults({"delay_s": 4.0, "stage": "critique"})
    with ExitStack() as stack:
        actor = stack.enter_context(service_process("actor", "ACTOR_", env=env))
        critic = stack.enter_context(service_process("critic", "CRITIC_", env=env))
        orch_env = {
            **env,
            "DATABASE_URL": database_url,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
            "ACTOR_URL": actor,
            "CRITIC_URL": critic,
            "ORCHESTRATOR_EXECUTOR_ID": "replica-a",
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((tmp_path / "orchestrator.log").open("wb"))
        first = start_orchestrator(orch_env, port, log)
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        run_id = httpx.post(
            f"{url}/v1/runs", json={"task": "Explain why the sky is blue."}, headers=headers
        ).json()["id"]

        def critique_in_flight():
            return any(
                c["stage"] == "critique" and c["status"] is None for c in fake_model.requests()
            )

        wait_until(critique_in_flight, 20, "the first critique to reach the model")
        first.send_signal(signal.SIGKILL)
        first.wait()

        second = start_orchestrator(orch_env, port, log)
        stack.callback(second.wait, 10)
        stack.callback(second.terminate)

        def finished():
            body = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json()
            return body if body["status"] in {"succeeded", "escalated", "failed"} else None

        run = wait_until(finished, 40, "the run to finish after the restart")

    assert run["status"] == "succeeded", run
    assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "pass"]
    calls = fake_model.requests()
    assert [c["stage"] for c in calls] == ["draft", "critique", "revise", "critique"], calls
    assert all(c["status"] == 200 for c in calls)


def test_kill_9_while_a_run_waits_for_review_then_decide(
    fake_model, service_token, database_url, tmp_path
):
    env = {
        **os.environ,
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": fake_model.openai_base_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": fake_model.anthropic_base_url,
    }
    with ExitStack() as stack:
        actor = stack.enter_context(service_process("actor", "ACTOR_", env=env))
        critic = stack.enter_context(service_process("critic", "CRITIC_", env=env))
        orch_env = {
            **env,
            "DATABASE_URL": database_url,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
            "ACTOR_URL": actor,
            "CRITIC_URL": critic,
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((tmp_path / "orchestrator.log").open("wb"))
        first = start_orchestrator(orch_env, port, log)
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        run_id = httpx.post(
            f"{url}/v1/runs",
            json={"task": "Explain tides.", "policy": {"review": "first_round"}},
            headers=admin,
        ).json()["id"]

        def status():
            return httpx.get(f"{url}/v1/runs/{run_id}", headers=admin).json()["status"]

        wait_until(lambda: status() == "awaiting_review", 20, "the run to pause")
        first.send_signal(signal.SIGKILL)
        first.wait()

        second = start_orchestrator(orch_env, port, log)
        stack.callback(second.wait, 10)
        stack.callback(second.terminate)
        reviewer = httpx.post(
            f"{url}/v1/tokens", json={"name": "ana", "role": "reviewer"}, headers=admin
        ).json()["token"]
        headers = {"Authorization": f"Bearer {reviewer}"}
        [item] = httpx.get(f"{url}/v1/reviews", params={"run_id": run_id}, headers=admin).json()[
            "items"
        ]
        assert httpx.post(f"{url}/v1/reviews/{item['id']}/claim", headers=headers).is_success
        decided = httpx.post(
            f"{url}/v1/reviews/{item['id']}/decision",
            json={"action": "comment", "comment": "Mention the Moon."},
            headers=headers,
        )
        assert decided.status_code == 200, decided.text
        wait_until(lambda: status() == "succeeded", 30, "the run to finish after the decision")

    # the comment binds the next revision: it comes straight after the decision
    assert [c["stage"] for c in fake_model.requests()] == ["draft", "revise", "critique"]
