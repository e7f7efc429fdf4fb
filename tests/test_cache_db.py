"""The sample cache in a database (DBPA_CACHE_URL): the same calls, values and claims as
the disk store, on a SQLite and on a PostgreSQL database; sampling uses it without knowing,
so a second machine on the same database pays for nothing twice; a bad URL is one line."""

import numpy as np
import pytest

from dbpa_core.cache import Cache, CacheError
from dbpa_core.cli import main
from dbpa_core.sampling import Sampler, model_key

from .test_sampling import MODEL, CountingBackend, jobs


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def cache_url(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'team.sqlite3'}"


def test_values_round_trip_as_data(tmp_path, cache_url):
    c = Cache(tmp_path / "a", url=cache_url)
    assert c.get("sample:1") is None and c.count() == 0
    c.set("sample:1", {"text": "réponse", "tokens": 3})
    vec = np.arange(6, dtype=np.float32).reshape(2, 3)
    c.set("emb:1", vec)
    assert c.get("sample:1") == {"text": "réponse", "tokens": 3}
    back = c.get("emb:1")
    assert back.dtype == np.float32 and np.array_equal(back, vec)
    c.set("sample:1", {"text": "replaced"})  # an upsert, not an error
    assert c.get_many(["sample:1", "emb:1", "nope"]).keys() == {"sample:1", "emb:1"}
    c.set_many({f"s:{i}": {"i": i} for i in range(300)})  # more than one batch
    assert c.count() == 302 and c.volume() > 300 and "s:299" in c
    c.delete("s:0")
    assert c.get("s:0") is None and not (tmp_path / "a" / "store").exists()  # nothing on disk
    assert c.clear() == 301 and c.count() == 0


def test_a_value_that_is_not_data_reads_as_missing(tmp_path, cache_url):
    c = Cache(tmp_path, url=cache_url)
    c.store.set("sample:x", "{not json")  # planted / half-written
    assert c.get("sample:x") is None and c.store.get("sample:x") is None  # and removed


def test_claims_are_taken_once_and_broken_when_their_run_is_gone(tmp_path, cache_url):
    mine, theirs = Cache(tmp_path / "m", url=cache_url), Cache(tmp_path / "t", url=cache_url)
    assert mine.claim("sample:1")
    assert not theirs.claim("sample:1")  # one claimant per key
    assert theirs.claim_holder("sample:1")["token"] == mine.owner["token"]
    state, values = theirs.claim_many(["sample:1", "sample:2"])
    assert state == {"sample:1": "theirs", "sample:2": "mine"} and values == {}
    mine.set_many({"sample:1": {"text": "paid once"}})  # gives up its claim
    assert theirs.claim_holder("sample:1") is None
    state, values = theirs.claim_many(["sample:1"])
    assert state == {"sample:1": "stored"} and values["sample:1"] == {"text": "paid once"}
    mine.claim("sample:3")
    mine.end_beat()  # its heartbeat is gone
    assert theirs.claim_holder("sample:3") is None and theirs.claim("sample:3")
    assert mine.claim("sample:4", ttl=-1.0)  # an expired claim ...
    assert theirs.claim("sample:4")  # ... is taken over


def test_sampling_uses_it_and_a_second_machine_pays_nothing(tmp_path, cache_url, monkeypatch):
    monkeypatch.setenv("DBPA_CACHE_URL", cache_url)
    first, second = CountingBackend(), CountingBackend()
    a = Sampler(Cache(tmp_path / "machine-a"), backends={model_key(MODEL): first})
    assert not any(r.cached for r in a.sample(jobs(["a", "b"], 3)))
    b = Sampler(Cache(tmp_path / "machine-b"), backends={model_key(MODEL): second})
    recs = b.sample(jobs(["a", "b"], 3))
    assert all(r.cached for r in recs) and second.calls == []
    assert [r.text for r in recs] == ["a#0", "a#1", "a#2", "b#0", "b#1", "b#2"]


def test_cache_info_names_the_database_without_its_password(tmp_path, capsys, cache_url, monkeypatch):
    monkeypatch.setenv("DBPA_CACHE_URL", cache_url)
    Cache(tmp_path).set("sample:1", {"text": "x"})
    assert main(["--cache-dir", str(tmp_path), "cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "items: 1" in out and "cache database:" in out
    assert main(["--cache-dir", str(tmp_path), "cache", "clear"]) == 0
    assert "removed 1 cached items" in capsys.readouterr().out


@pytest.mark.parametrize(
    "url, said",
    [
        ("postgresql://me:s3cret@127.0.0.1:1/nodb", "Cannot reach the database"),
        ("mysql://me:s3cret@somewhere/db", "not mysql"),
    ],
)
def test_a_bad_cache_url_is_one_line_without_the_password(tmp_path, capsys, monkeypatch, url, said):
    monkeypatch.setenv("DBPA_CACHE_URL", url)
    with pytest.raises(CacheError, match=said) as info:
        Cache(tmp_path).get("sample:1")
    assert "s3cret" not in str(info.value) and "***@" in str(info.value)
    assert main(["--cache-dir", str(tmp_path), "cache", "info"]) == 2
    err = capsys.readouterr().err
    assert said in err and "s3cret" not in err and len(err.strip().splitlines()) == 1
