"""Log in with a username and password, or by pasting an API token."""

import streamlit as st

from console.client import ApiError, get_client


def _signed_in(client, token: str, user: dict) -> None:
    st.session_state["token"] = token
    st.session_state["user"] = user
    st.session_state["client"] = client.with_token(token)
    st.rerun()


st.title("Crosscheck reviewer console")
password_tab, token_tab = st.tabs(["Password", "Token"])

with password_tab, st.form("login-password"):
    username = st.text_input("Username", key="login-username")
    password = st.text_input("Password", type="password", key="login-password-input")
    if st.form_submit_button("Log in", key="login-submit"):
        client = get_client()
        try:
            answer = client.login(username, password)
        except ApiError as exc:
            st.error(f"Login failed: {exc.detail}")
        else:
            _signed_in(client, answer["token"], {"name": answer["name"], "role": answer["role"]})

with token_tab, st.form("login-token"):
    token = st.text_input("API token", type="password", key="login-token-input")
    if st.form_submit_button("Use token", key="token-submit"):
        client = get_client()
        try:
            client.with_token(token.strip()).check_token()
        except ApiError as exc:
            st.error(f"Token rejected: {exc.detail}")
        else:
            _signed_in(client, token.strip(), {"name": None, "role": None})
