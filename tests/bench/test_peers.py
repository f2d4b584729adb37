"""bench.peers' P1 nodes (LangGraph's node functions over the official SDKs, rendering the
services' own templates) run a whole loop against the fake model: a template that gains a
variable the nodes do not pass breaks this test, not the next `make bench`. LangGraph
itself is only in the bench dependency group; the nodes do not need it."""

from typing import Any, cast

from bench.peers import RunState, SdkNodes, route
from tests.support.factories import OPENAI_KEY


async def test_p1_nodes_run_draft_critique_and_revise_to_a_pass(fake_model):
    nodes = SdkNodes(fake_model.url, OPENAI_KEY)
    state = RunState(
        run_id="p1",
        task="Summarise why reflection loops need an independent critic. [bench:3]",
        calls=0,
        reflections=[],
    )

    def then(update: dict[str, Any]) -> RunState:  # what LangGraph does with a node's update
        return cast(RunState, {**state, **update})

    try:
        state = then(await nodes.draft(state))
        while True:
            state = then(await nodes.critique(state))
            if route(state) == "end":
                break
            state = then(await nodes.revise(state))
    finally:
        await nodes.aclose()
    assert (state["status"], state["stop_reason"], state["round"]) == (
        "succeeded",
        "critic_pass",
        3,
    )
    assert state["calls"] == 6
    stages = [c["stage"] for c in fake_model.requests()]
    assert stages == ["draft", "critique", "revise", "critique", "revise", "critique"]
    assert all(c["status"] == 200 for c in fake_model.requests())
