"""The control models and the queues on the app state."""

import pytest
from pydantic import ValidationError

from fakemodel.settings import FakeModelSettings
from fakemodel.state import FakeModelState, Fault, ScriptItem, fits


def test_fault_needs_an_effect():
    with pytest.raises(ValidationError):
        Fault()
    with pytest.raises(ValidationError):
        Fault(retry_after=1.0)
    with pytest.raises(ValidationError):
        Fault(status=500, malformed=True)
    with pytest.raises(ValidationError):
        Fault(status=302)
    assert Fault(status=429, retry_after=0.2).retry_after == 0.2


def test_fits_checks_api_stage_and_match():
    item = ScriptItem(stage="critique", match="needle", api="anthropic")
    assert fits(item, api="anthropic", stage="critique", text="a needle here")
    assert not fits(item, api="openai", stage="critique", text="a needle here")
    assert not fits(item, api="anthropic", stage="draft", text="a needle here")
    assert not fits(item, api="anthropic", stage="critique", text="haystack")
    assert fits(ScriptItem(), api="openai", stage="revise", text="")


def test_take_first_fitting_in_order():
    state = FakeModelState(FakeModelSettings())
    state.script.extend(
        [
            ScriptItem(stage="critique", response="c"),
            ScriptItem(stage="draft", response="d1"),
            ScriptItem(stage="draft", response="d2"),
        ]
    )
    taken = [state.take_item(api="openai", stage="draft", text="") for _ in range(2)]
    assert [item.response if item else None for item in taken] == ["d1", "d2"]
    assert state.take_item(api="openai", stage="draft", text="") is None
    assert [item.response for item in state.script] == ["c"]


def test_reset_restores_everything():
    state = FakeModelState(FakeModelSettings(latency_ms=7, log_limit=2))
    state.script.append(ScriptItem())
    state.faults.append(Fault(status=500))
    state.latency_override_ms = 100
    state.requests.extend([{"a": 1}, {"a": 2}, {"a": 3}])
    assert len(state.requests) == 2
    assert state.latency_ms == 100
    state.next_seq()
    state.reset()
    assert not state.script
    assert not state.faults
    assert not state.requests
    assert state.latency_ms == 7
    assert state.next_seq() == 1
