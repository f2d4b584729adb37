"""What an operator would try: `kill -9` of any one service under `crosscheck up` while runs
are in flight. It comes back by itself, every run finishes, and the model is not billed twice
for a call that finished (a call cut off in flight may be repeated: counted and reported)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crosscheck.launcher import PORT_PREFIXES
from tests.docs.conftest import DOCS
from tests.docs.test_getting_started import commands
from tests.support.fakemodel import FakeModel
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
TESTS = (REPO / "examples" / "primes_tests.py").read_text()
PREFIXES = PORT_PREFIXES
RUNS_PER_KILL = 3
LATENCY_MS = 300
# the fake model first: its request log (what the model was asked) starts again when it does
VICTIMS = ("fakemodel", "orchestrator", "critic", "actor", "sandbox", "console")
MODEL_CALLERS = {"actor", "critic"}


class Platform:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.update({f"{p}_PORT": str(free_port()) for p in PREFIXES})
        env["CROSSCHECK_LOG_LEVEL"] = "WARNING"
        env["ORCHESTRATOR_PEER_RETRY_INITIAL_S"] = "0.2"  # a peer down for ~2 s is waited out
        env["ORCHESTRATOR_PEER_MAX_ATTEMPTS"] = "12"
        self.env = env
        self.out = (workdir / "up.out").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crosscheck", "up"],
            env=env,
            cwd=workdir,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.fake = FakeModel(f"http://127.0.0.1:{env['FAKEMODEL_PORT']}")
        self.api: httpx.Client | None = None

    def wait_up(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if b"Press Ctrl-C" in (self.workdir / "up.out").read_bytes():
                break
            assert self.process.poll() is None, self.output()
            time.sleep(0.2)
        else:
            raise AssertionError(f"not up in {timeout_s} s:\n{self.output()}")
        credentials = dict(
            line.split("=", 1)
            for line in (self.workdir / "var" / "crosscheck.env").read_text().splitlines()
        )
        self.api = httpx.Client(
            base_url=credentials["CROSSCHECK_URL"],
            headers={"Authorization": f"Bearer {credentials['CROSSCHECK_TOKEN']}"},
            timeout=60,  # a bound, not a pace: a loaded machine answers slowly
            # no idle keep-alive: the server may close one just as the test reuses it
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def output(self) -> str:
        return (self.workdir / "up.out").read_text(errors="replace")[-3000:]

    def state(self) -> dict[str, dict[str, Any]]:
        saved = json.loads((self.workdir / "var" / "run" / "up.json").read_text())
        return {s["name"]: s for s in saved["services"]}

    def stop(self) -> None:
        if self.api is not None:
            self.api.close()
        self.fake.close()
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)
        self.out.close()


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    running = Platform(tmp_path_factory.mktemp("operations"))
    try:
        running.wait_up()
        yield running
    finally:
        running.stop()


def finished_calls(fake: FakeModel) -> Counter[str]:
    """Model calls the fake model answered in full, by what was asked (one step, one key)."""
    return Counter(
        json.dumps(call["body"], sort_keys=True)
        for call in fake.requests()
        if call["status"] == 200
    )


def repeats(calls: Counter[str]) -> int:
    return sum(count - 1 for count in calls.values())


def in_flight(fake: FakeModel) -> int:
    return sum(1 for call in fake.requests() if call["status"] is None)


def wait_in_flight(fake: FakeModel, timeout_s: float = 30) -> None:
    """Until a model call is in flight (the runs just created have reached the model)."""
    deadline = time.monotonic() + timeout_s
    while in_flight(fake) == 0:
        assert time.monotonic() < deadline, "no model call started within 30 s"
        time.sleep(0.05)
    time.sleep(0.1)  # and a little more: calls of several runs overlap


def wait_restarted(platform: Platform, name: str, restarts: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service = platform.state()[name]
        if service["restarts"] >= restarts and service["state"] == "healthy":
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} did not come back: {platform.state()[name]}\n{platform.output()}")


def wait_finished(api: httpx.Client, run_ids: list[str], timeout_s: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = [api.get(f"/v1/runs/{run_id}").json() for run_id in run_ids]
        if all(r["status"] in {"succeeded", "escalated", "failed", "cancelled"} for r in runs):
            return runs
        time.sleep(0.2)
    raise AssertionError(f"runs still going: {[(r['id'], r['status']) for r in runs]}")


@pytest.mark.timeout(400)  # the first test of the module: it pays for starting the platform
def test_the_banner_fits_80_columns_whole_and_its_commands_work_as_printed(platform):
    """Not a terminal, so rich lays the banner out at 80 columns: every URL is whole, nothing is
    cut with an ellipsis, and the commands it suggests run from the folder it started in."""
    out = (platform.workdir / "up.out").read_text()
    banner = out[out.index("Crosscheck is up") : out.index("Press Ctrl-C")]
    assert "…" not in banner, banner
    assert max(len(line) for line in banner.splitlines()) <= 80, banner
    for name in (*VICTIMS, "research"):  # every service of the demo
        assert f"http://127.0.0.1:{platform.env[f'{name.upper()}_PORT']}" in banner, name
    commands = [line.strip() for line in banner.splitlines() if line.startswith("  ")]
    status = next(command for command in commands if command.endswith(" status"))
    assert status in {"crosscheck status", "uv run crosscheck status"}, commands
    done = subprocess.run(
        status.split(), cwd=platform.workdir, env=platform.env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr  # every service healthy
    assert "orchestrator" in done.stdout


RUN_ID = re.compile(r"\brun_[0-9a-f]{20,}\b")


def test_every_command_of_the_getting_started_page_runs_as_printed(platform):
    """The page's `uv run crosscheck ...` commands, in its order, from a folder with the
    examples, as a newcomer types them: each exits as the page says (0, and 2 for the run
    that stops for a person), `<run id>` being the id the run before it printed."""
    shutil.copytree(REPO / "examples", platform.workdir / "examples", dirs_exist_ok=True)
    env = {**platform.env, "CROSSCHECK_NEW_PASSWORD": "a password of 12+ chars"}
    printed = [c for c in commands(DOCS / "getting-started.md") if c.startswith("uv run ")]
    assert len(printed) >= 5, printed
    run_id = ""
    for command in printed:
        if "<run id>" in command:
            assert run_id, f"no run printed its id before: {command}"
            command = command.replace("<run id>", run_id)
        done = subprocess.run(
            shlex.split(command),
            cwd=platform.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        expected = 2 if "--review on_escalation" in command else 0
        assert done.returncode == expected, (command, done.stdout[-3000:], done.stderr[-3000:])
        if expected == 2:  # stopped for a person, not refused as a usage error (also 2)
            assert "escalated" in done.stdout, (command, done.stdout[-3000:])
        if " crosscheck run " in f" {command} " and (ids := RUN_ID.findall(done.stdout)):
            run_id = ids[-1]
    assert list((platform.workdir / "var" / "datasets").glob("*.jsonl")), "export wrote nothing"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_kill_9_of_any_one_service_heals_and_no_finished_call_is_billed_twice(platform):
    api = platform.api
    assert api is not None
    report = []
    for n, victim in enumerate(VICTIMS):
        platform.fake.latency(LATENCY_MS)
        before = finished_calls(platform.fake)
        run_ids = []
        for i in range(RUNS_PER_KILL):
            created = api.post(
                "/v1/runs",
                json={
                    "task": f"Write primes_up_to(n) returning every prime <= n. (batch {n}.{i})",
                    "kind": "code",
                    "tests": TESTS,
                    "entry_point": "primes_up_to",
                    "policy": {"max_rounds": 3},
                },
            )
            assert created.status_code == 201, created.text
            run_ids.append(created.json()["id"])
        service = platform.state()[victim]
        wait_in_flight(platform.fake)
        # Calls unanswered around the kill may be repeated (the model finished one the caller
        # never recorded); the log is read just before and just after it, as a call can start
        # in between.
        cut_off = in_flight(platform.fake)
        os.kill(service["pid"], signal.SIGKILL)
        if victim != "fakemodel":  # a dead model server has no log to read
            cut_off = max(cut_off, in_flight(platform.fake))
        wait_restarted(platform, victim, service["restarts"] + 1)
        if victim == "fakemodel":
            platform.fake.latency(LATENCY_MS)  # a new process: its settings start again
        runs = wait_finished(api, run_ids)
        assert [r["status"] for r in runs] == ["succeeded"] * RUNS_PER_KILL, runs
        assert all(r["stop_reason"] == "critic_pass" for r in runs)
        if victim == "fakemodel":
            before = Counter()  # its request log started again with it
        repeated = repeats(finished_calls(platform.fake)) - repeats(before)
        allowed = cut_off if victim in MODEL_CALLERS else 0
        report.append(f"{victim}: {cut_off} calls in flight at the kill, {repeated} repeated")
        assert repeated <= allowed, report
    status = platform.state()
    assert all(status[v]["restarts"] == 1 for v in VICTIMS), status
    assert all(status[v]["last_exit"] == "killed by SIGKILL" for v in VICTIMS)
    print("\n".join(report))  # noqa: T201  (shown with -s: what an operator would read)
