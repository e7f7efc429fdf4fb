"""What the browser tests share: Debian's Chromium driven by Playwright, a free port on
127.0.0.1, and the dashboard served there with its own temporary cache and DBPA_HOME.

A test module starts with::

    playwright = require_browser()          # skips the module without playwright/chromium

and gets the ``browser`` fixture from ``tests/app/conftest.py``; its server fixture is
``with dashboard(tmp, DBPA_REPLAY_FILE=...) as url: yield url`` (with the recorded demo
answers: ``dashboard(tmp, cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO)``, their embeddings
already in the cache).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.demo_cache import copy_to
from tests.local_http import stop_process

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# no background traffic: the machine's network is closed, and tests talk to 127.0.0.1 only
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STOP_GRACE_S = 3.0  # how long a stopped dashboard may take to exit before it is killed


def require_browser():
    """``playwright.sync_api``, or skip the calling test module (no Playwright, or no
    Debian Chromium: ``make browser-deps`` installs it)."""
    module = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make browser-deps)", allow_module_level=True)
    return module


def launch(p):
    """A headless Chromium from a ``sync_playwright()`` context."""
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)


def free_port() -> int:
    """A free port on 127.0.0.1: from ``$DBPA_TEST_PORTS`` (e.g. ``8651-8659``) when set,
    else any the system gives."""
    lo, _, hi = os.environ.get("DBPA_TEST_PORTS", "0-0").partition("-")
    for port in range(int(lo), int(hi or lo) + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in DBPA_TEST_PORTS={os.environ['DBPA_TEST_PORTS']}")


@contextlib.contextmanager
def dashboard(
    tmp: Path, *, start_timeout: float = 120.0, cache_from: Path | None = None, **env: str
) -> Iterator[str]:
    """``streamlit run app.py`` on 127.0.0.1 (a free port), with ``tmp/cache`` as its
    cache and ``tmp/home`` as its DBPA_HOME unless ``env`` says otherwise (and no
    DBPA_REPLAY_FILE unless ``env`` gives one); yields its URL once it answers, and stops
    it afterwards. ``cache_from``: a cache folder copied to ``tmp/cache`` first (the
    ``demo_cache`` fixture: the recorded demo answers already embedded)."""
    port = free_port()
    full = dict(
        os.environ,
        DBPA_CACHE_DIR=str(tmp / "cache"),
        DBPA_HOME=str(tmp / "home"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    full.pop("DBPA_REPLAY_FILE", None)
    full.update(env)
    tmp.mkdir(parents=True, exist_ok=True)
    if cache_from is not None:
        copy_to(cache_from, Path(full["DBPA_CACHE_DIR"]))
    log_path = tmp / "streamlit.log"  # a file, not a pipe nobody reads (a full pipe blocks it)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(ROOT / "app.py"),
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
            ],
            env=full,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail("streamlit did not start: " + log_path.read_text(errors="replace")[-2000:])
                time.sleep(0.5)
        yield url
    finally:
        # once a page has been served, Streamlit says "Stopping..." at once but then does not
        # exit (a thread dump shows its main thread collecting garbage, no other Python
        # thread), so every module's teardown waited out stop_process's 10 s; nothing a
        # test reads is written then, so it is killed after a few seconds
        stop_process(proc, timeout=STOP_GRACE_S)


def wait_idle(page, ms: float = 300, *, timeout: float = 240_000) -> None:
    """Until the page's rerun is over (Streamlit's running indicator gone, waited for at
    most ``timeout`` ms), then ``ms`` more (for charts to settle)."""
    page.wait_for_timeout(400)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=timeout)
    page.wait_for_timeout(ms)


def shots() -> Path:
    """Where screenshots go: ``$DBPA_SCREENSHOTS``, else ``screenshots/``."""
    d = Path(os.environ.get("DBPA_SCREENSHOTS", ROOT / "screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d
