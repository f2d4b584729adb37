"""Drive the scripted model server's control API from tests."""

from __future__ import annotations

from typing import Any

import httpx


class FakeModel:
    """A handle on one running fake model server: its URLs and its control API."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.openai_base_url = f"{url}/v1"
        self.anthropic_base_url = url
        # No idle keep-alive: the server closes a connection idle for 5 s, and a test that
        # reuses it just then gets "server disconnected" (RemoteProtocolError).
        self._http = httpx.Client(
            base_url=url, timeout=60, limits=httpx.Limits(max_keepalive_connections=0)
        )

    def reset(self) -> None:
        self._http.post("/_control/reset").raise_for_status()

    def script(self, *items: dict[str, Any]) -> None:
        self._http.post("/_control/script", json={"items": list(items)}).raise_for_status()

    def faults(self, *faults: dict[str, Any]) -> None:
        self._http.post("/_control/faults", json={"faults": list(faults)}).raise_for_status()

    def latency(self, ms: int | None) -> None:
        self._http.post("/_control/config", json={"latency_ms": ms}).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        response = self._http.get("/_control/requests")
        response.raise_for_status()
        calls: list[dict[str, Any]] = response.json()
        return calls

    def close(self) -> None:
        self._http.close()


def user_text(call: dict[str, Any]) -> str:
    """The last user message of a logged call, for either API."""
    messages = call["body"]["messages"]
    content = messages[-1]["content"]
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content)
    return str(content)
