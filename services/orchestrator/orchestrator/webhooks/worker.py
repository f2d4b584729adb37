"""The delivery worker: one per orchestrator process, started and stopped by the app.

It claims due outbox rows (``FOR UPDATE SKIP LOCKED`` on Postgres, so replicas never take
the same row; SQLite has one process), POSTs each with the Standard Webhooks headers, and
records the outcome: 2xx is delivered; anything else is retried with exponential backoff and
jitter until the attempt or age budget is spent, then the row is ``failed`` (a dead letter
an admin can redeliver). A claim is a lease: the row's ``next_attempt_at`` moves past the
request's timeout, so a process killed mid-delivery leaves it due again (at once, when the
same executor id restarts). Every retry of a row sends the same body under the same
``webhook-id``; only ``webhook-timestamp`` and the signature are new.

At most ``webhook_concurrency`` requests are in flight, and at most
``webhook_host_concurrency`` to one receiver; each has a hard deadline. So a slow or dead
receiver holds a few slots for at most ``webhook_timeout_s`` each, never every slot, and
never a run's step (runs only write rows).

Before each request the target is checked again (``targets.TargetGuard``: DNS may have
changed since it was registered) and the request connects to the address that was checked,
with the URL's host as ``Host`` and TLS server name, so a second resolution cannot swap it.
A target now inside is a ``failed`` delivery at once, with the reason and no request; a host
that does not resolve is retried like a receiver that is down.
"""

from __future__ import annotations

import asyncio
import functools
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import sqlalchemy as sa
from sqlmodel import Session
from standardwebhooks.webhooks import Webhook

from orchestrator.db import Database
from orchestrator.settings import OrchestratorSettings
from orchestrator.tables import utcnow
from orchestrator.webhooks import notify, outbox
from orchestrator.webhooks.secrets import SecretBox
from orchestrator.webhooks.targets import TargetGuard, TargetRefused, Unresolvable, Verdict
from shared.aio import call_on_loop, wait_until_set
from shared.logging import get_logger
from shared.orchestration import DeliveryStatus, webhook_secret_bytes

log = get_logger("crosscheck.orchestrator.webhooks")

D = outbox.DELIVERIES
S = outbox.SUBSCRIPTIONS
LEASE_MARGIN_S = 10.0
USER_AGENT = "Crosscheck-Webhooks/1"
_PENDING = DeliveryStatus.pending.value


@dataclass(frozen=True)
class Job:
    id: str
    url: str
    destination: str
    body: str
    attempts: int
    queued_at: datetime
    key: bytes | None
    problem: str | None  # why it cannot be signed (it fails without a request)


def backoff(attempts: int, initial: float, cap: float) -> float:
    """Delay after the ``attempts``-th failed attempt: doubling, capped, +/- 25 % jitter."""
    base = min(cap, initial * 2.0 ** min(attempts - 1, 30))
    return float(min(cap, base * random.uniform(0.75, 1.25)))


