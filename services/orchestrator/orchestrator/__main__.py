"""``python -m orchestrator``: serve the Orchestrator on ORCHESTRATOR_HOST:ORCHESTRATOR_PORT."""

from __future__ import annotations

from orchestrator.app import create_app
from orchestrator.settings import OrchestratorSettings
from shared.runner import serve


def main() -> None:
    serve("orchestrator", OrchestratorSettings(), create_app)


if __name__ == "__main__":
    main()
