"""Reachability before the run (the smallest p each test can reach, controls that cannot
fail) and the measured duration of a local model (dbpa estimate, dbpa scan)."""

from __future__ import annotations

import math
import time

import pytest

from dbpa_core.backends import GenerationParams, Sample
from dbpa_core.cache import Cache
from dbpa_core.checks import exact_test
from dbpa_core.cli import main
from dbpa_core.reach import reachability, smallest_mean_p
from dbpa_core.sampling import Job, Sampler, model_key, requests_for
from dbpa_core.spec import parse_spec
from dbpa_core.timings import duration_estimate, measured_timing, record_timing

CONTROLS = "".join(f"  - {{name: c{i}, prefix: 'Note {i}.', role: control}}\n" for i in range(8))


def spec_text(k: int, extra: str = "") -> str:
    return f"samples: {k}\nbase: Advice on cholesterol?\n{extra}perturbations:\n{CONTROLS}"


def test_a_control_that_cannot_reject_is_not_testable():
    # k = 5, jsd (base null): 2 / C(10, 5) = 0.00794; Holm over 8 tests: 0.0635 > 0.05
    r = reachability(parse_spec(spec_text(5)))
    assert r.rows[0].smallest_p == pytest.approx(2 / math.comb(10, 5))
    assert r.rows[0].smallest_adjusted_p == pytest.approx(8 * 2 / math.comb(10, 5))
    assert not r.testable and r.untestable_controls == tuple(f"c{i}" for i in range(8))
    assert r.control_status("c0") == "not testable at k = 5"
    assert "not testable at k = 5" in r.lines()[-1] and "Use at least k = 6" in r.lines()[-1]
    ok = reachability(parse_spec(spec_text(10)))
    assert ok.testable and ok.untestable_controls == () and ok.control_status("c0") is None


def test_check_and_suite_rows():
    text = spec_text(5, "checks: [{name: r, refusal: true}, {name: n, words: true}]\n")
    r = reachability(parse_spec(text))
    check = r.rows[1]
    assert check.smallest_p == exact_test(0, 5, 5, 5)[0] and check.family == 16
    assert check.smallest_adjusted_p == pytest.approx(16 * check.smallest_p)
    assert smallest_mean_p(5, 5, 2000) == pytest.approx(2 / 252)
    assert smallest_mean_p(20, 20, 999) == pytest.approx(2 / 1000)
    suite = parse_spec(
        "samples: 5\ncases: [{w: a}, {w: b}, {w: c}]\nbase: 'say {w}'\n"
        "perturbations: [{name: p, prefix: x, role: control}]\nchecks: [{name: r, refusal: true}]\n"
    )
    rows = {row.what.split(" (")[0]: row for row in reachability(suite).rows}
    assert rows["each pooled verdict"].family == 1
    assert rows["each answer check"].family == 3
    assert rows["each pooled check"].smallest_p == pytest.approx(2 / math.comb(10, 5) ** 3)
    assert reachability(suite).gate == "pooled verdict (perturbation over the cases)"


class LocalFake:
    """Stands in for the embedded model: 20 ms per answer."""

    name = model = "smollm2"
    deterministic = False

    def generate(self, requests, on_sample, *, should_stop=None):
        for r in requests:
            time.sleep(0.02)
            on_sample(r, Sample("an answer", 3, 5, "smollm2"))


def test_a_local_model_is_timed_on_each_run_and_estimated_from_it(tmp_path):
    local = {"backend": "local"}
    assert "not known yet" in duration_estimate(local, 10, 300)
    assert duration_estimate({"backend": "openai", "name": "gpt"}, 10, 300) is None
    params = GenerationParams(temperature=0.7, max_tokens=100)
    jobs = [Job(local, r, "base") for r in requests_for("hi", n=6, seed=1, params=params)]
    Sampler(Cache(tmp_path / "c"), backends={model_key(local): LocalFake()}).sample(jobs)
    from dbpa_core.backends.decoding import local_precision

    t = measured_timing(local, local_precision())
    assert t is not None and t.calls == 6 and t.max_tokens == 100 and 0.02 <= t.per_call < 1
    assert t.estimate(10, 200) == pytest.approx(10 * t.per_call * 2)
    line = duration_estimate(local, 100, 100, local_precision())
    assert line.startswith("duration: about") and "for 100 answers" in line
    assert duration_estimate(local, 0, 100).endswith("every answer is cached)")
    assert not record_timing(local, seconds=1.0, calls=2, max_tokens=10)  # too few to tell


def test_estimate_prints_reachability_and_duration(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(spec_text(5))
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(tmp_path / "s.yaml")]) == 0
    out = capsys.readouterr().out
    assert "duration: not known yet for this local model" in out
    assert "reachability" in out and "not testable at k = 5" in out


def two_untestable_controls(base_url: str):
    """An audit at k = 3 with two controls on a fake server: 2 / C(6, 3) = 0.1 > α, so
    neither control can fail."""
    return parse_spec(
        f"""model: {{backend: openai, name: fake-model, base_url: "{base_url}", max_retries: 0}}
embedder: {{backend: openai, name: fake-embed, base_url: "{base_url}"}}
samples: 3
base: Advice on cholesterol?
perturbations:
  - {{name: a, prefix: "Note.", role: control}}
  - {{name: b, prefix: "Hello.", role: control}}
"""
    )


def test_the_report_says_not_testable_instead_of_passed(tmp_path):
    from dbpa_core.audit import run_audit
    from dbpa_core.runs import as_run

    from .fake_openai import FakeOpenAI

    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        spec = two_untestable_controls(srv.base_url)
        result = run_audit(spec, cache=Cache(tmp_path / "c"))
    run = as_run({"job": result}, title="t")
    assert {v.flag for v in run.verdicts() if getattr(v, "gate", "") == "control"} == {"untestable"}
    assert "not testable" in run.headline()


def test_sequential_sampling_reads_the_looks_and_their_weights():
    # fixed k = 7: 2 / C(14, 7) = 5.8e-4, Holm over 8: 4.7e-3, reachable. Sequential, looks
    # 3 and 7 weighted 0.95 and 0.05: min(2 / C(6, 3) / 0.95, 2 / C(14, 7) / 0.05) = 0.0117,
    # Holm over 8: 0.093 > .05: the same k cannot be significant, so the controls cannot fail
    fixed = reachability(parse_spec(spec_text(7)))
    assert fixed.testable
    seq = reachability(
        parse_spec(spec_text(7, "sequential_sampling: {looks: [3, 7], weights: [0.95, 0.05]}\n"))
    )
    row = seq.rows[0]
    assert row.smallest_p == pytest.approx(2 / math.comb(14, 7) / 0.05)
    assert row.smallest_adjusted_p == pytest.approx(8 * 2 / math.comb(14, 7) / 0.05)
    assert "sequential p, at k = 7 of looks 3, 7" in row.text
    assert not seq.testable and seq.untestable_controls == tuple(f"c{i}" for i in range(8))
    # the default plan at 40: the first look (B raised to 6,399 for 0.25 · .05/8) gives the floor
    dflt = reachability(parse_spec(spec_text(40, "sequential_sampling: true\n"))).rows[0]
    assert dflt.smallest_p == pytest.approx(1 / 6400 / 0.25)
    assert "at k = 12 of looks 12, 18, 40" in dflt.test