class DeliveryWorker:
    def __init__(
        self,
        settings: OrchestratorSettings,
        db: Database,
        box: SecretBox | None,
        guard: TargetGuard,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._db = db
        self._box = box
        self._guard = guard
        secret = settings.webhook_secret
        self._platform_key = (
            webhook_secret_bytes(secret.get_secret_value()) if secret is not None else None
        )
        self._me = settings.executor_id
        self._client = httpx.AsyncClient(
            timeout=settings.webhook_timeout_s, transport=transport, follow_redirects=False
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._busy: dict[str, int] = {}  # in-flight requests per destination
        self._notifier = notify.Notifier(
            settings.notify_channel_urls, settings.notify_console_url, settings.webhook_timeout_s
        )

    def wake(self) -> None:
        """Safe from any thread: look for due deliveries now."""
        call_on_loop(self._loop, self._event.set)

    async def run_forever(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            released = await self._db.run(self._release_own)
            if released:
                log.info("webhook deliveries resumed after a restart", deliveries=released)
        except Exception as exc:  # their lease lapses by itself
            log.warning("webhook claims not released", error=type(exc).__name__)
        while True:
            self._event.clear()  # a wake-up from here on makes the wait below return at once
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away for a moment: try again
                log.warning("webhook worker error", error=type(exc).__name__)
            await wait_until_set(self._event, self._settings.webhook_poll_s)

    async def aclose(self) -> None:
        """Stop sending; what was in flight is due again at once (here or on a replica)."""
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        await self._client.aclose()
        try:
            await self._db.run(self._release_own)
        except Exception as exc:  # the lease lapses by itself
            log.warning("webhook claims not released", error=type(exc).__name__)

    async def _tick(self) -> None:
        free = self._settings.webhook_concurrency - len(self._inflight)
        if free <= 0 or not await self._db.read(self._any_due):
            return
        busy = dict(self._busy)
        jobs = await self._db.run(lambda s: self._claim(s, free, busy))
        for job in jobs:
            self._busy[job.destination] = self._busy.get(job.destination, 0) + 1
            task = asyncio.create_task(self._deliver(job), name=f"webhook-{job.id}")
            self._inflight.add(task)
            task.add_done_callback(functools.partial(self._done, destination=job.destination))

    def _done(self, task: asyncio.Task[None], destination: str) -> None:
        self._inflight.discard(task)
        left = self._busy.get(destination, 1) - 1
        if left > 0:
            self._busy[destination] = left
        else:
            self._busy.pop(destination, None)
        self._event.set()  # a slot is free: there may be more due

    # ------------------------------------------------------------------ database work

    def _release_own(self, session: Session) -> int:
        """Rows this executor id claimed before it was killed are due again now."""
        result = session.connection().execute(
            D.update()
            .where(D.c.status == _PENDING, D.c.claimed_by == self._me)
            .values(claimed_by=None, next_attempt_at=utcnow())
        )
        return int(result.rowcount or 0)

    def _any_due(self, session: Session) -> bool:
        query = (
            sa.select(D.c.id)
            .where(D.c.status == _PENDING, D.c.next_attempt_at <= utcnow())
            .limit(1)
        )
        return session.connection().execute(query).first() is not None

    def _claim(self, session: Session, limit: int, busy: dict[str, int]) -> list[Job]:
        """Up to ``limit`` due rows, at most ``webhook_host_concurrency`` in flight per
        destination (counting ``busy``, what this process already sends)."""
        conn = session.connection()
        now = utcnow()
        cap = self._settings.webhook_host_concurrency
        due = (
            sa.select(D.c.id, D.c.destination)
            .where(D.c.status == _PENDING, D.c.next_attempt_at <= now)
            .order_by(D.c.next_attempt_at)
            .limit(limit * 4)
            .with_for_update(skip_locked=True)
        )
        full = sorted(d for d, n in busy.items() if n >= cap)
        if full:
            due = due.where(D.c.destination.not_in(full))
        ids: list[str] = []
        for candidate in conn.execute(due):
            if busy.get(candidate.destination, 0) >= cap:
                continue  # locked until this transaction ends, then free for the next claim
            busy[candidate.destination] = busy.get(candidate.destination, 0) + 1
            ids.append(candidate.id)
            if len(ids) == limit:
                break
        if not ids:
            return []
        settings = self._settings
        # the target is resolved again before the request: both fit in the lease
        budget = settings.webhook_resolve_timeout_s + settings.webhook_timeout_s
        lease = now + timedelta(seconds=budget + LEASE_MARGIN_S)
        conn.execute(
            D.update()
            .where(D.c.id.in_(ids))
            .values(
                next_attempt_at=lease,
                claimed_by=self._me,
                attempts=D.c.attempts + 1,
                last_attempt_at=now,
            )
        )
        rows = list(
            conn.execute(
                sa.select(
                    D.c.id,
                    D.c.url,
                    D.c.destination,
                    D.c.body,
                    D.c.attempts,
                    D.c.queued_at,
                    D.c.subscription_id,
                ).where(D.c.id.in_(ids))
            )
        )
        wanted = {row.subscription_id for row in rows if row.subscription_id}
        sealed = (
            {
                row.id: row.secret_encrypted
                for row in conn.execute(
                    sa.select(S.c.id, S.c.secret_encrypted).where(S.c.id.in_(wanted))
                )
            }
            if wanted
            else {}
        )
        jobs: list[Job] = []
        for row in rows:
            channel = notify.channel_number(row.url) is not None  # sent by Apprise, unsigned
            key, problem = (None, None) if channel else self._key(row.subscription_id, sealed)
            jobs.append(
                Job(
                    row.id,
                    row.url,
                    row.destination,
                    row.body,
                    row.attempts,
                    row.queued_at,
                    key,
                    problem,
                )
            )
        return jobs

    def _key(
        self, subscription_id: str | None, sealed: dict[str, str]
    ) -> tuple[bytes | None, str | None]:
        if subscription_id is None:
            if self._platform_key is None:
                return None, "ORCHESTRATOR_WEBHOOK_SECRET is not set: callbacks cannot be signed"
            return self._platform_key, None
        token = sealed.get(subscription_id)
        if token is None:
            return None, "the subscription was deleted"
        key = self._box.open(token) if self._box is not None else None
        if key is None:
            return None, (
                "the subscription's secret cannot be decrypted with the configured keys "
                "(ORCHESTRATOR_WEBHOOK_KEY or CROSSCHECK_ADMIN_TOKEN changed?)"
            )
        return key, None

    def _record(
        self, session: Session, job: Job, code: int | None, error: str | None, final: bool
    ) -> str:
        now = utcnow()
        values: dict[str, object] = {
            "claimed_by": None,
            "last_status_code": code,
            "last_error": error[:500] if error else None,
        }
        if error is None:
            values.update(status=DeliveryStatus.delivered.value, delivered_at=now)
        else:
            settings = self._settings
            spent = (
                job.attempts >= settings.webhook_max_attempts
                or (now - job.queued_at).total_seconds() >= settings.webhook_max_age_s
            )
            if final or spent:
                values["status"] = DeliveryStatus.failed.value
            else:
                delay = backoff(
                    job.attempts, settings.webhook_retry_initial_s, settings.webhook_retry_max_s
                )
                values["next_attempt_at"] = now + timedelta(seconds=delay)
        session.connection().execute(
            D.update().where(D.c.id == job.id, D.c.claimed_by == self._me).values(**values)
        )
        return str(values.get("status", _PENDING))

    # ---------------------------------------------------------------------- sending

    async def _deliver(self, job: Job) -> None:
        try:
            await self._attempt(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # recording failed: the lease lapses and it is tried again
            log.warning(
                "webhook delivery not recorded", delivery_id=job.id, error=type(exc).__name__
            )

    async def _attempt(self, job: Job) -> None:
        code: int | None = None
        error: str | None = job.problem
        final = job.problem is not None
        if notify.channel_number(job.url) is not None:
            error = await self._notify(job)
        elif job.key is not None:
            try:
                verdict = await self._guard.check(job.url)
            except Unresolvable as exc:  # DNS may be back by the next attempt
                error = f"not sent: {exc.reason}"
            except TargetRefused as exc:  # inside: no request, and no retry
                error, final = f"refused, not sent: {exc.reason}", True
            except Exception as exc:  # a resolver's surprise: not sent, tried again later
                error = f"not sent: the target could not be checked ({type(exc).__name__})"
            else:
                code, error = await self._post(job, job.key, verdict)
        status = await self._db.run(lambda s: self._record(s, job, code, error, final=final))
        if error is not None:
            log.info(
                "webhook delivery not accepted",
                delivery_id=job.id,
                attempt=job.attempts,
                status_code=code,
                error=error,
                outcome=status,
            )

    async def _notify(self, job: Job) -> str | None:
        timeout = self._settings.webhook_timeout_s
        try:
            await self._notifier.load()  # not on the channel's clock: see Notifier.load
            async with asyncio.timeout(timeout + 1.0):
                return await self._notifier.send(job.url, job.body)
        except TimeoutError:
            return f"no answer within {timeout:g} s"
        except Exception as exc:  # a plugin's surprise: tried again later, its text unshown
            return f"not delivered ({type(exc).__name__})"

    async def _post(self, job: Job, key: bytes, verdict: Verdict) -> tuple[int | None, str | None]:
        now = datetime.now(UTC)
        url = httpx.URL(job.url)
        extensions: dict[str, str] = {}
        headers: dict[str, str] = {}
        if verdict.address is not None:
            # Connect to the checked address; the name stays the Host and the TLS server name
            # (the certificate is verified against it).
            headers["host"] = url.netloc.decode("ascii")
            if url.scheme == "https":
                extensions["sni_hostname"] = url.raw_host.decode("ascii")
                # a pooled connection is keyed by address only: one verified for another
                # name at the same address must not carry this request
                headers["connection"] = "close"
            url = url.copy_with(host=str(verdict.address))
        headers |= {
            "webhook-id": job.id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(key).sign(job.id, now, job.body),
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        timeout = self._settings.webhook_timeout_s
        try:
            async with asyncio.timeout(timeout):
                async with self._client.stream(
                    "POST", url, content=job.body.encode(), headers=headers, extensions=extensions
                ) as response:
                    code = response.status_code
        except TimeoutError:
            return None, f"no answer within {timeout:g} s"
        except httpx.TimeoutException:
            return None, f"no answer within {timeout:g} s"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {str(exc)[:200]}"
        if 200 <= code < 300:
            return code, None
        return code, f"HTTP {code}"
