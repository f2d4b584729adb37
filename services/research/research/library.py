"""Managing the corpus over the API (``/v1/corpus``): what ``crosscheck corpus`` calls, so
the service is the one writer of its store. Uploaded files are parsed here, off the event
loop; a file the corpus cannot read is a 400 saying why, a store that cannot be reached a
503 naming it (never its password)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from research.corpus import (
    SUPPORTED_SUFFIXES,
    CorpusStore,
    CorpusUnavailable,
    parse_document,
)
from shared.errors import BadRequest, NotFound, PayloadTooLarge, UpstreamUnavailable
from shared.research_client import (
    CorpusDocument,
    CorpusListing,
    CorpusSummary,
    DocumentAdded,
)

MAX_URL_CHARS = 2048
MAX_FILENAME_CHARS = 255
# scheme://rest, no white space or control characters (file:///abs/path, https://host/page)
_STABLE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\x00-\x1f\x7f]+")

T = TypeVar("T")


class InvalidDocumentUrl(BadRequest):
    """A document URL the corpus cannot key a document by."""


def checked_url(url: str) -> str:
    if len(url) > MAX_URL_CHARS or not _STABLE_URL.fullmatch(url):
        raise InvalidDocumentUrl(
            f"a document's URL must be an absolute URL of at most {MAX_URL_CHARS} characters "
            "without spaces, such as https://example.org/page or file:///path/to/file.md"
        )
    return url


class Library:
    """The corpus store behind the API; every store call runs in a worker thread."""

    def __init__(self, store: CorpusStore, *, max_bytes: int) -> None:
        self.store = store
        self.max_bytes = max_bytes

    async def _call(self, work: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(work)
        except CorpusUnavailable as exc:
            raise UpstreamUnavailable(str(exc)) from None

    async def summary(self) -> CorpusSummary:
        count = await self._call(self.store.count)
        return CorpusSummary(
            location=self.store.location,
            documents=count,
            formats=sorted(SUPPORTED_SUFFIXES),
            max_bytes=self.max_bytes,
        )

    async def listing(self) -> CorpusListing:
        documents = await self._call(self.store.documents)
        return CorpusListing(
            location=self.store.location, documents=[CorpusDocument(**asdict(d)) for d in documents]
        )

    async def add(self, content: bytes, *, filename: str, url: str) -> DocumentAdded:
        """Parse and index one file, replacing the document with the same URL."""
        checked_url(url)
        if len(content) > self.max_bytes:
            raise PayloadTooLarge(
                f"the file is {len(content)} bytes; the corpus takes files of at most "
                f"{self.max_bytes} bytes (RESEARCH_CORPUS_MAX_BYTES)"
            )

        def index() -> DocumentAdded:
            document = parse_document(content, filename, url)
            passages = self.store.add(document)
            return DocumentAdded(
                url=document.url,
                title=document.title,
                kind=document.kind,
                chars=len(document.text),
                passages=passages,
            )

        return await self._call(index)

    async def remove(self, url: str) -> None:
        removed = await self._call(lambda: self.store.remove(url))
        if not removed:
            raise NotFound(f"no document {url} in {self.store.location}")
