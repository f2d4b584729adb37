"""Data files written by hand (profiles, knowledge packs, labelled sets): TOML read into a
pydantic model, with an error that names the file and the field a person has to fix."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

MAX_PROBLEMS = 5


def load_toml_model(path: Path, model: type[M], label: str, error: type[Exception]) -> M:
    """``path`` parsed as TOML and validated as ``model``. Raises ``error`` with a message
    ``"<label> <path>: field `a.0.b`: <problem>"`` (up to five problems) or ``"... cannot be
    read"`` / ``"... not valid TOML"``."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label} {path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{label} {path}: not valid TOML: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            "field `" + (".".join(str(p) for p in e["loc"]) or "(file)") + f"`: {e['msg']}"
            for e in exc.errors()[:MAX_PROBLEMS]
        )
        raise error(f"{label} {path}: {problems}") from None
