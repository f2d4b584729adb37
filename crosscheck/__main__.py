"""``python -m crosscheck``: the same as the ``crosscheck`` command."""

from crosscheck.cli import app

app()
