"""Model providers behind one small Protocol: OpenAI and Anthropic through their official SDKs."""

from shared.contracts import ModelExchange
from shared.providers.base import ModelCall, ModelProvider, StructuredReply
from shared.providers.factory import build_provider
from shared.providers.pricing import PriceTable
from shared.providers.settings import ProviderSettings

__all__ = [
    "ModelCall",
    "ModelExchange",
    "ModelProvider",
    "PriceTable",
    "ProviderSettings",
    "StructuredReply",
    "build_provider",
]
