"""Which servers may receive an API key read from the environment.

A model definition says where its key is (``api_key_env``) and where its server is
(``base_url``). On the command line (and in a Python program) the operator wrote or chose
the spec, so its servers are theirs. The dashboard is different: a model can be added there
by whoever has the page open, so an environment key is sent only to a server the operator
allowed **on the machine**:

* the OpenAI API's own address (the default ``base_url``);
* ``allow_key_hosts: [URL, ...]`` in ``$DBPA_HOME/settings.yaml``;
* ``$DBPA_ALLOW_KEY_HOSTS`` (URLs separated by commas or spaces);
* ``dbpa ui --allow-key-host URL`` (which sets that variable for the dashboard).

A key typed into the dashboard's Settings page is the session's own and goes to the
server it was typed for, whatever this list says. Servers are compared by origin
(scheme, host and port; a path and a ``user:password@`` do not count).

The dashboard turns the rule on for its process with :func:`restrict_to_allowed_hosts`;
nothing else does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""The base URL of a model that names none (the OpenAI API)."""

ENV_VAR = "DBPA_ALLOW_KEY_HOSTS"
"""The environment variable that lists more allowed servers (commas or spaces between)."""

SETTING = "allow_key_hosts"
"""The key of ``$DBPA_HOME/settings.yaml`` that lists allowed servers."""

_restricted = False


def origin(url: str | None) -> str | None:
    """``scheme://host:port`` of ``url`` in lower case, with the scheme's default port
    filled in, or None when ``url`` is not an http(s) URL with a host.

    >>> origin("HTTPS://user:pw@API.example.com/v1")
    'https://api.example.com:443'
    """
    if not url:
        return None
    try:
        u = urlsplit(url.strip() if "://" in url else f"https://{url.strip()}")
        port = u.port
    except ValueError:
        return None
    if u.scheme.lower() not in ("http", "https") or not u.hostname:
        return None
    port = port or (443 if u.scheme.lower() == "https" else 80)
    host = u.hostname.lower()
    return f"{u.scheme.lower()}://{f'[{host}]' if ':' in host else host}:{port}"


def allowed_key_hosts(extra: Iterable[str] = ()) -> frozenset[str]:
    """The origins an environment key may be sent to in the dashboard: the OpenAI API,
    ``allow_key_hosts`` of the settings file, ``$DBPA_ALLOW_KEY_HOSTS`` and ``extra``.
    Entries that are not URLs are ignored (:func:`problems` names them)."""
    found = {origin(DEFAULT_BASE_URL)}
    for url in (*_configured(), *extra):
        found.add(origin(url))
    found.discard(None)
    return frozenset(x for x in found if x)


def problems() -> list[str]:
    """One line for each allowed server that is not an http(s) URL (it allows nothing)."""
    return [
        f"{url!r} in {ENV_VAR} or {SETTING} is not an http(s) URL: it allows nothing"
        for url in _configured()
        if origin(url) is None
    ]


def _configured() -> list[str]:
    from .home import setting

    urls = [u for u in re.split(r"[,\s]+", os.environ.get(ENV_VAR, "")) if u]
    listed = setting(SETTING)
    if isinstance(listed, str):
        listed = [listed]
    if isinstance(listed, list):
        urls += [u for u in listed if isinstance(u, str)]
    return urls


def restrict_to_allowed_hosts(on: bool = True) -> None:
    """From now on in this process (``on``), an environment key goes only to the servers
    of :func:`allowed_key_hosts`; the dashboard calls this before any page runs."""
    global _restricted
    _restricted = bool(on)


def restricted() -> bool:
    """Whether :func:`restrict_to_allowed_hosts` is in force in this process."""
    return _restricted


def env_key_allowed(base_url: str | None) -> bool:
    """May a key read from the environment be sent to ``base_url`` (None: the default)?
    Always outside the dashboard; in it, only to :func:`allowed_key_hosts`."""
    if not _restricted:
        return True
    return origin(base_url or DEFAULT_BASE_URL) in allowed_key_hosts()


def refusal(env: str, base_url: str | None) -> str:
    """One line: why the key in ``$env`` is not sent to ``base_url``, and the two ways on."""
    where = origin(base_url or DEFAULT_BASE_URL) or str(base_url)
    return (
        f"The key in ${env} is not sent to {where}: the dashboard sends a key from the "
        "environment only to servers allowed on this machine. Type the key into this "
        "model's key field on the Settings page (kept in this session only), or allow the "
        f"server where the dashboard runs: '{SETTING}: [{where}]' in $DBPA_HOME/settings.yaml, "
        f"{ENV_VAR}={where}, or dbpa ui --allow-key-host {where}."
    )


__all__ = [
    "DEFAULT_BASE_URL",
    "ENV_VAR",
    "SETTING",
    "allowed_key_hosts",
    "env_key_allowed",
    "origin",
    "problems",
    "refusal",
    "restrict_to_allowed_hosts",
    "restricted",
]
