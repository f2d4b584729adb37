"""The loop end to end on the real local model (``-m real_model``; not in the main run).

`crosscheck up` with ``CROSSCHECK_MODELS=local`` builds llama-server if this machine has no
build yet (about 5-8 minutes on two cores, once), then a text task goes through both SDKs: the
Actor's openai SDK to llama-server, the Critic's anthropic SDK to the adapter. What the model
says is not judged (a 135M model is no useful critic); what must hold whatever it says is."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from crosscheck.localmodel import DEFAULT_ROOT
from tests.support.servers import free_port

pytestmark = pytest.mark.real_model

REPO = Path(__file__).resolve().parents[2]
FINAL = {"succeeded", "escalated", "failed", "cancelled"}
BUILD_AND_START_S = 1200  # a first build on a busy two-core machine, then the services
RUN_S = 2400  # three CPU-bound model calls (draft, critique, repairs) at 600 s each at most


@pytest.mark.timeout(BUILD_AND_START_S + RUN_S + 120)
def test_a_text_task_runs_through_the_loop_on_the_local_model(tmp_path):
    names = (
        "ACTOR",
        "CRITIC",
        "RESEARCH",
        "ORCHESTRATOR",
        "LOCALMODEL_SERVER",
        "LOCALMODEL_ADAPTER",
    )
    ports = {name: free_port() for name in names}
    admin_token = "real-model-admin-token-0123456789"
    env = {
        **os.environ,
        **{f"{name}_PORT": str(port) for name, port in ports.items()},
        "CROSSCHECK_MODELS": "local",
        "CROSSCHECK_LOCALMODEL_DIR": os.environ.get(
            "CROSSCHECK_LOCALMODEL_DIR", str(REPO / DEFAULT_ROOT)
        ),
        "CROSSCHECK_ADMIN_TOKEN": admin_token,
        "DATABASE_URL": f"sqlite:///{tmp_path}/crosscheck.sqlite",
        "COLUMNS": "200",
    }
    up = subprocess.Popen(
        [sys.executable, "-m", "crosscheck", "up", "--no-sandbox", "--no-console"]
        + ["--log-dir", str(tmp_path)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert up.stdout is not None
    started = time.monotonic()
    try:
        lines = []
        while time.monotonic() - started < BUILD_AND_START_S:
            line = up.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C" in line:
                break
        banner = "".join(lines)
        assert "Crosscheck is up" in banner, banner
        assert "models: local model" in banner
        up_s = time.monotonic() - started

        orchestrator = f"http://127.0.0.1:{ports['ORCHESTRATOR']}"
        admin = {"Authorization": f"Bearer {admin_token}"}
        created = httpx.post(
            f"{orchestrator}/v1/runs",
            json={
                "task": "In two sentences, explain why the sky is blue.",
                "policy": {"max_rounds": 1},
            },
            headers=admin,
            timeout=60,
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        run_started = time.monotonic()
        run: dict = {}
        while time.monotonic() - run_started < RUN_S:
            run = httpx.get(f"{orchestrator}/v1/runs/{run_id}", headers=admin, timeout=60).json()
            if run["status"] in FINAL:
                break
            time.sleep(2)
        run_s = time.monotonic() - run_started
        trajectory = httpx.get(
            f"{orchestrator}/v1/runs/{run_id}/trajectory", headers=admin, timeout=60
        ).json()
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)

    # the outcome, shown with -s (or in the report when the test fails)
    report = [
        f"local model: up in {up_s:.0f} s, run {run['status']} ({run.get('stop_reason')}) "
        f"in {run_s:.0f} s"
    ]
    for call in trajectory["calls"]:
        statuses = [e.get("status") for e in call["exchanges"]]
        report.append(
            f"  round {call['round']} {call['role']}/{call['stage']}: "
            f"{call['latency_ms'] / 1000:.0f} s, exchanges {statuses}"
        )
    sys.stdout.write("\n".join(["", *report, ""]))
    assert run["status"] in FINAL, f"no terminal state after {RUN_S} s: {run}"
    assert run["stop_reason"], run
    assert run.get("error_class") != "internal_error", run
    assert up.returncode == 0, rest
    for log in tmp_path.glob("*.log"):
        assert '"status": 500' not in log.read_text(), log.name
    for call in trajectory["calls"]:
        assert call["exchanges"], call  # every call is on the books with what was sent
        for exchange in call["exchanges"]:
            assert (exchange.get("status") or 200) < 500, exchange
    assert "actor" in {call["role"] for call in trajectory["calls"]}, trajectory
