"""Nothing silent, Stop keeps work (issue 12), at the sampling layer: a model that loads
gets its own progress line, a decoding backend's tokens reach the progress line with an
ETA, every finished sample is cached the moment it finishes, and the precision of a
local model is recorded."""

import time

import pytest

from dbpa_core.backends import GenerationParams, Sample
from dbpa_core.backends.decoding import local_precision
from dbpa_core.cache import Cache
from dbpa_core.sampling import (
    Job,
    Progress,
    RunCancelled,
    Sampler,
    _duration,
    model_key,
    requests_for,
)

LOCAL = {"backend": "local"}


class DecodingBackend:
    """Plays a local model: loads slowly once, draws tokens step by step for all samples
    at once, reports every step on ``on_tokens``, ends sample i after 2 + i steps, and
    polls ``should_stop`` before every step."""

    name = "local"
    model = "Fake-135M"
    precision = "bfloat16"
    deterministic = False

    def __init__(self, step_seconds=0.0):
        self.ready = False
        self.on_status = None
        self.on_tokens = None
        self.step_seconds = step_seconds
        self.steps = 0

    def prepare(self):
        self.on_status("converting the embedded model (once, ~40 s)")
        self.ready = True

    def generate(self, requests, on_sample, *, should_stop=None):
        live = {r: 0 for r in requests}
        drawn = 0
        while live:
            if should_stop is not None and should_stop():
                return
            time.sleep(self.step_seconds)
            self.steps += 1
            for r in list(live):
                live[r] += 1
                drawn += 1
                if live[r] >= 2 + r.index:
                    del live[r]
                    on_sample(r, Sample(f"{r.prompt} #{r.index}", 4, 2 + r.index, self.model))
            self.on_tokens(drawn, drawn + sum(2 + r.index - n for r, n in live.items()))


def _jobs(n=4, prompts=("a", "b")):
    p = GenerationParams(max_tokens=20)
    return [Job(LOCAL, r) for q in prompts for r in requests_for(q, n=n, seed=0, params=p)]


def test_loading_has_its_own_line_and_says_what_it_does(tmp_path):
    seen: list[Progress] = []
    s = Sampler(Cache(tmp_path), backends={model_key(LOCAL): DecodingBackend()}, progress=seen.append)
    s.sample(_jobs())
    loading = [p for p in seen if p.stage == "loading"]
    assert [p.done for p in loading] == [0, 0, 1]
    assert loading[0].detail == "loading Fake-135M (bfloat16)"
    assert loading[1].detail == "converting the embedded model (once, ~40 s)"
    assert loading[2].detail.startswith("Fake-135M (bfloat16) ready (")
    first_tokens = next(i for i, p in enumerate(seen) if p.tokens)
    assert seen.index(loading[-1]) < first_tokens  # loaded before the first token
    # a model already loaded says nothing about loading
    seen.clear()
    s.sample(_jobs(n=5))
    assert not [p for p in seen if p.stage == "loading"]


def test_tokens_are_counted_as_they_come_with_an_eta(tmp_path, monkeypatch):
    monkeypatch.setattr("dbpa_core.sampling.TOKEN_REPORT_EVERY", 0.0)
    seen: list[Progress] = []
    backend = DecodingBackend()
    s = Sampler(Cache(tmp_path), backends={model_key(LOCAL): backend}, progress=seen.append)
    s.sample(_jobs())
    ticks = [p for p in seen if p.stage == "sampling" and p.tokens]
    # a report before any sample finished: the line moves while answers are being written
    assert ticks[0].done == 0 and ticks[0].tokens == 8
    assert [p.tokens for p in ticks] == sorted(p.tokens for p in ticks)
    assert all(p.tokens_expected >= p.tokens for p in ticks)
    # no time left is guessed before two answers are complete; then it always is
    assert all((p.eta_s is None) == (p.done < 2) for p in ticks)
    assert all(p.eta_s >= 0 for p in ticks if p.eta_s is not None)
    assert ticks[0].tokens_expected == sum(2 + i for i in range(4)) * 2
    assert "8 tokens" in ticks[0].detail and "tokens/s" in ticks[0].detail
    assert "estimating the time left" in ticks[0].detail
    assert any("left" in p.detail and "estimating" not in p.detail for p in ticks)
    assert ticks[-1].done == 8 and ticks[-1].fraction == 1.0
    assert 0 < ticks[0].fraction < 1
    assert s.usage["precision"] == local_precision()  # of this machine's weights: part of the keys


def test_token_reports_are_throttled(tmp_path):
    seen: list[Progress] = []
    backend = DecodingBackend()
    s = Sampler(Cache(tmp_path), backends={model_key(LOCAL): backend}, progress=seen.append)
    s.sample(_jobs(n=30))
    ticks = [p for p in seen if p.stage == "sampling" and p.tokens and p.done == 0]
    assert backend.steps >= 30 and len(ticks) <= 2  # steps take microseconds here


