"""The query-quality gate: which queries are searched, and why the others are not."""

from __future__ import annotations

import re

from shared.contracts import FailedQuery
from shared.contracts import normalise_query as normalise

__all__ = ["gate", "normalise"]

_SPACE = re.compile(r"\s+")


def gate(
    queries: list[str], *, max_queries: int, max_words: int
) -> tuple[list[str], list[FailedQuery]]:
    """Accepted queries (white space tidied, in order) and the rejected ones with a reason:
    empty, a duplicate of an earlier one, over ``max_words`` words, or beyond the cap."""
    accepted: list[str] = []
    rejected: list[FailedQuery] = []
    seen: set[str] = set()
    for raw in queries:
        tidy = _SPACE.sub(" ", raw).strip()
        key = normalise(raw)
        if not key:
            rejected.append(FailedQuery(query=raw, reason="empty query"))
        elif key in seen:
            rejected.append(FailedQuery(query=raw, reason="duplicate of an earlier query"))
        elif len(tidy.split()) > max_words:
            rejected.append(
                FailedQuery(
                    query=raw,
                    reason=f"too long: {len(tidy.split())} words, at most {max_words}",
                )
            )
        elif len(accepted) >= max_queries:
            seen.add(key)
            rejected.append(
                FailedQuery(query=raw, reason=f"over the cap of {max_queries} queries per request")
            )
        else:
            seen.add(key)
            accepted.append(tidy)
    return accepted, rejected
