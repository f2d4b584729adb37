"""One ``LISTEN crosscheck_events`` connection per replica (Postgres): every commit that
appended events, on any replica, wakes this replica's websocket subscribers at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg

from orchestrator.events.hub import EventHub
from orchestrator.readmodel.events import EVENTS_CHANNEL
from shared.logging import get_logger

log = get_logger("crosscheck.events")


class EventListener:
    def __init__(
        self,
        conninfo: str,
        hub: EventHub,
        *,
        retry_s: float = 1.0,
        connect_kwargs: dict[str, Any] | None = None,
        channels: dict[str, Callable[[], None]] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.connect_kwargs = {**(connect_kwargs or {}), "autocommit": True}
        self.hub = hub
        self.retry_s = retry_s
        self.connected = asyncio.Event()
        # Other channels on the same connection, each with what to do on a notification
        # (also once on each connect: notifications sent while disconnected are lost).
        self.channels = channels or {}

    async def run_forever(self) -> None:
        """Listen; on a lost connection fall back to the hub's 1 s poll and reconnect."""
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("event listener lost its connection", error=str(exc))
            finally:
                self.hub.set_listening(False)
                self.connected.clear()
            await asyncio.sleep(self.retry_s)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(
            self.conninfo, **self.connect_kwargs
        ) as conn:
            await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
            for channel, callback in self.channels.items():
                await conn.execute(f"LISTEN {channel}")
                callback()
            self.hub.set_listening(True)
            self.connected.set()
            self.hub.notify()  # events committed while no listener ran: read them now
            async for notice in conn.notifies():
                on_notice = self.channels.get(notice.channel)
                if on_notice is not None:
                    on_notice()
                else:
                    # the payload is the appended event's type: only the subscribers that
                    # follow it wake (an empty one, from an older replica: all of them)
                    self.hub.notify({notice.payload} if notice.payload else None)
