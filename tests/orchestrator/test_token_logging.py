"""Bearer tokens (bootstrap, minted, rejected) never reach the orchestrator's logs."""

import io
import logging

import pytest

from shared.logging import configure_logging
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for


@pytest.fixture
def database_url(tmp_path):
    return f"sqlite:///{tmp_path}/crosscheck.sqlite"


@pytest.fixture
def captured(orchestrator_settings):
    stream = io.StringIO()
    configure_logging(
        "orchestrator",
        level="DEBUG",
        secrets=orchestrator_settings.secrets(),
        stream=stream,
    )
    yield stream
    logging.getLogger().handlers = []


async def test_tokens_never_appear_in_logs(captured, api):
    service = await mint(api, "service")
    headers = {"Authorization": f"Bearer {service}"}
    run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
    await wait_for(api, run_id)
    assert (await api.get("/v1/runs", headers=headers)).status_code == 200
    wrong = "cc_this-token-does-not-exist-0123456789"
    assert (
        await api.get("/v1/runs", headers={"Authorization": f"Bearer {wrong}"})
    ).status_code == 401
    logs = captured.getvalue()
    assert '"path": "/v1/runs"' in logs  # the requests were logged ...
    for token in (ADMIN_TOKEN, service, wrong):
        assert token not in logs  # ... their tokens were not
