"""The supervisor in `crosscheck up`: it restarts a service that dies (with backoff, without
touching the others), stops everything on a signal, and reports through `crosscheck status`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.start_stop import run_cycles
from crosscheck.cli import app
from crosscheck.launcher import (
    REPLICA_PORT_STEP,
    PlanError,
    Running,
    ServiceSpec,
    Supervisor,
    _json_line,
    backoff_s,
    exit_status,
    plan,
)
from shared.logging import REDACTED
from tests.support.servers import free_port

runner = CliRunner()


@dataclass(frozen=True)
class ScriptSpec(ServiceSpec):
    """A service that is a Python one-liner (to crash, or to ignore SIGTERM)."""

    script: str = ""

    def command(self, env: dict[str, str]) -> list[str]:
        return [sys.executable, "-c", self.script]


def fakemodel(name: str) -> ServiceSpec:
    port = str(free_port())
    return ServiceSpec(
        name, "fakemodel", "FAKEMODEL_", 0, "scripted model", overrides=(("FAKEMODEL_PORT", port),)
    )


def supervise_until(sup: Supervisor, running: Running, state: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sup.supervise()
        if running.state == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{running.spec.name} stayed {running.state}")


class TestPolicy:
    def test_backoff_doubles_from_half_a_second_up_to_thirty(self):
        assert [backoff_s(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
        assert backoff_s(7) == 30.0
        assert backoff_s(50) == 30.0

    def test_exit_status_names_the_signal(self):
        assert exit_status(-9) == "killed by SIGKILL"
        assert exit_status(3) == "exit code 3"


class TestLogs:
    def test_json_lines_pass_through_and_plain_text_is_wrapped(self):
        line = json.dumps({"event": "ready", "service": "actor"})
        assert json.loads(_json_line("actor", line + "\n")) == {
            "event": "ready",
            "service": "actor",
        }
        wrapped = json.loads(_json_line("console", "  You can now view your Streamlit app\n"))
        assert wrapped["service"] == "console"
        assert wrapped["event"] == "  You can now view your Streamlit app"
        assert wrapped["timestamp"]

    def test_a_registered_secret_is_masked_either_way(self, tmp_path):
        secret = "supervisor-test-secret-0123456789"
        Supervisor(plan({"CROSSCHECK_SERVICE_TOKEN": secret}), tmp_path)
        assert secret not in _json_line("console", f"token is {secret}\n")
        assert REDACTED in _json_line("actor", json.dumps({"event": f"token {secret}"}))


class TestReplicas:
    def test_replicas_get_their_own_port_and_a_stable_executor_id(self):
        p = plan(
            {"DATABASE_URL": "postgresql://db/crosscheck", "ORCHESTRATOR_PORT": "9000"},
            replicas=3,
        )
        replicas = [s for s in p.services if s.name.startswith("orchestrator")]
        assert [s.name for s in replicas] == ["orchestrator-1", "orchestrator-2", "orchestrator-3"]
        assert [s.port(p.env) for s in replicas] == [9000 + REPLICA_PORT_STEP * i for i in range(3)]
        ids = [s.environment(p.env)["ORCHESTRATOR_EXECUTOR_ID"] for s in replicas]
        assert ids == ["local", "local-2", "local-3"]
        assert p.env["CROSSCHECK_URL"] == "http://127.0.0.1:9000"

    def test_one_replica_is_the_plain_orchestrator(self):
        names = [s.name for s in plan({}, replicas=1).services]
        assert "orchestrator" in names

    def test_replicas_need_postgres(self):
        with pytest.raises(PlanError, match="needs Postgres"):
            plan({}, replicas=2)

    def test_the_replica_count_is_bounded(self):
        with pytest.raises(PlanError, match="between 1 and 4"):
            plan({"DATABASE_URL": "postgresql://db/x"}, replicas=5)

    def test_replica_pools_fit_postgres_default_connection_limit(self):
        p = plan({"DATABASE_URL": "postgresql://db/x"}, replicas=4)
        total = 0
        for spec in (s for s in p.services if s.name.startswith("orchestrator")):
            env = spec.environment(p.env)
            total += sum(
                int(env[f"ORCHESTRATOR_{name}"])
                for name in ("DB_POOL_SIZE", "DB_MAX_OVERFLOW", "SYSTEM_DB_POOL_SIZE")
            )
            total += 2  # the replica's control and LISTEN connections
        assert total <= 100

    def test_up_refuses_replicas_on_sqlite_before_starting_anything(self, tmp_path):
        result = runner.invoke(
            app,
            ["up", "--replicas", "2"],
            env={"DATABASE_URL": f"sqlite:///{tmp_path}/x.sqlite"},
        )
        assert result.exit_code == 2
        assert "needs Postgres" in result.output


class TestHealing:
    def test_a_killed_service_comes_back_and_the_other_is_left_alone(self, tmp_path):
        state = tmp_path / "up.json"
        sup = Supervisor(plan({}), tmp_path / "logs", state_path=state)
        victim, bystander = sup.start(fakemodel("victim")), sup.start(fakemodel("bystander"))
        try:
            for running in (victim, bystander):
                assert sup.wait_healthy(running, 30) is None
            first_pid, bystander_pid = victim.pid, bystander.pid
            os.kill(first_pid, signal.SIGKILL)
            victim.process.wait()
            supervise_until(sup, victim, "healthy")
            assert victim.pid != first_pid
            assert (victim.restarts, victim.last_exit) == (1, "killed by SIGKILL")
            assert bystander.pid == bystander_pid
            assert bystander.restarts == 0
            saved = {s["name"]: s for s in json.loads(state.read_text())["services"]}
            assert saved["victim"]["restarts"] == 1
            assert saved["victim"]["pid"] == victim.pid
            assert saved["victim"]["last_exit"] == "killed by SIGKILL"
            lines = (tmp_path / "logs" / "supervisor.log").read_text().splitlines()
            events = [json.loads(line) for line in lines]
            assert {"service": "victim", "status": "killed by SIGKILL"}.items() <= events[0].items()
        finally:
            sup.stop(grace_s=5)

    def test_a_service_that_keeps_crashing_is_restarted_ever_more_slowly(self, tmp_path):
        sup = Supervisor(plan({}), tmp_path)
        crasher = ScriptSpec(
            "crasher", "-", "CRASHER_", free_port(), "exits", script="raise SystemExit(3)"
        )
        running = sup.start(crasher)
        delays: list[float] = []
        deadline = time.monotonic() + 15
        while len(delays) < 3 and time.monotonic() < deadline:
            before = running.restart_at
            sup.supervise()
            if running.restart_at != before and running.state == "backoff":
                delays.append(round((running.restart_at or 0) - time.monotonic(), 1))
            time.sleep(0.02)
        sup.stop(grace_s=1)
        assert running.last_exit == "exit code 3"
        assert delays == [0.5, 1.0, 2.0]


class TestStop:
    IGNORES_SIGTERM = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )

    def _stubborn(self, tmp_path: Path) -> tuple[Supervisor, Running]:
        sup = Supervisor(plan({}), tmp_path)
        spec = ScriptSpec(
            "stubborn",
            "-",
            "STUBBORN_",
            free_port(),
            "ignores SIGTERM",
            script=self.IGNORES_SIGTERM,
        )
        running = sup.start(spec)
        from bench.start_stop import descendants

        deadline = time.monotonic() + 60  # its own child is started: a bound, not a pause
        while len(descendants(running.pid)) < 2:
            assert time.monotonic() < deadline, "the stubborn script never started its child"
            time.sleep(0.05)
        return sup, running

    def test_what_ignores_sigterm_is_killed_after_the_grace_period_with_its_children(
        self, tmp_path
    ):
        from bench.start_stop import alive, descendants

        sup, running = self._stubborn(tmp_path)
        tree = descendants(running.pid)
        assert len(tree) == 2
        began = time.monotonic()
        sup.stop(grace_s=1.0)
        assert 1.0 <= time.monotonic() - began < 30
        deadline = time.monotonic() + 30
        while alive(tree):
            assert time.monotonic() < deadline, "the stubborn tree outlived the kill"
            time.sleep(0.05)

    def test_a_second_signal_skips_the_grace_period(self, tmp_path):
        sup, running = self._stubborn(tmp_path)
        sup.signals = 2
        began = time.monotonic()
        sup.stop(grace_s=30)
        assert time.monotonic() - began < 15  # well inside the 30 s grace it skipped
        assert running.process.returncode == -signal.SIGKILL


class TestStatus:
    def _state(self, path: Path, pid: int, url: str, state: str = "healthy") -> None:
        path.write_text(
            json.dumps(
                {
                    "supervisor_pid": pid,
                    "updated_at": "2026-11-30T10:00:00+00:00",
                    "services": [
                        {
                            "name": "fakemodel",
                            "url": url,
                            "health_path": "/healthz",
                            "pid": 1,
                            "state": state,
                            "restarts": 2,
                            "last_exit": "killed by SIGKILL",
                            "log": "x",
                        }
                    ],
                }
            )
        )

    def test_nothing_running_is_exit_1(self, tmp_path):
        result = runner.invoke(app, ["status", "--state-file", str(tmp_path / "none.json")])
        assert result.exit_code == 1
        assert "not running" in result.output

    def test_a_dead_supervisor_is_reported_as_gone(self, tmp_path):
        path = tmp_path / "up.json"
        gone = subprocess_pid_that_exited()
        self._state(path, gone, "http://127.0.0.1:1")
        result = runner.invoke(app, ["status", "--state-file", str(path)])
        assert result.exit_code == 1
        assert f"supervisor (pid {gone}) is gone" in result.output

    def test_healthy_services_are_exit_0_and_show_restarts(self, tmp_path):
        sup = Supervisor(plan({}), tmp_path)
        running = sup.start(fakemodel("fakemodel"))
        try:
            assert sup.wait_healthy(running, 30) is None
            path = tmp_path / "up.json"
            self._state(path, os.getpid(), running.spec.url(sup.plan.env))
            result = runner.invoke(
                app, ["status", "--state-file", str(path), "--json"], env={"COLUMNS": "200"}
            )
            assert result.exit_code == 0, result.output
            shown = json.loads(result.output)["services"][0]
            assert shown["restarts"] == 2
            assert shown["responding"] is True
        finally:
            sup.stop(grace_s=5)

    def test_a_service_that_does_not_answer_is_exit_2(self, tmp_path):
        path = tmp_path / "up.json"
        self._state(path, os.getpid(), f"http://127.0.0.1:{free_port()}", state="backoff")
        result = runner.invoke(app, ["status", "--state-file", str(path)], env={"COLUMNS": "200"})
        assert result.exit_code == 2
        assert "down" in result.output


def subprocess_pid_that_exited() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class TestStartStopTool:
    """`bench.start_stop` itself: a start that fails is reported, never a crash of the tool."""

    def _command(self, tmp_path: Path, body: str) -> list[str]:
        script = tmp_path / "fake_up.py"
        script.write_text(body)
        return [sys.executable, str(script)]

    def test_a_start_that_lost_its_port_is_tried_again_on_other_ports(self, tmp_path):
        # the first start says its port is taken (as `crosscheck up` does) and exits; the
        # second comes up and stops on the signal
        body = (
            "import pathlib, signal, sys, time\n"
            f"marker = pathlib.Path({str(tmp_path / 'tried')!r})\n"
            "if not marker.exists():\n"
            "    marker.write_text('1')\n"
            "    print('actor cannot listen on 127.0.0.1:1: the port is in use', flush=True)\n"
            "    sys.exit(1)\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
            "print('Press Ctrl-C to stop', flush=True)\n"
            "time.sleep(60)\n"
        )
        [cycle] = run_cycles(1, self._command(tmp_path, body), tmp_path, timeout_s=30)
        assert cycle.problem is None, cycle.problem
        assert not cycle.left_processes

    def test_a_start_that_fails_otherwise_is_a_problem_with_its_output(self, tmp_path):
        body = "print('no database here', flush=True)\nraise SystemExit(3)\n"
        [cycle] = run_cycles(1, self._command(tmp_path, body), tmp_path, timeout_s=30)
        assert cycle.problem is not None
        assert "did not start" in cycle.problem
        assert "no database here" in cycle.problem


@pytest.mark.slow
class TestStartStopCycles:
    @pytest.mark.timeout(300)  # three full starts of every service on a loaded machine
    def test_every_way_of_stopping_leaves_no_process_and_no_port(self, tmp_path):
        """SIGTERM to the group, SIGINT (Ctrl-C) and a double SIGTERM, with the sandbox's
        bubblewrap workers running (`bench.start_stop` does 20 cycles of `make run`)."""
        results = run_cycles(
            3, [sys.executable, "-m", "crosscheck", "up", "--no-console"], tmp_path
        )
        for cycle in results:
            assert cycle.problem is None, cycle.problem
            assert cycle.processes >= 6  # up, fake model, actor, critic, sandbox + its workers
            assert not cycle.left_processes, cycle
            assert not cycle.left_ports, cycle


@pytest.mark.slow
@pytest.mark.postgres
class TestUpWithReplicas:
    def test_up_runs_replicas_on_one_postgres_and_one_comes_back_after_kill_9(self, tmp_path):
        import httpx

        from tests.support.databases import fresh_postgres_database

        ports = {p: free_port() for p in ("ACTOR", "CRITIC", "FAKEMODEL", "RESEARCH")}
        base = free_port()
        with fresh_postgres_database("cc_up") as database_url:
            env = {
                **os.environ,
                **{f"{name}_PORT": str(port) for name, port in ports.items()},
                "ORCHESTRATOR_PORT": str(base),
                "DATABASE_URL": database_url,
                "CROSSCHECK_LOG_LEVEL": "WARNING",
                "ORCHESTRATOR_HEARTBEAT_S": "0.5",
                "ORCHESTRATOR_REPLICA_TIMEOUT_S": "2",
            }
            command = [sys.executable, "-m", "crosscheck", "up", "--replicas", "2"]
            command += ["--no-console", "--no-sandbox"]
            out = (tmp_path / "up.out").open("wb")
            up = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=out)
            try:
                deadline = time.monotonic() + 120
                while b"Press Ctrl-C" not in (tmp_path / "up.out").read_bytes():
                    assert up.poll() is None, (tmp_path / "up.out").read_text()
                    assert time.monotonic() < deadline, (tmp_path / "up.out").read_text()
                    time.sleep(0.2)
                token = dict(
                    line.split("=", 1)
                    for line in (tmp_path / "var" / "crosscheck.env").read_text().splitlines()
                )["CROSSCHECK_TOKEN"]
                second = f"http://127.0.0.1:{base + REPLICA_PORT_STEP}"
                headers = {"Authorization": f"Bearer {token}"}

                def cluster() -> dict:
                    return httpx.get(f"{second}/v1/cluster", headers=headers, timeout=30).json()

                assert {r["executor_id"] for r in cluster()["replicas"]} == {"local", "local-2"}
                state = json.loads((tmp_path / "var" / "run" / "up.json").read_text())
                first = next(s for s in state["services"] if s["name"] == "orchestrator-1")
                os.kill(first["pid"], signal.SIGKILL)
                deadline = time.monotonic() + 60
                while True:  # replica 2 leads meanwhile; replica 1 comes back under its own id
                    state = json.loads((tmp_path / "var" / "run" / "up.json").read_text())
                    first = next(s for s in state["services"] if s["name"] == "orchestrator-1")
                    if first["restarts"] == 1 and first["state"] == "healthy":
                        break
                    assert time.monotonic() < deadline, state
                    time.sleep(0.2)
                alive = {r["executor_id"] for r in cluster()["replicas"] if r["alive"]}
                assert alive == {"local", "local-2"}
            finally:
                up.send_signal(signal.SIGTERM)
                up.wait(timeout=60)
                out.close()
            assert up.returncode == 0
