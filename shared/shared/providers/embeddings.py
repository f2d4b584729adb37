"""An OpenAI-compatible embeddings client through the official ``openai`` SDK (the knowledge
index's optional embeddings; installed with the `providers` extra)."""

from __future__ import annotations

import openai

from shared.errors import EmbeddingUnavailable

BATCH = 64  # texts per embeddings request
MAX_TEXT_CHARS = 8000


class Embedder:
    """One OpenAI-compatible embeddings client."""

    def __init__(self, *, model: str, api_key: str, base_url: str | None, timeout_s: float) -> None:
        self.model = model
        # One retry of our own at most: a provider that is down must not hold a run's step.
        self.client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=1
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            chunk = [t[:MAX_TEXT_CHARS] or " " for t in texts[start : start + BATCH]]
            try:
                reply = await self.client.embeddings.create(model=self.model, input=chunk)
            except openai.OpenAIError as exc:
                raise EmbeddingUnavailable(f"{type(exc).__name__}: {_short(exc)}") from exc
            vectors = sorted(reply.data, key=lambda d: d.index)
            if len(vectors) != len(chunk) or any(not v.embedding for v in vectors):
                raise EmbeddingUnavailable(
                    f"the provider answered {len(vectors)} vectors for {len(chunk)} texts"
                )
            out.extend([float(x) for x in v.embedding] for v in vectors)
        return out

    async def aclose(self) -> None:
        await self.client.close()


def _short(exc: Exception) -> str:
    # The SDK's messages carry the status and the provider's error text, never the key.
    return str(exc).splitlines()[0][:300] if str(exc) else ""
