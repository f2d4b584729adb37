"""Which queries ask about a moving figure, so their results are cached for the short
lifetime (``TimeSensitivity.high``) whatever the request's own sensitivity.

A moving figure is one that changes from day to day: a price, a rate (interest, exchange,
inflation...), a stock or a share, a score, or anything asked "today", "now", "tonight",
"current(ly)", "latest" or "this week/month/year". The test is a fixed list of whole words,
case-insensitive, on the query's text alone: the same query always gets the same lifetime.
A false positive ("ocean current") costs one search more once the short lifetime passes; a
false negative would serve a stale figure for a day, so the list leans wide.
"""

from __future__ import annotations

import re

from shared.contracts import TimeSensitivity

MOVING = re.compile(
    r"\b(?:"
    r"prices?|pricing|rates?|stocks?|shares?|scores?|"
    r"today|tonight|now|current|currently|latest|"
    r"this\s+(?:week|month|year)"
    r")\b",
    re.IGNORECASE,
)


def moving_figure(query: str) -> bool:
    """Whether ``query`` asks about a figure that changes from day to day."""
    return MOVING.search(query) is not None


def sensitivity(query: str, default: TimeSensitivity) -> TimeSensitivity:
    """The cache lifetime class of one query: ``high`` for a moving figure, else the
    request's ``default``."""
    return TimeSensitivity.high if moving_figure(query) else default
