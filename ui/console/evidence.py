"""The evidence a round's research found and the citations of its output, for the Review page
and the Runs timeline.

A round may carry ``research`` (``{"status", "queries", "evidence": [{"n", "url", "title",
"snippet", "distilled", "retrieved_at", "source", "query", "span"}], "failed_queries"}``) and
``citations`` (``{"ok", "cited", "problems": [{"kind", "message", "number", "url",
"sentence"}]}``); older runs have neither, and then nothing here shows.

Everything in them came from the web, a corpus or a model: it is escaped into HTML, and a URL
becomes a link only when it is ``http``, ``https`` or ``file`` with nothing in it that a
browser would read otherwise (no blank or control character); any other URL
(``javascript:``, ``data:``...) shows as text. The URL is always shown beside its title, so a
title cannot pose as another site (Streamlit's HTML sanitizer also drops a ``file:`` href, so
in the browser a local document's title reads as text beside its path). Each ``[n]`` of the
output is read as the citation check reads it: through the output's own reference line for
``n`` to the evidence whose URL that line gives, and links to that evidence's anchor
``#cc-ev-<round>-<m>``. When that evidence is not evidence ``n`` the mismatch shows beside
the marker; a number without a usable reference line, or whose URL is no evidence's, is
marked invalid. The pure helpers build HTML; :func:`panel` renders it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import streamlit as st

from console.view import ago
from shared.citations import split_references

LINK_SCHEMES = frozenset({"http", "https", "file"})
MARKER = re.compile(r"\[(\d{1,4})\]")  # as shared/citations.py reads a citation
_UNSAFE_IN_URL = re.compile(r"[\x00-\x20\x7f-\x9f\"'<>\\`]")
PROBLEM_WORDS = {
    "unknown_number": "no reference for this number",
    "url_not_in_evidence": "reference not in the evidence",
    "wrong_source": "reference lists another source's URL",
    "several_urls": "several URLs for one number",
    "missing_url": "reference without a URL",
    "uncited_reference": "reference never cited",
    "uncited_claim": "claim without a citation",
}
EVIDENCE_CSS = """<style>
.cc-ev-list { display: flex; flex-direction: column; gap: .5rem; font-size: .9rem; }
.cc-ev { border: 1px solid rgba(128,128,128,.35); border-radius: .4rem; padding: .4rem .6rem; }
.cc-ev:target { outline: 2px solid #ffb000; }
.cc-ev-n { font-weight: 700; margin-right: .3em; }
.cc-ev-meta, .cc-ev-url { color: #777; font-size: .8rem; overflow-wrap: anywhere; }
.cc-ev-body { white-space: pre-wrap; overflow-wrap: anywhere; margin: .3rem 0 0 0; }
.cc-ev-cited { font-size: .75rem; color: #1a7f37; font-weight: 600; margin-left: .4em; }
.cc-ev-failed li, .cc-cite-problems li { overflow-wrap: anywhere; }
.cc-cite-problems { color: #b42318; }
.cc-cite-mismatch { color: #b42318; font-weight: 600; }
.cc-cite-note { color: #b42318; font-size: .8em; }
</style>"""


def safe_href(url: Any) -> str | None:
    """``url`` when it may become a link (``http``, ``https`` or ``file``, nothing a browser
    would read otherwise), else ``None``: show it as text."""
    if not isinstance(url, str) or not url or _UNSAFE_IN_URL.search(url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in LINK_SCHEMES:
        return None
    if parts.scheme.lower() != "file" and not parts.netloc:
        return None
    return url


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def anchor(round_number: int, n: int) -> str:
    return f"cc-ev-{round_number}-{n}"


def evidence_by_number(research: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for item in _dicts((research or {}).get("evidence")):
        n = _number(item.get("n"))
        if n is not None and n not in out:
            out[n] = item
    return out


def _title(item: dict[str, Any]) -> str:
    return str(item.get("title") or item.get("url") or "untitled")


def cited_numbers(citations: dict[str, Any] | None) -> set[int]:
    cited = (citations or {}).get("cited")
    numbers = (_number(v) for v in cited) if isinstance(cited, list) else iter(())
    return {n for n in numbers if n is not None}


def problems_by_number(citations: dict[str, Any] | None) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for problem in _dicts((citations or {}).get("problems")):
        n = _number(problem.get("number"))
        if n is not None:
            out.setdefault(n, []).append(str(problem.get("message") or problem.get("kind")))
    return out


def citation_linker(
    round_number: int,
    research: dict[str, Any] | None,
    citations: dict[str, Any] | None,
    *,
    output: str,
) -> Callable[[str], str] | None:
    """A function that turns each ``[n]`` of escaped output into a link, through
    ``output``'s own reference line for ``n``, to the evidence whose URL that line gives (its
    title as the tooltip); a link to another evidence than ``n`` says so beside the marker;
    a number the check found a problem with, without a reference line, with several URLs or
    with a URL that is no evidence's is marked invalid with the reason. ``None`` when the
    round has neither research nor citations (the output is left as is)."""
    if not research and not citations:
        return None
    evidence = evidence_by_number(research)
    by_url: dict[str, int] = {}
    for n, item in sorted(evidence.items()):
        by_url.setdefault(str(item.get("url") or "").rstrip(".,;:"), n)  # as the check reads
    _, references, _ = split_references(output)
    problems = problems_by_number(citations)

    def bad(n: int, why: str) -> str:
        return (
            f'<span class="cc-cite-bad" data-cite="{n}" '
            f'title="{html.escape(why, quote=True)}">[{n}]</span>'
        )

    def one(match: re.Match[str]) -> str:
        n = int(match.group(1))
        urls = references.get(n) or []
        found = by_url.get(urls[0]) if len(urls) == 1 else None
        if found is None:
            if not urls:
                why = f"[{n}] has no reference line with a web or file URL"
            elif len(urls) > 1:
                why = f"reference [{n}] lists {len(urls)} URLs"
            else:
                why = f"reference [{n}] lists {urls[0]}, which is none of this round's evidence"
            return bad(n, "; ".join(problems.get(n) or [why]))
        title = _title(evidence[found])
        target = f'href="#{anchor(round_number, found)}"'
        if found != n:
            why = f"[{n}] lists evidence [{found}]'s URL, not evidence [{n}]'s: {title}"
            return (
                f'<a class="cc-cite-mismatch" data-cite="{n}" data-evidence="{found}" {target} '
                f'title="{html.escape(why, quote=True)}">[{n}]</a>'
                f'<span class="cc-cite-note"> (lists evidence [{found}])</span>'
            )
        if n in problems:
            return bad(n, "; ".join(problems[n]))
        return (
            f'<a class="cc-cite" data-cite="{n}" {target} '
            f'title="{html.escape(title, quote=True)}">[{n}]</a>'
        )

    def link(escaped: str) -> str:
        return MARKER.sub(one, escaped)

    return link


def evidence_html(
    round_number: int, research: dict[str, Any], cited: set[int] | None = None
) -> str:
    """Each piece of evidence: its number, its title (a link when its URL may be one), the
    URL itself, where it came from and for which query, and the distilled claims (else the
    snippet)."""
    items: list[str] = []
    for n, item in sorted(evidence_by_number(research).items()):
        href = safe_href(item.get("url"))
        title = html.escape(_title(item))
        if href is not None:
            head = (
                f'<a href="{html.escape(href, quote=True)}" target="_blank" '
                f'rel="noopener noreferrer nofollow">{title}</a>'
            )
        else:
            head = f'<span class="cc-ev-title">{title}</span>'
        badge = '<span class="cc-ev-cited">cited</span>' if cited and n in cited else ""
        meta = [f"source {html.escape(str(item.get('source') or '?'))}"]
        if item.get("query"):
            meta.append(f"query “{html.escape(str(item['query']))}”")
        if item.get("retrieved_at"):
            meta.append(f"retrieved {html.escape(ago(item['retrieved_at']))}")
        span = item.get("span")
        if isinstance(span, list) and len(span) == 2:
            meta.append(f"characters {html.escape(str(span[0]))}–{html.escape(str(span[1]))}")
        url_line = html.escape(str(item.get("url") or ""))
        if href is None and item.get("url"):
            url_line += " (not a web or file address: not linked)"
        distilled = item.get("distilled")
        label, body = ("Distilled", distilled) if distilled else ("Snippet", item.get("snippet"))
        items.append(
            f'<div class="cc-ev" id="{anchor(round_number, n)}" data-evidence="{n}">'
            f'<span class="cc-ev-n">[{n}]</span>{head}{badge}'
            f'<div class="cc-ev-url">{url_line}</div>'
            f'<div class="cc-ev-meta">{" · ".join(meta)}</div>'
            f'<div class="cc-ev-body"><b>{label}:</b> {html.escape(str(body or ""))}</div>'
            "</div>"
        )
    return EVIDENCE_CSS + '<div class="cc-ev-list">' + "".join(items) + "</div>"


def failed_html(research: dict[str, Any]) -> str:
    rows = [
        f"<li>“{html.escape(str(f.get('query') or ''))}”: "
        f"{html.escape(str(f.get('reason') or 'no reason given'))}</li>"
        for f in _dicts(research.get("failed_queries"))
    ]
    return EVIDENCE_CSS + '<ul class="cc-ev-failed">' + "".join(rows) + "</ul>" if rows else ""


def problems_html(citations: dict[str, Any]) -> str:
    rows = []
    for p in _dicts(citations.get("problems")):
        kind = str(p.get("kind") or "")
        head = html.escape(PROBLEM_WORDS.get(kind, kind or "problem"))
        n = _number(p.get("number"))
        where = f" [{n}]" if n is not None else ""
        row = f"<li><b>{head}{where}</b>: {html.escape(str(p.get('message') or ''))}"
        if p.get("url"):
            row += f'<br><span class="cc-ev-url">{html.escape(str(p["url"]))}</span>'
        if p.get("sentence"):
            row += f"<br>“{html.escape(str(p['sentence']))}”"
        rows.append(row + "</li>")
    return EVIDENCE_CSS + '<ul class="cc-cite-problems">' + "".join(rows) + "</ul>" if rows else ""


def round_research(
    *sources: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first ``research`` and the first ``citations`` (each a dict) among ``sources``
    (the run's round, then the review's context)."""
    research = next(
        (s["research"] for s in sources if s and isinstance(s.get("research"), dict)), None
    )
    citations = next(
        (s["citations"] for s in sources if s and isinstance(s.get("citations"), dict)), None
    )
    return research, citations


def panel(
    round_number: int,
    research: dict[str, Any] | None,
    citations: dict[str, Any] | None,
    *,
    heading: bool = True,
) -> None:
    """The citation check's verdict and problems, then the evidence and the failed queries
    (nothing when the round has neither). No expander: the Runs page shows it inside one."""
    if not research and not citations:
        return
    if heading:
        st.subheader("Evidence and citations")
    if citations:
        problems = _dicts(citations.get("problems"))
        if citations.get("ok") and not problems:
            count = len(cited_numbers(citations))
            st.success(
                f"Citations checked: {count} cited, each matches its evidence."
                if count
                else "Citations checked: no problem found."
            )
        else:
            st.error(f"Citation problems: {len(problems)}. Each is marked in the output.")
            if problems:
                st.html(problems_html(citations))
    if not research:
        st.caption("No research was recorded for this round.")
        return
    failed = _dicts(research.get("failed_queries"))
    if research.get("status") == "degraded":
        st.warning(
            f"Research degraded: {len(failed)} "
            f"quer{'ies' if len(failed) != 1 else 'y'} failed, so the evidence may be "
            "incomplete."
        )
    evidence = evidence_by_number(research)
    if evidence:
        st.html(evidence_html(round_number, research, cited_numbers(citations)))
    else:
        st.caption("The research found no evidence.")
    if failed:
        st.markdown("**Failed queries**")
        st.html(failed_html(research))
