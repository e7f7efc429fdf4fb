"""``dbpa audit --batch``: the Batch API job (upload, create, poll, download, validate), its
failures and its resumption, against a fake Batch API on 127.0.0.1."""

import json

import numpy as np
import pytest

from dbpa_core import batch
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.pricing import BATCH_DISCOUNT
from dbpa_core.runs import estimate
from dbpa_core.sampling import backend_identity, sample_key

from .fake_batch import FakeBatch
from .test_audit_openai import KEY, spec_for

K = 4  # samples per arm: 3 arms -> 12 requests


@pytest.fixture(autouse=True)
def key_env(monkeypatch):
    monkeypatch.setenv("DBPA_TEST_KEY", KEY)


def server(**kw):
    return FakeBatch(api_key=KEY, models=("fake-model", "fake-embed"), **kw)


def fill(spec, cache, **kw):
    return batch.fill_cache(batch.jobs(spec), cache, sleep=lambda s: None, **kw)


def keys_of(spec):
    return [sample_key(backend_identity(m), r) for m, r in batch.jobs(spec)]


def test_job_fills_the_cache_and_the_audit_then_calls_nothing(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(polls_until_done=3) as srv:
        spec = spec_for(srv, samples=K)
        out = fill(spec, cache)
        assert (srv.uploads, len(srv.created), out.stored, out.requests) == (1, 1, 12, 12)
        assert srv.polls >= 3  # validating -> in_progress -> completed
        create = srv.created[0]
        assert (create["endpoint"], create["completion_window"]) == ("/v1/chat/completions", "24h")
        lines = srv.lines(create["input_file_id"])
        assert sorted(x["custom_id"] for x in lines) == sorted(keys_of(spec))
        assert {x["url"] for x in lines} == {"/v1/chat/completions"}
        assert {x["body"]["model"] for x in lines} == {"fake-model"}
        result = run_audit(spec, cache=cache)
        assert result.usage["calls"] == 0 and result.usage["cached_samples"] == 12
        assert srv.chat_ok == 0  # no live chat call at all
        assert not list((tmp_path / "c" / "batches").glob("*.json"))  # a done job is forgotten
        again = fill(spec, cache)  # everything cached: no second job
        assert (again.requests, srv.uploads, len(srv.created)) == (0, 1, 1)


def test_batch_answers_are_the_live_answers(tmp_path):
    """The batch lines ask exactly what a live call asks (model, messages, seed, params)."""
    with server() as srv:
        spec = spec_for(srv, samples=K)
        fill(spec, Cache(tmp_path / "b"))
        by_batch = run_audit(spec, cache=Cache(tmp_path / "b"))
        live = run_audit(spec, cache=Cache(tmp_path / "l"))
        assert live.usage["calls"] == 12 and by_batch.usage["calls"] == 0
        assert by_batch.base.texts == live.base.texts
        assert [a.texts for a in by_batch.arms] == [a.texts for a in live.arms]


def test_failed_lines_are_reported_left_uncached_and_asked_again_alone(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(fail_lines={0}, malformed_lines={5}) as srv:
        spec = spec_for(srv, samples=K)
        with pytest.raises(batch.BatchError) as err:
            fill(spec, cache)
        msg = str(err.value)
        assert "2 of 12 batch request(s) failed" in msg and "\n" not in msg
        assert "500" in msg and "'choices' is empty" in msg  # the live validator's words
        bad = {srv.lines("file-1")[i]["custom_id"] for i in (0, 5)}
        assert [k for k in keys_of(spec) if k not in cache] == [k for k in keys_of(spec) if k in bad]
        srv.fail_lines, srv.malformed_lines = set(), set()
        out = fill(spec, cache)
        assert len(srv.created) == 2 and out.stored == 2
        assert {x["custom_id"] for x in srv.lines(srv.created[1]["input_file_id"])} == bad
        assert run_audit(spec, cache=cache).usage["calls"] == 0


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_expired_or_cancelled_job_keeps_what_it_answered(tmp_path, outcome):
    cache = Cache(tmp_path / "c")
    with server(outcome=outcome, answered=5) as srv:
        spec = spec_for(srv, samples=K)
        with pytest.raises(batch.BatchError) as err:
            fill(spec, cache)
        msg = str(err.value)
        assert "\n" not in msg
        assert (
            f"The batch batch_1 at http://127.0.0.1:{srv.server.server_address[1]}/v1 {outcome} with 7 of 12 request(s) unanswered"
            in msg
        )
        assert sum(k in cache for k in keys_of(spec)) == 5
        srv.outcome = "completed"
        out = fill(spec, cache)  # a new job for the 7 left
        assert len(srv.created) == 2 and out.requests == 7 and out.stored == 7


def test_failed_job_says_so_in_one_line(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(outcome="failed") as srv:
        spec = spec_for(srv, samples=K)
        with pytest.raises(batch.BatchError) as err:
            fill(spec, cache)
        msg = str(err.value)
        assert "failed (The input file is invalid.) with 12 of 12" in msg and "\n" not in msg
        assert not any(k in cache for k in keys_of(spec))


def test_stopped_while_pending_picks_up_the_same_job(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(hold=True) as srv:
        spec = spec_for(srv, samples=K)
        looks = []
        with pytest.raises(batch.BatchPending) as stop:
            fill(spec, cache, should_stop=lambda: len(looks) > 1 or looks.append(1))
        assert "batch_1" in str(stop.value) and "pick it up" in str(stop.value)
        saved = list((tmp_path / "c" / "batches").glob("*.json"))
        assert len(saved) == 1 and json.loads(saved[0].read_text())["batch_id"] == "batch_1"
        assert KEY not in saved[0].read_text()
        assert not any(k in cache for k in keys_of(spec))
        srv.hold = False  # the job finishes while nobody watches
        out = fill(spec, cache)
        assert out.resumed == ["batch_1"] and out.batch_ids == ["batch_1"]
        assert (srv.uploads, len(srv.created), out.stored) == (1, 1, 12)  # paid once
        result = run_audit(spec, cache=cache)
        assert result.usage["calls"] == 0 and srv.chat_ok == 0


def test_other_backends_are_left_to_the_sampler(tmp_path):
    with server() as srv:
        spec = spec_for(srv, samples=K)
        jobs = [({"backend": "local"}, r) for _, r in batch.jobs(spec)]
        out = batch.fill_cache(jobs, Cache(tmp_path / "c"), sleep=lambda s: None)
        assert out.requests == 0 and srv.uploads == 0


def test_estimate_shows_the_batch_price(tmp_path, capsys):
    spec_file = tmp_path / "s.yaml"
    with server() as srv:
        priced = spec_for(srv, samples=K)
    priced.prices.update(
        {"fake-model": {"input": 1.0, "output": 2.0}, "fake-embed": {"input": 0.5, "output": 0.0}}
    )
    est = estimate(priced, cache=Cache(tmp_path / "c"))
    chat = sum(r["cost"] for r in est["arms"])
    assert batch.batch_cost(est, priced) == pytest.approx(est["totals"]["cost"] - chat * (1 - BATCH_DISCOUNT))
    assert BATCH_DISCOUNT == 0.5
    spec_file.write_text(_yaml(srv, prices=True))
    assert main(["estimate", str(spec_file), "--cache-dir", str(tmp_path / "c")]) == 0
    said = capsys.readouterr().out
    assert "through the Batch API (dbpa audit --batch): $" in said


def _yaml(srv, *, prices=False) -> str:
    extra = (
        """
prices:
  fake-model: {input: 1.0, output: 2.0}
"""
        if prices
        else ""
    )
    return f"""
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY}}
embedder: {{backend: openai, name: fake-embed, base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY}}
samples: {K}
max_tokens: 50
permutations: 200
seed: 0
base: {{prompt: "John has these features: age 70"}}
perturbations:
  - {{name: name-change, prompt: "Ahmed has these features: age 70", role: control}}
{extra}"""


def test_cli_audit_batch_then_runs_from_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(batch, "POLL_FIRST", 0.01)
    spec_file = tmp_path / "s.yaml"
    with server() as srv:
        spec_file.write_text(_yaml(srv, prices=True))
        args = [
            "audit",
            str(spec_file),
            "--out",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "c"),
            "--no-history",
            "--quiet",
        ]
        assert main(args + ["--batch"]) == 0
        cap = capsys.readouterr()
        assert "at the batch price" in cap.err
        assert "Batch API: 8 answers of 8 requests cached from batch_1" in cap.out
        assert "0 new calls, 8 samples from the cache" in cap.out
        assert srv.chat_ok == 0 and len(srv.created) == 1
        assert (tmp_path / "out" / "results.json").exists()
        assert main(args + ["--batch", "--no-cache"]) == 2
        assert "cannot run with --no-cache" in capsys.readouterr().err


def test_cli_failed_lines_exit_3_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(batch, "POLL_FIRST", 0.01)
    spec_file = tmp_path / "s.yaml"
    with server(fail_lines={1}) as srv:
        spec_file.write_text(_yaml(srv))
        rc = main(
            [
                "audit",
                str(spec_file),
                "--out",
                str(tmp_path / "out"),
                "--cache-dir",
                str(tmp_path / "c"),
                "--no-history",
                "--quiet",
                "--batch",
            ]
        )
        err = capsys.readouterr().err
        assert rc == 3 and "1 of 8 batch request(s) failed" in err
        assert "Traceback" not in err and srv.chat_ok == 0  # nothing asked live


def test_fidelity_simulate_batch_then_runs_from_the_cache(tmp_path, capsys, monkeypatch):
    """``dbpa fidelity --simulate --batch``: the simulation's answers come from one job, and
    its counts are the rule-based respondent's, computed by hand."""
    from dbpa_core.fidelity.data import load_data, parse_csv

    from .survey_model import survey_answer
    from .test_fidelity_simulate import SURVEY, expected

    monkeypatch.setattr(batch, "POLL_FIRST", 0.01)
    (tmp_path / "survey.csv").write_text(SURVEY)
    with FakeBatch(models=("survey-model",), answer=survey_answer) as srv:
        spec = tmp_path / "sim.yaml"
        spec.write_text(f"""
data: survey.csv
models:
  - {{backend: openai, name: survey-model, base_url: "{srv.base_url}", label: survey}}
samples: 8
""")
        out = tmp_path / "out"
        args = [
            "fidelity",
            "--simulate",
            str(spec),
            "--out",
            str(out),
            "--quiet",
            "--cache-dir",
            str(tmp_path / "c"),
        ]
        assert main(args + ["--batch"]) == 0
        printed = capsys.readouterr().out
        assert "Batch API: 24 answers of 24 requests cached from batch_1" in printed
        assert "0 new calls, 24 answers from the cache" in printed and srv.chat_ok == 0
        counts, _ = expected(
            parse_csv(SURVEY),
            [{"backend": "openai", "name": "survey-model", "base_url": srv.base_url, "label": "survey"}],
            samples=8,
        )
        got = load_data(out / "data.csv")
        for s in got.scenarios:
            np.testing.assert_array_equal(
                got.simulated["survey"][got.ids.index(s.id)], counts["survey"][s.id]
            )


def test_a_suite_sends_every_case_in_one_job(tmp_path):
    from dbpa_core.spec import load_spec
    from dbpa_core.suite import run_suite

    from .test_suite import suite_yaml, write_cases

    write_cases(tmp_path, n=3)
    cache = Cache(tmp_path / "c")
    with FakeBatch(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "suite.yaml").write_text(suite_yaml(srv.base_url))
        spec = load_spec(tmp_path / "suite.yaml")
        out = fill(spec, cache)
        assert out.requests == 3 * 3 * 6 and out.stored == 54 and len(srv.created) == 1
        assert out.completion_tokens == 54 * 12 and out.prompt_tokens > 0
        result = run_suite(spec, cache=cache)
        assert result.usage["calls"] == 0 and srv.chat_ok == 0 and len(result.tests) == 6


def test_two_runs_at_once_share_one_job(tmp_path):
    """Two runs of one audit started together (two threads, one cache folder): one job is
    created, the second run picks it up while it runs, and both get every answer. The job
    is held at the server until both runs watch it, so a busy machine cannot let the first
    run finish before the second starts (then the second would find every answer cached
    and send nothing, which is right but not what this test is about)."""
    import threading
    import time

    with server(polls_until_done=2, hold=True) as srv:
        spec = spec_for(srv, samples=K)
        outs, errors, watching = [], [], set()
        deadline = time.monotonic() + 120

        def sleep(_seconds):
            if len(watching) == 2 or time.monotonic() > deadline:
                srv.hold = False
            time.sleep(0.01)

        def run():
            try:
                outs.append(
                    batch.fill_cache(
                        batch.jobs(spec),
                        Cache(tmp_path / "c"),
                        progress=lambda p: watching.add(threading.get_ident()),
                        sleep=sleep,
                    )
                )
            except Exception as exc:  # noqa: BLE001 - reported by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(watching) == 2, "the second run never watched the first run's job"
        assert not errors and (srv.uploads, len(srv.created)) == (1, 1)
        assert sorted(o.batch_ids for o in outs) == [["batch_1"], ["batch_1"]]
        assert sorted(o.resumed for o in outs) == [[], ["batch_1"]]
        assert run_audit(spec, cache=Cache(tmp_path / "c")).usage["calls"] == 0


def test_a_saved_job_the_server_forgot_is_sent_again(tmp_path):
    cache = Cache(tmp_path / "c")
    with server(hold=True) as srv:
        spec = spec_for(srv, samples=K)
        with pytest.raises(batch.BatchPending):
            fill(spec, cache, should_stop=lambda: True)
        del srv.batches["batch_1"]  # unknown to the server now (404)
        srv.hold = False
        out = fill(spec, cache)
        assert out.batch_ids == ["batch_2"] and not out.resumed and out.stored == 12


def test_a_job_answered_meanwhile_is_not_sent_again(tmp_path):
    """Answers another run cached after this run looked (before it could create its job)
    are not asked again."""
    cache = Cache(tmp_path / "c")
    with server() as srv:
        spec = spec_for(srv, samples=K)
        real_get_many = Cache.get_many
        calls = []

        def first_look_sees_nothing(self, keys):
            calls.append(1)
            return {} if len(calls) == 1 else real_get_many(self, keys)

        run_audit(spec, cache=cache)  # every answer cached live
        live = srv.chat_ok
        cache.get_many = first_look_sees_nothing.__get__(cache)
        out = fill(spec, cache)
        assert srv.uploads == 0 and out.requests == 0 and srv.chat_ok == live
