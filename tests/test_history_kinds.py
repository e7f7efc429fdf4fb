"""Every kind of run in the history: a battery, a simulation or a sensitivity study is
stored with its result and read back; reruns find the first run by the inputs'
fingerprint; a payload that would run code is refused with one line. Each test runs on the
SQLite file and on a PostgreSQL database."""

import pickle
import zlib

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from dbpa_core import db
from dbpa_core.history import History, HistoryError


@pytest.fixture
def h(tmp_path, history_store):
    return History(history_store or tmp_path / "h.sqlite3")


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_a_result_is_stored_listed_and_read_back(h):
    result = {
        "battery": {
            "table": pd.DataFrame({"ER": [0.1, 0.2]}),
            "vectors": np.arange(6, dtype=np.float32).reshape(2, 3),
        }
    }
    run_id = h.record_result(
        "battery",
        result,
        title="tf battery",
        models=["m1"],
        headline="2 items",
        page="robustness",
        fingerprint="abc",
        settings={"signature": "s"},
    )
    [summary] = h.list()
    assert summary.id == run_id and summary.title == "tf battery"
    assert h.extras([run_id])[run_id] == {"kind": "battery", "models": ("m1",), "headline": "2 items"}
    kind, back = h.result(run_id)
    assert kind == "battery"
    pd.testing.assert_frame_equal(back["battery"]["table"], result["battery"]["table"])
    assert np.array_equal(back["battery"]["vectors"], result["battery"]["vectors"])
    assert h.first_run("abc") == run_id and h.first_run("other") is None
    assert h.get(run_id).settings == {"signature": "s"}
    h.delete(run_id)
    assert h.first_run("abc") is None and h.extras([run_id]) == {}


def test_an_audit_run_is_found_by_its_fingerprint(h):
    with pytest.raises(ValueError, match="kind"):
        h.record_result("audit", {}, title="x", models=[])
    run_id = h.record_result("sensitivity", {}, title="x", models=[])
    h.mark(run_id, fingerprint="f")
    assert h.first_run("f") == run_id


def test_a_payload_that_would_run_code_is_refused(h):
    run_id = h.record_result("fidelity", {"ok": 1}, title="x", models=[])
    with db.engine(h.url).begin() as con:
        con.execute(
            sa.update(db.run_extras)
            .where(db.run_extras.c.run_id == run_id)
            .values(payload=zlib.compress(pickle.dumps(Evil())))
        )
    with pytest.raises(HistoryError, match="cannot be read back"):
        h.result(run_id)


def test_the_newest_run_of_each_page_counts_reruns(h):
    a = h.record_result(
        "battery", {}, title="a", models=[], page="robustness", form={"values": {"w_samples": 10}}
    )
    b = h.record_result(
        "battery", {}, title="b", models=[], page="robustness", form={"values": {"w_samples": 12}}
    )
    s = h.record_result("sensitivity", {}, title="s", models=[], page="sensitivity")
    last = h.last_runs()
    assert last["robustness"] == (b, "battery", {"values": {"w_samples": 12}})
    assert last["sensitivity"] == (s, "sensitivity", None)
    import time

    time.sleep(1.1)  # ISO seconds: the rerun is a second later
    h.touch(a)
    assert h.last_runs()["robustness"][0] == a
