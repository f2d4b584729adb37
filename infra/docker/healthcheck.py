"""Container health probe for the Crosscheck services (stdlib only: slim images have no curl).

Usage: ``python healthcheck.py PORT_VARIABLE [PATH]``, for example ``healthcheck.py ACTOR_PORT``
or, for the Streamlit console, ``healthcheck.py CONSOLE_PORT /_stcore/health``.

Reads the service's port from the named environment variable (so a port changed at run time is
still the one probed), asks ``http://127.0.0.1:<port><PATH>`` (PATH defaults to ``/healthz``)
without any proxy, and exits 0 only on HTTP 200 with ``{"status": "ok"}`` (our services) or
the plain text ``ok`` (Streamlit's health endpoint); 1 when unhealthy, 2 on a usage error.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

TIMEOUT_SECONDS = 3.0
MAX_BODY_BYTES = 4096
DEFAULT_PATH = "/healthz"


def _healthy_body(raw: bytes) -> bool:
    if raw.strip() == b"ok":  # Streamlit's /_stcore/health answers text/plain "ok"
        return True
    body = json.loads(raw or b"null")  # ValueError on anything else that is not JSON
    return isinstance(body, dict) and body.get("status") == "ok"


def probe(port: int, path: str = DEFAULT_PATH) -> str | None:
    """``None`` when healthy, else why not."""
    url = f"http://127.0.0.1:{port}{path}"
    # No proxy: an HTTP(S)_PROXY in the container's environment must not reroute a loopback probe.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=TIMEOUT_SECONDS) as response:
            status = response.status
            raw = response.read(MAX_BODY_BYTES)
            healthy = _healthy_body(raw)
    except (
        OSError,
        ValueError,
    ) as exc:  # URLError and HTTPError are OSErrors; bad JSON a ValueError
        return f"{url}: {exc}"
    if status != 200 or not healthy:
        return f"{url}: HTTP {status}, body {raw[:200]!r}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].startswith("/")):
        sys.stderr.write(
            "usage: healthcheck.py PORT_VARIABLE [/PATH] (for example ACTOR_PORT, or "
            "CONSOLE_PORT /_stcore/health)\n"
        )
        return 2
    variable = argv[1]
    path = argv[2] if len(argv) == 3 else DEFAULT_PATH
    raw = os.environ.get(variable, "")
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        sys.stderr.write(f"unhealthy: {variable} is not set to a port number (got {raw!r})\n")
        return 1
    problem = probe(int(raw), path)
    if problem is not None:
        sys.stderr.write(f"unhealthy: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
