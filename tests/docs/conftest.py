"""What the docs tests share: the repository, and the docs site built the way CI builds it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# pages the build makes from the code (docs/hooks/openapi.py): links to them are real
GENERATED = {DOCS / "api" / "reference.md", DOCS / "api" / "openapi.json"}


def build_site(site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` into ``site``, as scripts/test.sh and `make docs` run it."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
