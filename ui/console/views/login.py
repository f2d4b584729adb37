"""Logging in (a username and password, or an API token) and the session cookie.

``main.py`` calls :func:`restore` first: a session token kept in a cookie (12 hours, like the
orchestrator's session) logs the reviewer back in after a reload or in a new tab on a shared
link. The cookie is HttpOnly: the console's own route sets and clears it (see
:mod:`console.server`), never a script on the page. Logged out, every page's URL still
resolves and shows :func:`show` in its place, so after logging in the reviewer is on the page
(and item) the URL names.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

import streamlit as st

from console import mode
from console.client import ApiError, get_client
from console.server import COOKIE, SESSION_COOKIES, WHO, cookie_script
from console.view import md_literal

__all__ = ["COOKIE", "WHO"]

SESSION = timedelta(hours=12)  # the orchestrator's session length
SESSION_KEYS = (
    *("token", "user", "client", "review_id", "my_claims", "cookie", "cookie-ticket"),
    "last_decision",
)
# user: {"id": the token's id (who holds a claim), "name": an account's name (None for an API
# token), "token_name": an API token's name, "role"}


def read_cookies() -> Mapping[str, str]:
    """The cookies the browser sent when this session opened (tests replace this)."""
    return st.context.cookies


def _base_client() -> Any:
    """A client without a token (or the injected fake)."""
    return get_client()


def restore() -> None:
    """Log in from the session cookie, if there is one and the API still takes it."""
    if st.session_state.get("token") or st.session_state.get("signed_out"):
        return
    cookies = read_cookies()
    token, who = cookies.get(COOKIE), cookies.get(WHO)
    if not isinstance(token, str) or not token:
        return
    client = _base_client().with_token(token)
    name, _, role = unquote(who if isinstance(who, str) else "").partition("|")
    user: dict[str, Any] = {"name": name or None, "role": role or None}
    try:
        user.update(_whom(client.who_am_i(), account=bool(name)))
    except ApiError as exc:
        if exc.status in (401, 403):  # expired or revoked: forget it
            st.session_state["signed_out"] = True
            return
        # the API does not answer: stay logged in; who holds what is asked again later
    st.session_state["token"] = token
    st.session_state["user"] = user
    st.session_state["client"] = client


def _whom(me: dict[str, Any], *, account: bool) -> dict[str, Any]:
    """The session's user from ``GET /v1/auth/me``: an account's name, or an API token's."""
    if account:
        return {"id": me["id"], "name": me["name"], "role": me["role"]}
    return {"id": me["id"], "name": None, "token_name": me["name"], "role": me["role"]}


def my_id() -> str | None:
    """The id of this session's token, the one the orchestrator records on a claim (asked
    once per session; None while the API does not answer)."""
    user = st.session_state.get("user") or {}
    if user.get("id"):
        return str(user["id"])
    try:
        me = get_client().who_am_i()
    except ApiError:
        return None
    st.session_state["user"] = {**user, "id": me["id"]}
    return str(me["id"])


def _signed_in(client: Any, token: str, user: dict[str, Any], expires: Any = None) -> None:
    until = datetime.now(UTC) + SESSION
    if isinstance(expires, str):
        try:
            until = min(until, datetime.fromisoformat(expires.replace("Z", "+00:00")))
        except ValueError:
            pass
    st.session_state["token"] = token
    st.session_state["user"] = user
    st.session_state["client"] = client.with_token(token)
    st.session_state["cookie"] = until.isoformat()  # main.py writes the cookie on the next run
    st.session_state.pop("cookie-ticket", None)
    st.session_state.pop("cookie-drop", None)
    st.session_state.pop("signed_out", None)
    st.rerun()


def _send_ticket(ticket: str) -> None:
    """The browser posts the ticket to the console's route, which answers with Set-Cookie."""
    st.html(cookie_script(ticket), width="content", unsafe_allow_javascript=True)


def keep_cookie() -> None:
    """Write the session cookie for a login made in this session: the page posts a one-use
    ticket (never the token) to the console's route, which sets the cookie HttpOnly. Rendered
    until the route has redeemed the ticket, then never again; the run that sees it redeemed
    renders the page as usual (no extra rerun), so a click made meanwhile still acts."""
    until = st.session_state.get("cookie")
    token = st.session_state.get("token")
    if not until or not token:
        return
    ticket = st.session_state.get("cookie-ticket")
    if ticket and SESSION_COOKIES.done(ticket):
        st.session_state.pop("cookie", None)
        st.session_state.pop("cookie-ticket", None)
        return
    if not ticket:
        user = st.session_state.get("user") or {}
        who = quote(f"{user.get('name') or ''}|{user.get('role') or ''}", safe="")
        expires = datetime.fromisoformat(until)
        max_age = int(max(60.0, (expires - datetime.now(UTC)).total_seconds()))
        ticket = SESSION_COOKIES.set({COOKIE: token, WHO: who}, max_age)
        st.session_state["cookie-ticket"] = ticket
    _send_ticket(ticket)


def log_out() -> None:
    for key in SESSION_KEYS:
        st.session_state.pop(key, None)
    st.session_state["signed_out"] = True
    st.rerun()


def drop_cookie() -> None:
    """After logging out: clear the cookie in the browser (the console's route, by a ticket,
    so on the next run; rendered until the route has cleared it)."""
    if not st.session_state.get("signed_out") or not read_cookies().get(COOKIE):
        return
    ticket = st.session_state.get("cookie-drop")
    if ticket and SESSION_COOKIES.done(ticket):
        return
    if not ticket:
        ticket = SESSION_COOKIES.clear()
        st.session_state["cookie-drop"] = ticket
    _send_ticket(ticket)


def signed_in_as() -> str:
    user = st.session_state.get("user") or {}
    role = md_literal(user.get("role") or "role unknown")
    if user.get("name"):
        return f"Signed in as {md_literal(user['name'])} ({role})"
    if user.get("token_name"):
        return f"Signed in with the API token “{md_literal(user['token_name'])}” ({role})"
    return f"Signed in with an API token ({role})"


def show() -> None:
    """The login form, shown in place of whatever page the URL names."""
    st.title("Crosscheck reviewer console")
    mode.show_caption(_base_client())  # GET /v1/info needs no token
    if wanted := st.query_params.get("review"):
        st.caption(f"Log in to open review {md_literal(wanted)}.")
    password_tab, token_tab = st.tabs(["Password", "Token"])

    with password_tab, st.form("login-password"):
        username = st.text_input("Username", key="login-username")
        password = st.text_input("Password", type="password", key="login-password-input")
        if st.form_submit_button("Log in", key="login-submit"):
            client = _base_client()
            try:
                answer = client.login(username, password)
            except ApiError as exc:
                st.error(f"Login failed: {md_literal(exc.detail)}")
            else:
                user = {"name": answer["name"], "role": answer["role"]}
                _signed_in(client, answer["token"], user, answer.get("expires_at"))

    with token_tab, st.form("login-token"):
        token = st.text_input("API token", type="password", key="login-token-input")
        if st.form_submit_button("Use token", key="token-submit"):
            client = _base_client()
            candidate = client.with_token(token.strip())
            try:
                me = candidate.who_am_i()
            except ApiError as exc:
                st.error(f"Token rejected: {md_literal(exc.detail)}")
            else:
                _signed_in(client, token.strip(), _whom(me, account=False))
