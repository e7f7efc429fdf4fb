"""A team's database: two processes (two machines, as far as the database can tell) write
runs and cache entries to one new PostgreSQL database at the same time — they race to create
its schema too — and every row arrives, each contested sample is paid for by one of them,
and neither fails. A bad DBPA_DATABASE_URL is one line with its password masked."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbpa_core import db
from dbpa_core.cli import main
from dbpa_core.history import History

ROOT = Path(__file__).resolve().parents[1]
N = 25
WORKER = """
import json, sys, time
from pathlib import Path
from dbpa_core.cache import Cache
from dbpa_core.history import History

url, name, folder, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
history, cache = History(url), Cache(folder / name, url=url)
print("ready", flush=True)
while not (folder / "go").exists():
    time.sleep(0.01)
paid = []
for i in range(n):
    history.record_result("sensitivity", {"i": i, "by": name}, title=f"{name}-{i}",
                          models=[name], fingerprint=f"{name}-{i}")
    cache.set(f"sample:{name}:{i}", {"text": f"{name} {i}"})
    state, _ = cache.claim_many([f"sample:shared:{i}"])
    if state[f"sample:shared:{i}"] == "mine":
        paid.append(i)
        cache.set_many({f"sample:shared:{i}": {"by": name}})
print(json.dumps(paid), flush=True)
"""

pytestmark = pytest.mark.postgres


def test_two_writers_on_one_database(tmp_path, postgres_url):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, postgres_url, name, str(tmp_path), str(N)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("alice", "bob")
    ]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        (tmp_path / "go").touch()  # both start at once
        outs = [w.communicate(timeout=240) for w in workers]
    finally:
        for w in workers:
            w.kill()
    for w, (_out, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0 and "Traceback" not in err, err
    paid = [set(json.loads(out.strip().splitlines()[-1])) for out, _ in outs]
    assert paid[0].isdisjoint(paid[1]) and paid[0] | paid[1] == set(range(N))

    h = History(postgres_url)
    runs = h.list()
    assert sorted(r.title for r in runs) == sorted(f"{n}-{i}" for n in ("alice", "bob") for i in range(N))
    assert h.result(h.first_run("bob-7"))[1] == {"i": 7, "by": "bob"}
    with db.engine(postgres_url).connect() as con:
        keys = set(
            con.execute(
                sa.select(db.sample_cache.c.key).where(db.sample_cache.c.key.like("sample:%"))
            ).scalars()
        )
    assert keys == {f"sample:{n}:{i}" for n in ("alice", "bob", "shared") for i in range(N)}


def test_the_dashboard_and_cli_read_the_shared_history(tmp_path, postgres_url, monkeypatch, capsys):
    History(postgres_url).record_result(
        "battery", {}, title="from another machine", models=["m"], headline="2 items"
    )
    monkeypatch.setenv("DBPA_DATABASE_URL", postgres_url)
    h = History()  # what the History page opens
    assert h.where == db.masked(postgres_url) and h.path is None
    assert [r.title for r in h.list()] == ["from another machine"]
    assert History(h.location).list()[0].user  # who ran it
    assert main(["history", "show", "1"]) == 0
    assert "run by " in capsys.readouterr().out


@pytest.mark.parametrize(
    "url, said",
    [
        ("postgresql://me:s3cret@127.0.0.1:1/nodb", "Cannot reach the database"),
        ("postgresql://me:s3cret@127.0.0.1:{port}/no_such_db", "no_such_db"),
        ("mysql://me:s3cret@somewhere/db", "not mysql"),
        ("not a url://me:s3cret@x", "not a database URL"),
    ],
)
def test_a_bad_database_url_is_one_line_without_the_password(capsys, monkeypatch, url, said, postgres_server):
    monkeypatch.setenv("DBPA_DATABASE_URL", url.format(port=postgres_server.port))
    t0 = time.monotonic()
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert said in err and "s3cret" not in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and time.monotonic() - t0 < 60


@pytest.mark.slow  # two CLI processes and a PostgreSQL server (40 s on 2 busy cores)
def test_two_machines_run_one_audit_at_once_and_pay_once(tmp_path, postgres_url):
    """The same spec started at once from two "machines" (two processes, two cache
    folders) on one team database: every sample and embedding is requested once, both
    runs are recorded in the shared history, and their responses are the same."""
    import re

    from .fake_openai import FakeOpenAI, write_spec
    from .test_cache_safety import start_audit

    with FakeOpenAI(models=("fake-model", "fake-embed"), latency=0.8) as srv:
        spec = write_spec(tmp_path / "spec.yaml", srv.base_url, samples=4, concurrency=1, name="team-audit")

        def start(machine):
            return start_audit(
                spec,
                tmp_path / machine / "out",
                DBPA_CACHE_DIR=str(tmp_path / machine / "cache"),
                DBPA_HOME=str(tmp_path / machine / "home"),
                DBPA_DATABASE_URL=postgres_url,
                DBPA_CACHE_URL=postgres_url,
            )

        first, second = start("a"), start("b")
        out1, err1 = first.communicate(timeout=150)
        out2, err2 = second.communicate(timeout=150)
        assert first.returncode == 0, err1
        assert second.returncode == 0, err2
        assert srv.chat_ok == 8 and srv.embedding_ok == 1, (srv.chat_ok, srv.embedding_ok)
    paid = [int(re.search(r"(\d+) new calls", out).group(1)) for out in (out1, out2)]
    assert sum(paid) == 8, paid  # each sample paid by one of the two
    assert (tmp_path / "a" / "out" / "responses.jsonl").read_text() == (
        tmp_path / "b" / "out" / "responses.jsonl"
    ).read_text()
    runs = History(postgres_url).list()
    assert [r.title for r in runs] == ["team-audit", "team-audit"] and all(r.user for r in runs)
    assert "postgresql://" in out1 and "recorded as run" in out1 + out2
    assert not (tmp_path / "a" / "home" / "history.sqlite3").exists()
