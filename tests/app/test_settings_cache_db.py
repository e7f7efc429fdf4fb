"""The Settings page with the sample cache in a database (DBPA_CACHE_URL): it says where
the cached samples are (no password) and counts them there."""

from dbpa_core.cache import Cache


def test_the_settings_page_says_where_the_cache_is(make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("DBPA_CACHE_URL", f"sqlite:///{tmp_path / 'team.sqlite3'}")
    Cache(tmp_path).set("sample:1", {"text": "x"})
    at = make_app(page="pages/settings.py")
    notes = [i.value for i in at.info if "DBPA_CACHE_URL" in i.value]
    assert len(notes) == 1 and "team.sqlite3" in notes[0]
    assert [m.value for m in at.metric if m.label == "Cached items"] == ["1"]
