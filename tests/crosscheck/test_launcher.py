"""`crosscheck up`: what it plans, and a real start of every service with Ctrl-C to stop."""

import json
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

    @pytest.mark.parametrize(
        ("env", "models"),
        [
            ({}, "demo"),
            ({"OPENAI_API_KEY": "sk-a"}, "demo"),  # one key missing: still the scripted model
            ({"OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-b"}, "providers"),
            ({"CROSSCHECK_MODELS": "local"}, "local"),
            ({"CROSSCHECK_MODELS": "local", "OPENAI_API_KEY": "sk-a"}, "local"),
            # the orchestrator says the mode `up` runs in, whatever was in the environment
            ({"ORCHESTRATOR_MODELS": "providers"}, "demo"),
        ],
    )
    def test_the_orchestrator_is_told_the_mode(self, env, models):
        p = plan(env)
        assert p.models == models
        orchestrator = next(s for s in p.services if s.name == "orchestrator")
        assert orchestrator.environment(p.env)["ORCHESTRATOR_MODELS"] == models

    def test_every_replica_is_told_the_mode(self):
        p = plan({"DATABASE_URL": "postgresql://u@db/x"}, replicas=2)
        replicas = [s for s in p.services if s.module == "orchestrator"]
        assert len(replicas) == 2
        assert {s.environment(p.env)["ORCHESTRATOR_MODELS"] for s in replicas} == {"demo"}

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


