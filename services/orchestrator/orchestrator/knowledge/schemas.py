"""Knowledge API DTOs: what an admin writes and what a reader sees."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from shared.contracts import (
    MAX_REFLECTION_CHARS,
    KnowledgeKind,
    ProfileName,
    WireModel,
    printable,
)

Title = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
    AfterValidator(printable),
]
Body = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REFLECTION_CHARS)
]
Key = Annotated[
    str, StringConstraints(min_length=1, max_length=80, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
]
Profiles = Annotated[list[ProfileName], Field(max_length=20)]
Weight = Annotated[float, Field(ge=0.0, le=1.0)]
Scope = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,49}$")]
SCOPE_HELP = "`global` (every run) or a run tag: only runs with that tag receive it."


class KnowledgeCreate(WireModel):
    kind: KnowledgeKind
    title: Title
    body: Body
    profiles: Profiles = Field(
        default=[], description="The critic profiles it applies to; empty: every profile."
    )
    weight: Weight = Field(
        default=1.0, description="How far evidence of this kind can be trusted (0 to 1)."
    )
    scope: Scope = Field(default="global", description=SCOPE_HELP)


class KnowledgeUpdate(WireModel):
    """Only the fields sent change; ``retired: false`` brings an entry back."""

    kind: KnowledgeKind | None = None
    title: Title | None = None
    body: Body | None = None
    profiles: Profiles | None = None
    weight: Weight | None = None
    scope: Scope | None = None
    retired: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> KnowledgeUpdate:
        if not self.model_fields_set:
            raise ValueError("send at least one field to change")
        for name in ("kind", "title", "body", "profiles", "weight", "scope", "retired"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


class KnowledgePublic(WireModel):
    id: str
    kind: KnowledgeKind
    title: str
    body: str
    profiles: list[str]
    weight: float
    pack: str = Field(
        description="The pack it came from, `api`, or `review` (a lesson a reviewer promoted)."
    )
    author: str
    retired: bool
    scope: str = Field(default="global", description=SCOPE_HELP)
    source_run_id: str | None = Field(
        default=None, description="A lesson's run: where the reviewer wrote the comment."
    )
    owner: str | None = Field(
        default=None,
        description="A lesson's tenant: the token that started its source run, whose runs it "
        "reaches; null: every run (pack and admin entries). Shown to its owner and to people.",
    )
    shared: bool = Field(
        default=False, description="An admin offered this lesson to every tenant's runs."
    )
    uses: int = Field(default=0, description="Runs whose Actor received it.")
    created_at: datetime
    updated_at: datetime


class KnowledgeMatch(WireModel):
    entry: KnowledgePublic
    score: float = Field(
        description="Relevance, higher is closer. Text index alone: its score (scale per "
        "database); with embeddings: the cosine similarity plus a share of the text score."
    )


class PackEntry(WireModel):
    """One entry of a pack file; its id is ``<pack>.<key>``."""

    key: Key
    kind: KnowledgeKind
    title: Title
    body: Body
    profiles: Profiles = []
    weight: Weight = 1.0


class PackFile(WireModel):
    pack: Key
    entries: Annotated[list[PackEntry], Field(min_length=1, max_length=1000)]
