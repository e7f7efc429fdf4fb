"""Provenance: the model name and system fingerprint each answer came back with are kept
with the sample (cache, responses.jsonl, results.json, history), a change within a run is a
warning, and answers cached before they were recorded still read."""

import json

import pytest

from dbpa_core import provenance
from dbpa_core.audit import run_audit
from dbpa_core.backends import GenerationParams, SampleRequest
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.history import History
from dbpa_core.sampling import Job, Sampler, backend_identity, requests_for, sample_key

from .fake_openai import FakeOpenAI, fake_text
from .test_audit_openai import KEY, spec_for


@pytest.fixture(autouse=True)
def key_env(monkeypatch):
    monkeypatch.setenv("DBPA_TEST_KEY", KEY)


def server(**kw):
    return FakeOpenAI(api_key=KEY, models=("fake-model", "fake-embed"), **kw)


def lines(result):
    return [json.loads(x) for x in result.responses_jsonl().splitlines()]


def test_each_answer_keeps_its_model_and_fingerprint(tmp_path):
    with server(system_fingerprint="fp_a", served_model="fake-model-2024-08-06") as srv:
        res = run_audit(spec_for(srv, samples=4), cache=Cache(tmp_path / "c"))
    rows = lines(res)
    assert len(rows) == 12
    assert {(r["served_model"], r["system_fingerprint"]) for r in rows} == {("fake-model-2024-08-06", "fp_a")}
    assert not [w for w in res.warnings if "fingerprint" in w or "model names" in w]
    entries = provenance.entries_of(res.usage)
    assert [e["arm"] for e in entries] == ["base", "name-change", "comedian"]
    assert json.loads(res.to_json())["usage"]["provenance"][0]["system_fingerprints"] == ["fp_a"] * 4


def test_a_fingerprint_that_changes_within_a_run_is_a_warning(tmp_path):
    # 3 arms x 5 samples, one chat request each (n = 1): the build changes after request 7
    with server(system_fingerprint=lambda n: "fp_a" if n <= 7 else "fp_b") as srv:
        res = run_audit(spec_for(srv, samples=5, concurrency=1), cache=Cache(tmp_path / "c"))
    fps = [r["system_fingerprint"] for r in lines(res)]
    assert fps == ["fp_a"] * 7 + ["fp_b"] * 8
    (w,) = [w for w in res.warnings if "system fingerprints" in w]
    assert "2 different system fingerprints" in w and "fp_b: 8 answers" in w
    assert "fp_a: 7 answers" in w and "name-change: fp_a x2, fp_b x3" in w
    assert not [w for w in res.warnings if "model names" in w]  # the name stayed the same


def test_a_model_name_that_changes_is_a_warning(tmp_path):
    with server(served_model=lambda n: "m-2024-08" if n <= 5 else "m-2024-11") as srv:
        res = run_audit(spec_for(srv, samples=5, concurrency=1), cache=Cache(tmp_path / "c"))
    (w,) = [w for w in res.warnings if "model names" in w]
    assert "m-2024-08: 5 answers" in w and "m-2024-11: 10 answers" in w
    assert "base: m-2024-08 x5" in w


