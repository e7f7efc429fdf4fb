"""Who may open the dashboard: the access gate every page passes first.

* An access token is set on the machine (``$DBPA_UI_TOKEN``, which ``dbpa ui --share``
  sets to a new one when none is, or ``ui_token`` in ``$DBPA_HOME/settings.yaml``): no page
  renders until the session has shown it, in the link (``?token=...``, read once and taken
  out of the address bar) or typed into the form the gate shows. Compared in constant time
  (:func:`hmac.compare_digest`); once shown it lives in the session (a new tab or a reload
  asks again, unless the link still carries it).
* No token: the dashboard is this machine's. A browser on another machine (Streamlit
  knows its address) gets one line that says how to share the dashboard, and nothing else.

Also: every key read from the environment goes only to servers allowed on the machine
(:func:`dbpa_core.keyhosts.restrict_to_allowed_hosts`, switched on here).
"""

from __future__ import annotations

import hmac

import streamlit as st

from dbpa_core.keyhosts import restrict_to_allowed_hosts
from dbpa_core.launcher import TOKEN_ENV, TOKEN_SETTING, configured_token

GRANTED = "_access_granted"
"""Session key: the session showed the token (holds a digest of the token it showed)."""
FIELD = "access_token_field"


def _digest(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    return given is not None and hmac.compare_digest(given.strip().encode(), token.encode())


def gate() -> None:
    """Let this run go on, or draw the gate (the token form, or the one line for a visitor
    from another machine) and stop it. First thing on every page, before anything is drawn."""
    restrict_to_allowed_hosts()
    ss = st.session_state
    token = configured_token()
    if token is None:
        ip = st.context.ip_address  # None: this machine (AppTest: no address at all)
        if isinstance(ip, str) and ip:  # a browser on another machine
            _page_config()
            st.error(
                "This dashboard serves only the machine it runs on. To open it from other "
                "machines, start it with `dbpa ui --share` (or `make run SHARE=1`): it prints "
                "a link with an access token."
            )
            st.stop()
        return
    if ss.get(GRANTED) == _digest(token):
        return
    given = st.query_params.get("token")
    if given is not None:
        del st.query_params["token"]  # out of the address bar (and of screenshots)
        if token_matches(given, token):
            ss[GRANTED] = _digest(token)
            return
    _page_config()
    st.title("dbpa")
    st.subheader("Access token needed")
    st.caption(
        "This dashboard is shared behind an access token: open the link printed where it "
        "was started (it ends in ?token=...), or type the token here. The operator sets it in "
        f"${TOKEN_ENV} or as {TOKEN_SETTING} in $DBPA_HOME/settings.yaml, or `dbpa ui --share` "
        "makes one at start."
    )
    if given is not None:
        st.error("That link's token is not this dashboard's.")
    with st.form("access_gate"):
        typed = st.text_input("Access token", type="password", key=FIELD)
        sent = st.form_submit_button("Open the dashboard", type="primary")
    if sent:
        if token_matches(typed, token):
            ss[GRANTED] = _digest(token)
            st.rerun()
        st.error("That is not the access token.")
    st.stop()


def _page_config() -> None:
    st.set_page_config(page_title="dbpa — LLM robustness audits", page_icon="📊", layout="centered")
