"""The bench report generator on recorded results: what a reader of bench/REPORT.md sees."""

import json
from pathlib import Path

from bench import report

RECORDED = Path(__file__).parent / "recorded.json"


def rendered(tmp_path: Path) -> str:
    doc = json.loads(RECORDED.read_text())
    return report.render(doc, tmp_path).read_text()


def test_the_report_names_the_machine_the_versions_the_commit_and_the_date(tmp_path):
    text = rendered(tmp_path)
    assert "2 cores, 7936.2 MB memory, Linux 6.8.0" in text
    assert "python 3.11.14, dbos 2.4.0, langgraph 1.2.24" in text
    assert "0123456789abcdef0123456789abcdef01234567" in text
    assert "2026-12-01T02:00:00+00:00" in text


def test_peers_show_their_medians_side_by_side_with_memory(tmp_path):
    text = rendered(tmp_path)
    section = text.split("## The loop against its peers")[1].split("\n## ")[0]
    assert "| system | measurement | label | runs | wall_s | p50_ms |" in section
    assert "| p1 | seq | LangGraph + SDK | 200 | 12.5 | 55.1 |" in section
    assert "| x | seq | Crosscheck | 200 | 20 | 90.3 |" in section
    assert "| 99.0 |" not in section  # a single sample is not a figure of the report
    assert '"orchestrator": 180.0' in section  # memory per process, for each system
    assert '"langgraph": 120.5' in section
    assert "![The loop against its peers" in section


def test_each_benchmark_gets_a_plot_beside_the_report(tmp_path):
    rendered(tmp_path)
    for name in ("peers", "review_latency", "sandbox_humaneval"):
        assert (tmp_path / f"bench_{name}.png").read_bytes()[:4] == b"\x89PNG", name


def test_a_benchmark_without_figures_says_so_with_its_exit_code(tmp_path):
    text = rendered(tmp_path)
    section = text.split("## Orchestrator replicas (Postgres)")[1]
    assert "exit code 2" in section
    assert "No figures" in section
    assert not (tmp_path / "bench_replicas.png").exists()


def test_json_printed_by_a_benchmark_is_found_in_its_output():
    printed = 'table ...\n{"a": 1}\nnot json {"b": 2}\n{\n  "c": [1,\n 2]\n}\n{broken\n'
    assert report.json_objects(printed) == [{"a": 1}, {"c": [1, 2]}]


def test_the_command_reports_a_missing_results_file(tmp_path, capsys):
    assert report.main(["--results", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 1
    assert "run `make bench` first" in capsys.readouterr().err


def test_a_legend_names_the_system_and_what_was_measured() -> None:
    from bench.report import label

    row = {"row": "median", "system": "p1", "label": "P1 LangGraph + SDK", "measurement": "conc"}
    assert label(row, 0) == "P1 LangGraph + SDK conc"
    assert label({"system": "x", "measurement": "seq"}, 0) == "x seq"
    assert label({"replicas": 2}, 0) == "2"
    assert label({}, 3) == "#4"


def test_dbos_alone_gets_a_table_of_its_own_under_the_peers_medians(tmp_path):
    section = rendered(tmp_path).split("## The loop against its peers")[1].split("\n## ")[0]
    medians, _, after = section.partition("| database | steps |")
    assert "| x | seq | Crosscheck |" in medians  # the medians' table comes first
    assert after.startswith(" a_runs | a_cpu_ms_per_workflow |")
    assert "| sqlite | 6 | 200 | 6.4 |" in after
