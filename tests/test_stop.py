"""Stop cancels what is in flight: every sampler made inside ``stop_when`` obeys it, a
server's requests in flight are abandoned (no more are sent), and the claims of a stopped
run are given up at once, so the next run never waits for it."""

import threading

import pytest

from dbpa_core.backends import GenerationParams, Sample
from dbpa_core.cache import Cache
from dbpa_core.sampling import Job, RunCancelled, Sampler, model_key, requests_for, stop_when

from .fake_openai import FakeOpenAI

MODEL = {"backend": "openai", "name": "fake-model", "base_url": "http://127.0.0.1:9/v1"}


class SlowBackend:
    """Answers one request, then waits (as a long decoding would) until stopped."""

    name = model = "slow"

    def __init__(self):
        self.polls = 0

    def generate(self, requests, on_sample, *, should_stop=None):
        on_sample(requests[0], Sample("first", 1, 1, "slow"))
        while not should_stop():
            self.polls += 1


def _jobs(model, n=4):
    params = GenerationParams(temperature=0.7, max_tokens=10)
    return [Job(model, r) for r in requests_for("Say hi", n=n, seed=0, params=params)]


def test_a_sampler_made_inside_stop_when_stops_and_gives_up_its_claims(tmp_path):
    cache = Cache(tmp_path)
    backend = SlowBackend()
    flag = threading.Event()
    with stop_when(flag.is_set):
        sampler = Sampler(
            cache, backends={model_key(MODEL): backend}, progress=lambda p: flag.set() if p.done else None
        )
    with pytest.raises(RunCancelled):
        sampler.sample(_jobs(MODEL))
    # nothing is held by the stopped run: the next one claims the rest at once
    assert all(cache.claim_holder(k) is None for k in _keys(cache))
    again = Sampler(cache, backends={model_key(MODEL): _Answering()}).sample(_jobs(MODEL))
    assert [r.cached for r in again] == [True, False, False, False]


class _Answering:
    name = model = "answering"

    def generate(self, requests, on_sample, *, should_stop=None):
        for r in requests:
            on_sample(r, Sample(f"answer {r.index}", 1, 1, "answering"))


def _keys(cache):
    from dbpa_core.sampling import backend_identity, sample_key

    return [sample_key(backend_identity(MODEL), j.request) for j in _jobs(MODEL)]


def test_no_stop_when_outside_the_block(tmp_path):
    with stop_when(lambda: True):
        pass
    out = Sampler(Cache(tmp_path), backends={model_key(MODEL): _Answering()}).sample(_jobs(MODEL))
    assert len(out) == 4


def test_a_servers_requests_in_flight_are_abandoned_on_stop(tmp_path):
    """The server holds every request for ten minutes: the run returns on Stop without
    an answer (requests abandoned), and sends no request after it."""
    with FakeOpenAI(fault="slow", slow_seconds=600) as srv:
        model = dict(MODEL, base_url=srv.base_url)
        sent = threading.Event()
        stop = threading.Event()

        def should_stop():
            if srv.requests and not stop.is_set():
                sent.set()
                stop.set()
            return stop.is_set()

        sampler = Sampler(Cache(tmp_path), should_stop=should_stop)
        with pytest.raises(RunCancelled):
            sampler.sample(_jobs(model, n=12))
        assert sent.is_set() and srv.chat_ok == 0  # abandoned, not waited for
        assert srv.requests <= 8  # the first wave at most: none after
