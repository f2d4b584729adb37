"""Schema evaluations in killable worker processes, shared fairly between run owners.

A schema can be slow to evaluate however its patterns are bounded (a chain of ``anyOf``
pairs of ``$ref`` doubles the work at every link), and a thread cannot be stopped: so each
evaluation runs in a worker process (``evaluators.worker``) whose address space is capped, and
one that is not done within the time limit is killed; its slot gets a fresh worker at its next
use. Workers are reused, so a warm evaluation pays a pipe round trip, not a process start.

Slots are shared between owners (the token that created the run): one owner holds at most
``owner_share`` of the ``workers`` slots at once; its other evaluations queue, and queued
owners are served in turn. The time limit counts from the moment a worker has the request,
so waiting for a slot never fails an evaluation.

The pool is used from more than one event loop (DBOS runs some steps on its own loop): its
bookkeeping is under a thread lock, and a waiter is woken on its own loop.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from orchestrator.evaluators.patterns import PatternLimits
from orchestrator.evaluators.worker import READY

# The worker's environment: enough to run Python, none of the service's settings or secrets.
_ENVIRONMENT = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")


@dataclass(frozen=True)
class PoolConfig:
    workers: int = 2
    owner_share: int = 1
    timeout_s: float = 5.0
    memory_mb: int = 512
    patterns: PatternLimits = field(default_factory=PatternLimits)
    start_timeout_s: float = 60.0  # a worker's start (interpreter and imports)


class SchemaTimeout(Exception):
    """An evaluation took longer than its limit (its worker was killed)."""


class SchemaUnusable(Exception):
    """The schema cannot be evaluated (only schemas stored before the checks get here), or
    its worker ran out of memory or ended without an answer."""


@dataclass(frozen=True)
class Evaluated:
    count: int  # violations in all
    violations: list[tuple[list[str | int], str]]  # the first ones: (path, message)


def _rebuilt(name: str, message: str) -> Exception:
    """The worker's exception as the same built-in class where it can be (the step records
    the class of an unexpected error), else a RuntimeError naming it."""
    raised = getattr(builtins, name, None)
    if isinstance(raised, type) and issubclass(raised, Exception):
        try:
            return raised(message)
        except TypeError:  # a class that needs more arguments (UnicodeError's)
            pass
    return RuntimeError(f"{name}: {message}")


class _Worker:
    def __init__(self, config: PoolConfig) -> None:
        limits = {**asdict(config.patterns), "memory_mb": config.memory_mb}
        self.process = subprocess.Popen(  # our own module, no shell
            [sys.executable, "-m", "orchestrator.evaluators.worker", json.dumps(limits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={k: os.environ[k] for k in _ENVIRONMENT if k in os.environ},
        )
        self.stdin: IO[bytes] = self.process.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = self.process.stdout  # type: ignore[assignment]

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> None:
        line = self.stdout.readline()
        if line.strip() != READY.encode():
            self.kill()
            raise SchemaUnusable("the schema worker did not start")

    def exchange(self, schema: dict[str, Any], document: Any) -> dict[str, Any]:
        """Send one request, read its answer (blocking: call it on a thread)."""
        request = json.dumps({"schema": schema, "document": document}).encode() + b"\n"
        try:
            self.stdin.write(request)
            self.stdin.flush()
            line = self.stdout.readline()
        except (BrokenPipeError, ValueError, OSError):
            line = b""
        if not line:
            raise SchemaUnusable("the schema evaluation ended without an answer")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        """Kill the process and reap it (its pid is gone when this returns)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.stdin, self.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.worker: _Worker | None = None

    def discard(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.kill()

    def ensure_worker(self, config: PoolConfig) -> _Worker:
        """This slot's live worker, started now if it has none (blocking: on a thread)."""
        if self.worker is not None and self.worker.process.poll() is None:
            return self.worker
        self.discard()
        self.worker = _Worker(config)
        self.worker.wait_ready()
        return self.worker


_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[_Slot]"]


def _fail_waiter(future: asyncio.Future[_Slot]) -> None:
    if not future.done():
        future.set_exception(SchemaUnusable("the schema workers are shut down"))


class SchemaPool:
    """``workers`` reusable worker processes; see the module docstring."""

    def __init__(self, config: PoolConfig | None = None) -> None:
        self.config = config or PoolConfig()
        self.share = min(self.config.owner_share, self.config.workers)
        self._lock = threading.Lock()
        self._slots = [_Slot(i) for i in range(self.config.workers)]
        self._idle = list(reversed(self._slots))
        self._held: dict[str, int] = {}
        self._queues: dict[str, deque[_Waiter]] = {}  # in the order owners are served
        # a thread per slot waits on its worker's pipe, a second one reaps a killed worker
        self._threads = ThreadPoolExecutor(
            max_workers=2 * self.config.workers, thread_name_prefix="json-schema"
        )
        self._closed = False

    # -------------------------------------------------------------- evaluation

    async def evaluate(self, owner: str, schema: dict[str, Any], document: Any) -> Evaluated:
        slot = await self._acquire(owner)
        try:
            return await self._run(slot, schema, document)
        finally:
            self._release(owner, slot)

    async def _run(self, slot: _Slot, schema: dict[str, Any], document: Any) -> Evaluated:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise SchemaUnusable("the schema workers are shut down")
        try:
            worker = await asyncio.wait_for(
                loop.run_in_executor(self._threads, slot.ensure_worker, self.config),
                self.config.start_timeout_s,
            )
        except BaseException:
            await asyncio.shield(self._off_loop(slot.discard))
            raise
        try:
            answer = await asyncio.wait_for(
                loop.run_in_executor(self._threads, worker.exchange, schema, document),
                self.config.timeout_s,
            )
        except TimeoutError:
            await asyncio.shield(self._off_loop(slot.discard))
            raise SchemaTimeout(
                f"the schema evaluation took longer than {self.config.timeout_s:g} s"
            ) from None
        except BaseException:  # no answer, or the step was cancelled mid-evaluation
            await asyncio.shield(self._off_loop(slot.discard))
            raise
        if "error" in answer:
            name, message = str(answer["error"]), str(answer.get("message", ""))
            if name == "MemoryError":
                await self._off_loop(slot.discard)
                raise SchemaUnusable(
                    f"the schema evaluation needed more than {self.config.memory_mb} MB"
                )
            if "unusable" in answer:
                raise SchemaUnusable(f"the run's schema cannot be evaluated: {name}")
            raise _rebuilt(name, message)
        return Evaluated(
            int(answer["count"]), [(list(path), str(text)) for path, text in answer["violations"]]
        )

    async def _off_loop(self, function: Callable[[], None]) -> None:
        """On a thread of the pool; after ``close`` (its workers are killed already: nothing
        blocks) here."""
        try:
            future = asyncio.get_running_loop().run_in_executor(self._threads, function)
        except RuntimeError:
            function()
            return
        await future

    def busy(self) -> int:
        """Slots in use (for tests and diagnostics)."""
        with self._lock:
            return len(self._slots) - len(self._idle)

    def pids(self) -> list[int]:
        """The live workers' pids (for tests and diagnostics)."""
        return [
            s.worker.pid
            for s in self._slots
            if s.worker is not None and s.worker.process.poll() is None
        ]

    # -------------------------------------------------------------- slots

    async def _acquire(self, owner: str) -> _Slot:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise SchemaUnusable("the schema workers are shut down")
            if self._idle and self._held.get(owner, 0) < self.share and owner not in self._queues:
                return self._grant(owner)
            future: asyncio.Future[_Slot] = loop.create_future()
            waiter: _Waiter = (loop, future)
            self._queues.setdefault(owner, deque()).append(waiter)
        try:
            return await future
        except asyncio.CancelledError:
            with self._lock:
                queue = self._queues.get(owner)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._queues[owner]
                    raise
            # granted meanwhile: a delivered slot is given back here, an undelivered one by
            # _deliver when it finds the future cancelled
            if future.done() and not future.cancelled():
                self._release(owner, future.result())
            raise

    def _grant(self, owner: str) -> _Slot:
        self._held[owner] = self._held.get(owner, 0) + 1
        return self._idle.pop()

    def _release(self, owner: str, slot: _Slot) -> None:
        with self._lock:
            self._held[owner] -= 1
            if not self._held[owner]:
                del self._held[owner]
            self._idle.append(slot)
            self._dispatch()

    def _dispatch(self) -> None:
        """Give idle slots to queued owners under their share, in turn (under the lock)."""
        while self._idle:
            owner = next((o for o in self._queues if self._held.get(o, 0) < self.share), None)
            if owner is None:
                return
            queue = self._queues.pop(owner)
            loop, future = queue.popleft()
            if queue:
                self._queues[owner] = queue  # to the back of the line
            slot = self._grant(owner)
            try:
                loop.call_soon_threadsafe(self._deliver, owner, future, slot)
            except RuntimeError:  # that loop is closed: nobody waits any more
                self._held[owner] -= 1
                if not self._held[owner]:
                    del self._held[owner]
                self._idle.append(slot)

    def _deliver(self, owner: str, future: asyncio.Future[_Slot], slot: _Slot) -> None:
        if future.cancelled():
            self._release(owner, slot)
        else:
            future.set_result(slot)

    def close(self) -> None:
        """Stop every worker (each also ends by itself at the end of its stdin); evaluations
        still waiting for a slot fail."""
        with self._lock:
            self._closed = True
            waiting = [waiter for queue in self._queues.values() for waiter in queue]
            self._queues.clear()
        for loop, future in waiting:
            try:
                loop.call_soon_threadsafe(_fail_waiter, future)
            except RuntimeError:  # that loop is closed
                pass
        for slot in self._slots:
            slot.discard()
        self._threads.shutdown(wait=False, cancel_futures=True)
