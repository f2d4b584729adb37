"""What a user wants from the replay store: ``kill -9`` of the Actor and the Critic right
after they answered, a restart on the same replay files, and the same ``Idempotency-Key``
is answered again without a second (paid) model call. Real processes, real SDKs, the fake
model server's request log as the bill. Both services run side by side, so the test pays
for two start-ups, not four."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY
from tests.support.servers import free_port, wait_healthy

SERVICES = {
    "actor": ("ACTOR_", "/v1/draft", {"task": "Write primes_up_to(n).", "kind": "code"}),
    "critic": (
        "CRITIC_",
        "/v1/critique",
        {"task": "Write primes_up_to(n).", "kind": "code", "output": "def primes_up_to(n): ..."},
    ),
}


@contextmanager
def both_services(
    env: dict[str, str], logs: Path
) -> Iterator[dict[str, tuple[str, subprocess.Popen]]]:
    """Start the Actor and the Critic at once; yield each one's URL and process."""
    running: dict[str, tuple[str, subprocess.Popen]] = {}
    with ExitStack() as stack:
        for module, (prefix, _, _) in SERVICES.items():
            port = free_port()
            with (logs / f"{module}.log").open("ab") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", module],
                    env={**env, f"{prefix}HOST": "127.0.0.1", f"{prefix}PORT": str(port)},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            stack.callback(_stop, process)
            running[module] = (f"http://127.0.0.1:{port}", process)
        for url, process in running.values():
            wait_healthy(url, process)
        yield running


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=10)


def test_after_kill_9_restarted_services_replay_the_key_without_calling_the_model(
    fake_model, service_token, tmp_path
):
    env = {
        **{k: v for k, v in os.environ.items() if k != "REDIS_URL"},
        "CROSSCHECK_SERVICE_TOKEN": service_token,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": fake_model.openai_base_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": fake_model.anthropic_base_url,
        "ACTOR_REPLAY_DB": str(tmp_path / "replays" / "actor.sqlite"),
        "CRITIC_REPLAY_DB": str(tmp_path / "replays" / "critic.sqlite"),
    }

    def call(url: str, module: str) -> httpx.Response:
        _, path, body = SERVICES[module]
        headers = {
            "Authorization": f"Bearer {service_token}",
            "Idempotency-Key": f"run_9:1:{module}:1",
        }
        return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)

    first: dict[str, httpx.Response] = {}
    with both_services(env, tmp_path) as running:
        for module, (url, process) in running.items():
            first[module] = call(url, module)
            process.kill()  # SIGKILL: no shutdown, no flush, only what is on disk survives
            assert process.wait(timeout=10) == -9
    assert {m: r.status_code for m, r in first.items()} == {"actor": 200, "critic": 200}
    assert sorted(c["api"] for c in fake_model.requests()) == ["anthropic", "openai"]

    with both_services(env, tmp_path) as running:
        again = {module: call(url, module) for module, (url, _) in running.items()}
        ready = {
            m: httpx.get(f"{url}/readyz", timeout=30).json() for m, (url, _) in running.items()
        }

    for module in SERVICES:
        assert again[module].status_code == 200, again[module].text
        assert first[module].json()["exchanges"]
        assert again[module].json() == {**first[module].json(), "exchanges": []}
        assert ready[module] == {"status": "ready"}
        assert (
            f"sqlite at {env[SERVICES[module][0] + 'REPLAY_DB']}"
            in (tmp_path / f"{module}.log").read_text()
        )
    assert len(fake_model.requests()) == 2, "a restarted service called the model again"
