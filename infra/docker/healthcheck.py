"""Container health probe for the Crosscheck services (stdlib only: slim images have no curl).

Usage: ``python healthcheck.py PORT_VARIABLE``, for example ``healthcheck.py ACTOR_PORT``.

Reads the service's port from the named environment variable (so a port changed at run time is
still the one probed), asks ``http://127.0.0.1:<port>/healthz`` without any proxy, and exits 0
only on HTTP 200 with ``{"status": "ok"}``; 1 when unhealthy, 2 on a usage error.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

TIMEOUT_SECONDS = 3.0
MAX_BODY_BYTES = 4096


def probe(port: int) -> str | None:
    """``None`` when healthy, else why not."""
    url = f"http://127.0.0.1:{port}/healthz"
    # No proxy: an HTTP(S)_PROXY in the container's environment must not reroute a loopback probe.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=TIMEOUT_SECONDS) as response:
            status = response.status
            body = json.loads(response.read(MAX_BODY_BYTES) or b"null")
    except (
        OSError,
        ValueError,
    ) as exc:  # URLError and HTTPError are OSErrors; bad JSON a ValueError
        return f"{url}: {exc}"
    if status != 200 or not isinstance(body, dict) or body.get("status") != "ok":
        return f"{url}: HTTP {status}, body {body!r}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: healthcheck.py PORT_VARIABLE (for example ACTOR_PORT)\n")
        return 2
    variable = argv[1]
    raw = os.environ.get(variable, "")
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        sys.stderr.write(f"unhealthy: {variable} is not set to a port number (got {raw!r})\n")
        return 1
    problem = probe(int(raw))
    if problem is not None:
        sys.stderr.write(f"unhealthy: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