def test_stop_during_decoding_keeps_each_finished_sample(tmp_path):
    """Stop is polled every step: a stop after the 4th step keeps the samples that had
    finished by then (each cached as it finished, not per batch) and nothing else."""
    backend = DecodingBackend()
    s = Sampler(Cache(tmp_path), backends={model_key(LOCAL): backend}, should_stop=lambda: backend.steps >= 4)
    with pytest.raises(RunCancelled, match="cached"):
        s.sample(_jobs())
    assert backend.steps == 4
    again = DecodingBackend()
    recs = Sampler(Cache(tmp_path), backends={model_key(LOCAL): again}).sample(_jobs())
    # samples 0, 1, 2 of each prompt end after 2, 3, 4 steps
    assert [r.cached for r in recs] == [True, True, True, False] * 2
    assert sum(r.cached for r in recs) == 6


def test_stop_returns_within_a_step(tmp_path):
    """The backend hears Stop before its next step: not one more step is drawn (without
    the poll, the 50 samples would run their 51 steps)."""
    backend = DecodingBackend()
    s = Sampler(Cache(tmp_path), backends={model_key(LOCAL): backend}, should_stop=lambda: backend.steps >= 3)
    with pytest.raises(RunCancelled):
        s.sample(_jobs(n=50))
    assert backend.steps == 3


def test_precision_is_recorded_for_cached_runs_too(tmp_path):
    from dbpa_core.backends.decoding import local_precision

    backend = DecodingBackend()
    Sampler(Cache(tmp_path), backends={model_key(LOCAL): backend}).sample(_jobs())
    s = Sampler(Cache(tmp_path))  # no backend needed: all cached
    recs = s.sample(_jobs())
    assert all(r.cached for r in recs) and s.usage["precision"] == local_precision()
    openai = {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1"}
    s2 = Sampler(Cache(tmp_path), backends={model_key(openai): DecodingBackend()})
    s2.sample([Job(openai, j.request) for j in _jobs(n=2)])
    assert "precision" not in s2.usage


@pytest.mark.parametrize(
    "seconds,text",
    [(0, "0 s"), (42.4, "42 s"), (60, "1 min"), (100, "1 min 40 s"), (119, "2 min"), (3725, "1 h 2 min")],
)
def test_durations_read_like_an_estimate(seconds, text):
    assert _duration(seconds) == text


def test_models_sampled_one_after_the_other_add_up_on_one_line(tmp_path, monkeypatch):
    """The Model comparison page samples three local models, one backend call each: the
    token count keeps growing across them and the first estimate already counts the
    models still to come, so the bar never jumps back."""
    monkeypatch.setattr("dbpa_core.sampling.TOKEN_REPORT_EVERY", 0.0)
    hot = {"backend": "local", "temperature": 1.2}
    seen: list[Progress] = []
    s = Sampler(
        Cache(tmp_path),
        progress=seen.append,
        backends={model_key(LOCAL): DecodingBackend(), model_key(hot): DecodingBackend()},
    )
    jobs = [
        Job(m, r)
        for m in (LOCAL, hot)
        for r in requests_for(
            "a", n=3, seed=0, params=GenerationParams(temperature=m.get("temperature", 0.8), max_tokens=20)
        )
    ]
    s.sample(jobs)
    ticks = [t for t in seen if t.stage == "sampling" and t.tokens]
    assert [t.tokens for t in ticks] == sorted(t.tokens for t in ticks)
    assert ticks[-1].tokens == 2 * (2 + 3 + 4)
    assert ticks[0].tokens_expected == (2 + 3 + 4) + 3 * 20  # the second model at its cap
    fractions = [t.fraction for t in ticks]
    assert fractions[-1] == 1.0 and min(fractions[len(fractions) // 2 :]) >= 0.4


def test_the_time_left_waits_for_answers_and_forgets_a_slow_start():
    """The issue's '1 h 45 min left' on a 6-minute run: nothing is said before enough
    answers are complete, and a slow first minute (loading, prompts) leaves the rate once
    it is more than RATE_WINDOW seconds old."""
    from dbpa_core.sampling import RATE_WINDOW, _TokenMeter, eta_ready

    now = [0.0]
    meter = _TokenMeter(clock=lambda: now[0])
    meter.start_group(later=0)
    total, cap = 180, 120
    now[0] = 60.0  # a slow start: 100 tokens in a minute
    meter.update(100, total * cap)
    first = meter.report("sampling", 0, total)
    assert first.eta_s is None and "estimating the time left" in first.detail
    tokens, done = 100, 0
    for _ in range(40):  # then 200 tokens/s
        now[0] += 1.0
        tokens += 200
        done += 1
        meter.update(tokens, tokens + (total - done) * 60)
        p = meter.report("sampling", done, total)
    assert eta_ready(done, total) and p.eta_s is not None
    assert now[0] - 60.0 > RATE_WINDOW
    assert p.eta_s == pytest.approx((total - done) * 60 / 200, rel=0.01)
    assert "200 tokens/s" in p.detail


@pytest.mark.parametrize(
    ("done", "total", "ready"),
    [(0, 180, False), (8, 180, False), (9, 180, True), (1, 20, False), (2, 20, True), (1, 1, True)],
)
def test_the_time_left_needs_five_percent_of_the_answers(done, total, ready):
    from dbpa_core.sampling import eta_ready

    assert eta_ready(done, total) is ready
