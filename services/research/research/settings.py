"""Research settings: ``RESEARCH_*`` for this service; web search keys as their vendors name
them (``TAVILY_API_KEY``, ``BRAVE_API_KEY``); provider variables as the SDKs name them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from shared.contracts import Provider, TimeSensitivity
from shared.providers import ProviderSettings
from shared.settings import ServiceSettings

BackendKind = Literal["corpus", "tavily", "brave", "searxng"]

HOUR_S = 3600.0


class ResearchSettings(ServiceSettings, ProviderSettings):
    model_config = SettingsConfigDict(env_prefix="RESEARCH_", extra="ignore", env_file=None)

    port: int = Field(default=8005, ge=1, le=65535)
    backend: BackendKind = Field(
        default="corpus",
        description="Where evidence comes from: corpus (the local index, the default), "
        "tavily, brave or searxng (RESEARCH_BACKEND).",
    )
    corpus_db: Path = Field(
        default=Path("var/research/corpus.sqlite"),
        description="SQLite file of the local corpus index (RESEARCH_CORPUS_DB); "
        "`crosscheck corpus add` writes it.",
    )
    corpus_url: SecretStr | None = Field(
        default=None,
        description="postgresql://... : the corpus lives in that Postgres database "
        "(full-text search with a GIN index) instead of RESEARCH_CORPUS_DB "
        "(RESEARCH_CORPUS_URL); `crosscheck corpus add` writes it too.",
    )
    corpus_max_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024 * 1024,
        le=1024 * 1024 * 1024,
        description="The largest file `crosscheck corpus add` may upload, in bytes "
        "(RESEARCH_CORPUS_MAX_BYTES); the service's request body limit follows it.",
    )
    cache_db: Path = Field(
        default=Path("var/research/cache.sqlite"),
        description="SQLite file of the result cache (RESEARCH_CACHE_DB); unused when "
        "REDIS_URL is set.",
    )
    redis_url: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "redis_url"),
        description="redis://...: the result cache lives there instead of SQLite.",
    )
    cache: bool = Field(default=True, description="RESEARCH_CACHE=0 turns the cache off.")
    ttl_high_s: float = Field(default=1 * HOUR_S, gt=0, description="RESEARCH_TTL_HIGH_S")
    ttl_normal_s: float = Field(default=24 * HOUR_S, gt=0, description="RESEARCH_TTL_NORMAL_S")
    ttl_static_s: float = Field(default=7 * 24 * HOUR_S, gt=0, description="RESEARCH_TTL_STATIC_S")
    max_queries: int = Field(
        default=3, ge=1, le=10, description="Queries searched per request (RESEARCH_MAX_QUERIES)."
    )
    max_query_words: int = Field(
        default=8, ge=1, le=50, description="Longer queries are refused (RESEARCH_MAX_QUERY_WORDS)."
    )
    hits_per_query: int = Field(default=3, ge=1, le=20, description="RESEARCH_HITS_PER_QUERY")
    budget_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Time budget of one query's search (and its distillation); over it the "
        "query fails and the answer is degraded (RESEARCH_BUDGET_S).",
    )
    distill: bool = Field(
        default=True,
        description="Condense each hit with a model to the claims relevant to its query "
        "(RESEARCH_DISTILL=0 turns it off).",
    )
    provider: Provider = Field(
        default=Provider.openai,
        description="Model provider of the distillation (RESEARCH_PROVIDER).",
    )
    model: str | None = Field(
        default=None, description="Model of the distillation; default depends on the provider."
    )
    distill_max_tokens: int = Field(default=512, ge=64, le=8192)
    tavily_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("TAVILY_API_KEY", "tavily_api_key")
    )
    tavily_url: str = Field(default="https://api.tavily.com", description="RESEARCH_TAVILY_URL")
    brave_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("BRAVE_API_KEY", "brave_api_key")
    )
    brave_url: str = Field(default="https://api.search.brave.com", description="RESEARCH_BRAVE_URL")
    searxng_url: str | None = Field(
        default=None, description="Base URL of a SearXNG instance with JSON output enabled."
    )

    @field_validator(
        "redis_url", "corpus_url", "tavily_api_key", "brave_api_key", "searxng_url", mode="before"
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("corpus_url")
    @classmethod
    def _corpus_url_is_postgres(cls, value: SecretStr | None) -> SecretStr | None:
        from research.corpus import is_postgres_url

        if value is not None and not is_postgres_url(value.get_secret_value()):
            raise ValueError(
                "RESEARCH_CORPUS_URL must be a postgresql:// URL (a SQLite corpus is a file: "
                "RESEARCH_CORPUS_DB)"
            )
        return value

    @property
    def corpus_target(self) -> str | Path:
        """Where the corpus lives: the Postgres URL when set, else the SQLite file."""
        return self.corpus_url.get_secret_value() if self.corpus_url else self.corpus_db

    @model_validator(mode="after")
    def _backend_has_what_it_needs(self) -> ResearchSettings:
        needs = {
            "tavily": (self.tavily_api_key, "TAVILY_API_KEY"),
            "brave": (self.brave_api_key, "BRAVE_API_KEY"),
            "searxng": (self.searxng_url, "RESEARCH_SEARXNG_URL"),
        }
        if self.backend in needs and not needs[self.backend][0]:
            raise ValueError(f"RESEARCH_BACKEND={self.backend} needs {needs[self.backend][1]}")
        return self

    def ttl_s(self, sensitivity: TimeSensitivity) -> float:
        return {
            TimeSensitivity.high: self.ttl_high_s,
            TimeSensitivity.normal: self.ttl_normal_s,
            TimeSensitivity.static: self.ttl_static_s,
        }[sensitivity]

    def secrets(self) -> list[str]:
        """Also the passwords inside ``REDIS_URL`` and ``RESEARCH_CORPUS_URL`` on their own, as
        they may be logged apart."""
        from urllib.parse import unquote, urlsplit

        found = super().secrets()
        for url in (self.redis_url, self.corpus_url):
            if url is not None:
                password = urlsplit(url.get_secret_value()).password
                if password:
                    found.extend({password, unquote(password)})
        return found
