"""``crosscheck eval intercept``: the shipped labelled set through the real Critic (served
on a port) against the fake model, whose scripted catches give the rate exactly."""

import asyncio
import json

import pytest
from typer.testing import CliRunner

from critic.app import create_app
from critic.intercept import InterceptSetError, load_set, shipped_set
from crosscheck.cli import app
from shared.evaluations import INTERCEPT_TARGET
from tests.critic.conftest import issue, scripted
from tests.support.apps import uvicorn_serving
from tests.support.factories import critic_settings

ITEMS = load_set(shipped_set())


def caught(item, *, by: str) -> dict:
    """A critique that catches the planted error by its type, or only by its span."""
    found = issue(
        quote=item.span,
        error_type=item.error_type if by == "type" else "other",
        severity="critical",
    )
    return scripted(issues=[found])


def unrelated(item) -> dict:
    first = item.output.split()[0]
    return scripted(issues=[issue(quote=first, error_type="other", severity="minor")])


async def intercept(fake_model, service_token, *args: str, out, env=None):
    """The command against a served Critic; ``--no-publish`` unless ``args`` say otherwise."""
    settings = critic_settings(fake=fake_model, token=service_token)
    publishing = [] if any(a.endswith("publish") for a in args) else ["--no-publish"]
    async with uvicorn_serving(create_app(settings)) as url:
        env = {"CROSSCHECK_SERVICE_TOKEN": service_token, "CRITIC_URL": url, **(env or {})}
        command = ["eval", "intercept", *args, *publishing, "--out", str(out)]
        return await asyncio.to_thread(CliRunner().invoke, app, command, env=env)


def report_of(output: str) -> dict:
    """The JSON report, which ends the output (the in-process Critic logs to stdout too)."""
    text = "\n" + output
    return json.loads(text[text.rindex("\n{\n") + 1 :])


class TestInterceptRate:
    def test_the_shipped_set_has_two_items_per_profile(self):
        profiles = [item.profile for item in ITEMS]
        assert sorted(set(profiles)) == ["code", "general", "legal", "medical", "support"]
        assert all(profiles.count(p) == 2 for p in set(profiles))

    async def test_the_rate_is_the_scripted_one_exactly(self, fake_model, service_token, tmp_path):
        plan = ["type", "type", "span", "miss", "type", "unrelated", "type", "span", "miss", "type"]
        answers = {
            "type": lambda item: caught(item, by="type"),
            "span": lambda item: caught(item, by="span"),
            "miss": lambda item: scripted(verdict="pass", error_class="none"),
            "unrelated": unrelated,
        }
        fake_model.script(
            *[
                {"stage": "critique", "response": answers[how](item)}
                for how, item in zip(plan, ITEMS, strict=True)
            ]
        )
        result = await intercept(fake_model, service_token, "--depth", "L1", "--json", out=tmp_path)
        assert result.exit_code == 0, result.output
        report = report_of(result.output)
        assert (report["items"], report["intercepted"], report["rate"]) == (10, 7, 0.7)
        assert report["met"] is True
        missed = [r["id"] for r in report["results"] if not r["intercepted"]]
        assert missed == [ITEMS[3].id, ITEMS[5].id, ITEMS[8].id]
        by_profile = {p["profile"]: p["intercepted"] for p in report["profiles"]}
        assert sum(by_profile.values()) == 7
        calls = fake_model.requests()
        assert len(calls) == 10
        assert "senior legal reviewer" in calls[6]["body"]["system"]
        # the record under --out: the report as an evaluation of the Critic alone
        doc = json.loads((tmp_path / "results.json").read_text())
        assert (doc["set"], list(doc["modes"])) == ("intercept", ["critic"])
        summary = doc["modes"]["critic"]["summary"]
        assert (summary["items"], summary["passed"], summary["score"]) == (10, 7, 0.7)
        assert summary["critic"] == ["anthropic/claude-sonnet-4-6"]
        assert [r["id"] for r in doc["modes"]["critic"]["items"]] == [i.id for i in ITEMS]
        assert doc["config"]["target"] == INTERCEPT_TARGET
        assert doc["config"]["by_profile"]["legal"]["items"] == 2

    async def test_below_the_target_exits_2(self, fake_model, service_token, tmp_path):
        fake_model.script(
            *[
                {"stage": "critique", "response": caught(item, by="type")}
                if i < 3
                else {"stage": "critique", "response": scripted(verdict="pass")}
                for i, item in enumerate(ITEMS)
            ]
        )
        result = await intercept(fake_model, service_token, "--depth", "L1", out=tmp_path)
        assert result.exit_code == 2, result.output
        assert "intercept rate 3/10 = 30.0% (target 65%: NOT met)" in result.output

    async def test_one_profile_only(self, fake_model, service_token, tmp_path):
        legal = [item for item in ITEMS if item.profile == "legal"]
        fake_model.script(
            *[{"stage": "critique", "response": caught(item, by="type")} for item in legal]
        )
        result = await intercept(
            fake_model, service_token, "--profile", "legal", "--depth", "L2", "--json", out=tmp_path
        )
        report = report_of(result.output)
        assert (report["items"], report["rate"]) == (2, 1.0)
        assert {r["depth"] for r in report["results"]} == {"L2"}


class TestBadInput:
    def test_a_span_not_in_the_output_is_refused(self, tmp_path):
        path = tmp_path / "set.toml"
        path.write_text(
            '[[items]]\nid = "x"\nprofile = "general"\ntask = "t"\noutput = "o"\n'
            'error_type = "factual_error"\nspan = "nope"\n'
        )
        with pytest.raises(InterceptSetError, match="item 'x': `span` is not in `output`"):
            load_set(path)

    def test_a_missing_field_names_it(self, tmp_path):
        path = tmp_path / "set.toml"
        path.write_text('[[items]]\nid = "x"\nprofile = "general"\n')
        with pytest.raises(InterceptSetError, match=r"field `items.0.task`: Field required"):
            load_set(path)

    def test_a_bad_depth_is_a_usage_error(self):
        result = CliRunner().invoke(
            app,
            ["eval", "intercept", "--depth", "L7"],
            env={"CROSSCHECK_SERVICE_TOKEN": "x" * 20},
        )
        assert result.exit_code == 2
        assert "use L1, L2, L3 or auto" in result.output
