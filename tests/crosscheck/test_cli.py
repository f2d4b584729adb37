"""`crosscheck run` and `crosscheck show`: argument and settings errors, then the real thing
against an Orchestrator on SQLite with real Actor and Critic apps on the fake model server."""

import asyncio
import json
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosedError

from crosscheck import client as client_module
from crosscheck import render
from crosscheck.cli import app
from crosscheck.client import CrosscheckClient, CrosscheckError, resolve_settings
from crosscheck.launcher import write_credentials
from shared.providers.defaults import DEMO_MODEL
from tests.orchestrator.conftest import ADMIN_TOKEN, start, wait_for
from tests.support.servers import free_port

SKY = "Explain why the sky is blue."
NO_TOKEN = "run `crosscheck up` first, or set CROSSCHECK_TOKEN"


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


async def cli(url: str, *args: str, token: str = ADMIN_TOKEN) -> Ran:
    """`python -m crosscheck` as a user runs it, with the settings in its environment.

    A child process, so the services' logs on this test's event loop stay out of its output.
    """
    env = {**os.environ, "CROSSCHECK_URL": url, "CROSSCHECK_TOKEN": token}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crosscheck",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Ran(process.returncode, stdout.decode(), stderr.decode())


def flat(text: str) -> str:
    """The words a user reads, without line breaks and the frames of typer's error panels."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def lines_with(output: str, *words: str) -> list[str]:
    return [line for line in output.splitlines() if all(w in line for w in words)]


class TestArguments:
    def test_help_names_both_commands(self):
        result = invoke("--help")
        assert result.exit_code == 0
        assert "run" in result.output
        assert "show" in result.output

    def test_run_needs_a_task(self):
        result = invoke("run")
        assert result.exit_code == 2
        assert "Missing argument" in result.output

    def test_an_unknown_kind_is_refused(self):
        result = invoke("run", "Do it.", "--kind", "poem")
        assert result.exit_code == 2
        assert "--kind" in result.output

    def test_max_rounds_must_be_in_range(self):
        result = invoke("run", "Do it.", "--max-rounds", "0")
        assert result.exit_code == 2
        assert "--max-rounds" in result.output

    def test_a_missing_tests_file_is_refused(self, tmp_path):
        result = invoke("run", "Do it.", "--tests-file", str(tmp_path / "nope.py"))
        assert result.exit_code == 2
        assert "does not exist" in flat(result.output)

    def test_tests_need_a_code_task(self, tmp_path):
        tests = tmp_path / "test_x.py"
        tests.write_text("def test_x():\n    assert True\n")
        result = invoke("run", "Do it.", "--kind", "text", "--tests-file", str(tests))
        assert result.exit_code == 2
        assert "--tests-file needs a code task" in flat(result.output)

    def test_an_invalid_entry_point_is_refused_before_sending(self, tmp_path):
        result = invoke("run", "Do it.", "--entry-point", "1st", "--url", "http://127.0.0.1:1")
        assert result.exit_code == 2
        assert "entry_point" in result.output

    def test_the_password_prompt_says_its_rules_and_a_short_one_is_refused(self):
        result = CliRunner().invoke(
            app,
            ["reviewer", "add", "ada", "--url", "http://127.0.0.1:1", "--token", "t" * 20],
            input="short\nshort\n",
        )
        assert "Password (12 to 200 characters):" in result.output
        assert result.exit_code == 2, result.output
        assert "at least 12 characters" in flat(result.output)
        assert "Traceback" not in result.output


class TestSettings:
    def test_no_token_anywhere_is_a_clear_error(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        result = invoke("show", "run_x")
        assert result.exit_code == 1
        assert NO_TOKEN in result.output
        assert "Traceback" not in result.output

    def test_options_then_environment_then_the_file_up_writes(self, tmp_path):
        write_credentials(
            {
                "CROSSCHECK_ADMIN_TOKEN": "from-file",
                "CROSSCHECK_SERVICE_TOKEN": "service-from-file",
                "ORCHESTRATOR_PORT": "8123",
            },
            tmp_path / "var",
        )
        from_file = resolve_settings(environ={}, cwd=tmp_path)
        assert (from_file.url, from_file.token) == ("http://127.0.0.1:8123", "from-file")
        env = {"CROSSCHECK_URL": "http://env:1/", "CROSSCHECK_TOKEN": "from-env"}
        from_env = resolve_settings(environ=env, cwd=tmp_path)
        assert (from_env.url, from_env.token) == ("http://env:1", "from-env")
        from_options = resolve_settings("https://opt:2", "from-option", environ=env, cwd=tmp_path)
        assert (from_options.url, from_options.token) == ("https://opt:2", "from-option")
        assert from_options.ws_url == "wss://opt:2"

    @pytest.mark.parametrize("bad", ["localhost:8000", "ftp://host", "http://"])
    def test_a_url_that_is_not_http_is_refused(self, bad):
        result = invoke("show", "run_x", "--url", bad, "--token", "t")
        assert result.exit_code == 1
        assert f"{bad!r} is not an orchestrator URL" in flat(result.output)

    def test_the_default_url_needs_only_a_token(self, tmp_path):
        settings = resolve_settings(environ={"CROSSCHECK_TOKEN": "t"}, cwd=tmp_path)
        assert settings.url == "http://127.0.0.1:8000"
        with pytest.raises(CrosscheckError, match="or set CROSSCHECK_TOKEN"):
            resolve_settings(environ={}, cwd=tmp_path)

    @pytest.mark.parametrize("command", [["show", "run_x"], ["run", SKY]])
    def test_an_unreachable_orchestrator_is_a_clear_error(self, command):
        url = f"http://127.0.0.1:{free_port()}"
        result = invoke(*command, "--url", url, "--token", "t")
        assert result.exit_code == 1
        expected = f"cannot reach the orchestrator at {url}: is `crosscheck up` running?"
        assert expected in flat(result.output)
        assert "Traceback" not in result.output

    def test_the_demo_model_name_matches_the_providers(self):
        assert render.DEMO_MODEL == DEMO_MODEL


class TestAgainstTheOrchestrator:
    async def test_run_follows_both_rounds_to_success(self, url, api):
        result = await cli(url, "run", SKY)
        assert result.exit_code == 0, result.output
        out = result.output
        critiques = lines_with(out, "round", "critique")
        assert [line.split()[:4] for line in critiques] == [
            ["round", "1", "critique", "revise"],
            ["round", "2", "critique", "pass"],
        ]
        assert lines_with(out, "round 1", "draft", "chars")
        assert lines_with(out, "round 2", "revise", "chars")
        assert lines_with(out, "finished", "succeeded", "critic_pass")
        assert "DEMO: the scripted demo model answered" in flat(out)
        run_id = out.split("run ", 1)[1].split()[0]
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["status"] == "succeeded"
        assert run["final_output"].strip() in out

    async def test_a_person_deciding_next_is_exit_code_2(self, url):
        result = await cli(url, "run", SKY, "--max-rounds", "1")
        assert result.exit_code == 2, result.output
        assert lines_with(result.output, "finished", "escalated", "max_rounds")
        assert "review queue" in result.output

        result = await cli(url, "run", SKY, "--review", "before_critique")
        assert result.exit_code == 2, result.output
        assert lines_with(result.output, "review", "waiting", "rev_")
        assert "awaiting_review" in result.output
        assert not lines_with(result.output, "critique")

    async def test_research_options_reach_the_runs_policy(self, url, api):
        result = await cli(url, "run", SKY, "--no-follow", "--research", "--require-citations")
        assert result.exit_code == 0, result.output
        run = (await api.get(f"/v1/runs/{result.stdout.strip()}")).json()
        assert (run["policy"]["research"], run["policy"]["require_citations"]) == (True, True)

        result = await cli(url, "run", SKY, "--no-follow", "--no-research")
        run = (await api.get(f"/v1/runs/{result.stdout.strip()}")).json()
        assert (run["policy"]["research"], run["policy"]["require_citations"]) == (False, False)

        result = await cli(url, "run", SKY, "--no-follow")  # neither: the server's default
        run = (await api.get(f"/v1/runs/{result.stdout.strip()}")).json()
        assert (run["policy"]["research"], run["policy"]["require_citations"]) == (None, False)

    async def test_a_code_task_starts_from_a_file(self, url, tmp_path):
        start = tmp_path / "start.py"
        start.write_text("def add(a, b):\n    return a - b\n")
        result = await cli(
            url,
            "run",
            "Fix add so it returns the sum.",
            *("--kind", "code", "--code-file", str(start), "--entry-point", "add", "--json"),
        )
        assert result.exit_code == 0, result.output
        run = json.loads(result.stdout)
        assert run["kind"] == "code"
        assert "## Starting point: start.py" in run["task"]
        assert "    return a - b" in run["task"]
        assert "def " in run["final_output"]

    async def test_show_prints_every_round_and_model_call(self, url, api):
        result = await cli(url, "run", SKY, "--no-follow")
        assert result.exit_code == 0
        run_id = result.stdout.strip()
        assert run_id.startswith("run_")
        await wait_for(api, run_id)

        result = await cli(url, "show", run_id)
        assert result.exit_code == 0, result.output
        out = result.output
        assert "round 1" in out
        assert "round 2 (final)" in out
        assert lines_with(out, "critique", "revise")
        assert lines_with(out, "critique", "pass")
        assert lines_with(out, "reflection", "critic")
        assert "model calls" in out
        calls = [line.split()[:2] for line in lines_with(out, "scripted-demo", " ms")]
        assert calls == [
            ["actor", "draft"],
            ["critic", "critique"],
            ["actor", "revise"],
            ["critic", "critique"],
        ]

        result = await cli(url, "show", run_id, "--json")
        assert result.exit_code == 0
        document = json.loads(result.stdout)
        assert document["run"]["id"] == run_id
        assert [c["stage"] for c in document["trajectory"]["calls"]] == [
            "draft",
            "critique",
            "revise",
            "critique",
        ]

    async def test_run_json_prints_only_the_finished_run(self, url):
        result = await cli(url, "run", SKY, "--json")
        assert result.exit_code == 0, result.output
        run = json.loads(result.stdout)
        assert run["status"] == "succeeded"
        assert [r["critique"]["verdict"] for r in run["rounds"]] == ["revise", "pass"]

    async def test_api_errors_are_one_line(self, url):
        result = await cli(url, "show", "run_missing")
        assert result.exit_code == 1
        assert "NotFound (HTTP 404)" in result.stderr
        assert "Traceback" not in result.output
        result = await cli(url, "show", "run_x", token="wrong")
        assert result.exit_code == 1
        assert "Unauthorized (HTTP 401)" in flat(result.output)
        assert "the token came from CROSSCHECK_TOKEN" in flat(result.output)


class TestLiveEvents:
    async def test_a_dropped_websocket_resumes_from_the_last_seq(self, url, api, monkeypatch):
        real = client_module.ws_connect  # type: ignore[attr-defined]
        urls: list[str] = []

        @contextmanager
        def dropping_after_two(ws_url, **kwargs):
            urls.append(ws_url)
            with real(ws_url, **kwargs) as ws:
                if len(urls) > 1:
                    yield ws
                    return
                received: list[str | bytes] = []

                class Cut:
                    def recv(self, timeout=None):
                        if len(received) == 2:
                            raise ConnectionClosedError(None, None)
                        received.append(ws.recv(timeout))
                        return received[-1]

                yield Cut()

        monkeypatch.setattr(client_module, "ws_connect", dropping_after_two)
        run_id = await start(api, task=SKY)
        settings = resolve_settings(url, ADMIN_TOKEN)
        with CrosscheckClient(settings) as client:
            seen = await asyncio.to_thread(lambda: list(client.follow(run_id)))
        stored = (await api.get("/v1/events", params={"run_id": run_id})).json()
        assert [e.seq for e in seen] == [e["seq"] for e in stored]
        assert len(urls) == 2
        assert urls[1].endswith(f"since={stored[1]['seq']}")

    async def test_a_revoked_token_ends_the_follow_with_the_apis_401(self, url, api, fake_model):
        """The server closes the socket (4401) when its token is revoked: the client does not
        reconnect, it says why and raises the API's own Unauthorized."""
        fake_model.script({"stage": "draft", "fault": {"delay_s": 30}})  # the run stays busy
        made = await api.post("/v1/tokens", json={"name": "follower", "role": "service"})
        assert made.status_code == 201, made.text
        token = made.json()
        created = await api.post(
            "/v1/runs", json={"task": SKY}, headers={"Authorization": f"Bearer {token['token']}"}
        )
        assert created.status_code == 201, created.text
        notices: list[str] = []
        seen: list[str] = []

        def follow() -> None:
            with CrosscheckClient(resolve_settings(url, token["token"])) as client:
                for event in client.follow(created.json()["id"], on_notice=notices.append):
                    seen.append(event.type)

        following = asyncio.create_task(asyncio.to_thread(follow))
        deadline = asyncio.get_running_loop().time() + 60
        while not seen:  # the socket is open and streaming
            assert asyncio.get_running_loop().time() < deadline, notices
            await asyncio.sleep(0.05)
        revoked = await api.delete(f"/v1/tokens/{token['id']}")
        assert revoked.status_code == 204, revoked.text
        with pytest.raises(client_module.Unauthorized):
            await asyncio.wait_for(following, 60)
        assert len(notices) == 1
        assert notices[0].startswith("websocket closed:")

    async def test_without_a_websocket_it_polls(self, url, api, monkeypatch):
        def refused(*args, **kwargs):
            raise ConnectionRefusedError("no websocket here")

        monkeypatch.setattr(client_module, "ws_connect", refused)
        monkeypatch.setattr(client_module, "WS_BACKOFF_S", (0.0,))
        run_id = await start(api, task=SKY)
        notices: list[str] = []
        with CrosscheckClient(resolve_settings(url, ADMIN_TOKEN)) as client:
            seen = await asyncio.to_thread(
                lambda: list(client.follow(run_id, on_notice=notices.append))
            )
        assert notices == ["websocket unavailable (ConnectionRefusedError); polling instead"]
        assert [e.type for e in seen].count("round.critique") == 2
        assert seen[-1].type == "run.finished"
