"""A schema worker process: evaluates documents against run schemas, one at a time.

Started by ``evaluators.pool`` as ``python -m orchestrator.evaluators.worker LIMITS_JSON``.
It caps its own address space first (``RLIMIT_AS``), then reads one JSON request per line on
stdin (``{"schema": ..., "document": ...}``) and writes one JSON answer per line on stdout:
``{"count": N, "violations": [[path, message], ...]}`` (the first ``MAX_LISTED``), or
``{"error": ExceptionClass, "message": ...}`` (with ``"unusable": true`` when the schema
cannot be evaluated at all). It ends at the end of stdin, so it never
outlives the service. The pool kills it when an evaluation takes longer than its limit.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from referencing.exceptions import Unresolvable

from orchestrator.evaluators.patterns import PatternLimits, schema_violations

MAX_LISTED = 50
MAX_MESSAGE = 2000
READY = "ready"


def answer(request: dict[str, Any], limits: PatternLimits) -> dict[str, Any]:
    try:
        errors = schema_violations(request["schema"], request["document"], limits)
    except MemoryError:
        return {"error": "MemoryError", "message": "the schema evaluation ran out of memory"}
    except (RecursionError, Unresolvable) as exc:
        # only a schema stored before schemas were checked at creation gets here
        return {"error": type(exc).__name__, "unusable": True}
    except Exception as exc:  # the parent decides what each class means
        return {"error": type(exc).__name__, "message": str(exc)[:MAX_MESSAGE]}
    return {
        "count": len(errors),
        "violations": [[list(e.path), e.message[:MAX_MESSAGE]] for e in errors[:MAX_LISTED]],
    }


def serve(stdin: TextIO, stdout: TextIO, limits: PatternLimits) -> None:
    stdout.write(READY + "\n")
    stdout.flush()
    for line in stdin:
        try:
            reply = json.dumps(answer(json.loads(line), limits))
        except MemoryError:
            reply = json.dumps({"error": "MemoryError", "message": "out of memory"})
        stdout.write(reply + "\n")
        stdout.flush()


def main() -> None:
    config = json.loads(sys.argv[1])
    memory = int(config.pop("memory_mb")) * 1024 * 1024
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        # under a container's memory limit, the kernel kills a worker before the service
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the service's to handle
    serve(sys.stdin, sys.stdout, PatternLimits(**config))


if __name__ == "__main__":
    main()
