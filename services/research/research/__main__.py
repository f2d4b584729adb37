"""``python -m research``: serve the Research service on RESEARCH_HOST:RESEARCH_PORT."""

from __future__ import annotations

from research.app import create_app
from research.settings import ResearchSettings
from shared.runner import serve


def main() -> None:
    serve("research", ResearchSettings(), create_app)


if __name__ == "__main__":
    main()
