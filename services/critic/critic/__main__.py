"""``python -m critic``: serve the Critic on CRITIC_HOST:CRITIC_PORT."""

from __future__ import annotations

from critic.app import create_app
from critic.settings import CriticSettings
from shared.runner import serve


def main() -> None:
    serve("critic", CriticSettings(), create_app)


if __name__ == "__main__":
    main()
