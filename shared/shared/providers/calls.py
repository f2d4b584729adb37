"""What one model call is (``ModelCall``) and what a provider read from its reply
(``RawReply``): the values the provider seam (``base``) and its telemetry share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.contracts import Stage

TRUNCATED = frozenset({"length", "max_tokens"})  # OpenAI's / Anthropic's "cut off by the cap"


@dataclass(frozen=True)
class ModelCall:
    """One logical request to a model: the stage it serves and the prompt."""

    stage: Stage
    model: str
    temperature: float
    system: str
    user: str
    max_tokens: int = 4096
    # the most output tokens the one retry of a reply cut off by ``max_tokens`` may ask for;
    # None: twice ``max_tokens``
    max_tokens_ceiling: int | None = None

    def grown_cap(self) -> int:
        """The cap of the retry after a cut-off reply: double, within the ceiling."""
        ceiling = self.max_tokens_ceiling or 2 * self.max_tokens
        return max(self.max_tokens, min(2 * self.max_tokens, ceiling))


@dataclass
class RawReply:
    """What a subclass extracts from one SDK response."""

    payload: Any  # a dict (tool input) or a str (JSON text)
    input_tokens: int
    output_tokens: int
    request: dict[str, Any]
    response: dict[str, Any]
    finish_reason: str | None = None  # `finish_reason` / `stop_reason` as the provider said
    problem: str | None = None  # why the reply holds no answer to parse (no tool_use block)

    @property
    def truncated(self) -> bool:
        return self.finish_reason in TRUNCATED
