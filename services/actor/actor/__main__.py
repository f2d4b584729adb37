"""``python -m actor``: serve the Actor on ACTOR_HOST:ACTOR_PORT."""

from __future__ import annotations

from actor.app import create_app
from actor.settings import ActorSettings
from shared.runner import serve


def main() -> None:
    serve("actor", ActorSettings(), create_app)


if __name__ == "__main__":
    main()
