"""A real HTTP receiver on loopback for webhook tests: records every POST, answers a status."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.servers import free_port


@dataclass
class Received:
    at: float  # time.time() when the request arrived
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self, port: int | None = None, status: int = 200) -> None:
        self.port = port or free_port()
        self.status = status
        self.received: list[Received] = []
        self.hold = threading.Event()  # while unset and holding, requests wait (no answer)
        self.holding = False
        self.active = 0  # requests being answered now
        self.peak = 0  # the most at once
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                receiver.received.append(
                    Received(time.time(), {k.lower(): v for k, v in self.headers.items()}, body)
                )
                with receiver._lock:
                    receiver.active += 1
                    receiver.peak = max(receiver.peak, receiver.active)
                try:
                    if receiver.holding:
                        receiver.hold.wait(30)
                    self.send_response(receiver.status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (killed, or it gave up waiting)
                finally:
                    with receiver._lock:
                        receiver.active -= 1

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.hold.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def of_type(self, kind: str) -> list[Received]:
        import json

        return [r for r in self.received if json.loads(r.body)["type"] == kind]

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 60.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.of_type(kind)
            if len(found) >= count:
                return found
            await asyncio.sleep(0.02)
        ids = [r.headers.get("webhook-id") for r in self.received]
        raise AssertionError(f"no {count} x {kind} within {timeout} s (got {ids})")
