"""kill -9 of the orchestrator during a critique, then a restart: the run finishes and no
finished model call or research step is repeated (real processes, SQLite and Postgres)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack

import httpx
import pytest

from research.corpus import CorpusIndex, read_document
from tests.orchestrator.conftest import ADMIN_TOKEN
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY
from tests.support.servers import free_port, service_process, wait_healthy

pytestmark = pytest.mark.slow

FACT = "# Golden Gate Bridge\n\nThe Golden Gate Bridge opened to traffic on May 27, 1937.\n"


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


def research_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    line = next(ln for ln in text.splitlines() if ln.startswith("research_request_seconds_count"))
    return float(line.split()[1])


# five real services, the orchestrator started twice: minutes on a loaded machine
@pytest.mark.timeout(300)
def test_kill_9_during_critique_resumes_without_repeating_finished_calls(
    fake_model, service_token, database_url, tmp_path
):
    """The run researches before its critiques (the demo model's draft proposes the query,
    its revision cites what the corpus returned), so the step before the kill is a research
    step: neither it nor any finished model call runs again after the restart."""
    document = tmp_path / "golden-gate.md"
    document.write_text(FACT)
    corpus = tmp_path / "corpus.sqlite"
    index = CorpusIndex(corpus)
    index.add_many([read_document(document)])
    index.close()
    env = {
        **os.environ,
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": fake_model.openai_base_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": fake_model.anthropic_base_url,
        "CROSSCHECK_LOG_LEVEL": "INFO",
    }
    research_env = {
        **env,
        "RESEARCH_CORPUS_DB": str(corpus),
        "RESEARCH_CACHE": "0",  # every query reaches the index: a repeat would show
        "RESEARCH_DISTILL": "0",
    }
    # The first critique takes 4 s at the model: long enough to kill the orchestrator in it.
    fake_model.faults({"delay_s": 4.0, "stage": "critique"})
    with ExitStack() as stack:
        actor = stack.enter_context(service_process("actor", "ACTOR_", env=env))
        critic = stack.enter_context(service_process("critic", "CRITIC_", env=env))
        research = stack.enter_context(
            service_process("research", "RESEARCH_", env=research_env, log=tmp_path / "r.log")
        )
        orch_env = {
            **env,
            "DATABASE_URL": database_url,
            "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
            "ACTOR_URL": actor,
            "CRITIC_URL": critic,
            "ORCHESTRATOR_RESEARCH_URL": research,
            "ORCHESTRATOR_EXECUTOR_ID": "replica-a",
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((tmp_path / "orchestrator.log").open("wb"))
        first = start_orchestrator(orch_env, port, log)
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        run_id = httpx.post(
            f"{url}/v1/runs",
            json={"task": "When did the Golden Gate Bridge open?", "policy": {"research": True}},
            headers=headers,
        ).json()["id"]

        def critique_in_flight():
            return any(
                c["stage"] == "critique" and c["status"] is None for c in fake_model.requests()
            )

        wait_until(critique_in_flight, 20, "the first critique to reach the model")
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert research_requests(research) == 1

        second = start_orchestrator(orch_env, port, log)
        stack.callback(second.wait, 10)
        stack.callback(second.terminate)

        def finished():
            body = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json()
            return body if body["status"] in {"succeeded", "escalated", "failed"} else None

        run = wait_until(finished, 40, "the run to finish after the restart")
        searched = research_requests(research)

    assert run["status"] == "succeeded", run
    assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "pass"]
    calls = fake_model.requests()
    assert [c["stage"] for c in calls] == ["draft", "critique", "revise", "critique"], calls
    assert all(c["status"] == 200 for c in calls)
    assert searched == 1  # round 2 had nothing new to search; round 1 was not searched again
    first_round, second_round = run["rounds"]
    assert first_round["research"]["evidence"][0]["url"] == document.as_uri()
    assert second_round["citations"]["ok"] is True
    assert second_round["citations"]["cited"] == [1]


# five real services, the orchestrator started twice: minutes on a loaded machine
@pytest.mark.timeout(300)
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