STAND_IN_SERVER = """#!{python}
# llama-server's stand-in: the fake model's OpenAI wire on the --port it is given, plus /health
import json, sys
import uvicorn
from fakemodel.app import create_app
from fakemodel.settings import FakeModelSettings

args = sys.argv[1:]
open({argv!r}, "w").write(json.dumps(args))
port = int(args[args.index("--port") + 1])
app = create_app(FakeModelSettings(port=port))
app.add_api_route("/health", lambda: {{"status": "ok"}})
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def stand_in_build(root, argv_file):
    """A local model 'built' under ``root`` whose server is the fake model (no compiling)."""
    from crosscheck.localmodel import Layout

    layout = Layout(root)
    layout.server.parent.mkdir(parents=True)
    layout.server.write_text(STAND_IN_SERVER.format(python=sys.executable, argv=str(argv_file)))
    layout.server.chmod(0o755)
    layout.model.parent.mkdir(parents=True)
    layout.model.write_bytes(b"GGUF")
    return layout


class TestLocalModels:
    def test_local_mode_starts_the_model_and_points_both_sdks_at_it(self):
        p = plan({"CROSSCHECK_MODELS": "local"})
        assert p.local
        assert not p.demo
        assert "local model" in p.mode
        names = [s.name for s in p.services]
        assert names[:3] == ["llama-server", "model-adapter", "actor"]
        assert "fakemodel" not in names
        assert p.env["OPENAI_BASE_URL"] == "http://127.0.0.1:8011/v1"
        assert p.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8012"
        assert p.env["LOCALMODEL_ADAPTER_UPSTREAM_URL"] == "http://127.0.0.1:8011/v1"
        assert (p.env["ACTOR_PROVIDER"], p.env["CRITIC_PROVIDER"]) == ("openai", "anthropic")
        assert "CROSSCHECK_DEMO" not in p.env

    def test_local_mode_sets_cpu_sized_timeouts_and_caps_unless_set(self):
        env = plan({"CROSSCHECK_MODELS": "local", "CRITIC_L1_BUDGET_S": "333"}).env
        assert env["CROSSCHECK_MODEL_TIMEOUT_S"] == "600"
        assert env["CROSSCHECK_MODEL_MAX_ATTEMPTS"] == "2"
        assert env["CRITIC_L1_MAX_TOKENS"] == "1024"
        assert env["CROSSCHECK_MAX_OUTPUT_TOKENS"] == "4096"
        assert env["ORCHESTRATOR_PEER_TIMEOUT_S"] == "1800"
        assert env["ORCHESTRATOR_PEER_MAX_ATTEMPTS"] == "2"
        assert env["CRITIC_L1_BUDGET_S"] == "333"

    def test_no_switch_keeps_the_scripted_demo(self):
        p = plan({})
        assert p.demo
        assert not p.local
        assert p.services[0].name == "fakemodel"
        assert "scripted" in p.mode

    def test_an_unknown_mode_is_refused_before_anything_starts(self):
        from crosscheck.launcher import PlanError

        with pytest.raises(PlanError, match="CROSSCHECK_MODELS='gpu' is not a mode"):
            plan({"CROSSCHECK_MODELS": "gpu"})

    def test_a_real_key_is_never_sent_to_the_local_model(self):
        p = plan({"CROSSCHECK_MODELS": "local", "OPENAI_API_KEY": "sk-real-key-123"})
        assert "sk-real-key-123" not in json.dumps(p.env)
        server, adapter = p.services[:2]
        for spec in (server, adapter):
            given = spec.environment(p.env)
            assert "OPENAI_API_KEY" not in given
            assert "CROSSCHECK_SERVICE_TOKEN" not in given

    def test_the_server_runs_the_built_model_small_on_its_port(self, tmp_path):
        p = plan(
            {
                "CROSSCHECK_MODELS": "local",
                "CROSSCHECK_LOCALMODEL_DIR": str(tmp_path),
                "LOCALMODEL_SERVER_PORT": "9311",
            }
        )
        command = p.services[0].command(p.env)
        assert command[0] == str(tmp_path / "build" / "bin" / "llama-server")
        joined = " ".join(command)
        assert f"-m {tmp_path}/model/SmolLM2-135M-Instruct.Q4_1.gguf" in joined
        assert "--port 9311" in joined
        assert "--cache-ram 0" in joined
        assert "--alias actor-model,critic-model" in joined
        assert p.env["OPENAI_BASE_URL"] == "http://127.0.0.1:9311/v1"

    def test_both_sdks_reach_the_stand_in_server_through_the_wiring(self, tmp_path):
        import anthropic
        import openai

        from crosscheck.launcher import Supervisor
        from tests.support.fakemodel import FakeModel

        stand_in_build(tmp_path / "lm", tmp_path / "argv.json")
        p = plan(
            {
                "CROSSCHECK_MODELS": "local",
                "CROSSCHECK_LOCALMODEL_DIR": str(tmp_path / "lm"),
                "LOCALMODEL_SERVER_PORT": str(free_port()),
                "LOCALMODEL_ADAPTER_PORT": str(free_port()),
                "PATH": os.environ["PATH"],
            }
        )
        sup = Supervisor(p, tmp_path / "logs")
        try:
            for spec in p.services[:2]:
                assert sup.wait_healthy(sup.start(spec), 60) is None, spec.name
            server = FakeModel(p.env["OPENAI_BASE_URL"].removesuffix("/v1"))
            server.script(
                {"api": "openai", "raw": "a draft"},
                {"api": "openai", "response": {"verdict": "pass"}},
            )
            with openai.OpenAI(
                api_key=p.env["OPENAI_API_KEY"], base_url=p.env["OPENAI_BASE_URL"], max_retries=0
            ) as actor:
                draft = actor.chat.completions.create(
                    model=p.env["ACTOR_DRAFT_MODEL"],
                    messages=[{"role": "user", "content": "write"}],
                )
            with anthropic.Anthropic(
                api_key=p.env["ANTHROPIC_API_KEY"],
                base_url=p.env["ANTHROPIC_BASE_URL"],
                max_retries=0,
            ) as critic:
                critique = critic.messages.create(
                    model=p.env["CRITIC_MODEL"],
                    max_tokens=int(p.env["CRITIC_L1_MAX_TOKENS"]),
                    messages=[{"role": "user", "content": "judge"}],
                    tools=[{"name": "v", "input_schema": {"type": "object"}}],
                    tool_choice={"type": "tool", "name": "v"},
                )
            server.close()
        finally:
            sup.stop(grace_s=5)
        assert draft.choices[0].message.content == "a draft"
        assert critique.content[0].type == "tool_use"
        assert critique.content[0].input == {"verdict": "pass"}
        argv = json.loads((tmp_path / "argv.json").read_text())
        assert argv[argv.index("-m") + 1].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


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
            assert httpx.get(f"{orchestrator}/v1/info").json()["model_mode"] == "demo"
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
