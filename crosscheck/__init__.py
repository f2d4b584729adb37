"""Crosscheck: the command line, and the Python client of the Orchestrator's runs API.

from crosscheck import Crosscheck, NeedHumanIntervention
"""

from crosscheck.client import (
    ApiError,
    AsyncCrosscheck,
    BadRequest,
    Conflict,
    Crosscheck,
    CrosscheckError,
    Forbidden,
    InvalidModelOutput,
    MethodNotAllowed,
    NeedHumanIntervention,
    NotFound,
    PayloadTooLarge,
    RunFailed,
    RunTimeout,
    ServerError,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
    ValidationFailed,
)
from shared.orchestration import RunCreated, RunPublic, RunStatus, StopReason

__all__ = [
    "ApiError",
    "AsyncCrosscheck",
    "BadRequest",
    "Conflict",
    "Crosscheck",
    "CrosscheckError",
    "Forbidden",
    "InvalidModelOutput",
    "MethodNotAllowed",
    "NeedHumanIntervention",
    "NotFound",
    "PayloadTooLarge",
    "RunCreated",
    "RunFailed",
    "RunPublic",
    "RunStatus",
    "RunTimeout",
    "ServerError",
    "StopReason",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "ValidationFailed",
]
