"""A real browser on the Settings page with a damaged cache: one line says so, Clear
repairs it, no traceback (issue 7). Reuses the helpers of ``test_browser.py``."""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import ROOT
from .test_browser import _free_port, browser, playwright, shots  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _port() -> int:
    """A free port, preferring 8601-8609 (the range this project's sessions may use)."""
    for port in range(8601, 8610):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return _free_port()


@pytest.fixture(scope="module")
def damaged_app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-harden")
    store = tmp / "cache" / "store"
    store.mkdir(parents=True)
    (store / "cache.db").write_bytes(os.urandom(8192))
    port = _port()
    env = dict(os.environ, DBPA_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1",
               DBPA_REPLAY_FILE=str(ROOT / "assets" / "demo_replay.jsonl"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
         str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("streamlit did not start: " + proc.stdout.read().decode()[-2000:])
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_settings_with_a_damaged_cache_in_a_real_browser(damaged_app, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"{damaged_app}/settings", wait_until="networkidle")
    page.get_by_text("is damaged").first.wait_for(timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots() / "harden-01-damaged-cache.png"), full_page=True)
    body = page.inner_text("body")
    assert "dbpa cache clear" in body and "Traceback" not in body
    page.get_by_role("button", name="Clear the cache…").click()
    page.get_by_role("button", name="Yes, clear the cache").click()
    page.get_by_text("The damaged cache was removed").wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots() / "harden-02-repaired.png"), full_page=True)
    page.reload(wait_until="networkidle")
    page.get_by_text("Cached items").wait_for(timeout=30_000)
    playwright.expect(page.get_by_text("is damaged")).to_have_count(0)
    assert "Traceback" not in page.inner_text("body")
    page.close()
