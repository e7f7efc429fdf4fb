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


def test_two_suites_are_compared_through_the_run_interface(make_app, tmp_path, capsys):
    """The Compare tab takes suites too (as `dbpa history compare` does), says which pooled
    verdicts changed, and refuses a suite against an audit in one line."""
    from tests.fake_openai import FakeOpenAI
    from tests.test_compare_suites import suite_run
    from tests.test_suite import write_cases

    audit = _record(tmp_path)
    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        a = suite_run(tmp_path, srv, capsys)
        b = suite_run(tmp_path, srv, capsys, prefix="Act as a doctor.")
    at = make_app(page="pages/history.py")
    at.session_state["hist_tabs"] = "Compare two runs"
    at.run()
    at.selectbox(key="hist_a").set_value(a).run()
    at.selectbox(key="hist_b").set_value(b).run()
    assert not at.exception, at.exception
    said = " ".join(plain(e.value) for e in at.error)
    assert "pooled verdict" in said and "comedian" in said, said
    assert any("pooled over the cases" in c.value for c in at.code)
    at.selectbox(key="hist_b").set_value(audit).run()
    assert not at.exception, at.exception
    assert any(
        f"Run {a} is a suite of cases and run {audit} an audit: compare two runs of one kind."
        in plain(i.value)
        for i in at.info
    ), [i.value for i in at.info]
