"""``python -m sandbox``: serve the sandbox on SANDBOX_HOST:SANDBOX_PORT (127.0.0.1:8003).

The environment is read once for the settings and then scrubbed to a small allowlist, so
neither this process nor anything it starts holds a secret it does not need (the service
token stays in memory only).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from sandbox.app import create_app
from sandbox.isolation.identity import make_undumpable
from sandbox.settings import SandboxSettings
from shared.runner import serve

ENV_ALLOWLIST = frozenset({"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR"})
ENV_ALLOWED_PREFIXES = ("SANDBOX_", "CROSSCHECK_LOG")


def scrub_environment(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Drop every variable not on the allowlist; returns the names removed."""
    env = os.environ if environ is None else environ
    removed = [
        name
        for name in list(env)
        if name not in ENV_ALLOWLIST and not name.startswith(ENV_ALLOWED_PREFIXES)
    ]
    for name in removed:
        del env[name]
    return sorted(removed)


def main() -> None:
    settings = SandboxSettings()  # reads CROSSCHECK_SERVICE_TOKEN before it is scrubbed
    scrub_environment()
    make_undumpable()
    serve("sandbox", settings, create_app)


if __name__ == "__main__":
    main()
