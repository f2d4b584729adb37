"""Entry point: ``streamlit run ui/console/app.py``. Builds navigation; pages only render."""

import streamlit as st

st.set_page_config(page_title="Crosscheck reviewer console", layout="wide")

if not st.session_state.get("token"):
    # The login page sits at the queue's URL, so the rerun after logging in lands on the queue.
    page = st.navigation(
        [st.Page("views/login.py", title="Log in", icon=":material/login:", url_path="queue")]
    )
else:
    page = st.navigation(
        [
            st.Page("views/queue.py", title="Queue", icon=":material/inbox:", default=True),
            st.Page("views/review.py", title="Review", icon=":material/rate_review:"),
            st.Page("views/escalations.py", title="Escalations", icon=":material/report:"),
            st.Page("views/runs.py", title="Runs", icon=":material/timeline:"),
            st.Page("views/lessons.py", title="Lessons", icon=":material/school:"),
            st.Page("views/metrics.py", title="Metrics", icon=":material/monitoring:"),
        ]
    )
    with st.sidebar:
        who = st.session_state.get("user") or {}
        st.caption(f"Signed in as {who.get('name') or 'token holder'} ({who.get('role') or '?'})")
        if st.button("Log out", key="logout"):
            for key in ("token", "user", "client", "review_id"):
                st.session_state.pop(key, None)
            st.rerun()
page.run()
