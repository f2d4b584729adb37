"""Schemas fitted to the output-token cap: a small model held to the schema by a grammar, that
never stops before a field is full, still closes its JSON within the cap. Both SDKs against
the fake model's rambler (every string as long as the schema sent allows)."""

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actor.service import ActorOutput
from shared.contracts import MIN_JUSTIFICATION_CHARS, Critique, Provider, Stage
from shared.errors import OutputTruncated
from shared.providers import ModelCall, ProviderSettings, build_provider
from shared.providers.base import grammar_json_schema, strict_json_schema
from shared.providers.capabilities import CapabilityOverrides, capabilities_for
from shared.providers.fitting import (
    GRAMMAR_MAX_REPEAT,
    LONG_TEXT_FLOOR,
    budget_chars,
    fit_schema,
    longest,
)

CRITIQUE = strict_json_schema(Critique)
DRAFT = strict_json_schema(ActorOutput)


def bounds(node: Any, path: str = "") -> dict[str, int]:
    """Every maxLength and maxItems in a schema, by where it is."""
    found: dict[str, int] = {}
    if isinstance(node, dict):
        for key in ("maxLength", "maxItems"):
            if key in node:
                found[f"{path}/{key}"] = node[key]
        for key, value in node.items():
            found |= bounds(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found |= bounds(value, f"{path}/{i}")
    return found


class TestFitSchema:
    @settings(max_examples=40, deadline=None)
    @given(cap=st.integers(min_value=1_000, max_value=16_000))
    def test_the_longest_reply_fits_the_cap_and_is_never_looser(self, cap):
        for schema in (CRITIQUE, DRAFT):
            fitted = fit_schema(schema, cap)
            assert longest(fitted, fitted.get("$defs") or {}) <= budget_chars(cap)
            before, after = bounds(schema), bounds(fitted)
            assert before.keys() == after.keys()
            assert all(after[k] <= before[k] for k in before)  # only ever stricter
            # llama.cpp drops a bound above 2,000 repetitions: none is sent
            assert max(after.values()) <= GRAMMAR_MAX_REPEAT

    def test_a_schema_that_fits_already_is_sent_as_it_is(self):
        small = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}}}
        assert fit_schema(small, 100) is small

    def test_free_text_keeps_room_for_a_justification(self):
        fitted = fit_schema(CRITIQUE, 1024)
        assert fitted["properties"]["justification"]["maxLength"] >= MIN_JUSTIFICATION_CHARS
        assert LONG_TEXT_FLOOR >= MIN_JUSTIFICATION_CHARS

    def test_a_bound_the_grammar_would_drop_is_lowered_even_when_the_cap_is_large(self):
        wide: dict[str, Any] = {
            "type": "object",
            "properties": {"a": {"type": "string", "maxLength": 2_823}},
        }
        fitted = fit_schema(wide, 100_000)
        assert fitted["properties"]["a"]["maxLength"] == GRAMMAR_MAX_REPEAT
        assert wide["properties"]["a"]["maxLength"] == 2_823

    def test_a_larger_cap_leaves_more_room(self):
        small, large = fit_schema(DRAFT, 1024), fit_schema(DRAFT, 4096)
        assert (
            small["properties"]["output"]["maxLength"] < large["properties"]["output"]["maxLength"]
        )

    def test_the_caller_schema_is_not_changed(self):
        before = bounds(CRITIQUE)
        fit_schema(CRITIQUE, 800)
        assert bounds(CRITIQUE) == before


class TestWhoGetsAFittedSchema:
    @pytest.mark.parametrize(
        ("wire", "model", "fitted"),
        [
            ("openai", "SmolLM2-135M-Instruct", True),  # a local server's grammar
            ("anthropic", "critic-model", True),  # the adapter in front of one
            ("openai", "gpt-5-mini", False),
            ("openai", "gpt-4o-mini", False),
            ("anthropic", "claude-sonnet-4-6", False),
        ],
    )
    def test_by_family(self, wire, model, fitted):
        assert capabilities_for(wire, model).fit_to_cap is fitted

    def test_the_role_setting_wins_both_ways(self):
        off = CapabilityOverrides(fit_to_cap=False)
        on = CapabilityOverrides(fit_to_cap=True)
        assert capabilities_for("openai", "SmolLM2-135M-Instruct", off).fit_to_cap is False
        assert capabilities_for("openai", "gpt-4o-mini", on).fit_to_cap is True


