"""Datasets API: what people taught, as JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from orchestrator.datasets.service import DatasetExporter, ExportFilter
from orchestrator.deps import Reader
from orchestrator.stats.service import normalize_since
from shared.errors import BadRequest
from shared.orchestration import DecisionAction, ExportKind, Role

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])
NAME = r"^[a-z0-9][a-z0-9_.-]{0,99}$"


def _lines(exporter: DatasetExporter, kind: ExportKind, filters: ExportFilter) -> Iterator[bytes]:
    for record in exporter.records(kind, filters):
        yield (json.dumps(record, ensure_ascii=False) + "\n").encode()


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def export_dataset(
    caller: Reader,
    request: Request,
    kind: ExportKind = ExportKind.chat,
    since: Annotated[
        datetime | None, Query(description="Decided at or after (ISO 8601; no offset: UTC).")
    ] = None,
    until: Annotated[datetime | None, Query(description="Decided before (ISO 8601).")] = None,
    profile: Annotated[str | None, Query(pattern=NAME)] = None,
    tag: Annotated[str | None, Query(pattern=NAME)] = None,
    decision: DecisionAction | None = None,
) -> StreamingResponse:
    """Reviewed runs as JSONL, one record a line: `chat` (task -> the version a person
    approved or edited), `preference` (prompt, chosen, rejected) or `critique` (output, the
    Critic's issues, the reviewer's agree / dismiss). A service gets its own runs'."""
    since, until = normalize_since(since), normalize_since(until)
    if since is not None and until is not None and until <= since:
        raise BadRequest(f"until ({until.isoformat()}) must be after since ({since.isoformat()})")
    filters = ExportFilter(
        since=since,
        until=until,
        profile=profile,
        tag=tag,
        decision=decision,
        owner=caller.id if caller.role is Role.service else None,
    )
    exporter = DatasetExporter(request.app.state.engine)
    return StreamingResponse(
        _lines(exporter, kind, filters),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="crosscheck-{kind.value}.jsonl"'},
    )
