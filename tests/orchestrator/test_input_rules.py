"""Input rules every DTO keeps: a bool is JSON true or false, a number is not a bool, a float
is finite, and a name a person reads is printable. Each refusal is a 422 naming the field."""

import copy
import json
from typing import Any

import pytest

from shared.contracts import printable
from shared.orchestration import Policy, Role, TokenCreate

pytestmark = pytest.mark.sqlite_only


def raw_json(text: str) -> dict:
    """Python's parser reads NaN and Infinity; httpx's ``json=`` would refuse to send them."""
    return {"content": text, "headers": {"content-type": "application/json"}}


def refused_at(response, *loc: str) -> str:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "ValidationError"
    found = [e for e in body["detail"] if e["loc"][-len(loc) :] == list(loc)]
    assert found, body
    return found[0]["msg"]


class TestStrictScalars:
    @pytest.mark.parametrize(
        ("policy", "field"),
        [
            ('{"max_rounds": true}', "max_rounds"),
            ('{"max_rounds": false}', "max_rounds"),
            ('{"diff_lock": "off"}', "diff_lock"),
            ('{"diff_lock": 0}', "diff_lock"),
            ('{"stop_on_evaluator_pass": "yes"}', "stop_on_evaluator_pass"),
            ('{"max_cost_usd": Infinity}', "max_cost_usd"),
            ('{"max_cost_usd": -Infinity}', "max_cost_usd"),
            ('{"max_cost_usd": NaN}', "max_cost_usd"),
            ('{"max_cost_usd": true}', "max_cost_usd"),
            ('{"latency_budget_s": NaN}', "latency_budget_s"),
        ],
    )
    async def test_a_run_with_a_loose_scalar_is_a_422_naming_the_field(self, api, policy, field):
        body = f'{{"task": "Say hi.", "policy": {policy}}}'
        refused = await api.post("/v1/runs", **raw_json(body))
        refused_at(refused, "policy", field)
        assert (await api.get("/v1/runs")).json()["items"] == []

    async def test_proper_json_still_passes_and_numbers_may_be_strings(self, api):
        policy = {"max_rounds": 2, "diff_lock": False, "max_cost_usd": 0.5}
        created = await api.post("/v1/runs", json={"task": "Say hi.", "policy": policy})
        assert created.status_code == 201, created.text
        assert Policy.model_validate({"max_rounds": "2", "max_cost_usd": "0.5"}).max_rounds == 2

    async def test_a_knowledge_weight_and_flag_are_strict(self, api):
        entry = {"kind": "lesson", "title": "Tides", "body": "Two a day."}
        refused_at(
            await api.post(
                "/v1/knowledge", **raw_json(json.dumps(entry)[:-1] + ', "weight": NaN}')
            ),
            "weight",
        )
        created = (await api.post("/v1/knowledge", json=entry)).json()
        refused_at(
            await api.patch(f"/v1/knowledge/{created['id']}", json={"retired": "true"}), "retired"
        )

    async def test_a_query_flag_still_parses_from_its_string(self, api):
        """Query parameters are strings by nature; the strict rule is for JSON bodies."""
        assert (await api.get("/v1/runs", params={"limit": "5"})).status_code == 200


UNPRINTABLE = [
    "a\x00b",  # NUL
    "admin\u202etxt.exe",  # RIGHT-TO-LEFT OVERRIDE
    "zero\u200bwidth",  # ZERO WIDTH SPACE (Cf)
    "line\u2028break",  # LINE SEPARATOR (Zl)
    "para\u2029graph",  # PARAGRAPH SEPARATOR (Zp)
    "bell\x07",  # BEL (Cc)
    "tab\tname",  # TAB (Cc)
    "lone\ud800surrogate",  # a surrogate, which JSON's \\ud800 escape produces
]
# pydantic refuses a lone surrogate itself ("unable to parse raw data as a unicode string");
# the printable rule names every other kind.


class TestPrintableNames:
    @pytest.mark.parametrize("name", UNPRINTABLE)
    async def test_a_token_name_with_a_control_or_format_character_is_a_422(self, api, name):
        refused = await api.post(
            "/v1/tokens", **raw_json(json.dumps({"name": name, "role": "service"}))
        )
        message = refused_at(refused, "name")
        assert "\ud800" in name or "must be printable" in message, message

    @pytest.mark.parametrize("name", UNPRINTABLE[:3])
    async def test_a_knowledge_title_with_a_control_or_format_character_is_a_422(self, api, name):
        entry = {"kind": "lesson", "title": name, "body": "Two a day."}
        refused = await api.post("/v1/knowledge", **raw_json(json.dumps(entry)))
        assert "must be printable" in refused_at(refused, "title")

    async def test_an_evaluations_model_name_with_a_format_character_is_a_422(self, api):
        from tests.orchestrator.test_evaluations import SUMMARY

        body: dict[str, Any] = copy.deepcopy(SUMMARY)
        body["modes"][0]["actor"] = ["openai/gpt\u202ereverse"]
        refused = await api.post("/v1/evaluations", **raw_json(json.dumps(body)))
        assert "must be printable" in refused_at(refused, "modes", "0", "actor", "0")

    @pytest.mark.parametrize("name", ["ci-bot", "Zoë's laptop", "日本語", "émoji 🚀", "a b"])
    def test_printable_names_of_any_script_pass(self, name):
        assert printable(name) == name
        assert TokenCreate(name=name, role=Role.service).name == name
