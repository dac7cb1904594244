"""A Streamlit app (its page talks to the server over a WebSocket): a button that counts.
Run inside a sandbox by tests/e2e/test_real_apps.py."""

import streamlit as st

st.title("streamlit in the sandbox")
if st.button("Count"):
    st.session_state.count = st.session_state.get("count", 0) + 1
st.write(f"count={st.session_state.get('count', 0)}")
