"""Provider settings, following each SDK's own environment conventions."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.contracts import Provider
from shared.errors import ConfigurationError
from shared.providers.capabilities import (
    CapabilityOverrides,
    OutputMode,
    ReasoningEffort,
    TokenParam,
)


class ProviderSettings(BaseSettings):
    """Keys and URLs as the SDKs name them; retry and timeout policy of our own."""

    model_config = SettingsConfigDict(extra="ignore", env_file=None)

    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "openai_api_key")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL", "openai_base_url")
    )
    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY", "anthropic_api_key")
    )
    anthropic_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("ANTHROPIC_BASE_URL", "anthropic_base_url")
    )
    model_timeout_s: float = Field(
        default=60.0,
        gt=0,
        validation_alias=AliasChoices("CROSSCHECK_MODEL_TIMEOUT_S", "model_timeout_s"),
    )
    model_max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        validation_alias=AliasChoices("CROSSCHECK_MODEL_MAX_ATTEMPTS", "model_max_attempts"),
    )
    retry_initial_s: float = Field(
        default=0.5,
        ge=0,
        validation_alias=AliasChoices("CROSSCHECK_RETRY_INITIAL_S", "retry_initial_s"),
    )
    retry_max_wait_s: float = Field(
        default=30.0,
        ge=0,
        validation_alias=AliasChoices("CROSSCHECK_RETRY_MAX_WAIT_S", "retry_max_wait_s"),
    )
    max_output_tokens: int = Field(
        default=4096,
        ge=1,
        description="The most output tokens any model call asks for: the ceiling of the caps "
        "the Actor and Critic size per request, and of the one retry (at twice the cap) of a "
        "reply cut off by its cap.",
        validation_alias=AliasChoices("CROSSCHECK_MAX_OUTPUT_TOKENS", "max_output_tokens"),
    )
    prices_json: str | None = Field(
        default=None, validation_alias=AliasChoices("CROSSCHECK_PRICES", "prices_json")
    )
    actor_provider: Provider = Field(
        default=Provider.openai, validation_alias=AliasChoices("ACTOR_PROVIDER", "actor_provider")
    )
    critic_provider: Provider = Field(
        default=Provider.anthropic,
        validation_alias=AliasChoices("CRITIC_PROVIDER", "critic_provider"),
    )
    allow_same_provider: bool = Field(
        default=False,
        validation_alias=AliasChoices("CROSSCHECK_ALLOW_SAME_PROVIDER", "allow_same_provider"),
        description="Let Actor and Critic share one provider (the critic then shares blind spots).",
    )
    demo: bool = Field(
        default=False,
        validation_alias=AliasChoices("CROSSCHECK_DEMO", "demo"),
        description="Set by the launcher when the scripted demo model stands in for a provider.",
    )

    def check_provider_split(self) -> str | None:
        """Refuse one provider for both roles unless asked; return a warning when allowed."""
        if self.actor_provider is not self.critic_provider:
            return None
        message = (
            f"Actor and Critic both use {self.actor_provider.value}: a model grading itself "
            "shares its own blind spots."
        )
        if not self.allow_same_provider:
            raise ConfigurationError(
                f"{message} Set CRITIC_PROVIDER to another provider, or set "
                "CROSSCHECK_ALLOW_SAME_PROVIDER=1 to accept this explicitly."
            )
        return message

    def api_key(self, provider: Provider) -> str | None:
        key = self.openai_api_key if provider is Provider.openai else self.anthropic_api_key
        return key.get_secret_value() if key is not None else None

    def base_url(self, provider: Provider) -> str | None:
        return self.openai_base_url if provider is Provider.openai else self.anthropic_base_url


class RoleProviderSettings(ProviderSettings):
    """Provider settings of one role, with per-role overrides of the model family's
    capabilities (``ACTOR_*``, ``CRITIC_*`` by the subclass's prefix); unset, the family table
    in ``capabilities.py`` decides."""

    send_temperature: bool | None = Field(
        default=None,
        description="Send the sampling temperature (true) or never (false); unset: by model "
        "family (not for the gpt-5 and o-series reasoning models).",
    )
    token_param: TokenParam | None = Field(
        default=None,
        description="Name of the output-token cap sent: max_tokens or max_completion_tokens; "
        "unset: by model family (max_tokens for unknown OpenAI-compatible models).",
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="reasoning_effort sent on the OpenAI wire (none, minimal, low, medium, "
        "high); unset: not sent, the model's default applies. Not used on the Anthropic wire.",
    )
    output_mode: OutputMode | None = Field(
        default=None,
        description="How structured output is asked for: json_schema (strict), tool (a forced "
        "tool call) or json_object (JSON mode, schema in the prompt); unset: by model family.",
    )
    fit_to_cap: bool | None = Field(
        default=None,
        description="Shrink the schema sent (string and array lengths) until its longest "
        "reply fits the output-token cap, for servers that enforce it with a grammar; unset: "
        "by model family (on for unknown models, such as a local server's, off for OpenAI's "
        "and Anthropic's named families).",
    )

    def capability_overrides(self) -> CapabilityOverrides:
        return CapabilityOverrides(
            send_temperature=self.send_temperature,
            token_param=self.token_param,
            reasoning_effort=self.reasoning_effort,
            output_mode=self.output_mode,
            fit_to_cap=self.fit_to_cap,
        )
