"""The ``crosscheck`` command: start the platform locally, and (later) submit and follow runs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from crosscheck.launcher import Plan, Supervisor, plan, tail, write_credentials

app = typer.Typer(
    help="Crosscheck: reflective generation with an Actor, a Critic and a person in the loop.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def main() -> None:
    """Crosscheck command line."""


def _banner(p: Plan, sup: Supervisor, credentials: Path) -> None:
    table = Table(title="Crosscheck is up", show_lines=False)
    table.add_column("service")
    table.add_column("URL")
    table.add_column("what")
    table.add_column("log")
    for running in sup.running:
        spec = running.spec
        table.add_row(spec.name, spec.url(p.env), spec.what, str(running.log_path))
    console.print(table)
    if p.demo:
        console.print(
            "[bold yellow]DEMO MODE: the model is scripted, not a real LLM.[/] "
            f"Missing: {', '.join(p.missing_keys)}. Set the keys to use real providers."
        )
    for var, what in (
        ("CROSSCHECK_ADMIN_TOKEN", "admin token for the runs API (mints other tokens)"),
        ("CROSSCHECK_SERVICE_TOKEN", "token between services (actor, critic, sandbox)"),
    ):
        value = "from your environment" if os.environ.get(var) else p.env[var]
        console.print(f"{var} ({what}): {value}")
    console.print(f"`crosscheck run` reads the URL and admin token from {credentials}.")
    console.print("Press Ctrl-C to stop everything.")


@app.command()
def up(
    log_dir: Annotated[
        Path, typer.Option(help="Where each service writes its log.", envvar="CROSSCHECK_LOG_DIR")
    ] = Path("var/logs"),
    sandbox: Annotated[
        bool, typer.Option(help="Start the code sandbox (needs bubblewrap on Linux).")
    ] = True,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds each service may take to become healthy.")
    ] = 60.0,
) -> None:
    """Start every service on loopback (the scripted demo model when no API keys are set)."""
    p = plan(dict(os.environ), with_sandbox=sandbox)
    sup = Supervisor(p, log_dir)
    try:
        for spec in p.services:
            with console.status(f"starting {spec.name} on {spec.url(p.env)} ..."):
                running = sup.start(spec)
                problem = sup.wait_healthy(running, startup_timeout)
            if problem:
                console.print(f"[red]{spec.name} failed to start: {problem}[/]")
                console.print(tail(running.log_path))
                raise typer.Exit(1)
            console.print(f"[green]{spec.name}[/] healthy")
        credentials = write_credentials(p.env, Path("var"))
        _banner(p, sup, credentials)
        while True:
            dead = sup.dead()
            if dead:
                for running in dead:
                    console.print(
                        f"[red]{running.spec.name} stopped (exit {running.process.returncode})[/]"
                    )
                    console.print(tail(running.log_path))
                raise typer.Exit(1)
            time.sleep(0.5)
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        sup.stop()
        console.print("all services stopped")


if __name__ == "__main__":
    app()
