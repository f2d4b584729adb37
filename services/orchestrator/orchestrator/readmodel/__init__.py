"""The read model's one reader and writer of runs, rounds, reflections, model calls and
events, and the rules of who may see them.

- ``runs``: a run's row (``read_run`` for the steps, ``load_run`` for the rarer paths) and
  its status changes with their events.
- ``rounds``: the versions of a run's output.
- ``reflections``: what the next revision must take in (critique, evaluation, a person).
- ``calls``: every model call, stored once per key (exactly-once billing).
- ``events``: the append-only log the API, websockets and webhooks read; one append path.
- ``visibility``: what a caller may see (admin, service, reviewer).
- ``rows``: changing a run or round row a rarer path loaded through the ORM.
- ``aggregates``: queries over many runs at once (the stats page, the dataset export).

The engine, runs, reviews, events, knowledge, stats and datasets capabilities read and
write these tables through here only: a run or round row they load is changed with
``rows.change`` (or a named writer of ``runs``: ``finished``, ``reopened``, ``flag_cancel``).
A test
(``tests/orchestrator/test_readmodel_ownership.py``) fails when a module elsewhere builds
one of their rows, queries them, or sets a column of a row it holds.
"""
