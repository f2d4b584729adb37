"""Dependency aliases for the Critic's routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from critic.service import CriticService
from shared.errors import ConfigurationError


def get_critic(request: Request) -> CriticService:
    critic = getattr(request.app.state, "critic", None)
    if not isinstance(critic, CriticService):
        raise ConfigurationError("the critic service is not started")
    return critic


CriticDep = Annotated[CriticService, Depends(get_critic)]
