"""Dependency aliases for the Actor's routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from actor.service import ActorService
from shared.errors import ConfigurationError


def get_actor(request: Request) -> ActorService:
    actor = getattr(request.app.state, "actor", None)
    if not isinstance(actor, ActorService):
        raise ConfigurationError("the actor service is not started")
    return actor


ActorDep = Annotated[ActorService, Depends(get_actor)]
