from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, Field

from shared.errors import (
    AppError,
    Conflict,
    InvalidModelOutput,
    NeedHumanIntervention,
    NotFound,
    UpstreamTimeout,
    install_error_handlers,
)
from shared.service import BodySizeLimit


class Item(BaseModel):
    name: Annotated[str, Field(max_length=5)]
    count: int


def make_app(exc: Exception | None = None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, limit=1000)

    @app.post("/items")
    async def create(item: Item) -> Item:
        if exc is not None:
            raise exc
        return item

    return app


async def post(app: FastAPI, **kwargs) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.post("/items", **kwargs)


class TestErrorShape:
    @pytest.mark.parametrize(
        ("exc", "status", "name"),
        [
            (NotFound("no such run"), 404, "NotFound"),
            (Conflict("already claimed"), 409, "Conflict"),
            (InvalidModelOutput("bad json twice"), 422, "InvalidModelOutput"),
            (UpstreamTimeout("provider timed out"), 504, "UpstreamTimeout"),
        ],
    )
    async def test_typed_errors_render_class_name_and_message(self, exc, status, name):
        response = await post(make_app(exc), json={"name": "a", "count": 1})
        assert response.status_code == status
        assert response.json() == {"error": name, "detail": str(exc)}

    async def test_need_human_intervention_carries_stop_reason(self):
        exc = NeedHumanIntervention("loop broke", stop_reason="duplicate_output")
        response = await post(make_app(exc), json={"name": "a", "count": 1})
        assert response.status_code == 409
        assert response.json()["detail"] == {
            "stop_reason": "duplicate_output",
            "error_class": "logic",
        }

    async def test_app_error_status_override(self):
        response = await post(
            make_app(AppError("teapot", status_code=418)), json={"name": "a", "count": 1}
        )
        assert response.status_code == 418


class TestRequestValidation:
    async def test_missing_and_wrong_types_name_the_field(self):
        response = await post(make_app(), json={"name": "abc", "count": "many"})
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "ValidationError"
        assert body["detail"][0]["loc"] == ["body", "count"]

    async def test_limit_is_reported(self):
        response = await post(make_app(), json={"name": "toolong", "count": 1})
        assert response.status_code == 422
        assert response.json()["detail"][0]["ctx"] == {"max_length": 5}

    async def test_invalid_json_is_422_not_500(self):
        response = await post(
            make_app(), content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 422

    async def test_oversize_body_is_413(self):
        response = await post(make_app(), json={"name": "a" * 2000, "count": 1})
        assert response.status_code == 413
        assert response.json()["error"] == "PayloadTooLarge"

    async def test_oversize_streamed_body_without_length_is_413(self):
        async def chunks():
            for _ in range(20):
                yield b"x" * 100

        response = await post(
            make_app(), content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413
