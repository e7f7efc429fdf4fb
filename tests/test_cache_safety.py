"""The cache holds data, never code; a damaged store is said in one line and
`cache clear` always repairs it; two runs on one cache pay for each sample once."""

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dbpa_core.backends import GenerationParams, Sample
from dbpa_core.cache import Cache, CacheError, decode_value, encode_value
from dbpa_core.cli import main
from dbpa_core.sampling import Job, Progress, Sampler, model_key, requests_for

from .fake_openai import FakeOpenAI, write_spec

MODEL = {"backend": "openai", "name": "fake", "base_url": "http://127.0.0.1:9/v1"}
ROOT = Path(__file__).resolve().parent.parent


class CountingBackend:
    name = "fake"
    model = "fake"
    deterministic = False

    def __init__(self, delay: float = 0.0):
        self.requests: list = []
        self.delay = delay

    def generate(self, requests, on_sample, *, should_stop=None):
        for r in requests:
            time.sleep(self.delay)
            self.requests.append(r)
            on_sample(r, Sample(f"{r.prompt}#{r.index}", 3, 5, "fake"))


def jobs(prompts=("a", "b"), n=3):
    p = GenerationParams(temperature=0.7, max_tokens=10)
    return [Job(MODEL, r) for q in prompts for r in requests_for(q, n=n, seed=1, params=p)]


def sampler(cache, backend, **kw):
    return Sampler(cache, backends={model_key(MODEL): backend}, **kw)


def modes(store_dir: Path) -> list[int]:
    with sqlite3.connect(store_dir / "cache.db") as db:
        return [m for (m,) in db.execute("SELECT mode FROM Cache")]


# --------------------------------------------------------------------------- data, not code
def test_values_are_stored_as_data_never_pickled(tmp_path):
    cache = Cache(tmp_path)
    s = sampler(cache, CountingBackend())
    s.sample(jobs())
    cache.set("embedding:x", np.arange(6, dtype=np.float32).reshape(2, 3))
    cache.set("embedding:big", np.ones(100_000, np.float32))  # large: a value file
    cache.close()
    from diskcache.core import MODE_PICKLE

    found = modes(tmp_path / "store")
    assert len(found) == 8 and MODE_PICKLE not in found
    back = Cache(tmp_path)
    v = back.get("embedding:x")
    assert v.dtype == np.float32 and v.shape == (2, 3) and v[1, 2] == 5
    assert back.get("embedding:big").shape == (100_000,)


def test_encoding_is_json_or_raw_little_endian_bytes():
    raw = encode_value(np.array([1.5, -2.0], dtype=">f4"))  # big-endian in, little-endian out
    assert isinstance(raw, bytes) and raw.startswith(b"DBPA-NDARRAY\n")
    head, _, body = raw[len(b"DBPA-NDARRAY\n") :].partition(b"\n")
    assert json.loads(head) == {"dtype": "<f4", "shape": [2]}
    assert np.frombuffer(body, "<f4").tolist() == [1.5, -2.0]
    assert encode_value({"text": "hi", "prompt_tokens": 3}) == '{"text":"hi","prompt_tokens":3}'
    assert decode_value(raw[:-1]) is None  # truncated: missing, not garbage
    assert decode_value(b"\x80\x04pickle") is None


@pytest.mark.parametrize(
    "value,match",
    [
        (object(), "JSON data and float arrays only"),
        ({"x": float("nan")}, "JSON data and float arrays only"),
        (np.array([1, 2]), "float32/float64 arrays"),
        (np.array(["a"]), "float32/float64 arrays"),
    ],
)
def test_values_that_are_not_data_are_refused(tmp_path, value, match):
    with pytest.raises(TypeError, match=match):
        Cache(tmp_path).set("k", value)


class Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def test_a_planted_pickle_is_never_run_and_reads_as_missing(tmp_path):
    import diskcache

    from dbpa_core.sampling import backend_identity, sample_key

    backend = CountingBackend()
    skey = sample_key(backend_identity(MODEL), jobs(("a",), 1)[0].request)
    marker = tmp_path / "marker"
    with diskcache.Cache(str(tmp_path / "store")) as evil:  # the default Disk pickles
        evil.set(skey, Payload(marker))
        evil.set("big", [Payload(marker)] * 20_000)  # a pickle in a value file
        evil.set(skey.replace("sample", "old"), {"text": "an old-format entry"})
    recs = sampler(Cache(tmp_path), backend).sample(jobs(("a",), 1))
    assert not marker.exists()
    assert recs[0].text == "a#0" and not recs[0].cached and len(backend.requests) == 1
    c = Cache(tmp_path)
    assert c.get("big") is None and c.get(skey.replace("sample", "old")) is None
    assert not marker.exists()
    assert c.get(skey)["text"] == "a#0"  # replaced by data


def test_a_planted_row_cannot_reach_outside_the_store(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    cache = Cache(tmp_path / "c")
    cache.set("k", "x" * 10)
    cache.close()
    from diskcache.core import MODE_BINARY

    with sqlite3.connect(tmp_path / "c" / "store" / "cache.db") as db:
        db.execute(
            "UPDATE Cache SET mode = ?, filename = ?, value = NULL WHERE key = 'k'",
            (MODE_BINARY, "../../precious.txt"),
        )
    c = Cache(tmp_path / "c")
    assert c.get("k") is None
    c.clear()
    assert outside.read_text() == "keep me"


@pytest.mark.parametrize("value", [{"text": 5}, {"text": "x", "prompt_tokens": -1}, ["a"], "text"])
def test_a_cached_sample_that_is_not_valid_is_fetched_again(tmp_path, value):
    from dbpa_core.sampling import backend_identity, sample_key

    j = jobs(("a",), 1)
    cache = Cache(tmp_path)
    cache.set(sample_key(backend_identity(MODEL), j[0].request), value)
    backend = CountingBackend()
    assert sampler(cache, backend).sample(j)[0].text == "a#0" and len(backend.requests) == 1


@pytest.mark.parametrize(
    "value",
    [
        np.array([np.nan, 1.0], np.float32),
        np.zeros(3, np.float32),
        np.ones((2, 2), np.float32),
        {"not": "a vector"},
    ],
)
def test_a_cached_embedding_that_is_not_valid_is_computed_again(tmp_path, value):
    from dbpa_core.sampling import embedder_identity, embedding_key

    class Emb:
        name = "fake"
        calls = 0

        def embed(self, texts):
            Emb.calls += 1
            return np.ones((len(texts), 3), np.float32)

    cfg = {"backend": "fake-emb"}
    cache = Cache(tmp_path)
    cache.set(embedding_key(embedder_identity(cfg), "t"), value)
    s = Sampler(cache, embedders={model_key(cfg): Emb()})
    out = s.embed(["t"], cfg)
    assert out.shape == (1, 3) and Emb.calls == 1


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda n: np.full((n, 3), np.nan), "NaN or infinite"),
        (lambda n: np.zeros((n, 3)), "all-zero vector"),
        (lambda n: [[1.0, 2.0]] * (n - 1) + [[1.0]], "not a rectangular array"),
        (lambda n: np.ones((n + 1, 3)), r"shape \(3, 3\) for 2 texts"),
    ],
)
def test_an_embedder_returning_garbage_caches_nothing(tmp_path, bad, match):
    from dbpa_core.backends import BackendError

    class Emb:
        name = "fake"

        def embed(self, texts):
            return bad(len(texts))

    cfg = {"backend": "fake-emb"}
    cache = Cache(tmp_path)
    with pytest.raises(BackendError, match=match):
        Sampler(cache, embedders={model_key(cfg): Emb()}).embed(["a", "b"], cfg)
    assert cache.count() == 0


def test_a_backend_returning_a_non_text_caches_nothing(tmp_path):
    from dbpa_core.backends import BackendError

    class Bad(CountingBackend):
        def generate(self, requests, on_sample, *, should_stop=None):
            on_sample(requests[0], Sample(["not", "text"]))

    cache = Cache(tmp_path)
    with pytest.raises(BackendError, match="returned list instead of a text; nothing was cached"):
        sampler(cache, Bad()).sample(jobs(("a",), 1))
    assert cache.count() == 0


# --------------------------------------------------------------------------- a damaged store
def damage(store: Path, how: str) -> None:
    db = store / "cache.db"
    if how == "garbage":
        db.write_bytes(os.urandom(4096))
    else:  # truncated to a third
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])


