"""bench.peers' P1 nodes (LangGraph's node functions over the official SDKs, rendering the
services' own templates) run a whole loop against the fake model: a template that gains a
variable the nodes do not pass breaks this test, not the next `make bench`. LangGraph
itself is only in the bench dependency group; the nodes do not need it."""

import json
import subprocess
import sys
from pathlib import Path

from bench.peers import RunState, SdkNodes, above_the_calls, check_final, plain_loop
from tests.support.factories import OPENAI_KEY


async def test_the_plain_loop_runs_p1s_nodes_to_a_pass_in_six_calls(fake_model):
    nodes = SdkNodes(fake_model.url, OPENAI_KEY)
    state = RunState(
        run_id="p1",
        task="Summarise why reflection loops need an independent critic. [bench:3]",
        calls=0,
        reflections=[],
    )
    try:
        final = await plain_loop(nodes, state)
    finally:
        await nodes.aclose()
    assert (final["status"], final["stop_reason"], final["round"]) == (
        "succeeded",
        "critic_pass",
        3,
    )
    assert check_final(final) == "ok"  # the check every system's runs must pass
    stages = [c["stage"] for c in fake_model.requests()]
    assert stages == ["draft", "critique", "revise", "critique", "revise", "critique"]
    assert all(c["status"] == 200 for c in fake_model.requests())


def test_the_table_says_what_each_orchestrator_costs_above_the_calls_alone():
    def median(process: str, cpu: float) -> dict[str, object]:
        return {"cpu_ms_per_run_by_process": {process: cpu, "actor": 9.0}}

    medians = {
        ("p0", "seq"): median("plain loop", 7.0),
        ("p2", "seq"): median("langgraph", 18.0),
        ("p2s", "seq"): median("langgraph", 22.5),
        ("x", "seq"): median("orchestrator", 30.5),
    }
    floor = {"database": "sqlite", "a_cpu_ms_per_workflow": 6.5, "b_cpu_ms_per_workflow": 8.0}
    lines = above_the_calls(medians, [floor])
    assert (
        "P2 LangGraph -> Crosscheck services 11.0 ms, P2 at LangGraph's sync durability 15.5 ms, "
        "X Crosscheck 23.5 ms" in lines[0]
    )
    assert "DBOS alone on sqlite" in lines[1]
    assert "the calls plus DBOS: 13.5 ms" in lines[1]
    assert not any(line.startswith("(b)") for line in lines)  # no (b) samples, no (b) line
    assert above_the_calls({("x", "seq"): median("orchestrator", 30.5)}, [floor]) == []


def test_the_dbos_floor_runs_every_workflow_and_prints_its_cpu():
    done = subprocess.run(
        [sys.executable, "-m", "bench.dbos_floor", "--runs", "3", "--concurrency", "4"]
        + ["--lat", "0.01", "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[2],  # the repository root, where bench/ is
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert (row["database"], row["steps"], row["a_runs"], row["b_concurrency"]) == (
        "sqlite",
        2,
        3,
        4,
    )
    assert row["a_cpu_ms_per_workflow"] > 0
    assert row["b_cpu_ms_per_workflow"] > 0
