"""Start a point that quotes the output: the claim's holder selects a line or a span of the
output with the mouse (or clicks a line's number), or picks a line by its number in a plain
select box (the keyboard's way), and the comment form gets a point quoting it.

The output is drawn by a small ``st.components.v2`` component (JavaScript in the page, no
iframe) that shows the same escaped HTML as ``st.html`` would (``console.view.marked_output``)
and sends back which lines were picked and the text selected there. That answer comes from
the browser, so the quote is taken from the output itself (``console.view.picked_quote``).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from console.view import NEWLINE_MARK, md_literal, picked_quote

# the output's HTML is escaped by marked_output (model text never reaches innerHTML as
# markup); the script only reads the selection and reports line numbers and plain text
_JS = """
export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let root = parentElement.querySelector(':scope > .cc-pick');
  if (!root) {
    root = document.createElement('div');
    root.className = 'cc-pick';
    parentElement.appendChild(root);
  }
  if (root.ccHtml !== data.html) {
    root.innerHTML = data.html;
    root.ccHtml = data.html;
  }
  const lineOf = (node) => {
    const element = node && (node.nodeType === 1 ? node : node.parentElement);
    return element ? element.closest('.cc-l') : null;
  };
  const plain = (range) => {
    const copy = range.cloneContents();
    copy.querySelectorAll('.cc-ln, sup.cc-q').forEach((n) => n.remove());
    return copy.textContent;
  };
  // the part of the selection inside one element
  const rangeOver = (element, range) => {
    const part = document.createRange();
    part.selectNodeContents(element);
    if (part.compareBoundaryPoints(Range.START_TO_START, range) < 0)
      part.setStart(range.startContainer, range.startOffset);
    if (part.compareBoundaryPoints(Range.END_TO_END, range) > 0)
      part.setEnd(range.endContainer, range.endOffset);
    return part;
  };
  const send = (first, last, text) =>
    setTriggerValue('picked', { first: Number(first), last: Number(last), text });
  root.onclick = (event) => {
    const number = event.target.closest && event.target.closest('.cc-ln');
    const line = number && lineOf(number);
    if (line) send(line.dataset.line, line.dataset.line, '');
  };
  // a double or triple click fires mouseup each time: read the selection once it settles
  root.onmouseup = () => {
    clearTimeout(root.ccTimer);
    root.ccTimer = setTimeout(() => {
      const selection = window.getSelection();
      if (!selection || selection.isCollapsed || !selection.rangeCount) return;
      const pre = root.querySelector('pre');
      // a triple click's selection may run on past the output: keep its part in the output
      if (!pre || !selection.getRangeAt(0).intersectsNode(pre)) return;
      const range = rangeOver(pre, selection.getRangeAt(0));
      const text = plain(range);
      const lines = [...root.querySelectorAll('.cc-l')].filter((l) =>
        range.intersectsNode(l) && plain(rangeOver(l, range)).length > 0);
      if (!text.trim() || !lines.length) return;
      send(lines[0].dataset.line, lines[lines.length - 1].dataset.line, text);
    }, 350);
  };
  return () => clearTimeout(root.ccTimer);
}
"""

LABEL_CHARS = 24  # one line in the decision panel at 1280 px: Send stays in view

_pick = st.components.v2.component("console_output_quote", js=_JS, isolate_styles=False)


def _quotes_key(review_id: str) -> str:
    return f"quotes-{review_id}"


def quotes(review_id: str) -> list[dict[str, Any]]:
    """The quotes picked for this item's comment, in the order picked."""
    return list(st.session_state.get(_quotes_key(review_id)) or [])


def drop(review_id: str) -> None:
    """Forget the picked quotes and what was written for them."""
    for n in range(len(quotes(review_id))):
        st.session_state.pop(f"decision-quoted-{n}", None)
    st.session_state.pop(_quotes_key(review_id), None)


def _start_point(review_id: str, picked: dict[str, Any] | None) -> None:
    if picked is None:
        return
    have = quotes(review_id)
    if any(q["quote"] == picked["quote"] and q["first"] == picked["first"] for q in have):
        return  # picked twice: one point
    st.session_state[_quotes_key(review_id)] = [*have, picked]
    st.session_state["decision-action"] = "comment"  # the point starts in the comment form


def pickable_output(review_id: str, output: str, html: str) -> None:
    """The output (``html``: marked_output with ``lines=True``) where a selection or a click
    on a line's number starts a point; call before the decision panel is drawn."""
    answer = _pick(key="output-select", data={"html": html}, on_picked_change=lambda: None)
    got = answer.get("picked") if answer else None
    if isinstance(got, dict):
        found = picked_quote(output, got.get("first"), got.get("last"), got.get("text"))
        _start_point(review_id, found)


def line_picker(review_id: str, output: str) -> None:
    """The same without a mouse: choose a line by its number."""
    rows = output.split("\n")
    numbers = [n for n, row in enumerate(rows, start=1) if row.strip()]

    def picked() -> None:
        number = st.session_state.get("quote-line")
        if number is not None:
            _start_point(review_id, picked_quote(output, number, number))
        st.session_state["quote-line"] = None

    st.selectbox(
        "Quote a line in a new point",
        numbers,
        index=None,
        format_func=lambda n: f"{n}: {rows[n - 1].strip()[:70]}",
        placeholder="Select a line or a span above, or choose a line here",
        key="quote-line",
        on_change=picked,
    )


def form_fields(review_id: str) -> list[tuple[dict[str, Any], str]]:
    """In the comment form: a box per quoted point, labelled with its line and quote (cut to
    one line, whole in its help), for what should change there. Returns each quote
    with what was written for it."""
    out = []
    for n, picked in enumerate(quotes(review_id)):
        a, b = picked["first"], picked["last"]
        where = f"line {a}" if a == b else f"lines {a}-{b}"
        one = NEWLINE_MARK.join(r.strip() for r in str(picked["quote"]).split("\n") if r.strip())
        short = one if len(one) <= LABEL_CHARS else one[: LABEL_CHARS - 1] + "\u2026"
        with st.container(key=f"quoted-point-{n}"):
            said = st.text_input(
                f"{where.capitalize()}: \u201c{md_literal(short)}\u201d",
                key=f"decision-quoted-{n}",
                placeholder="What should change here?",
                help=md_literal(one),
            )
        out.append((picked, said))
    return out
