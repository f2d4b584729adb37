"""`crosscheck eval humaneval|text`: the shipped sets, then whole evaluations against a real
Orchestrator with real Actor and Critic apps on the fake model server, whose scripted
answers make every score known in advance."""

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from crosscheck.eval import report
from crosscheck.eval.harness import Outcome
from crosscheck.eval.scoring import check_text, judge_config, parse_score
from crosscheck.eval.sets import PROFILES, load, text_items
from tests.crosscheck.test_cli import flat
from tests.orchestrator import conftest as orchestrator_fixtures
from tests.orchestrator.conftest import ADMIN_TOKEN

# ---------------------------------------------------------------- the sets


class TestShippedTextSet:
    def test_forty_tasks_over_every_profile_each_with_a_planted_error(self):
        tasks = text_items(variants=False)
        items = text_items()
        assert len(tasks) == 40
        assert len(items) == 80
        assert {t.profile for t in tasks} == set(PROFILES)

    def test_each_reference_passes_its_checks_and_each_planted_draft_fails_them(self):
        for item in text_items():
            assert check_text(item, item.reference).passed, item.id
            if item.planted is not None:
                draft = item.task.split("<draft>")[1]
                assert not check_text(item, draft).passed, item.id

    def test_a_seed_draws_the_same_items_and_another_seed_others(self):
        first = [i.id for i in load("text", limit=10, seed=1)]
        assert first == [i.id for i in load("text", limit=10, seed=1)]
        assert first != [i.id for i in load("text", limit=10, seed=2)]
        assert [i.id for i in load("text", limit=3)] == [
            "general-sky",
            "general-sky~1",
            "general-boiling",
        ]

    def test_humaneval_is_the_packages_own_164_problems_with_their_check(self):
        items = load("humaneval")
        assert len(items) == 164
        assert items[0].id == "HumanEval/0"
        assert "def check(candidate)" in (items[0].tests or "")
        assert items[0].entry_point == "has_close_elements"

    def test_a_text_set_whose_variant_lacks_its_error_is_refused(self, tmp_path):
        bad = tmp_path / "set.toml"
        bad.write_text(
            '[[task]]\nid = "x"\nprofile = "general"\ntask = "t"\nreference = "r"\n'
            '[[task.variant]]\nerror = "wrong"\ntext = "fine"\n'
        )
        with pytest.raises(ValueError, match="must contain its error"):
            text_items(bad)


class TestScoring:
    def test_alternatives_and_case_and_spacing_do_not_matter(self):
        [item] = [i for i in text_items(variants=False) if i.id == "general-speed-of-light"]
        assert check_text(item, "about 300 000 KM/S").passed
        check = check_text(item, "about 30,000 km/s")
        assert check.missing
        assert check.present == ("30,000 km/s",)

    def test_the_judge_is_off_unless_a_model_is_named(self):
        assert judge_config({}) is None
        config = judge_config(
            {"CROSSCHECK_EVAL_JUDGE_MODEL": "m", "OPENAI_API_KEY": "sk-secret-value"}
        )
        assert config is not None
        assert config.provider == "openai"
        assert "sk-secret-value" not in json.dumps(config.public())

    def test_a_judge_reply_gives_a_score(self):
        assert parse_score('{"score": 4, "reason": "ok"}') == 4
        assert parse_score("Score: 2") == 2


