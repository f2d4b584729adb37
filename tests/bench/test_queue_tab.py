"""bench.queue_tab, tiny: one Queue tab for a few seconds on a real platform; it prints the
per-tab figures (requests to the orchestrator, bytes, CPU seconds) as JSON rows."""

import json
import subprocess
import sys

import pytest


# a whole platform and a Chromium on a shared 2-core machine: bounds, not paces
@pytest.mark.timeout(300)
def test_one_tab_for_a_few_seconds_prints_its_figures():
    done = subprocess.run(
        [sys.executable, "-m", "bench.queue_tab", "--tabs", "1", "--seconds", "4"]
        + ["--idle-seconds", "1", "--warmup", "1"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["tabs"] for r in rows] == [0, 1]
    quiet, tab = rows
    assert quiet["requests_per_min"] == 0  # no tab, no request from the console
    # the open tab polls the events feed about once a second (a loaded machine: less often)
    assert tab["requests_by_path_per_tab_min"].get("GET /v1/events", 0) >= 10
    assert tab["requests_per_tab_min"] >= tab["requests_by_path_per_tab_min"]["GET /v1/events"]
    assert tab["orchestrator_kb_per_tab_min"] > 0
    assert tab["websocket_kb_per_tab_min"] > 0
    assert tab["console_cpu_per_tab_min_s"] > 0
    assert tab["orchestrator_cpu_per_tab_min_s"] >= 0
    assert "The live queue, per open tab per minute" in done.stdout
