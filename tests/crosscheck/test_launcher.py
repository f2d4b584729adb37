"""`crosscheck up`: what it plans, and a real start of every service with Ctrl-C to stop."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from crosscheck.launcher import PLATFORM_SECRETS, SERVICES, child_env, plan
from tests.support.servers import free_port


class TestPlan:
    def test_no_keys_means_the_scripted_demo(self):
        p = plan({})
        assert p.demo
        assert p.missing_keys == ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
        assert [s.name for s in p.services] == [
            "fakemodel",
            "actor",
            "critic",
            "sandbox",
            "research",
            "orchestrator",
            "console",
        ]
        assert p.env["ACTOR_URL"] == "http://127.0.0.1:8001"
        assert p.env["ORCHESTRATOR_RESEARCH_URL"] == "http://127.0.0.1:8005"
        assert p.env["DATABASE_URL"] == "sqlite:///var/crosscheck.sqlite"
        assert len(p.env["CROSSCHECK_ADMIN_TOKEN"]) > 32
        assert p.env["OPENAI_BASE_URL"] == "http://127.0.0.1:8009/v1"
        assert p.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8009"
        assert p.env["CROSSCHECK_DEMO"] == "1"

    def test_keys_set_means_real_providers(self):
        p = plan({"OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-b"})
        assert not p.demo
        assert "fakemodel" not in [s.name for s in p.services]
        assert p.env["OPENAI_API_KEY"] == "sk-a"
        assert "OPENAI_BASE_URL" not in p.env

    def test_only_the_configured_providers_need_keys(self):
        env = {"OPENAI_API_KEY": "sk-a", "CRITIC_PROVIDER": "openai"}
        assert not plan(env).demo

    def test_a_webhook_signing_secret_is_generated_in_the_standard_format(self):
        import base64

        secret = plan({}).env["ORCHESTRATOR_WEBHOOK_SECRET"]
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        kept = plan({"ORCHESTRATOR_WEBHOOK_SECRET": "whsec_mine"}).env
        assert kept["ORCHESTRATOR_WEBHOOK_SECRET"] == "whsec_mine"

    def test_a_service_token_is_generated_when_missing(self):
        first, second = plan({}), plan({})
        assert len(first.env["CROSSCHECK_SERVICE_TOKEN"]) >= 32
        assert first.env["CROSSCHECK_SERVICE_TOKEN"] != second.env["CROSSCHECK_SERVICE_TOKEN"]

    def test_ports_come_from_the_environment(self):
        p = plan({"ACTOR_PORT": "9101", "FAKEMODEL_PORT": "9109"})
        actor = next(s for s in p.services if s.name == "actor")
        assert actor.url(p.env) == "http://127.0.0.1:9101"
        assert p.env["OPENAI_BASE_URL"] == "http://127.0.0.1:9109/v1"

    def test_the_sandbox_gets_no_provider_keys(self):
        env = plan({"OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-b", "PATH": "/usr/bin"}).env
        sandbox = next(s for s in SERVICES if s.name == "sandbox")
        assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & set(child_env(sandbox, env))
        assert "CROSSCHECK_SERVICE_TOKEN" in child_env(sandbox, env)

    @staticmethod
    def secrets_given(p) -> dict[str, set[str]]:
        return {
            s.name: {k for k in s.environment(p.env) if k in PLATFORM_SECRETS} for s in p.services
        }

    def test_each_service_gets_only_the_secrets_it_uses(self):
        p = plan(
            {
                "OPENAI_API_KEY": "sk-a",
                "ANTHROPIC_API_KEY": "sk-b",
                "REDIS_URL": "redis://:pw@127.0.0.1:6379/0",
                "ORCHESTRATOR_WEBHOOK_KEY": "k",
                "PATH": "/usr/bin",
            }
        )
        service = "CROSSCHECK_SERVICE_TOKEN"
        assert self.secrets_given(p) == {
            "actor": {service, "OPENAI_API_KEY", "REDIS_URL"},
            "critic": {service, "ANTHROPIC_API_KEY", "REDIS_URL"},
            "sandbox": {service},
            "research": {service, "OPENAI_API_KEY", "REDIS_URL"},
            "orchestrator": {
                service,
                "CROSSCHECK_ADMIN_TOKEN",
                "ORCHESTRATOR_WEBHOOK_SECRET",
                "ORCHESTRATOR_WEBHOOK_KEY",
                "DATABASE_URL",
            },
            "console": set(),
        }
        assert p.services[0].environment(p.env)["PATH"] == "/usr/bin"  # the rest is kept

    def test_on_postgres_the_corpus_follows_the_platform_and_only_research_gets_it(self):
        p = plan({"DATABASE_URL": "postgresql+psycopg://cc:pw@db:5432/crosscheck"})
        assert p.env["RESEARCH_CORPUS_URL"] == "postgresql://cc:pw@db:5432/crosscheck"
        given = self.secrets_given(p)
        assert [name for name, keys in given.items() if "RESEARCH_CORPUS_URL" in keys] == [
            "research"
        ]
        chosen = plan(
            {
                "DATABASE_URL": "postgresql://cc:pw@db/crosscheck",
                "RESEARCH_CORPUS_URL": "postgresql://r:pw@other/corpus",
            }
        )
        assert chosen.env["RESEARCH_CORPUS_URL"] == "postgresql://r:pw@other/corpus"
        assert "RESEARCH_CORPUS_URL" not in plan({}).env  # SQLite platform: SQLite corpus

    def test_providers_swapped_swap_the_keys_and_the_demo_model_gets_nothing(self):
        swapped = plan(
            {
                "OPENAI_API_KEY": "sk-a",
                "ANTHROPIC_API_KEY": "sk-b",
                "ACTOR_PROVIDER": "anthropic",
                "CRITIC_PROVIDER": "openai",
            }
        )
        given = self.secrets_given(swapped)
        assert given["actor"] == {"CROSSCHECK_SERVICE_TOKEN", "ANTHROPIC_API_KEY"}
        assert given["critic"] == {"CROSSCHECK_SERVICE_TOKEN", "OPENAI_API_KEY"}
        assert self.secrets_given(plan({}))["fakemodel"] == set()

    def test_every_replica_is_given_what_the_orchestrator_is(self):
        p = plan({"DATABASE_URL": "postgresql://u:pw@db/x"}, replicas=2)
        given = self.secrets_given(p)
        assert given["orchestrator-1"] == given["orchestrator-2"]
        assert "DATABASE_URL" in given["orchestrator-2"]
        assert "DATABASE_URL" not in given["actor"]


class TestPorts:
    def test_a_busy_port_is_refused_before_starting(self, tmp_path):
        import socket

        from crosscheck.launcher import PortInUse, Supervisor

        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            p = plan({"ACTOR_PORT": str(port)})
            actor = next(s for s in p.services if s.name == "actor")
            with pytest.raises(PortInUse, match=f"127.0.0.1:{port}"):
                Supervisor(p, tmp_path).start(actor)


@pytest.mark.slow
class TestUp:
    def test_starts_everything_serves_a_draft_and_critique_and_stops_on_ctrl_c(self, tmp_path):
        ports = {
            name: free_port()
            for name in (
                "ACTOR",
                "CRITIC",
                "SANDBOX",
                "RESEARCH",
                "FAKEMODEL",
                "ORCHESTRATOR",
                "CONSOLE",
            )
        }
        token = "launcher-test-token-0123456789"
        env = {
            **os.environ,
            **{f"{name}_PORT": str(port) for name, port in ports.items()},
            "CROSSCHECK_SERVICE_TOKEN": token,
            "CROSSCHECK_ADMIN_TOKEN": "launcher-admin-token-0123456789",
            "DATABASE_URL": f"sqlite:///{tmp_path}/crosscheck.sqlite",
            "COLUMNS": "200",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "crosscheck", "up", "--no-sandbox", "--log-dir", str(tmp_path)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        try:
            lines = []
            # guards against a hang: services start one after another, and each takes 20-30 s
            # to import on a loaded 2-core machine
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if "Ctrl-C" in line:
                    break
            banner = "".join(lines)
            assert "Crosscheck is up" in banner, banner
            assert "DEMO MODE: the model is scripted" in banner
            assert token not in banner
            assert "launcher-admin-token-0123456789" not in banner
            credentials = tmp_path / "var" / "crosscheck.env"
            assert credentials.stat().st_mode & 0o777 == 0o600
            assert f"CROSSCHECK_SERVICE_TOKEN={token}" in credentials.read_text()
            assert "ORCHESTRATOR_WEBHOOK_SECRET=whsec_" in credentials.read_text()
            assert "whsec_" not in banner
            headers = {"Authorization": f"Bearer {token}"}
            actor = f"http://127.0.0.1:{ports['ACTOR']}"
            critic = f"http://127.0.0.1:{ports['CRITIC']}"
            task = {"task": "Write primes_up_to(n) returning all primes <= n.", "kind": "code"}
            draft = httpx.post(f"{actor}/v1/draft", json=task, headers=headers, timeout=30)
            assert draft.status_code == 200, draft.text
            critique = httpx.post(
                f"{critic}/v1/critique",
                json={**task, "output": draft.json()["output"]},
                headers=headers,
                timeout=30,
            )
            assert critique.status_code == 200, critique.text
            assert critique.json()["verdict"] == "revise"
            assert httpx.get(f"{actor}/v1/info").json()["demo"] is True
            orchestrator = f"http://127.0.0.1:{ports['ORCHESTRATOR']}"
            admin = {"Authorization": "Bearer launcher-admin-token-0123456789"}
            run = httpx.post(
                f"{orchestrator}/v1/runs",
                json={"task": "Explain tides.", "policy": {"max_rounds": 1}},
                headers=admin,
            )
            assert run.status_code == 201, run.text
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                body = httpx.get(f"{orchestrator}/v1/runs/{run.json()['id']}", headers=admin).json()
                if body["status"] == "escalated":
                    break
                time.sleep(0.1)
            assert body["stop_reason"] == "max_rounds"
            research = httpx.get(f"http://127.0.0.1:{ports['RESEARCH']}/v1/info", timeout=30)
            assert research.json()["models"] == {"distill": "scripted-demo"}
            console = httpx.get(f"http://127.0.0.1:{ports['CONSOLE']}/_stcore/health", timeout=30)
            assert console.status_code == 200
        finally:
            process.send_signal(signal.SIGTERM)  # like Ctrl-C: every child is stopped
            rest, _ = process.communicate(timeout=30)
        assert process.returncode == 0, rest
        assert "all services stopped" in rest
        for port in ports.values():
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        assert (tmp_path / "actor.log").read_text()
        # what the platform writes is its owner's only: logs, databases (and replay stores)
        written = [
            *tmp_path.glob("*.log"),
            *tmp_path.glob("crosscheck*.sqlite*"),
            *(tmp_path / "var" / "replays").glob("*.sqlite*"),
        ]
        modes = {path.name: oct(path.stat().st_mode & 0o777) for path in written}
        expected = {"actor.log", "orchestrator.log", "console.log", "fakemodel.log"}
        assert expected | {"crosscheck.sqlite", "crosscheck.dbos.sqlite"} <= set(modes), modes
        assert set(modes.values()) == {"0o600"}, modes


class TestConsoleLink:
    def test_the_client_links_escalations_to_the_console_up_started(self, tmp_path):
        from crosscheck.client import console_base
        from crosscheck.launcher import write_credentials

        p = plan({"CONSOLE_PORT": "9999"})
        write_credentials(p.env, tmp_path / "var")
        assert console_base(environ={}, cwd=tmp_path) == "http://127.0.0.1:9999"
        assert console_base(environ={"CROSSCHECK_CONSOLE_URL": "http://c:1/"}, cwd=tmp_path) == (
            "http://c:1"
        )
        assert console_base(environ={}, cwd=tmp_path / "elsewhere") == "http://127.0.0.1:8501"

    def test_without_the_console_there_is_no_link_to_write(self):
        assert "CROSSCHECK_CONSOLE_URL" not in plan({}, with_console=False).env
