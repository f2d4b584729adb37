"""Critic profiles: who the Critic is and what it looks for, as TOML files.

A profile names its persona, the rubric dimensions it judges (each with a definition), the
domain's five riskiest error types (highest risk first), its risk level and its default
depth. The shipped profiles sit beside this module; ``CRITIC_PROFILES_DIR`` adds more (a
file there may not reuse a shipped name). Every file is validated when the Critic starts,
and a bad one stops it with an error naming the file and the field.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from shared.contracts import Depth, ProfileName, TaskKind, WireModel
from shared.datafiles import load_toml_model
from shared.errors import AppError, ConfigurationError, NotFound

SHIPPED_DIR = Path(__file__).parent
ERROR_TYPES_PER_PROFILE = 5
OTHER_ERROR_TYPE = "other"
DEFAULT_FOR_KIND = {TaskKind.text: "general", TaskKind.code: "code"}

Slug = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
Prose = Annotated[str, StringConstraints(strip_whitespace=True, min_length=10, max_length=2000)]


class Risk(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class Dimension(WireModel):
    name: Slug
    definition: Prose


class ErrorType(WireModel):
    name: Slug
    definition: Prose

    @field_validator("name")
    @classmethod
    def _not_other(cls, value: str) -> str:
        if value == OTHER_ERROR_TYPE:
            raise ValueError(f"`{OTHER_ERROR_TYPE}` is implied for every profile; name a real type")
        return value


class Profile(WireModel):
    """One profile file, as it is written and as ``GET /v1/profiles`` lists it."""

    name: ProfileName
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    kinds: Annotated[list[TaskKind], Field(min_length=1)] = Field(
        description="The task kinds this profile can judge."
    )
    risk: Risk
    default_depth: Depth
    persona: Prose
    dimensions: Annotated[list[Dimension], Field(min_length=1, max_length=12)]
    error_types: Annotated[
        list[ErrorType],
        Field(min_length=ERROR_TYPES_PER_PROFILE, max_length=ERROR_TYPES_PER_PROFILE),
    ] = Field(description="The domain's five riskiest error types, highest risk first.")

    @field_validator("dimensions", "error_types")
    @classmethod
    def _unique_names(cls, items: list[Dimension] | list[ErrorType]) -> list[Any]:
        names = [item.name for item in items]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"repeated name(s) {', '.join(repeated)}")
        return list(items)

    @property
    def dimension_names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    @property
    def error_type_names(self) -> list[str]:
        return [e.name for e in self.error_types] + [OTHER_ERROR_TYPE]


class ProfileError(ConfigurationError):
    """A profile file that cannot be used; the message names the file and the field."""


class UnknownProfile(AppError):
    """A request names a profile the Critic does not have, or one for another task kind."""

    status_code = 422


def load_profile(path: Path) -> Profile:
    profile = load_toml_model(path, Profile, "profile", ProfileError)
    if profile.name != path.stem:
        raise ProfileError(
            f"profile {path}: field `name`: {profile.name!r} must match the file name {path.stem!r}"
        )
    return profile


class ProfileBook:
    """Every profile the Critic knows, loaded and validated once, at start."""

    def __init__(self, profiles: dict[str, Profile]) -> None:
        self.profiles = profiles
        for kind, name in DEFAULT_FOR_KIND.items():
            if name not in profiles:
                raise ProfileError(
                    f"the default profile {name!r} for {kind.value} tasks is missing"
                )

    @classmethod
    def load(cls, extra_dir: Path | None = None) -> ProfileBook:
        found: dict[str, tuple[Path, Profile]] = {}
        folders = [SHIPPED_DIR] + ([extra_dir] if extra_dir is not None else [])
        for folder in folders:
            if not folder.is_dir():
                raise ProfileError(f"profile folder {folder} does not exist")
            for path in sorted(folder.glob("*.toml")):
                profile = load_profile(path)
                if profile.name in found:
                    raise ProfileError(
                        f"profile {path}: field `name`: {profile.name!r} is already defined by "
                        f"{found[profile.name][0]}"
                    )
                found[profile.name] = (path, profile)
        return cls({name: profile for name, (_, profile) in found.items()})

    def listed(self) -> list[Profile]:
        return [self.profiles[name] for name in sorted(self.profiles)]

    def get(self, name: str) -> Profile:
        profile = self.profiles.get(name)
        if profile is None:
            raise NotFound(f"no critic profile {name!r}")
        return profile

    def choose(self, name: str | None, kind: TaskKind) -> Profile:
        """The profile a request names (or its kind's default); 422 when it is unknown or
        cannot judge that kind of task."""
        chosen = name or DEFAULT_FOR_KIND[kind]
        profile = self.profiles.get(chosen)
        if profile is None:
            raise UnknownProfile(
                f"profile: unknown critic profile {chosen!r}; known: "
                + ", ".join(sorted(self.profiles))
            )
        if kind not in profile.kinds:
            raise UnknownProfile(
                f"profile: {chosen!r} judges {', '.join(k.value for k in profile.kinds)} "
                f"tasks, not {kind.value}"
            )
        return profile
