"""bench.off_loop runs and says, for each comparison and size, where the engine runs it."""

import json

from bench import off_loop
from orchestrator.engine import offloop


def test_each_size_of_each_comparison_is_timed_where_the_engine_runs_it(capsys):
    assert off_loop.main(["--repeat", "1", "--hops", "50"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    timed = [r for r in rows if r["work"] != "thread hop"]
    assert {(r["work"], r["kind"]) for r in timed} == set(off_loop.LIMITS)
    assert len(timed) == 3 * len(off_loop.SIZES)
    for r in timed:
        assert r["runs_on"] == ("loop" if r["chars"] < r["limit"] else "thread"), r
        assert r["median_ms"] >= 0
        assert isinstance(r["ok"], bool)
    # the sizes straddle every limit: some of each run on the loop, some on a thread
    for pair in off_loop.LIMITS:
        sides = {r["runs_on"] for r in timed if (r["work"], r["kind"]) == pair}
        assert sides == {"loop", "thread"}, pair
    assert off_loop.LIMITS["diff lock", "code"] == offloop.LOCK_CHARS["code"]
    (hop,) = [r for r in rows if r["work"] == "thread hop"]
    assert hop["hop_cpu_us"] > 0
    assert hop["hop_wall_us"] > 0
