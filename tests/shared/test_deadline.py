"""One deadline per step: the header a caller sends, the scope a peer works in, and the model
calls (with their retries) that must fit inside it."""

import asyncio

import httpx
import pytest

from shared import deadline
from shared.contracts import Critique, Provider, ServiceInfo
from shared.errors import BadRequest, BudgetExceeded
from shared.service import build_service_app
from tests.shared.providers.test_contract import critique_call, provider_for


class TestHeader:
    @pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "", "٣", str(deadline.MAX_MS + 1)])
    def test_a_value_that_is_no_deadline_is_a_400_naming_the_header(self, value):
        with pytest.raises(BadRequest, match=deadline.HEADER):
            deadline.parse_header(value)

    @pytest.mark.parametrize("value", ["1", str(deadline.MAX_MS), " 1500 "])
    def test_the_range_ends_are_accepted(self, value):
        assert deadline.parse_header(value) > 0

    def test_the_peer_keeps_a_margin_to_answer_in(self):
        assert deadline.parse_header("30000") == pytest.approx(30 - deadline.REPLY_MARGIN_S)
        # a short deadline keeps half of it, not nothing
        assert deadline.parse_header("1000") == pytest.approx(0.5)

    def test_what_is_sent_is_what_is_left(self):
        assert deadline.header_value() is None
        with deadline.scope(10):
            sent = int(deadline.header_value() or 0)
        assert 9_000 < sent <= 10_000


class TestScope:
    def test_an_inner_deadline_never_extends_an_outer_one(self):
        with deadline.scope(5):
            with deadline.scope(100):
                assert (deadline.remaining() or 0) <= 5
            with deadline.scope(1):
                assert (deadline.remaining() or 0) <= 1
        assert deadline.remaining() is None

    def test_none_opens_no_deadline(self):
        with deadline.scope(None):
            assert deadline.remaining() is None
            assert deadline.within(7) == 7

    async def test_the_timeout_fires_at_the_deadline_before_a_longer_limit(self):
        with deadline.scope(0.05), pytest.raises(TimeoutError):
            async with deadline.timeout(30):
                await asyncio.sleep(5)


@pytest.fixture
async def service():
    app = build_service_app(
        title="t", info=lambda: ServiceInfo(service="t", role="test", version="0")
    )

    @app.get("/left")
    async def left() -> dict[str, float | None]:
        return {"left": deadline.remaining()}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client


class TestServiceFrame:
    async def test_a_handler_works_within_the_deadline_its_caller_sent(self, service):
        response = await service.get("/left", headers={deadline.HEADER: "20000"})
        assert 15 < response.json()["left"] <= 20 - deadline.REPLY_MARGIN_S

    async def test_without_the_header_there_is_no_deadline(self, service):
        assert (await service.get("/left")).json() == {"left": None}

    async def test_a_malformed_header_is_a_clear_400(self, service):
        response = await service.get("/left", headers={deadline.HEADER: "soon"})
        assert response.status_code == 400
        assert response.json()["error"] == "BadRequest"
        assert deadline.HEADER in response.json()["detail"]


class TestProviderWithinTheDeadline:
    """The provider's retries and each attempt fit the deadline; what runs out of it is
    ``BudgetExceeded``, which a caller does not send again."""

    @pytest.mark.parametrize("kind", list(Provider), ids=lambda p: p.value)
    async def test_a_slow_model_is_cut_off_at_the_deadline_and_not_asked_again(
        self, fake_model, kind
    ):
        fake_model.faults({"delay_s": 3.0})  # without the deadline: answered after 3 s
        provider = provider_for(kind, fake_model, model_timeout_s=60, model_max_attempts=5)
        with deadline.scope(0.5), pytest.raises(BudgetExceeded, match="deadline passed"):
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 1

    @pytest.mark.parametrize("kind", list(Provider), ids=lambda p: p.value)
    async def test_no_retry_starts_when_its_wait_would_pass_the_deadline(self, fake_model, kind):
        fake_model.faults({"status": 503}, {"status": 503})
        provider = provider_for(
            kind, fake_model, model_max_attempts=5, retry_initial_s=30, retry_max_wait_s=30
        )
        with deadline.scope(5), pytest.raises(BudgetExceeded, match="no time for another"):
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 1

    @pytest.mark.parametrize("kind", list(Provider), ids=lambda p: p.value)
    async def test_off_switch_without_a_deadline_the_retries_go_on(self, fake_model, kind):
        fake_model.faults({"status": 503}, {"status": 503})
        provider = provider_for(kind, fake_model, model_max_attempts=3)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert [e.status for e in reply.exchanges] == [503, 503, 200]
