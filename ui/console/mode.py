"""Which models answer the platform's calls, as the console says it on every page.

The orchestrator reports its mode in ``GET /v1/info`` (``model_mode``: ``demo``, ``local`` or
``providers``; ``crosscheck up`` sets it). The console asks once per browser session: the
mode does not change while the platform runs. An orchestrator that does not answer is asked
again on the next script run; one that reports no mode gets no caption.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from console.client import ApiError
from console.view import md_literal

CAPTIONS = {
    "demo": "Models: demo (scripted fake model)",
    "local": "Models: local model (SmolLM2-135M on this machine)",
    "providers": "Models: providers (real model APIs)",
}
DEMO_POINTS = (
    "Demo mode: the scripted Actor does not really rewrite the output. It “applies” each "
    "point by appending a line `Reviewer point applied: <your point>` (a `#` comment in "
    "code), and the scripted Critic counts a point as met when that line is there."
)
KEY = "model_mode"


def caption(mode: str | None) -> str | None:
    """The sidebar's words for a mode; an unknown one is named as the API sent it."""
    if not mode:
        return None
    return CAPTIONS.get(mode) or f"Models: {md_literal(mode)}"


def current(client: Any) -> str | None:
    """The orchestrator's mode, asked once per session (None: unknown)."""
    if KEY not in st.session_state:
        try:
            info = client.info()
        except ApiError:
            return None
        mode = info.get("model_mode") if isinstance(info, dict) else None
        st.session_state[KEY] = mode if isinstance(mode, str) else None
    found = st.session_state[KEY]
    return found if isinstance(found, str) else None


def show_caption(client: Any) -> None:
    """``Models: ...`` as a caption where it is called (the sidebar, the login form)."""
    words = caption(current(client))
    if words:
        st.caption(words)
