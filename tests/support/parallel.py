"""How scripts/test.sh spreads the suite over parallel workers (pytest-xdist).

Each test is its own unit of work, handed to whichever worker is free (as ``--dist load``
does), except the groups below, which go to one worker together and run one after another.
xdist's own ``xdist_group`` mark is not used: with this pytest it no longer reaches the
scheduler (pytest-xdist issue 1386), so the groups are named here, by path.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

# nodeid prefix (from the repository root) -> group name
WORKER_GROUPS = {
    # They share var/test-services/ and sweep each other's leftovers by design.
    "tests/scripts/test_test_services.py::": "test-services",
    # Each starts a whole platform and a Chromium, and keeps screenshots in var/artifacts/.
    "tests/browser/": "browser",
    "tests/bench/test_queue_tab.py::": "browser",
    # Whole platforms killed and restarted, checked against deadlines of their own: one at a
    # time, so that they do not slow each other down past those deadlines.
    "tests/orchestrator/test_cluster.py::": "platforms",
    "tests/orchestrator/test_crash_recovery.py::": "platforms",
    "tests/crosscheck/test_operations.py::": "platforms",
    "tests/crosscheck/test_supervisor.py::TestStartStopCycles::": "platforms",
    "tests/crosscheck/test_supervisor.py::TestUpWithReplicas::": "platforms",
    "tests/orchestrator/test_webhooks.py::": "webhooks",  # receivers down, slow, kill -9
    # Fork bombs and layer probes run as the sandbox user, and each test checks that no process
    # of that user outlived its job (an orphan re-parented to pid 1 counts, whoever left it):
    # one sandbox test at a time, so one test's dying jobs are not another's strays.
    "tests/sandbox/": "sandbox",
    # HumanEval through the real sandbox: its jobs run as the sandbox user too.
    "tests/crosscheck/test_eval.py::TestHumanEval::": "sandbox",
}


def group_of(nodeid: str) -> str | None:
    for prefix, group in WORKER_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return None


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """One test per unit of work, but each of ``WORKER_GROUPS`` as a single unit (the bigger
    units are handed out first, so a group starts early instead of ending the run)."""

    def _split_scope(self, nodeid: str) -> str:
        group = group_of(nodeid)
        return f"group:{group}" if group else nodeid
