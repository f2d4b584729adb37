"""Structured JSON logging that never writes a secret.

Every record, ours or a library's (httpx, openai, anthropic, uvicorn), passes the same
redactor: values under secret-looking keys are replaced, and any string that contains a
registered secret, a bearer credential or an API-key-shaped token is masked. The rendered
line is scrubbed once more, so a secret inside a traceback is masked too.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

REDACTED = "[REDACTED]"

_SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxy_authorization",
        "api_key",
        "apikey",
        "x_api_key",
        "token",
        "secret",
        "password",
        "passwd",
        "cookie",
        "set_cookie",
        "credentials",
    }
)
_SECRET_SUFFIXES = ("_api_key", "_token", "_secret", "_password")
_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), r"\1 " + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\bcc_[A-Za-z0-9_-]{16,}"), REDACTED),  # Crosscheck API tokens
    (re.compile(r"(?i)((?:x-)?api-key['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"), r"\1" + REDACTED),
)

_registered: set[str] = set()


def register_secrets(values: Iterable[str]) -> None:
    """Mask these exact values wherever they appear in a log line from now on."""
    for value in values:
        if value and len(value) >= 6:
            _registered.add(value)


def is_secret_key(key: str) -> bool:
    norm = key.lower().replace("-", "_")
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def scrub_text(text: str) -> str:
    for secret in sorted(_registered, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub(value: Any) -> Any:
    """Redact a log value recursively (dicts by key and value, sequences, strings)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_key(k) else scrub(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(scrub(v) for v in value)
    return value


def _redact_event(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        value = event_dict[key]
        event_dict[key] = REDACTED if is_secret_key(key) else scrub(value)
    return event_dict


def _scrub_rendered(_: Any, __: str, rendered: Any) -> Any:
    return scrub_text(rendered) if isinstance(rendered, str) else rendered


def configure_logging(
    service: str,
    *,
    level: str = "INFO",
    json: bool = True,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Route structlog and the standard library through one redacting JSON renderer."""
    register_secrets(secrets)

    def add_service(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Any:
        event_dict.setdefault("service", service)
        return event_dict

    pre_chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_service,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre_chain,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
            _scrub_rendered,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    structlog.configure(
        processors=[*pre_chain, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Calls below the level return at once, before any processor runs (a debug or info
        # line in a hot path then costs a method call, not a rendered and dropped record).
        wrapper_class=structlog.make_filtering_bound_logger(root.getEffectiveLevel()),
        cache_logger_on_first_use=False,
    )


def enabled(level: int) -> bool:
    """Whether a record at ``level`` would be written (for work done only to log)."""
    return logging.getLogger().isEnabledFor(level)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
