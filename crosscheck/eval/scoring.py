"""Scoring an output: exact checks for text, a rubric judge on a third model when configured.

The judge is off by default. ``CROSSCHECK_EVAL_JUDGE_MODEL`` turns it on;
``CROSSCHECK_EVAL_JUDGE_PROVIDER`` (``openai`` or ``anthropic``, default ``openai``),
``CROSSCHECK_EVAL_JUDGE_API_KEY`` (default: the provider's own ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY``) and ``CROSSCHECK_EVAL_JUDGE_BASE_URL`` choose where it runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crosscheck.eval.sets import Item

JUDGE_PREFIX = "CROSSCHECK_EVAL_JUDGE_"
RUBRIC_MAX = 5


@dataclass(frozen=True)
class TextCheck:
    """Which required phrases an output misses and which forbidden ones it contains."""

    missing: tuple[str, ...]
    present: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.missing and not self.present


def _contains(text: str, phrase: str) -> bool:
    folded = " ".join(text.casefold().split())
    return any(" ".join(alt.casefold().split()) in folded for alt in phrase.split("|"))


def check_text(item: Item, output: str) -> TextCheck:
    return TextCheck(
        missing=tuple(p for p in item.required if not _contains(output, p)),
        present=tuple(p for p in item.forbidden if _contains(output, p)),
    )


class JudgeError(RuntimeError):
    """The judge could not be reached or gave no usable score."""


@dataclass(frozen=True)
class JudgeConfig:
    provider: str
    model: str
    base_url: str | None
    api_key: str | None  # never printed nor written with the results

    def public(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url}


def judge_config(env: Mapping[str, str]) -> JudgeConfig | None:
    """The judge the environment configures, or ``None`` (the default: no judge)."""
    model = env.get(f"{JUDGE_PREFIX}MODEL", "").strip()
    if not model:
        return None
    provider = env.get(f"{JUDGE_PREFIX}PROVIDER", "openai").strip().lower() or "openai"
    if provider not in ("openai", "anthropic"):
        raise JudgeError(f"{JUDGE_PREFIX}PROVIDER must be openai or anthropic, not {provider!r}")
    fallback = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    return JudgeConfig(
        provider=provider,
        model=model,
        base_url=env.get(f"{JUDGE_PREFIX}BASE_URL") or None,
        api_key=env.get(f"{JUDGE_PREFIX}API_KEY") or env.get(fallback) or None,
    )


RUBRIC = """You grade an answer against a reference answer.

<task>
{task}
</task>
<reference>
{reference}
</reference>
<answer>
{answer}
</answer>

Score the answer from 1 to 5: 5 = correct and complete as the reference, 4 = correct with a
minor omission, 3 = partly correct, 2 = mostly wrong or missing the point, 1 = wrong or
harmful. Reply with JSON only: {{"score": <1-5>, "reason": "<one sentence>"}}"""


def parse_score(content: str) -> int:
    """The 1-5 score of a judge's reply (JSON, or the first digit 1-5 as a fallback)."""
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match:
        try:
            score = json.loads(match.group(0)).get("score")
            if isinstance(score, int | float) and 1 <= score <= RUBRIC_MAX:
                return int(score)
        except (ValueError, AttributeError):
            pass
    digit = re.search(r"\b([1-5])\b", content)
    if digit is None:
        raise JudgeError(f"the judge gave no score: {content[:200]!r}")
    return int(digit.group(1))


class Judge:
    """A rubric judge on a model of its own, through the provider's SDK."""

    def __init__(self, config: JudgeConfig, *, timeout_s: float = 120.0) -> None:
        self.config = config
        self.timeout_s = timeout_s

    def score(self, item: Item, output: str) -> float:
        """The rubric score scaled to 0..1 (1 -> 0.0, 5 -> 1.0)."""
        prompt = RUBRIC.format(task=item.task, reference=item.reference, answer=output)
        try:
            content = self._ask(prompt)
        except JudgeError:
            raise
        except Exception as exc:  # the SDKs' own errors: one clear line, never the key
            raise JudgeError(
                f"the judge {self.config.model} failed: {type(exc).__name__}"
            ) from None
        return (parse_score(content) - 1) / (RUBRIC_MAX - 1)

    def _ask(self, prompt: str) -> str:
        if self.config.provider == "anthropic":
            import anthropic

            client = anthropic.Anthropic(
                api_key=self.config.api_key,
                base_url=self.config.base_url,
                timeout=self.timeout_s,
                max_retries=2,
            )
            message = client.messages.create(
                model=self.config.model,
                max_tokens=300,
                messages=[{"role": "user", "content": prompt}],
            )
            return "".join(getattr(block, "text", "") for block in message.content)
        import openai

        openai_client = openai.OpenAI(
            api_key=self.config.api_key,
            base_url=self.config.base_url,
            timeout=self.timeout_s,
            max_retries=2,
        )
        completion = openai_client.chat.completions.create(
            model=self.config.model,
            temperature=0.0,
            messages=[{"role": "user", "content": prompt}],
        )
        return completion.choices[0].message.content or ""