def test_cached_answers_keep_their_fingerprint_and_a_new_build_mixed_in_is_named(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(system_fingerprint="fp_old") as srv:
        first = run_audit(spec_for(srv, samples=3), cache=cache)
        assert not [w for w in first.warnings if "fingerprint" in w]
        again = run_audit(spec_for(srv, samples=3), cache=cache)  # every answer cached
        assert again.usage["calls"] == 0
        assert {r["system_fingerprint"] for r in lines(again)} == {"fp_old"}
        srv.system_fingerprint = "fp_new"  # the provider upgrades; two more samples per arm
        more = run_audit(spec_for(srv, samples=5), cache=cache)
    assert more.usage["calls"] == 6
    assert [r["system_fingerprint"] for r in lines(more)][:5] == ["fp_old"] * 3 + ["fp_new"] * 2
    assert any("fp_old: 9 answers" in w and "fp_new: 6 answers" in w for w in more.warnings)


def test_old_cache_values_without_provenance_still_read(tmp_path):
    model = {"backend": "openai", "name": "fake-model", "base_url": "http://127.0.0.1:9/v1"}
    cache = Cache(tmp_path / "c")
    reqs = requests_for("hi", n=2, seed=0, params=GenerationParams())
    ident = backend_identity(model)
    for r in reqs:  # the value as dbpa stored it before provenance was recorded
        cache.set(
            sample_key(ident, r),
            {
                "text": fake_text("hi", r.seed),
                "prompt_tokens": 1,
                "completion_tokens": 3,
                "model": "fake-model",
            },
        )
    recs = Sampler(cache).sample([Job(model, r) for r in reqs])  # no server: no call made
    assert [(r.cached, r.model, r.system_fingerprint) for r in recs] == [(True, "fake-model", "")] * 2
    even_older = {"text": "x", "prompt_tokens": 0, "completion_tokens": 0}
    bogus = SampleRequest("other", 0, 1, GenerationParams())
    cache.set(sample_key(ident, bogus), dict(even_older, system_fingerprint=7))  # not text
    (rec,) = Sampler(cache).sample([Job(model, bogus)])
    assert (rec.text, rec.model, rec.system_fingerprint) == ("x", "", "")


def test_new_cache_values_hold_the_fingerprint(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(system_fingerprint="fp_x") as srv:
        model = {
            "backend": "openai",
            "name": "fake-model",
            "base_url": srv.base_url,
            "api_key_env": "DBPA_TEST_KEY",
        }
        reqs = requests_for("hi", n=2, seed=0, params=GenerationParams(max_tokens=20))
        Sampler(cache).sample([Job(model, r) for r in reqs])
    value = cache.get(sample_key(backend_identity(model), reqs[0]))
    assert value["system_fingerprint"] == "fp_x" and value["model"] == "fake-model"


def test_a_hostile_fingerprint_is_cleaned(tmp_path):
    with server(system_fingerprint="\x1b[31mfp\x1b[0m\x07" + "y" * 500) as srv:
        res = run_audit(spec_for(srv, samples=2), cache=Cache(tmp_path / "c"))
    fp = lines(res)[0]["system_fingerprint"]
    assert "\x1b" not in fp and "\x07" not in fp and fp.startswith("fpy") and len(fp) <= 100


def test_history_keeps_provenance_and_compare_names_a_new_build(tmp_path, capsys):
    cache = Cache(tmp_path / "c")
    h = History()
    with server(system_fingerprint="fp_a") as srv:
        a = run_audit(spec_for(srv, samples=3), cache=cache)
        srv.system_fingerprint = "fp_b"
        b = run_audit(spec_for(srv, samples=3), cache=Cache(tmp_path / "c2"))
    ida, idb = h.record({"m": a}, source="cli"), h.record({"m": b}, source="cli")
    again = h.get(ida).audits["m"]
    assert {r["system_fingerprint"] for r in lines(again)} == {"fp_a"}
    assert main(["history", "show", str(ida)]) == 0
    assert "system fingerprint fp_a: 9 answers" in capsys.readouterr().out
    assert main(["history", "compare", str(ida), str(idb)]) == 0
    assert "changed: system fingerprints the answers came back with: fp_a -> fp_b" in capsys.readouterr().out
    assert main(["history", "compare", str(ida), str(idb), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["served_changed"] == {"system_fingerprints": [["fp_a"], ["fp_b"]]}


def test_a_run_recorded_before_provenance_still_shows(tmp_path, capsys):
    with server() as srv:
        res = run_audit(spec_for(srv, samples=2), cache=Cache(tmp_path / "c"))
    del res.usage[provenance.KEY]  # as a run recorded by an older dbpa
    run_id = History().record({"m": res}, source="cli")
    assert main(["history", "show", str(run_id)]) == 0
    assert "answered by" not in capsys.readouterr().out
    rows = lines(History().get(run_id).audits["m"])
    assert {(r["served_model"], r["system_fingerprint"]) for r in rows} == {("", "")}
