"""The Settings page says in one line that the cache is damaged, and Clear repairs it."""

import os

from dbpa_core.cache import Cache

from .conftest import errors


def test_settings_page_shows_a_damaged_cache_and_clear_repairs_it(make_app, tmp_path):
    c = Cache(tmp_path / "cache")
    c.set("k", {"a": 1})
    c.close()
    (tmp_path / "cache" / "store" / "cache.db").write_bytes(os.urandom(4096))
    at = make_app(page="pages/settings.py")
    assert not at.exception
    msgs = errors(at)
    assert any("is damaged" in m and "dbpa cache clear" in m for m in msgs), msgs
    at.button(key="settings_clear").click().run()
    assert not at.exception
    assert any("damaged cache of" in w.value for w in at.warning)  # asks first
    at.button(key="settings_clear_yes").click().run()
    assert not at.exception
    assert any("damaged cache was removed" in s.value for s in at.success)
    at.run()
    assert not any("is damaged" in m for m in errors(at))
    assert at.metric[0].value == "0"


def test_settings_page_never_shows_a_password_in_base_url(make_app):
    at = make_app(
        page="pages/settings.py",
        models=[{"backend": "openai", "name": "m", "base_url": "http://alice:hunter2@127.0.0.1:9/v1"}],
    )
    text = " ".join(str(m.value) for m in at.markdown).replace("\\", "")  # markdown escapes
    assert "127.0.0.1:9" in text and "hunter2" not in text
