"""Distillation: a model condenses one hit to the claims relevant to its query."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from shared.contracts import Stage, Usage, WireModel
from shared.prompting import PromptBook
from shared.providers import ModelCall, ModelProvider

SCHEMA_NAME = "distillation"
MAX_CLAIMS = 5


class Distillation(WireModel):
    """What the model answers for one passage."""

    claims: Annotated[
        list[Annotated[str, StringConstraints(max_length=600)]], Field(max_length=MAX_CLAIMS)
    ]
    relevant: bool


class Distiller:
    def __init__(
        self, provider: ModelProvider, *, model: str, max_tokens: int, temperature: float = 0.0
    ) -> None:
        self.provider = provider
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.prompts = PromptBook("research")  # its `data` filter: shared.prompting.escape_data

    async def distill(self, task: str, query: str, passage: str) -> tuple[str, Usage]:
        """The relevant claims of ``passage`` as one text ("" when none are relevant)."""
        call = ModelCall(
            stage=Stage.distill,
            model=self.model,
            temperature=self.temperature,
            system=self.prompts.render_constant("distill_system.j2"),
            user=self.prompts.render("distill.j2", task=task, query=query, passage=passage),
            max_tokens=self.max_tokens,
        )
        reply = await self.provider.structured(call, Distillation, SCHEMA_NAME)
        value = reply.value
        text = " ".join(c.strip() for c in value.claims if c.strip()) if value.relevant else ""
        return text, reply.usage
