"""The engine's pure work runs on the event loop while it is short (no thread hop for work
under a millisecond) and on a worker thread from its limit on (the loop keeps serving)."""

import importlib
import threading

import pytest

from orchestrator.engine import difflock, offloop
from orchestrator.engine.difflock import LockRules
from orchestrator.engine.policy import change_ratio

critique = importlib.import_module("orchestrator.engine.steps.critique")  # the module


def _spy(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Record the thread each call of ``module.name`` runs on."""
    threads: list[int] = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return threads


def _pair(size: int, line: str) -> tuple[str, str]:
    """A previous version and a revision of ``size`` characters together, one line changed."""
    lines = [f"{line} {i}\n" for i in range(size)]
    previous = "".join(lines)[: size // 2]
    previous = previous[: previous.rindex("\n") + 1]
    revision = previous.replace(f"{line} 1\n", f"{line} 7\n", 1)  # the same length
    return previous, revision + "#" * (size - 2 * len(previous))


async def test_work_below_its_limit_runs_on_the_loop_and_from_it_on_a_thread():
    loop_thread = threading.get_ident()

    def where(answer: int) -> tuple[int, int]:
        return threading.get_ident(), answer

    assert await offloop.sized(9, 10, where, 42) == (loop_thread, 42)
    thread, answer = await offloop.sized(10, 10, where, 42)
    assert (thread != loop_thread, answer) == (True, 42)


@pytest.mark.parametrize("kind", ["text", "code"])
async def test_the_diff_lock_hops_to_a_thread_at_its_kinds_limit(monkeypatch, kind):
    threads = _spy(monkeypatch, difflock, "enforce")
    limit = offloop.LOCK_CHARS[kind]
    line = "value = compute()" if kind == "code" else "The answer keeps this line"
    rules = LockRules(quotes=[f"{line} 0"], kind=kind)
    loop_thread = threading.get_ident()
    for size, on_loop in ((limit - 1, True), (limit, False)):
        previous, revision = _pair(size, line)
        assert len(previous) + len(revision) == size
        locked = await difflock.enforce_off_loop(rules, previous, revision, [])
        assert (threads[-1] == loop_thread) is on_loop, (kind, size)
        assert locked == difflock.enforce(rules, previous, revision, [])


async def test_a_code_runs_lock_hops_sooner_than_a_text_runs(monkeypatch):
    """Code is parsed, which costs about twice as much: the same size that a text run's lock
    does on the loop goes to a thread in a code run."""
    size = offloop.LOCK_CHARS["code"] + 100
    assert size < offloop.LOCK_CHARS["text"]
    previous, revision = _pair(size, "x = 1")
    threads = _spy(monkeypatch, difflock, "enforce")
    for kind in ("text", "code"):
        await difflock.enforce_off_loop(
            LockRules(quotes=["x = 1 0"], kind=kind), previous, revision, []
        )
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


async def test_the_change_ratio_hops_to_a_thread_at_its_limit(monkeypatch):
    threads = _spy(monkeypatch, critique, "change_ratio")
    limit = offloop.CHANGE_RATIO_CHARS
    loop_thread = threading.get_ident()
    for size, on_loop in ((limit - 1, True), (limit, False)):
        previous, revision = _pair(size, "A sentence of the answer")
        ratio = await critique._change_ratio(previous, revision)
        assert (threads[-1] == loop_thread) is on_loop, size
        assert ratio == change_ratio(previous, revision) > 0
