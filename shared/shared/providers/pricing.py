"""Token prices per model, so every call reports what it cost."""

from __future__ import annotations

import json
from dataclasses import dataclass

# USD per million tokens (input, output), list prices as known when written. Names match by
# longest prefix ("claude-sonnet-4" covers "claude-sonnet-4-6"). A model with no entry reports
# cost None rather than a guess. Override or extend with CROSSCHECK_PRICES.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4o-mini": (0.15, 0.60),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-haiku-4": (1.00, 5.00),
    "scripted-demo": (0.0, 0.0),
}


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, tuple[float, float]]

    @classmethod
    def from_json(cls, raw: str | None) -> PriceTable:
        """Defaults, overridden by ``{"model": [input_usd_per_mtok, output_usd_per_mtok]}``."""
        prices = dict(DEFAULT_PRICES)
        if raw:
            try:
                loaded = json.loads(raw)
                for model, pair in loaded.items():
                    inp, out = pair
                    prices[str(model)] = (float(inp), float(out))
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    "CROSSCHECK_PRICES must be JSON like "
                    '{"model": [input_usd_per_mtok, output_usd_per_mtok]}'
                ) from exc
        return cls(prices)

    def price(self, model: str) -> tuple[float, float] | None:
        """Exact match first, then the longest known prefix (dated model names)."""
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.price(model)
        if price is None:
            return None
        return round((input_tokens * price[0] + output_tokens * price[1]) / 1_000_000, 8)
