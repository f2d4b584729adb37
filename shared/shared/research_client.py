"""A client of the Research service for the orchestrator, the CLI, or anyone holding the
service token. :meth:`ResearchClient.research` never raises for an unavailable service:
research that cannot be done comes back ``degraded`` with every query in ``failed_queries``,
so a caller goes on without evidence instead of stalling. The corpus methods, which a person
drives (``crosscheck corpus``), raise :class:`ResearchError` with the service's own message.
It lives in ``shared`` so callers can use it without depending on the service's package (its
backends, parsers and model SDKs)."""

from __future__ import annotations

import httpx
from pydantic import Field

from shared import tracing
from shared.auth import auth_headers
from shared.contracts import (
    FailedQuery,
    ResearchRequest,
    ResearchResult,
    ResearchStatus,
    WireModel,
)


class CorpusSummary(WireModel):
    """Where the corpus lives, how many documents it holds, and what it reads."""

    location: str = Field(description="A file path, or a database URL without its password.")
    documents: int = Field(ge=0)
    formats: list[str] = Field(description="File suffixes the corpus reads: .md, .pdf ...")
    max_bytes: int = Field(ge=1, description="The largest file an upload may be.")


class DocumentAdded(WireModel):
    url: str = Field(description="Its stable URL: where it was fetched from, or file://.")
    title: str
    kind: str = Field(description="markdown, text, html or pdf.")
    chars: int = Field(ge=0, description="Characters of its extracted text.")
    passages: int = Field(ge=0)


class CorpusDocument(DocumentAdded):
    added_at: float = Field(description="Unix time of its (latest) ingestion.")


class CorpusListing(WireModel):
    location: str
    documents: list[CorpusDocument]


class ResearchError(Exception):
    """The Research service refused a request (``status_code``) or never answered
    (``status_code`` None); ``message`` says why in the service's words."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class ResearchClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = auth_headers(token)
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._own = client is None

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def research(self, request: ResearchRequest) -> ResearchResult:
        """Evidence for ``request``. Unreachable, slow, 5xx, or a gate refusing every query
        (422): a ``degraded`` result naming each query and the reason."""
        headers = dict(self._headers)
        tracing.inject(headers)  # the service's spans join the caller's trace
        try:
            response = await self._client.post(
                f"{self.base_url}/v1/research",
                json=request.model_dump(mode="json"),
                headers=headers,
            )
        except httpx.TimeoutException:
            return self._degraded(request, "the research service did not answer in time")
        except httpx.HTTPError as exc:
            return self._degraded(
                request, f"the research service is unreachable: {type(exc).__name__}"
            )
        if response.status_code == 200:
            return ResearchResult.model_validate_json(response.content)
        if response.status_code == 422:
            detail = _json(response).get("detail")
            if isinstance(detail, dict) and isinstance(detail.get("failed_queries"), list):
                return ResearchResult(
                    status=ResearchStatus.degraded,
                    failed_queries=[
                        FailedQuery.model_validate(f) for f in detail["failed_queries"]
                    ],
                )
        return self._degraded(request, f"the research service answered HTTP {response.status_code}")

    @staticmethod
    def _degraded(request: ResearchRequest, reason: str) -> ResearchResult:
        return ResearchResult(
            status=ResearchStatus.degraded,
            failed_queries=[FailedQuery(query=q, reason=reason) for q in request.queries],
        )

    # ------------------------------------------------------------------ the corpus

    async def corpus(self) -> CorpusSummary:
        """Where the corpus lives, its size, and the formats and file size it takes."""
        response = await self._send("GET", "/v1/corpus")
        return CorpusSummary.model_validate_json(response.content)

    async def corpus_documents(self) -> CorpusListing:
        """Every document of the corpus, by URL."""
        response = await self._send("GET", "/v1/corpus/documents")
        return CorpusListing.model_validate_json(response.content)

    async def add_document(self, content: bytes, *, filename: str, url: str) -> DocumentAdded:
        """Index one file (``filename`` names its format), replacing the document with the
        same ``url``; a file the corpus cannot read is a ``ResearchError`` (4xx) saying why."""
        response = await self._send(
            "POST",
            "/v1/corpus/documents",
            params={"url": url, "filename": filename},
            content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return DocumentAdded.model_validate_json(response.content)

    async def remove_document(self, url: str) -> None:
        """Remove the document with this URL; one that is not there is a 404."""
        await self._send("DELETE", "/v1/corpus/documents", params={"url": url})

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        where = f"the Research service at {self.base_url}"
        try:
            response = await self._client.request(
                method,
                self.base_url + path,
                params=params,
                content=content,
                headers={**self._headers, **(headers or {})},
            )
        except httpx.TimeoutException:
            raise ResearchError(f"{where} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ResearchError(f"{where} is unreachable ({type(exc).__name__})") from None
        if response.is_success:
            return response
        detail = _json(response).get("detail")
        message = _readable(detail) or f"{where} answered HTTP {response.status_code}"
        raise ResearchError(message, response.status_code)


def _readable(detail: object) -> str:
    """The service's error detail as one line: its message, or each invalid field's."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(map(str, item.get('loc', [])))}: {item.get('msg', 'invalid')}"
            for item in detail
            if isinstance(item, dict)
        )
    return ""


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