def filled_cache(tmp_path) -> Cache:
    c = Cache(tmp_path)
    for i in range(400):
        c.set(f"sample:{i}", {"text": "x" * 300, "prompt_tokens": 1})
    c.close()
    return c


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_a_damaged_store_is_one_line_and_clear_repairs_it(tmp_path, how):
    filled_cache(tmp_path)
    damage(tmp_path / "store", how)
    c = Cache(tmp_path)
    for op in (lambda: c.get("sample:1"), c.count, lambda: c.set("k", 1), lambda: "k" in c):
        with pytest.raises(CacheError, match=r"is damaged \(.*\); `dbpa cache clear` repairs it") as ei:
            op()
        assert "\n" not in str(ei.value)
    assert c.clear() == 0 and c.repaired
    c.set("k", {"a": 1})
    assert c.get("k") == {"a": 1} and c.count() == 1
    assert Cache(tmp_path).get("k") == {"a": 1}


def test_clear_of_a_healthy_store_counts_and_keeps_it(tmp_path):
    filled_cache(tmp_path)
    c = Cache(tmp_path)
    assert c.clear() == 400 and not c.repaired and c.count() == 0


def test_a_store_rebuilt_by_another_process_is_reopened(tmp_path):
    a, b = Cache(tmp_path), Cache(tmp_path)
    a.set("k", 1)
    assert b.get("k") == 1
    damage(tmp_path / "store", "garbage")
    assert a.clear() == 0 and a.repaired
    a.set("k2", 2)
    assert b.get("k2") == 2  # b's old connection pointed at the removed file


