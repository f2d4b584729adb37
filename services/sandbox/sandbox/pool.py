"""A fixed number of warm sandboxes (default: one per usable CPU), one job at a time each.

A sandbox that died, could not clean up after a job, or reached its job quota is replaced in
the background (retrying with back-off for as long as the service runs; ``/readyz`` reports a
pool with no live sandbox); a job whose sandbox died before it started is retried once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from sandbox.isolation.plan import IsolationPlan
from sandbox.settings import SandboxSettings
from sandbox.worker import JobSpec, RawOutcome, Worker, WorkerDied
from shared.logging import get_logger

log = get_logger("crosscheck.sandbox.pool")

RESPAWN_DELAYS_S = (0.0, 0.2, 1.0, 5.0, 15.0)


class PoolUnavailable(Exception):
    pass


class WorkerPool:
    def __init__(self, plan: IsolationPlan, settings: SandboxSettings) -> None:
        self.plan = plan
        self.settings = settings
        self.size = settings.workers
        self._idle: asyncio.Queue[Worker] = asyncio.Queue()
        self._workers: dict[int, Worker] = {}
        self._respawning: set[asyncio.Task[None]] = set()
        self._closed = False
        self.last_error: str | None = None
        self.replaced = 0

    def _is_closed(self) -> bool:
        return self._closed

    @property
    def live(self) -> int:
        return sum(1 for w in self._workers.values() if w.usable())

    async def start(self) -> None:
        workers = [Worker(i, 0, plan=self.plan, settings=self.settings) for i in range(self.size)]
        outcomes = await asyncio.gather(*(w.start() for w in workers), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await asyncio.gather(*(w.stop(force=True) for w in workers), return_exceptions=True)
            raise PoolUnavailable(str(failures[0]))
        for worker in workers:
            self._workers[worker.index] = worker
            self._idle.put_nowait(worker)

    async def run(self, job: JobSpec) -> RawOutcome:
        """Run ``job`` on the next free sandbox; retried once if its sandbox died first."""
        deaths = 0
        while True:
            if self._is_closed():
                raise PoolUnavailable("the sandbox pool is shut down")
            try:
                worker = await asyncio.wait_for(
                    self._idle.get(), timeout=self.settings.queue_timeout_s
                )
            except TimeoutError as exc:
                raise PoolUnavailable(
                    f"no sandbox free within {self.settings.queue_timeout_s:g} s"
                    + (f" (last failure: {self.last_error})" if self.last_error else "")
                ) from exc
            if not worker.usable():  # died while idle: replace it, take the next one
                self._replace(worker)
                continue
            try:
                outcome = await worker.run(job)
            except WorkerDied as exc:
                self.last_error = str(exc)
                self._replace(worker)
                deaths += 1
                if deaths >= 2:
                    raise PoolUnavailable(str(exc)) from exc
                continue
            except BaseException:
                self._replace(worker)
                raise
            if worker.usable():
                self._idle.put_nowait(worker)
            else:
                self._replace(worker)
            return outcome

    def _replace(self, worker: Worker) -> None:
        if self._is_closed():
            return
        task = asyncio.get_running_loop().create_task(self._respawn(worker))
        self._respawning.add(task)
        task.add_done_callback(self._respawning.discard)

    async def _respawn(self, old: Worker) -> None:
        await old.stop(force=old.process is not None and old.process.poll() is None)
        generation = old.generation
        for attempt in itertools.count():
            if self._is_closed():
                return
            await asyncio.sleep(RESPAWN_DELAYS_S[min(attempt, len(RESPAWN_DELAYS_S) - 1)])
            generation += 1
            new = Worker(old.index, generation, plan=self.plan, settings=self.settings)
            try:
                await new.start()
            except asyncio.CancelledError:
                await new.stop(force=True)
                raise
            except WorkerDied as exc:
                self.last_error = str(exc)
                log.warning("sandbox restart failed", worker=new.name, error=str(exc))
                continue
            if self._is_closed():
                await new.stop()
                return
            self._workers[old.index] = new
            self.replaced += 1
            self._idle.put_nowait(new)
            return

    async def settle(self) -> None:
        """Wait for replacements in progress (tests use it to compare process counts)."""
        while self._respawning:
            await asyncio.gather(*list(self._respawning), return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._respawning):
            task.cancel()
        for task in list(self._respawning):
            with contextlib.suppress(BaseException):
                await task
        await asyncio.gather(*(w.stop() for w in self._workers.values()), return_exceptions=True)
