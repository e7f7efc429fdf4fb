"""The History page in plain words: 'detectable' (never 'significantly'), and a run whose
stored rows are partly garbled says in one line what could not be read."""

import getpass
import socket
import sqlite3

import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.history import History
from tests.test_history import _spec

from .conftest import plain


def _record(tmp_path) -> int:
    result = run_audit(_spec(samples=6), cache=Cache(tmp_path / "rec-cache"))
    return History().record({"demo": result}, source="cli", title="garbled later")


def _garble(run_id: int) -> None:
    con = sqlite3.connect(History().path)
    with con:
        con.execute("UPDATE tests SET detail = ? WHERE position = 0", (b"not zlib",))
        con.execute("UPDATE audits SET usage = ? WHERE run_id = ?", ("{", run_id))
    con.close()


def _page_text(at) -> str:
    return " ".join(
        plain(str(getattr(e, "value", "")))
        for e in [*at.markdown, *at.caption, *at.warning, *at.error, *at.info, *at.success]
    )


def test_a_garbled_run_names_what_could_not_be_read(make_app, tmp_path):
    run_id = _record(tmp_path)
    _garble(run_id)
    assert History().get(run_id).unreadable  # what the page must show
    at = make_app(page="pages/history.py")
    assert not at.exception, at.exception
    notes = [plain(w.value) for w in at.warning if "could not be read back" in w.value]
    assert len(notes) == 1, [w.value for w in at.warning]
    note = notes[0]
    assert "2 garbled part(s)" in note
    assert "test 'comedian': its permutation detail cannot be read" in note
    assert "audit 'demo': its usage cannot be read" in note
    assert "\n" not in note and f"dbpa history show {run_id}" in note  # one line


def test_an_intact_run_has_no_note_and_the_page_says_detectably(make_app, tmp_path):
    _record(tmp_path)
    at = make_app(page="pages/history.py")
    assert not at.exception, at.exception
    assert not any("could not be read back" in w.value for w in at.warning)
    text = _page_text(at)
    assert "significantly" not in text and "changed the answers detectably" in text
    table = at.dataframe[0].value
    assert "detectable" in table.columns and "significant" not in table.columns


@pytest.mark.postgres
def test_the_page_reads_a_shared_database_and_says_who_ran_each_run(
    make_app, tmp_path, postgres_url, monkeypatch
):
    monkeypatch.setenv("DBPA_DATABASE_URL", postgres_url)
    _record(tmp_path)
    at = make_app(page="pages/history.py")
    assert not at.exception, at.exception
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    assert at.dataframe[0].value["by"].tolist() == [who]
    text = _page_text(at)
    assert "postgresql://" in text and "127.0.0.1" in text  # the shared database
    assert f"run by {getpass.getuser()} on {socket.gethostname()}" in text
    assert "garbled later" in text
