"""Start the reviewer console in its container: ``streamlit run`` on the installed console app.

The ENTRYPOINT of the ``console`` image (infra/docker/python-service.Dockerfile). It builds the
command line ``crosscheck up`` uses (``crosscheck.launcher.ConsoleSpec``, which is not in the
image; tests/infra/test_dockerfiles.py keeps the two identical): headless, usage statistics
off, the Deploy button hidden, listening on CONSOLE_HOST:CONSOLE_PORT, and then becomes that
process (``exec``), so Streamlit runs as PID 1 and gets Docker's SIGTERM itself. Reading the
port from the environment, like the other services do, keeps it the one the healthcheck probes.

Stdlib only (the ``console`` package aside); exits 2 when CONSOLE_PORT is not a port number.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

ENV_PREFIX = "CONSOLE_"
DEFAULT_HOST = "0.0.0.0"  # in a container; `crosscheck up` binds loopback by default
DEFAULT_PORT = 8501


def app_script() -> Path:
    """The installed console's Streamlit script (in site-packages: the image has no source tree)."""
    import console

    return Path(console.__file__).parent / "app.py"


def command(env: Mapping[str, str]) -> list[str]:
    host = env.get(f"{ENV_PREFIX}HOST", DEFAULT_HOST)
    raw_port = env.get(f"{ENV_PREFIX}PORT", str(DEFAULT_PORT))
    if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
        raise ValueError(f"{ENV_PREFIX}PORT is not a port number (got {raw_port!r})")
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_script()),
        "--server.headless=true",
        f"--server.address={host}",
        f"--server.port={int(raw_port)}",
        "--browser.gatherUsageStats=false",
        "--client.toolbarMode=viewer",  # no Deploy button for reviewers
    ]


def main() -> int:
    try:
        argv = command(os.environ)
    except ValueError as exc:
        sys.stderr.write(f"run_console: {exc}\n")
        return 2
    os.execv(argv[0], argv)
    return 1  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
