"""`crosscheck export` and `CrosscheckClient.export_dataset`: reviewed runs written as JSONL
files with a dataset card, against a real Orchestrator on SQLite."""

import asyncio
import json

from crosscheck.client import CrosscheckClient, resolve_settings
from shared.orchestration import DecisionAction, ExportKind
from tests.crosscheck.test_cli import cli, flat
from tests.orchestrator.conftest import ADMIN_TOKEN, mint, start, wait_for

EDITED = "Tides follow the Moon: two bulges, two high tides a day."


async def edited_run(api) -> str:
    """A run paused on its first round, which a reviewer edits and accepts."""
    run_id = await start(api, task="Explain tides.", policy={"review": "first_round"})
    await wait_for(api, run_id)
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
    assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)).is_success
    body = {"action": "edit", "output": EDITED, "finish": True}
    response = await api.post(f"/v1/reviews/{item['id']}/decision", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return run_id


class TestExportCommand:
    async def test_writes_one_file_per_kind_and_a_card(self, api, url, tmp_path):
        run_id = await edited_run(api)
        folder = tmp_path / "datasets"
        ran = await cli(url, "export", str(folder))
        assert ran.exit_code == 0, ran.output
        assert "chat: 1 records" in ran.stdout
        assert "preference: 1 records" in ran.stdout
        assert "critique: 0 records" in ran.stdout  # decided before any critique
        [chat] = [json.loads(line) for line in (folder / "chat.jsonl").read_text().splitlines()]
        assert chat["run_id"] == run_id
        assert chat["messages"][1] == {"role": "assistant", "content": EDITED}
        [pair] = [
            json.loads(line) for line in (folder / "preference.jsonl").read_text().splitlines()
        ]
        assert pair["chosen"] == EDITED
        assert pair["rejected"] != EDITED
        card = (folder / "README.md").read_text()
        assert "config_name: chat" in card
        assert "path: preference.jsonl" in card
        assert "| chat.jsonl | 1 |" in card
        assert not list(folder.glob("*.partial"))

    async def test_kind_and_filters_narrow_it(self, api, url, tmp_path):
        await edited_run(api)
        folder = tmp_path / "only"
        ran = await cli(url, "export", str(folder), "--kind", "chat", "--decision", "approve")
        assert ran.exit_code == 0, ran.output
        assert sorted(p.name for p in folder.iterdir()) == ["README.md", "chat.jsonl"]
        assert (folder / "chat.jsonl").read_text() == ""
        assert "decision approve" in (folder / "README.md").read_text()

    async def test_bad_input_is_one_clear_line(self, url, tmp_path):
        ran = await cli(url, "export", str(tmp_path / "x"), "--since", "last week")
        assert ran.exit_code == 2
        assert "not an ISO 8601 time: 'last week'" in flat(ran.stderr)
        refused = await cli(url, "export", str(tmp_path / "y"), "--tag", "Not A Tag")
        assert refused.exit_code == 1
        assert "error:" in refused.stderr
        assert "tag" in refused.stderr
        assert "Traceback" not in refused.output
        assert not (tmp_path / "y" / "chat.jsonl").exists()
        assert not list((tmp_path / "y").glob("*.partial"))


class TestClientExport:
    async def test_streams_records_with_filters(self, api, url):
        run_id = await edited_run(api)

        def read(**filters) -> list[dict]:
            with CrosscheckClient(resolve_settings(url, ADMIN_TOKEN)) as client:
                return list(client.export_dataset(**filters))

        [chat] = await asyncio.to_thread(read)
        assert chat["run_id"] == run_id
        [pair] = await asyncio.to_thread(
            read, kind=ExportKind.preference, decision=DecisionAction.edit
        )
        assert pair["chosen"] == EDITED
        assert await asyncio.to_thread(read, profile="no-such-profile") == []