def write_replay_spec(tmp_path) -> Path:
    rec = tmp_path / "rec.jsonl"
    with open(rec, "w") as fh:
        for p in ("hi", "ho"):
            for i in range(4):
                fh.write(json.dumps({"prompt": p, "response": f"{p} answer number {i}"}) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "model: {backend: replay, file: rec.jsonl}\nembedder: {backend: rouge1}\n"
        "samples: 3\npermutations: 99\nbase: {prompt: hi}\n"
        "perturbations: [{name: p, prompt: ho}]\n"
    )
    return spec


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_cli_says_the_store_is_damaged_and_cache_clear_repairs_it(tmp_path, capsys, how):
    spec = write_replay_spec(tmp_path)
    cdir = tmp_path / "c"
    filled_cache(cdir)
    damage(cdir / "store", how)
    args = ["--cache-dir", str(cdir)]
    for cmd in (
        ["audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"],
        ["estimate", str(spec)],
        ["cache", "info"],
    ):
        assert main(args + cmd) == 2, cmd
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "damaged" in err and "dbpa cache clear" in err, err
    assert not (tmp_path / "o").exists()
    assert main(args + ["cache", "clear"]) == 0
    assert "damaged" in capsys.readouterr().out
    assert main(args + ["audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert main(args + ["cache", "info"]) == 0
    assert "items: 6" in capsys.readouterr().out


# --------------------------------------------------------------------------- paid once
def test_two_samplers_on_one_folder_pay_once(tmp_path):
    backend = CountingBackend(delay=0.05)
    out, seen = {}, []

    def run(name):
        s = sampler(Cache(tmp_path), backend, progress=seen.append)
        out[name] = [r.text for r in s.sample(jobs(("a", "b"), 5))]

    threads = [threading.Thread(target=run, args=(n,)) for n in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["x"] == out["y"] and len(out["x"]) == 10
    assert len(backend.requests) == 10  # not 20
    assert any("waiting for another run" in p.detail for p in seen)


def test_two_runs_sharing_one_cache_object_pay_once(tmp_path, monkeypatch):
    """The dashboard keeps one Cache per folder for every session: two sessions running
    the same audit at once must still pay once (each run claims as itself)."""
    import dbpa_core.cache as cache_mod

    monkeypatch.setattr(cache_mod, "HEARTBEAT_TTL", 0.6)
    monkeypatch.setattr(cache_mod, "HEARTBEAT_EVERY", 0.1)
    shared = Cache(tmp_path)
    backend = CountingBackend(delay=0.3)
    out = {}

    def run(name, wait):
        time.sleep(wait)
        out[name] = [r.text for r in sampler(shared, backend).sample(jobs(("a",), 4))]

    threads = [threading.Thread(target=run, args=("x", 0)), threading.Thread(target=run, args=("y", 0.1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["x"] == out["y"] and len(backend.requests) == 4
    assert shared.count() == 4  # no claim or heartbeat left behind


@pytest.mark.timeout(60)
def test_a_claim_of_a_dead_process_does_not_block(tmp_path):
    from dbpa_core.sampling import backend_identity, sample_key

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache = Cache(tmp_path)
    j = jobs(("a",), 2)
    import socket

    cache.store.set("owner:x", "alive", expire=3600)  # its heartbeat stands: only the pid tells
    for job in j:
        key = sample_key(backend_identity(MODEL), job.request)
        cache.store.add(
            "claim:" + key, json.dumps({"host": socket.gethostname(), "pid": dead.pid, "token": "x"})
        )
    seen: list[Progress] = []
    recs = sampler(Cache(tmp_path), CountingBackend(), progress=seen.append).sample(j)
    assert [r.text for r in recs] == ["a#0", "a#1"]
    assert not any("waiting for another run" in p.detail for p in seen)  # not a moment


@pytest.mark.timeout(60)
def test_a_claim_of_a_run_whose_heartbeat_stopped_is_broken(tmp_path):
    """A run on another machine (a cancelled CI container on a shared volume) that
    died: its claims stand only until its heartbeat expires."""
    from dbpa_core.sampling import backend_identity, sample_key

    j = jobs(("a",), 2)
    cache = Cache(tmp_path)
    cache.store.set("owner:gone", "alive", expire=1.0)
    for job in j:
        cache.store.add(
            "claim:" + sample_key(backend_identity(MODEL), job.request),
            json.dumps({"host": "another-machine", "pid": 1, "token": "gone"}),
        )
    seen: list[Progress] = []
    t = time.monotonic()
    recs = sampler(Cache(tmp_path), CountingBackend(), progress=seen.append).sample(j)
    took = time.monotonic() - t
    assert [r.text for r in recs] == ["a#0", "a#1"]
    assert any("waiting for another run (pid 1)" in p.detail for p in seen)  # the claim stood
    assert took < 30  # then fell with the heartbeat (1 s), not with the claim (6 hours)


def test_a_slow_live_run_keeps_its_claims_by_its_heartbeat(tmp_path, monkeypatch):
    import dbpa_core.cache as cache_mod

    # a beat every 0.1 s keeps claims for 3 s: a loaded machine may starve the beating
    # thread for a moment (a TTL of 0.6 s was within reach of that), not for 3 s
    monkeypatch.setattr(cache_mod, "HEARTBEAT_TTL", 3.0)
    monkeypatch.setattr(cache_mod, "HEARTBEAT_EVERY", 0.1)
    backend = CountingBackend(delay=1.0)  # 4 samples: 4 s, longer than the heartbeat TTL
    out = {}

    def run(name, wait):
        time.sleep(wait)
        out[name] = [r.text for r in sampler(Cache(tmp_path), backend).sample(jobs(("a",), 4))]

    threads = [threading.Thread(target=run, args=("x", 0)), threading.Thread(target=run, args=("y", 0.2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["x"] == out["y"] and len(backend.requests) == 4


@pytest.mark.timeout(60)
def test_a_run_waits_for_a_live_claim_and_reads_the_value(tmp_path):
    from dbpa_core.sampling import backend_identity, sample_key

    j = jobs(("a",), 1)
    key = sample_key(backend_identity(MODEL), j[0].request)
    other = Cache(tmp_path)
    assert other.claim(key)  # claims as itself, with a heartbeat
    seen: list[Progress] = []
    waiting = threading.Event()

    def progress(p):
        seen.append(p)
        if p.detail.startswith("waiting for another run"):
            waiting.set()

    def finish():  # the other run stores its value once this one waits for it
        waiting.wait(30)
        other.set(
            key, {"text": "from the other run", "prompt_tokens": 0, "completion_tokens": 0, "model": "m"}
        )
        other.release([key])

    threading.Thread(target=finish).start()
    backend = CountingBackend()
    recs = sampler(Cache(tmp_path), backend, progress=progress).sample(j)
    assert recs[0].text == "from the other run" and recs[0].cached and not backend.requests
    assert any(p.detail.startswith("waiting for another run") for p in seen)


def test_a_claim_given_up_without_a_value_is_fetched_here(tmp_path):
    from dbpa_core.sampling import backend_identity, sample_key

    j = jobs(("a",), 1)
    key = sample_key(backend_identity(MODEL), j[0].request)
    other = Cache(tmp_path)
    assert other.claim(key)
    threading.Timer(0.6, lambda: other.release([key])).start()  # that run failed
    backend = CountingBackend()
    recs = sampler(Cache(tmp_path), backend).sample(j)
    assert recs[0].text == "a#0" and len(backend.requests) == 1


@pytest.mark.timeout(60)
def test_stop_ends_a_wait_for_another_run(tmp_path):
    from dbpa_core.sampling import RunCancelled, backend_identity, sample_key

    j = jobs(("a",), 1)
    Cache(tmp_path).claim(sample_key(backend_identity(MODEL), j[0].request))  # alive for 45 s
    waiting = threading.Event()
    with pytest.raises(RunCancelled):  # else it waits out the heartbeat and fetches the sample
        sampler(
            Cache(tmp_path),
            CountingBackend(),
            progress=lambda p: "waiting for another run" in p.detail and waiting.set(),
            should_stop=waiting.is_set,
        ).sample(j)
    assert waiting.is_set()


def start_audit(spec: Path, out: Path, **env: str) -> subprocess.Popen:
    """``dbpa audit SPEC --out OUT --progress`` in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "dbpa_core.cli", "audit", str(spec), "--out", str(out), "--progress"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # two CLI processes (25 s on 2 busy cores); the in-process tests above cover the claims
def test_two_cli_processes_on_one_cache_pay_once(tmp_path):
    """The same spec run twice at once on one cache: every sample and embedding is
    requested once; the second run waits for the first and reads its answers."""
    with FakeOpenAI(models=("fake-model", "fake-embed"), latency=0.8) as srv:
        spec = write_spec(tmp_path / "spec.yaml", srv.base_url, samples=4, concurrency=1, name="team-audit")

        def start(out):
            return start_audit(spec, tmp_path / out, DBPA_CACHE_DIR=str(tmp_path / "cache"))

        # started together: they reach sampling together, one claims, the other waits
        first, second = start("o1"), start("o2")
        out1, err1 = first.communicate(timeout=150)
        out2, err2 = second.communicate(timeout=150)
        assert first.returncode == 0, err1
        assert second.returncode == 0, err2
        assert srv.chat_ok == 8 and srv.embedding_ok == 1, (srv.chat_ok, srv.embedding_ok)
    # "waiting for another run (pid N) to fetch ...": the progress bar may cut the start of
    # its detail to the terminal's width ("…r run (pid N) to fetch"), so its end is matched
    assert re.search(r"run \(pid \d+(, \d+)*\) to fetch", err1 + err2), err1 + err2

    paid = [int(re.search(r"(\d+) new calls", out).group(1)) for out in (out1, out2)]
    assert sum(paid) == 8, paid  # each sample paid by one of the two runs
    r1 = (tmp_path / "o1" / "responses.jsonl").read_text()
    assert r1 == (tmp_path / "o2" / "responses.jsonl").read_text()


def test_a_beat_under_way_when_the_claims_are_released_leaves_no_heartbeat(tmp_path, monkeypatch):
    """release_all waits for a beat in flight: it used to land after end_beat removed the
    heartbeat, which then stayed behind until it expired (a flaky count under load)."""
    import dbpa_core.cache as cache_mod
    from dbpa_core.sampling import _Claims

    monkeypatch.setattr(cache_mod, "HEARTBEAT_EVERY", 0.01)
    cache = Cache(tmp_path)
    beating = threading.Event()
    beat = cache.beat

    def slow_beat(owner=None, **kw):
        beating.set()
        time.sleep(0.3)  # the stop comes while this beat is writing
        beat(owner, **kw)

    claims = _Claims(cache)
    assert cache.claim("k", claims.owner)  # (a claim beats once itself)
    monkeypatch.setattr(cache, "beat", slow_beat)
    claims.hold(["k"])
    assert beating.wait(5)
    claims.release_all()
    cache.end_beat(claims.owner)
    time.sleep(0.4)  # a late beat would have landed by now
    assert cache.count() == 0
