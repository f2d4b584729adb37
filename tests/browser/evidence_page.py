"""A Streamlit page that shows one round's output and evidence as the Review page does (with
test_evidence.py's hostile evidence), for the browser test to read; run by ``streamlit run``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streamlit as st

from console import evidence
from console.view import marked_output
from tests.ui.test_evidence import OUTPUT, citations, research

# [4] lists evidence 1's URL: its link follows the reference line and says so
PAGE_OUTPUT = (
    OUTPUT.replace("agrees [3].", "agrees [3]. It crosses the strait [4].")
    + "\n[4] https://example.org/golden-gate"
)
found, checked = research(), citations()
cite = evidence.citation_linker(2, found, checked, output=PAGE_OUTPUT)
st.html(marked_output(PAGE_OUTPUT, [], code=False, decorate=cite))
for line in range(60):  # enough page that evidence 3 starts below the window
    st.text(f"line {line}")
evidence.panel(2, found, checked)
