import pytest
from pydantic import ValidationError

from shared.contracts import Provider
from shared.errors import ConfigurationError
from shared.providers import ProviderSettings
from shared.settings import ServiceSettings


class TestServiceToken:
    @pytest.mark.parametrize("token", ["", "changeme", "short"])
    def test_weak_or_default_token_fails_fast(self, monkeypatch, token):
        monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", token)
        with pytest.raises(ValidationError, match="at least 16 characters"):
            ServiceSettings()

    def test_missing_token_fails_fast(self, monkeypatch):
        monkeypatch.delenv("CROSSCHECK_SERVICE_TOKEN", raising=False)
        with pytest.raises(ValidationError, match="CROSSCHECK_SERVICE_TOKEN"):
            ServiceSettings()

    def test_token_never_shows_in_repr(self, monkeypatch):
        monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", "a-very-long-random-token-123")
        settings = ServiceSettings()
        assert "a-very-long-random-token-123" not in repr(settings)
        assert settings.secrets() == ["a-very-long-random-token-123"]


class TestProviderSettings:
    def test_sdk_environment_names(self, monkeypatch):
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-1234")
        monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://localhost:9")
        settings = ProviderSettings()
        assert settings.api_key(Provider.openai) == "sk-openai-test-1234"
        assert settings.base_url(Provider.openai) == "http://localhost:11434/v1"
        assert settings.api_key(Provider.anthropic) is None
        assert settings.base_url(Provider.anthropic) == "http://localhost:9"

    def test_defaults_split_roles_across_providers(self):
        settings = ProviderSettings()
        assert settings.actor_provider is Provider.openai
        assert settings.critic_provider is Provider.anthropic
        assert settings.check_provider_split() is None

    def test_same_provider_is_refused_unless_explicit(self, monkeypatch):
        monkeypatch.setenv("CRITIC_PROVIDER", "openai")
        with pytest.raises(ConfigurationError, match="CROSSCHECK_ALLOW_SAME_PROVIDER"):
            ProviderSettings().check_provider_split()
        monkeypatch.setenv("CROSSCHECK_ALLOW_SAME_PROVIDER", "1")
        warning = ProviderSettings().check_provider_split()
        assert warning is not None
        assert "blind spots" in warning