class TestArguments:
    def invoke(self, *args, env=None):
        from typer.testing import CliRunner

        from crosscheck.cli import app

        return CliRunner().invoke(app, ["eval", *args], env=env)

    def test_an_unknown_mode_is_refused(self):
        result = self.invoke("text", "--mode", "double")
        assert result.exit_code == 2
        assert "use single, self or cross" in flat(result.output)

    def test_no_sandbox_without_a_service_token_says_where_to_get_one(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("CROSSCHECK_SERVICE_TOKEN", raising=False)
        env = {"CROSSCHECK_TOKEN": "t", "CROSSCHECK_URL": "http://127.0.0.1:9"}
        result = self.invoke("humaneval", "--no-sandbox", "--limit", "1", env=env)
        assert result.exit_code == 1
        assert "needs the service token" in flat(result.output)

    def test_help_names_the_modes_and_the_outputs(self):
        result = self.invoke("humaneval", "--help")
        assert result.exit_code == 0
        said = flat(result.output)
        assert "single" in said
        assert "results.json" in said


class TestJudge:
    def test_the_judge_asks_its_own_model_and_scales_the_rubric_to_0_1(self, fake_model):
        from crosscheck.eval.scoring import Judge, JudgeConfig
        from tests.support.factories import OPENAI_KEY

        fake_model.script({"match": "You grade an answer", "raw": '{"score": 4, "reason": "ok"}'})
        judge = Judge(JudgeConfig("openai", "judge-model", fake_model.openai_base_url, OPENAI_KEY))
        [item] = text_items(variants=False)[:1]
        assert judge.score(item, item.reference) == 0.75
        [call] = fake_model.requests()
        assert call["body"]["model"] == "judge-model"


class TestReport:
    def test_latency_percentiles_interpolate(self):
        assert report.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
        assert report.percentile([], 0.5) is None
        assert report.percentile(list(map(float, range(1, 101))), 0.95) == pytest.approx(95.05)


# ---------------------------------------------------------------- end to end

peers = orchestrator_fixtures.peers
orchestrator_settings = orchestrator_fixtures.orchestrator_settings
orchestrator_app = orchestrator_fixtures.orchestrator_app
sandbox_url = orchestrator_fixtures.sandbox_url  # the real one: HumanEval is scored there


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str


async def evaluate(url: str, *args: str) -> Ran:
    """`python -m crosscheck eval ...` as a user runs it (a child process, so the services on
    this test's event loop keep serving while it waits)."""
    env = {**os.environ, "CROSSCHECK_URL": url, "CROSSCHECK_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crosscheck",
        "eval",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 500)
    assert process.returncode is not None
    return Ran(process.returncode, stdout.decode(), stderr.decode())


async def published(url: str, token: str = ADMIN_TOKEN) -> Any:
    """The latest evaluation the orchestrator keeps (None: none)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        response = await http.get("/v1/evaluations/latest")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return response.json()


async def run_status(url: str, run_id: str) -> str:
    import httpx

    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        response = await http.get(f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    return str(response.json()["status"])


def summaries(out) -> dict:
    doc = json.loads((out / "results.json").read_text())
    return {mode: body["summary"] for mode, body in doc["modes"].items()}


TEXT_SET = """
[[task]]
id = "t1"
profile = "general"
task = "Marker T1: name the capital of France."
reference = "The capital of France is Paris."
required = ["Paris"]
forbidden = ["Lyon"]
"""
for number in (2, 3, 4):
    TEXT_SET += (
        TEXT_SET.split("[[task]]")[1]
        .replace("T1", f"T{number}")
        .replace('"t1"', f'"t{number}"')
        .join(["[[task]]", ""])
    )


# As long as the generic draft it replaces: a revision that shrinks by more than 30 % is
# rolled back and asked for again (the policy's shrink_threshold).
REVISED_T2 = (
    "Here is a direct answer: the capital of France is Paris. It states the main point first, "
    "then the detail: Paris is the seat of the government and of the parliament.\n(revised)"
)


def script_text(fake_model, *, copies: int) -> None:
    """T1's draft is right; T2's draft is the built-in generic answer and its revision is
    right; T3 is never right; T4's draft names the forbidden city and keeps it."""
    for _ in range(copies):
        fake_model.script(
            {
                "stage": "draft",
                "match": "Marker T1",
                "response": {"output": "The capital of France is Paris.", "uncertainties": []},
            },
            {
                "stage": "draft",
                "match": "Marker T4",
                "response": {"output": "The capital of France is Lyon.", "uncertainties": []},
            },
        )
    fake_model.script(
        {
            "stage": "revise",
            "match": "Marker T2",
            "response": {"output": REVISED_T2, "uncertainties": []},
        }
    )


@pytest.fixture
def text_set(tmp_path):
    path = tmp_path / "set.toml"
    path.write_text(TEXT_SET)
    return path


@pytest.fixture
async def url(orchestrator_app):
    from tests.support.apps import uvicorn_serving

    async with uvicorn_serving(orchestrator_app) as served:
        yield served


@pytest.fixture
def database_url(tmp_path):
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


# Each starts a whole platform and runs the CLI as a child process: minutes on a busy machine.
e2e = [pytest.mark.slow, pytest.mark.timeout(600)]


class TestTextSet:
    pytestmark = e2e

    async def test_single_counts_the_draft_and_cross_the_loop(
        self, url, fake_model, text_set, tmp_path
    ):
        script_text(fake_model, copies=2)
        out = tmp_path / "out"
        ran = await evaluate(
            url,
            "text",
            "--set",
            str(text_set),
            "--mode",
            "single",
            "--mode",
            "cross",
            "--concurrency",
            "2",
            "--out",
            str(out),
        )
        assert ran.exit_code == 0, ran.stderr
        got = summaries(out)
        assert (got["single"]["passed"], got["single"]["items"]) == (1, 4)
        assert got["single"]["rounds"] == 1
        assert got["single"]["escalations"] is None
        assert (got["cross"]["passed"], got["cross"]["score"]) == (2, 0.5)
        assert got["cross"]["rounds"] == 2
        assert got["cross"]["escalations"] == 0
        assert got["cross"]["critic"]
        assert got["cross"]["actor"] != got["cross"]["critic"]
        assert got["cross"]["tokens"] > got["single"]["tokens"] > 0
        table = (out / "results.md").read_text()
        assert "| single | 4 | 25.0% |" in table
        assert "| cross | 4 | 50.0% |" in table
        assert (out / "score_vs_cost.png").read_bytes()[:4] == b"\x89PNG"
        assert "25.0%" in ran.stdout
        assert "50.0%" in ran.stdout
        # published to the orchestrator it ran against, where the console reads it
        assert "published to " + url in flat(ran.stderr)
        latest = await published(url)
        assert (latest["dataset"], latest["items"], latest["seed"]) == ("text", 4, None)
        assert [m["mode"] for m in latest["modes"]] == ["single", "cross"]
        single, cross = latest["modes"]
        assert (single["score"], cross["score"]) == (0.25, 0.5)
        assert (single["escalations"], cross["escalations"]) == (None, 0)
        assert cross["critic"] == got["cross"]["critic"]
        assert cross["cost_usd"] == pytest.approx(got["cross"]["cost_usd"])
        assert latest["started_at"] <= latest["finished_at"]
        assert latest["config"]["set_file"] == str(text_set)
        assert "url" not in latest["config"]

    async def test_the_shipped_set_runs_its_code_topic_items_as_text_to_the_end(
        self, url, fake_model, tmp_path
    ):
        """Its `profile = "code"` items are prose about code: text runs critiqued as general
        text, not refused for naming the Critic's code-only profile."""
        out = tmp_path / "out"
        ran = await evaluate(
            url, "text", "--limit", "3", "--seed", "4", "--mode", "cross", "--out", str(out)
        )
        assert ran.exit_code == 0, ran.stderr
        doc = json.loads((out / "results.json").read_text())
        items = doc["modes"]["cross"]["items"]
        assert [i["id"] for i in items] == [
            "general-speed-of-light~1",
            "code-utf8",
            "support-cancel-plan",
        ]
        assert [i["profile"] for i in items] == ["general", "code", "support"]
        assert all(i["status"] not in ("failed", "timeout") for i in items), items
        assert all(i["rounds"] >= 1 for i in items)

    async def test_single_makes_one_actor_call_per_item_and_asks_no_critic(
        self, url, fake_model, tmp_path
    ):
        out = tmp_path / "out"
        ran = await evaluate(
            url, "text", "--limit", "3", "--seed", "4", "--mode", "single", "--out", str(out)
        )
        assert ran.exit_code == 0, ran.stderr
        items = json.loads((out / "results.json").read_text())["modes"]["single"]["items"]
        assert [(i["status"], i["rounds"]) for i in items] == [("draft", 1)] * 3
        calls = fake_model.requests()
        assert [c["stage"] for c in calls] == ["draft"] * 3
        assert {c["api"] for c in calls} == {"openai"}  # the Critic is on anthropic
        for item in items:  # the paused runs are not left waiting for a person
            assert (await run_status(url, item["run_id"])) == "cancelled"

    async def test_self_on_a_platform_whose_critic_is_on_another_provider_is_refused(
        self, url, fake_model, tmp_path
    ):
        out = tmp_path / "out"
        ran = await evaluate(url, "text", "--limit", "1", "--mode", "self", "--out", str(out))
        assert ran.exit_code == 2
        said = flat(ran.stderr)
        assert "refused" in said
        assert "CRITIC_PROVIDER=openai" in said
        assert not out.exists()

    async def test_self_and_cross_at_once_are_refused_before_any_run(self, url, fake_model):
        ran = await evaluate(url, "text", "--mode", "self", "--mode", "cross")
        assert ran.exit_code == 2
        assert "different platforms" in flat(ran.stderr)
        assert fake_model.requests() == []


class TestSelfOnOneProvider:
    pytestmark = e2e

    @pytest.fixture
    def peer_overrides(self):
        """The Critic on the Actor's provider, as CRITIC_PROVIDER=openai with
        CROSSCHECK_ALLOW_SAME_PROVIDER=1 starts it."""
        return {
            "actor": {"model_max_attempts": 2},
            "critic": {
                "model_max_attempts": 2,
                "critic_provider": "openai",
                "allow_same_provider": True,
            },
        }

    async def test_self_runs_the_loop_and_cross_is_refused(
        self, url, fake_model, text_set, tmp_path
    ):
        script_text(fake_model, copies=1)
        out = tmp_path / "self"
        ran = await evaluate(
            url,
            "text",
            "--set",
            str(text_set),
            "--mode",
            "self",
            "--out",
            str(out),
            "--no-publish",
        )
        assert ran.exit_code == 0, ran.stderr
        got = summaries(out)["self"]
        assert (got["passed"], got["items"]) == (2, 4)
        assert got["actor"] == got["critic"]
        assert "published" not in flat(ran.stderr)
        assert await published(url) is None  # --no-publish: the files alone
        refused = await evaluate(
            url, "text", "--set", str(text_set), "--mode", "cross", "--out", str(tmp_path / "cross")
        )
        assert refused.exit_code == 2
        assert "both on openai" in flat(refused.stderr)


def canonical(problem, marker: bool = True) -> str:
    return problem.reference + ("# revised\n" if marker else "")


class TestHumanEval:
    pytestmark = e2e

    async def test_pass_at_1_of_the_draft_and_after_critique(self, url, fake_model, tmp_path):
        """Of five problems, two drafts pass their tests; the critique of two more leads to a
        passing revision; the last never passes and escalates at --max-rounds 2."""
        items = load("humaneval", limit=5, seed=1)
        assert not any("prime" in i.task.lower() for i in items)  # the fake's primes script
        for copy in range(2):
            for item in items[:2]:
                fake_model.script(
                    {
                        "stage": "draft",
                        "match": f"<entry_point>{item.entry_point}<",
                        "response": {"output": canonical(item), "uncertainties": []},
                    }
                )
            for item in items[2:]:
                wrong = item.prompt + "    return None\n"
                fake_model.script(
                    {
                        "stage": "draft",
                        "match": f"<entry_point>{item.entry_point}<",
                        "response": {"output": wrong, "uncertainties": []},
                    }
                )
            if copy == 0:
                for item in items[2:4]:
                    fake_model.script(
                        {
                            "stage": "revise",
                            "match": f"<entry_point>{item.entry_point}<",
                            "response": {"output": canonical(item), "uncertainties": []},
                        }
                    )
        out = tmp_path / "out"
        ran = await evaluate(
            url,
            "humaneval",
            "--limit",
            "5",
            "--seed",
            "1",
            "--mode",
            "single",
            "--mode",
            "cross",
            "--max-rounds",
            "2",
            "--out",
            str(out),
        )
        assert ran.exit_code == 0, ran.stderr
        got = summaries(out)
        assert (got["single"]["passed"], got["single"]["items"]) == (2, 5)
        assert (got["cross"]["passed"], got["cross"]["items"]) == (4, 5)
        assert got["cross"]["escalations"] == 1
        assert got["cross"]["seen_by_person"] == pytest.approx(0.2)
        doc = json.loads((out / "results.json").read_text())
        assert doc["config"]["seed"] == 1
        assert doc["config"]["limit"] == 5
        assert doc["config"]["sandbox"] is True
        by_id = {o["id"]: o for o in doc["modes"]["cross"]["items"]}
        assert by_id[items[4].id]["status"] == "escalated"


# ---------------------------------------------------------------- publishing


def outcome(mode: str, item: int, score: float) -> Outcome:
    critic = {} if mode == "single" else {"provider": "anthropic", "model": "claude"}
    if mode == "self":
        critic = {"provider": "openai", "model": "gpt"}
    return Outcome(
        id=f"t{item}",
        mode=mode,
        profile="general",
        run_id=f"run_{mode}_{item}",
        status="succeeded",
        stop_reason="critic_pass",
        score=score,
        rounds=1 if mode == "single" else 2,
        input_tokens=100,
        output_tokens=50,
        cost_usd=0.001 if mode == "single" else 0.003,
        latency_s=1.0 + item,
        escalated=False,
        seen_by_person=False,
        actor={"provider": "openai", "model": "gpt"},
        critic=critic,
    )


def results(tmp_path, name: str, scores: dict[str, list[float]]):
    """A results folder as `crosscheck eval text --limit 2 --seed 7` writes it."""
    from datetime import UTC, datetime

    config = {"set_file": "shipped text set", "limit": 2, "seed": 7, "items": 2}
    runs = {m: [outcome(m, i, s) for i, s in enumerate(v)] for m, v in scores.items()}
    config |= {"modes": list(scores), "url": "http://user:secret@127.0.0.1:8000"}
    doc = report.document("text", config, runs, started=datetime.now(UTC))
    report.write(doc, tmp_path / name)
    return tmp_path / name


class TestPublishing:
    """`crosscheck eval report --publish` against a real Orchestrator that starts no peers
    (publishing runs nothing); the end-to-end runs above publish at their end."""

    @pytest.fixture
    def peers(self):
        return {}

    @pytest.fixture
    def sandbox_url(self):
        from tests.support.servers import free_port

        return f"http://127.0.0.1:{free_port()}"

    async def test_report_publishes_the_modes_side_by_side(self, url, tmp_path):
        cross = results(tmp_path, "cross", {"single": [1.0, 0.0], "cross": [1.0, 1.0]})
        own = results(tmp_path, "self", {"self": [1.0, 0.0]})
        out = tmp_path / "combined"
        ran = await evaluate(url, "report", str(cross), str(own), "--out", str(out), "--publish")
        assert ran.exit_code == 0, ran.stderr
        assert "published to " + url in flat(ran.stderr)
        latest = await published(url)
        assert [m["mode"] for m in latest["modes"]] == ["single", "self", "cross"]
        assert [m["score"] for m in latest["modes"]] == [0.5, 0.5, 1.0]
        assert (latest["limit"], latest["seed"], latest["items"]) == (2, 7, 2)
        combined = json.loads((out / "results.json").read_text())
        assert latest["finished_at"][:19] == combined["finished"][:19]
        assert "secret" not in json.dumps(latest)  # the URL the harness used stays local
        assert latest["config"]["combined_from"] == [str(cross), str(own)]

    async def test_a_refused_publish_is_a_warning_and_the_files_stay(self, url, api, tmp_path):
        from tests.orchestrator.conftest import mint

        reviewer = await mint(api, "reviewer")
        folder = results(tmp_path, "cross", {"single": [1.0, 0.0], "cross": [1.0, 1.0]})
        out = tmp_path / "combined"
        ran = await evaluate(
            url, "report", str(folder), "--out", str(out), "--publish", "--token", reviewer
        )
        assert ran.exit_code == 0, ran.stderr
        said = flat(ran.stderr)
        assert "warning: not published" in said
        assert "needs the role service" in said
        assert reviewer not in said
        assert (out / "results.json").is_file()
        assert await published(url) is None

    def test_an_unreachable_orchestrator_is_a_warning(self, tmp_path):
        from typer.testing import CliRunner

        from crosscheck.cli import app
        from tests.support.servers import free_port

        folder = results(tmp_path, "cross", {"single": [1.0], "cross": [1.0]})
        out = tmp_path / "combined"
        nowhere = f"http://127.0.0.1:{free_port()}"
        args = ["eval", "report", str(folder), "--out", str(out), "--publish", "--url", nowhere]
        result = CliRunner().invoke(app, [*args, "--token", "tok-0123456789"])
        assert result.exit_code == 0, result.output
        said = flat(result.output)
        assert f"warning: not published: cannot reach the orchestrator at {nowhere}" in said
        assert f"report {out} --publish" in said
        assert (out / "results.json").is_file()

    def test_report_without_publish_sends_nothing(self, tmp_path):
        from typer.testing import CliRunner

        from crosscheck.cli import app

        folder = results(tmp_path, "cross", {"single": [1.0], "cross": [1.0]})
        result = CliRunner().invoke(
            app, ["eval", "report", str(folder), "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 0, result.output
        assert "published" not in flat(result.output)


class TestInterceptPublishing:
    """`crosscheck eval intercept` publishes each rate to a real Orchestrator (which starts no
    peers: the command calls the Critic itself, served here on the fake model)."""

    @pytest.fixture
    def peers(self):
        return {}

    @pytest.fixture
    def sandbox_url(self):
        from tests.support.servers import free_port

        return f"http://127.0.0.1:{free_port()}"

    @staticmethod
    def script(fake_model, caught: int) -> None:
        from tests.critic.conftest import scripted
        from tests.critic.test_intercept import ITEMS
        from tests.critic.test_intercept import caught as catch

        missed = scripted(verdict="pass", error_class="none")
        fake_model.script(
            *[
                {"stage": "critique", "response": catch(item, by="type") if n < caught else missed}
                for n, item in enumerate(ITEMS)
            ]
        )

    async def test_each_rate_is_published_and_its_history_reads_back(
        self, url, fake_model, service_token, tmp_path
    ):
        from tests.critic.test_intercept import intercept

        history: list[float] = []
        for caught in (7, 3):
            self.script(fake_model, caught)
            out = tmp_path / f"caught-{caught}"
            args = ("--depth", "L1", "--url", url, "--api-token", ADMIN_TOKEN, "--publish")
            ran = await intercept(fake_model, service_token, *args, out=out)
            assert ran.exit_code == (0 if caught == 7 else 2), ran.output
            assert "published to " + url in flat(ran.stderr)
            assert (out / "results.json").is_file()
            history.insert(0, caught / 10)
        import httpx

        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            kept = (await http.get("/v1/evaluations", params={"dataset": "intercept"})).json()
            scraped = (await http.get("/metrics")).text
        assert [e["modes"][0]["score"] for e in kept] == history == [0.3, 0.7]
        latest = kept[0]
        assert [m["mode"] for m in latest["modes"]] == ["critic"]
        assert (latest["items"], latest["modes"][0]["passed"]) == (10, 3)
        assert latest["modes"][0]["critic"] == ["anthropic/claude-sonnet-4-6"]
        assert latest["config"]["target"] == 0.65
        assert latest["config"]["met"] is False
        assert sum(p["items"] for p in latest["config"]["by_profile"].values()) == 10
        assert "url" not in latest["config"]  # where the Critic was reached stays local
        assert "crosscheck_intercept_rate 0.3" in scraped

    async def test_a_refused_publish_is_a_warning_and_the_exit_code_is_the_rates(
        self, url, api, fake_model, service_token, tmp_path
    ):
        from tests.critic.test_intercept import intercept, report_of
        from tests.orchestrator.conftest import mint

        reviewer = await mint(api, "reviewer")
        self.script(fake_model, 7)
        args = ("--depth", "L1", "--url", url, "--api-token", reviewer, "--publish", "--json")
        ran = await intercept(fake_model, service_token, *args, out=tmp_path / "refused")
        assert ran.exit_code == 0, ran.output
        said = flat(ran.stderr)
        assert "warning: not published" in said
        assert "needs the role service" in said
        assert f"The report is in {tmp_path / 'refused' / 'results.json'}" in said
        assert reviewer not in said
        assert report_of(ran.stdout)["rate"] == 0.7

        self.script(fake_model, 3)
        ran = await intercept(fake_model, service_token, "--depth", "L1", out=tmp_path / "quiet")
        assert ran.exit_code == 2, ran.output  # --no-publish (the helper's default)
        assert "published" not in flat(ran.output)
        latest = await api.get("/v1/evaluations/latest", params={"dataset": "intercept"})
        assert latest.status_code == 404
