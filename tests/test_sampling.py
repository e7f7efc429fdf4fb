"""The shared sampling layer: cache first, one backend call per model, progress, stop."""

import pytest

from dbpa_core.backends import BackendError, GenerationParams, Sample
from dbpa_core.cache import Cache
from dbpa_core.sampling import Job, Progress, RunCancelled, Sampler, model_key, requests_for

MODEL = {"backend": "openai", "name": "fake", "base_url": "http://127.0.0.1:9/v1"}


class CountingBackend:
    """Answers every request with its prompt and index; records each generate call."""

    name = "fake"
    model = "fake"
    deterministic = False

    def __init__(self, drop: int = 0):
        self.calls: list[list] = []
        self.drop = drop

    def generate(self, requests, on_sample, *, should_stop=None):
        self.calls.append(list(requests))
        for r in requests[self.drop :]:
            if should_stop is not None and should_stop():
                return
            on_sample(r, Sample(f"{r.prompt}#{r.index}", 3, 5, "fake"))


def jobs(prompts, n, label=""):
    p = GenerationParams(temperature=0.7, max_tokens=10)
    return [Job(MODEL, r, label) for q in prompts for r in requests_for(q, n=n, seed=1, params=p)]


def test_all_prompts_go_to_the_backend_in_one_call_and_then_come_from_the_cache(tmp_path):
    backend = CountingBackend()
    cache = Cache(tmp_path)
    seen: list[Progress] = []
    s = Sampler(cache, backends={model_key(MODEL): backend}, progress=seen.append)
    recs = s.sample(jobs(["a", "b"], 3, label="arm"))
    assert [r.text for r in recs] == ["a#0", "a#1", "a#2", "b#0", "b#1", "b#2"]
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 6
    assert not any(r.cached for r in recs)
    assert seen[-1] == Progress("sampling", 6, 6, "arm")
    assert s.usage["calls"] == 6 and s.usage["completion_tokens"] == 30

    again = Sampler(cache, backends={model_key(MODEL): backend})
    recs2 = again.sample(jobs(["a", "b"], 4))  # one more sample per prompt: only 2 calls
    assert [r.cached for r in recs2] == [True, True, True, False] * 2
    assert len(backend.calls) == 2 and [r.index for r in backend.calls[1]] == [3, 3]


def test_duplicate_jobs_are_sampled_once(tmp_path):
    backend = CountingBackend()
    s = Sampler(Cache(tmp_path), backends={model_key(MODEL): backend})
    j = jobs(["a"], 2)
    recs = s.sample(j + j)
    assert len(recs) == 4 and len(backend.calls[0]) == 2


def test_missing_samples_are_an_error_that_says_run_again(tmp_path):
    s = Sampler(Cache(tmp_path), backends={model_key(MODEL): CountingBackend(drop=1)})
    with pytest.raises(BackendError, match="returned 2 of 3 samples; run again"):
        s.sample(jobs(["a"], 3))


def test_stop_keeps_what_arrived(tmp_path):
    backend = CountingBackend()
    got = []
    s = Sampler(
        Cache(tmp_path),
        backends={model_key(MODEL): backend},
        should_stop=lambda: len(got) >= 2,
        progress=lambda p: got.append(p) if p.done else None,
    )
    with pytest.raises(RunCancelled, match="cached"):
        s.sample(jobs(["a"], 5))
    resumed = Sampler(Cache(tmp_path), backends={model_key(MODEL): backend}).sample(jobs(["a"], 5))
    assert sum(r.cached for r in resumed) == 2


def test_keys_in_memory_by_server_do_not_clobber_each_other(tmp_path):
    """The dashboard keeps a typed key per variable *and server* (key_slot): two servers
    that both name OPENAI_API_KEY get their own key; a key under the bare variable name
    (what the CLI and library callers pass) still works, and a slot wins over it."""
    from dbpa_core.sampling import key_slot

    a = {
        "backend": "openai",
        "name": "m",
        "base_url": "http://127.0.0.1:8001/v1",
        "api_key_env": "OPENAI_API_KEY",
    }
    b = dict(a, base_url="http://127.0.0.1:8002/v1/")
    assert key_slot(a) == "OPENAI_API_KEY@http://127.0.0.1:8001/v1"
    assert key_slot(b) == "OPENAI_API_KEY@http://127.0.0.1:8002/v1"  # trailing / ignored
    assert key_slot(dict(a, name="other")) == key_slot(a)  # same server, one key
    s = Sampler(
        Cache(tmp_path, enabled=False),
        api_keys={key_slot(a): "sk-a", key_slot(b): "sk-b", "OPENAI_API_KEY": "sk-env"},
    )
    assert s.backend(a).settings.api_key() == "sk-a"
    assert s.backend(b).settings.api_key() == "sk-b"
    c = dict(a, base_url="http://127.0.0.1:8003/v1")
    assert s.backend(c).settings.api_key() == "sk-env"  # by variable name
    bare = {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:8004/v1"}
    assert (
        Sampler(Cache(tmp_path, enabled=False), api_keys={key_slot(bare): "sk-bare"})
        .backend(bare)
        .settings.api_key()
        == "sk-bare"
    )
