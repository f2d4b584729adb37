"""The loop end to end on the real local model (``-m real_model``; `make test` runs it last).

`crosscheck up` with ``CROSSCHECK_MODELS=local`` builds llama-server if this machine has no
build yet (about 5 minutes on two idle cores, once), then, all at once: a code task with tests
(the sandbox), a text task a person reviews before its first critique (a comment the Actor
must follow), a text task with research, and the evaluation harness on one item of its text
set. Every call goes through both SDKs: the Actor's openai SDK to llama-server, the Critic's
anthropic SDK to the adapter in front of it. (No plain text task: the two text tasks go
through its draft and critique, and on llama-server's one thread its calls made the tier a
third longer, past ten minutes in CI.)

What the model says is not judged (a 135M model is no useful critic); what must hold whatever
it says is: each run ends in a terminal state with a stop reason, no 5xx anywhere, no
``internal_error``, no hang, every call in the trajectory with what was sent (failed ones
included) and in ``/v1/stats``, no call left cut off by its cap and no Critic reply without its
tool block. The schema sent to a grammar server is fitted to the cap at two characters a token;
a reply of digits runs about one a token and can be cut off at the first cap, so the promise
checked is the fitting's: such a reply is asked again at the larger cap, and that one closes.
The outcome table (stop reasons, repairs, truncations, seconds per call) is printed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from crosscheck.localmodel import DEFAULT_ROOT
from tests.support.servers import free_port

pytestmark = pytest.mark.real_model

REPO = Path(__file__).resolve().parents[2]
FINAL = {"succeeded", "escalated", "failed", "cancelled"}
BUILD_AND_START_S = 1200  # a first build on a busy two-core machine, then the services
RUN_S = 1500  # a bound, not a pace: every run and the evaluation, in flight together
ADMIN_TOKEN = "real-model-admin-token-0123456789"
CODE_TESTS = (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
)


@dataclass
class Platform:
    url: str
    logs: Path
    up: subprocess.Popen[str]
    banner: str
    up_s: float
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60
        )


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    logs = tmp_path_factory.mktemp("real-model")
    names = ("ACTOR", "CRITIC", "RESEARCH", "SANDBOX", "ORCHESTRATOR")
    ports = {name: free_port() for name in (*names, "LOCALMODEL_SERVER", "LOCALMODEL_ADAPTER")}
    env = {
        **os.environ,
        **{f"{name}_PORT": str(port) for name, port in ports.items()},
        "CROSSCHECK_MODELS": "local",
        "CROSSCHECK_LOCALMODEL_DIR": os.environ.get(
            "CROSSCHECK_LOCALMODEL_DIR", str(REPO / DEFAULT_ROOT)
        ),
        "CROSSCHECK_ADMIN_TOKEN": ADMIN_TOKEN,
        "DATABASE_URL": f"sqlite:///{logs}/crosscheck.sqlite",
        "COLUMNS": "200",
    }
    up = subprocess.Popen(
        [sys.executable, "-m", "crosscheck", "up", "--no-console", "--log-dir", str(logs)],
        env=env,
        cwd=logs,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert up.stdout is not None
    started = time.monotonic()
    lines: list[str] = []
    while time.monotonic() - started < BUILD_AND_START_S:
        line = up.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C" in line:
            break
    banner = "".join(lines)
    running = Platform(
        f"http://127.0.0.1:{ports['ORCHESTRATOR']}", logs, up, banner, time.monotonic() - started
    )
    try:
        yield running
    finally:
        running.client.close()
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=120)
        assert up.returncode == 0, rest


def _follow(platform: Platform, ids: dict[str, str], deadline: float) -> dict[str, dict]:
    """Every run to its end, together: the one paused before its first critique gets a
    reviewer's comment (authoritative: the revision must answer it, and its critique check it)."""
    runs: dict[str, dict[str, Any]] = {}
    commented = False
    while time.monotonic() < deadline:
        for name, run_id in ids.items():
            runs[name] = platform.client.get(f"/v1/runs/{run_id}").json()
        if runs.get("review", {}).get("status") == "awaiting_review":
            # first_round: one pause; a second would wait for a person forever
            assert not commented, f"the reviewed run paused again after the comment: {runs}"
            _comment(platform, ids["review"])
            commented = True
        if all(run["status"] in FINAL for run in runs.values()):
            break
        time.sleep(2)
    return runs


def _comment(platform: Platform, run_id: str) -> None:
    reviewer = platform.client.post(
        "/v1/tokens", json={"name": "real-model reviewer", "role": "reviewer"}
    ).json()["token"]
    as_reviewer = {"Authorization": f"Bearer {reviewer}"}
    [item] = platform.client.get("/v1/reviews", params={"run_id": run_id}).json()["items"]
    claimed = platform.client.post(f"/v1/reviews/{item['id']}/claim", headers=as_reviewer)
    assert claimed.status_code == 200, claimed.text
    decided = platform.client.post(
        f"/v1/reviews/{item['id']}/decision",
        json={"action": "comment", "comment": "Name the colour of the sky in the first sentence."},
        headers=as_reviewer,
    )
    assert decided.status_code == 200, decided.text


def _truncated(exchange: dict[str, Any]) -> bool:
    response = exchange.get("response") or {}
    if response.get("stop_reason") == "max_tokens":
        return True
    return any(c.get("finish_reason") == "length" for c in response.get("choices") or [])


def _cap(exchange: dict[str, Any]) -> int:
    request = exchange.get("request") or {}
    return int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)


