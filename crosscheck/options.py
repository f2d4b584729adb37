"""Command-line options that several commands share (`crosscheck run`, `show`, `eval` ...)."""

from __future__ import annotations

from typing import Annotated

import typer

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Orchestrator URL. Default: CROSSCHECK_URL, else var/crosscheck.env, "
        "else http://127.0.0.1:8000.",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="API token. Default: CROSSCHECK_TOKEN, else var/crosscheck.env.",
        show_default=False,
    ),
]