def provider_for(kind: Provider, fake, **overrides):
    settings_ = ProviderSettings(
        openai_api_key="sk-fit-openai-0123456789",
        openai_base_url=fake.openai_base_url,
        anthropic_api_key="sk-ant-fit-0123456789",
        anthropic_base_url=fake.anthropic_base_url,
        retry_initial_s=0.01,
        retry_max_wait_s=0.05,
    )
    provider = build_provider(kind, settings_)
    if overrides:
        provider.overrides = CapabilityOverrides(**overrides)
    return provider


def critique_call(model: str, cap: int) -> ModelCall:
    return ModelCall(
        stage=Stage.critique,
        model=model,
        temperature=0.2,
        system="You are a strict critic.",
        user="<task>\nSay what colour the sky is.\n</task>\n"
        "<candidate_output>\nThe sky is green.\n</candidate_output>",
        max_tokens=cap,
    )


WIRES = [(Provider.openai, "SmolLM2-135M-Instruct"), (Provider.anthropic, "critic-model")]


class TestARamblingModel:
    @pytest.mark.parametrize(("kind", "model"), WIRES, ids=["openai", "anthropic"])
    async def test_its_critique_closes_within_the_cap(self, fake_model, kind, model):
        fake_model.faults({"ramble": True})
        provider = provider_for(kind, fake_model)
        try:
            reply = await provider.structured(critique_call(model, 1024), Critique, "critique")
        finally:
            await provider.aclose()
        assert isinstance(reply.value, Critique)
        assert reply.usage.cut_off_calls == 0
        assert len(reply.exchanges) == 1  # no retry on a larger cap was needed
        assert 0 < len(reply.value.reflection) < 2_000

    @pytest.mark.parametrize(("kind", "model"), WIRES, ids=["openai", "anthropic"])
    async def test_unfitted_it_is_cut_off_even_on_the_larger_retry(self, fake_model, kind, model):
        fake_model.faults({"ramble": True}, {"ramble": True})
        provider = provider_for(kind, fake_model, fit_to_cap=False)
        try:
            with pytest.raises(OutputTruncated):
                await provider.structured(critique_call(model, 1024), Critique, "critique")
        finally:
            await provider.aclose()


GOOD_ISSUE = {
    "dimension": "correctness",
    "severity": "major",
    "quote": "The sky is green.",
    "suggestion": "Say that the sky is blue.",
}
# 125 characters: above the record's 120, within the fitted 128
JUSTIFIED = ("Checked the colour named against the task: blue is what a clear daytime sky " * 2)[
    :125
]


def critique(issues: list, no_error_found: bool, justification: str = "") -> dict:
    value = Critique.model_validate(
        {
            "verdict": "revise" if issues else "pass",
            "confidence": 0.8,
            "issues": issues,
            "reflection": "Checked.",
            "error_class": "logic" if issues else "none",
            "no_error_found": no_error_found,
            "justification": justification,
        }
    )
    return value.model_dump(mode="json")


class TestTheRecordAsAGrammar:
    """A server with a grammar gets the critique's reflection record as two shapes, so a
    small model cannot break it; everything else gets the strict schema."""

    @pytest.mark.parametrize(
        ("issues", "no_error_found", "justification"),
        [
            ([GOOD_ISSUE], False, ""),
            ([GOOD_ISSUE], True, ""),
            ([], True, JUSTIFIED),
            ([], True, "Looks fine."),
            ([], False, JUSTIFIED),
        ],
    )
    def test_the_schema_allows_exactly_what_keeps_the_record(
        self, issues, no_error_found, justification
    ):
        payload = critique(issues, no_error_found, justification)
        kept = not Critique.model_validate(payload).record_problems()
        valid = jsonschema.Draft202012Validator(grammar_json_schema(Critique)).is_valid(payload)
        assert valid is kept
        # fitted to a cap, it keeps the same rule
        fitted = fit_schema(grammar_json_schema(Critique), 1536)
        assert jsonschema.Draft202012Validator(fitted).is_valid(payload) is kept

    async def test_a_local_model_is_sent_the_two_shapes_and_a_named_one_the_strict_schema(
        self, fake_model
    ):
        for kind, model, shapes in (
            (Provider.anthropic, "critic-model", True),
            (Provider.anthropic, "claude-sonnet-4-6", False),
            (Provider.openai, "gpt-5-mini", False),
        ):
            provider = provider_for(kind, fake_model)
            try:
                await provider.structured(critique_call(model, 1536), Critique, "critique")
            finally:
                await provider.aclose()
            body = fake_model.requests()[-1]["body"]
            sent = (
                body["tools"][0]["input_schema"]
                if kind is Provider.anthropic
                else body["response_format"]["json_schema"]["schema"]
            )
            assert ("anyOf" in sent) is shapes, model
            assert sent["type"] == "object"