def _left_cut_off(exchanges: list[dict[str, Any]]) -> bool:
    """A reply cut off by its cap and not asked again at a larger cap that closed."""
    for at, exchange in enumerate(exchanges):
        if _truncated(exchange) and not any(
            _cap(later) > _cap(exchange) and later.get("response") and not _truncated(later)
            for later in exchanges[at + 1 :]
        ):
            return True
    return False


def _call_figures(call: dict[str, Any]) -> str:
    """``c159/870``: a Critic call of 159 s that wrote 870 tokens (its repair included)."""
    tokens = (call.get("usage") or {}).get("output_tokens", "?")
    return f"{call['role'][0]}{call['latency_ms'] / 1000:.0f}/{tokens}"


def _no_tool_block(call: dict[str, Any]) -> bool:
    """A Critic reply without the tool block it was forced to use (its error says so)."""
    return any("tool_use" in str(e.get("error") or "") for e in call["exchanges"])


def _eval(platform: Platform, out: Path, result: dict[str, Any]) -> None:
    command = [sys.executable, "-m", "crosscheck", "eval", "text", "--limit", "1"]
    command += ["--mode", "single", "--no-variants"]  # the runs above are the loop
    command += ["--out", str(out), "--no-publish", "--timeout", str(RUN_S)]
    env = {**os.environ, "CROSSCHECK_URL": platform.url, "CROSSCHECK_TOKEN": ADMIN_TOKEN}
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RUN_S + 60)
    result.update(code=done.returncode, output=done.stdout + done.stderr)
    result["seconds"] = time.monotonic() - started


@pytest.mark.timeout(BUILD_AND_START_S + RUN_S + 300)
def test_every_kind_of_run_reaches_an_end_on_the_local_model(platform: Platform) -> None:
    assert "Crosscheck is up" in platform.banner, platform.banner
    assert "models: local model" in platform.banner
    tasks: dict[str, dict[str, Any]] = {
        # first: its chain is the longest (draft, a person's comment, the revision, its critique)
        "review": {
            "task": "In two sentences, say what colour the sky is on a clear day.",
            "policy": {"review": "first_round"},
        },
        "code": {
            "task": "Write add(a, b) that returns the sum of two integers.",
            "kind": "code",
            "entry_point": "add",
            "tests": CODE_TESTS,
        },
        "research": {
            "task": "In two sentences, say what the Golden Gate Bridge is.",
            "policy": {"research": True},
        },
    }
    started = time.monotonic()
    deadline = started + RUN_S
    evaluation: dict[str, Any] = {}
    eval_thread = threading.Thread(
        target=_eval, args=(platform, platform.logs / "eval", evaluation), daemon=True
    )
    eval_thread.start()
    ids: dict[str, str] = {}
    for name, body in tasks.items():
        policy = {"max_rounds": 1, **body.get("policy", {})}
        created = platform.client.post("/v1/runs", json={**body, "policy": policy})
        assert created.status_code == 201, (name, created.text)
        ids[name] = created.json()["id"]
    runs = _follow(platform, ids, deadline)
    eval_thread.join(timeout=max(1.0, deadline - time.monotonic()) + 60)
    trajectories = {
        name: platform.client.get(f"/v1/runs/{run_id}/trajectory").json()
        for name, run_id in ids.items()
    }
    stats = platform.client.get("/v1/stats").json()

    # the outcome table, shown with -s (and in the report when an assertion fails)
    report = [
        "",
        f"local model (SmolLM2-135M, llama-server on this CPU): up in {platform.up_s:.0f} s, "
        f"all runs done in {time.monotonic() - started:.0f} s",
        f"{'run':<9}{'status':<11}{'stop reason':<24}{'calls':>6}{'repairs':>8}"
        f"{'cut off':>8}  seconds/tokens out per call",
    ]
    for name, run in runs.items():
        calls = trajectories[name]["calls"]
        report.append(
            f"{name:<9}{run.get('status', '?'):<11}{str(run.get('stop_reason')):<24}"
            f"{len(calls):>6}{sum(len(c['exchanges']) > 1 for c in calls):>8}"
            f"{sum(_truncated(e) for c in calls for e in c['exchanges']):>8}  "
            + " ".join(_call_figures(call) for call in calls)
        )
    report.append(
        f"eval text (1 item, one Actor call): exit {evaluation.get('code')} in "
        f"{evaluation.get('seconds', 0):.0f} s"
    )
    sys.stdout.write("\n".join(report) + "\n")
    failure = "\n".join(report)

    for name, run in runs.items():
        assert run.get("status") in FINAL, f"{name}: no terminal state in {RUN_S} s\n{failure}"
        assert run["stop_reason"], (name, run)
        assert run.get("error_class") != "internal_error", (name, run)
        calls = trajectories[name]["calls"]
        assert "actor" in {call["role"] for call in calls}, (name, failure)
        for call in calls:
            assert call["exchanges"], (name, call)  # on the books with what was sent
            for exchange in call["exchanges"]:
                assert (exchange.get("status") or 200) < 500, (name, exchange)
            assert not _left_cut_off(call["exchanges"]), f"{name}: a reply left cut off\n{failure}"
            assert not _no_tool_block(call), f"{name}: a reply without its tool block\n{failure}"
    recorded = sum(len(t["calls"]) for t in trajectories.values())
    assert stats["model_calls"] >= recorded, (stats["model_calls"], recorded)  # + the eval's
    assert evaluation.get("code") == 0, evaluation.get("output")
    for log in platform.logs.glob("*.log"):
        assert '"status": 500' not in log.read_text(), log.name
