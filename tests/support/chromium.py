"""Debian's Chromium as the browser tests and the console benchmark launch it (through the
``playwright`` package, never a browser ``playwright install`` downloads)."""

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# headless on a machine with no screen, no GPU and a small /dev/shm, and nothing fetched
# from outside: no component updates, sync or background requests
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
