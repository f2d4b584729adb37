"""The console's pages: their scripts (relative to ``main.py``), titles and URL paths."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import NamedTuple


class PageSpec(NamedTuple):
    script: str
    title: str

    @property
    def url_path(self) -> str:
        """Streamlit's URL path for a page script: its file name without ``.py``."""
        return PurePosixPath(self.script).stem


PAGES = (
    PageSpec("views/queue.py", "Queue"),  # the default page, also at the root URL
    PageSpec("views/review.py", "Review"),
    PageSpec("views/decisions.py", "My decisions"),
    PageSpec("views/escalations.py", "Escalations"),
    PageSpec("views/runs.py", "Runs"),
    PageSpec("views/lessons.py", "Lessons"),
    PageSpec("views/datasets.py", "Datasets"),
    PageSpec("views/knowledge.py", "Knowledge"),
    PageSpec("views/metrics.py", "Metrics"),
)
