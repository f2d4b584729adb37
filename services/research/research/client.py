"""The Research service's client lives in ``shared.research_client`` so the orchestrator can
call the service without depending on this package (its search backends, PDF and HTML
parsers and model SDKs); it is re-exported here for callers that import it from the
service."""

from shared.research_client import ResearchClient

__all__ = ["ResearchClient"]
