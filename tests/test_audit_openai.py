"""The audit runner over real HTTP (openai client) against a local faulty server."""

from pathlib import Path

import pytest

from dbpa_core.audit import AuditCancelled, run_audit
from dbpa_core.backends import (
    AuthError,
    ModelNotFoundError,
    PromptTooLongError,
    ServerUnavailableError,
)
from dbpa_core.cache import Cache
from dbpa_core.spec import parse_spec

from .fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789abcdef"


def spec_for(
    server, *, samples=5, extra_model="", perts=None, embed_model="fake-embed", concurrency=4, timeout=60.0
):
    # a generous client timeout: on a busy machine a 1 s one ran out on good answers too, which
    # were then asked again (and counted twice by the server); only the fault test wants it short
    perts = (
        perts
        or """
  - {name: name-change, prompt: "Ahmed has these features: age 70", role: control}
  - {name: comedian, prompt: "Act as a comedian. John has these features: age 70", role: target}
"""
    )
    return parse_spec(
        f"""
model:
  backend: openai
  name: fake-model
  base_url: {server.base_url}
  api_key_env: DBPA_TEST_KEY
  concurrency: {concurrency}
  max_retries: 6
  timeout: {timeout}
{extra_model}
embedder:
  backend: openai
  name: {embed_model}
  base_url: {server.base_url}
  api_key_env: DBPA_TEST_KEY
samples: {samples}
temperature: 0.8
max_tokens: 50
permutations: 500
seed: 0
base:
  prompt: "John has these features: age 70"
perturbations:{perts}
""",
        source="test.yaml",
    )


@pytest.fixture(autouse=True)
def key_env(monkeypatch):
    monkeypatch.setenv("DBPA_TEST_KEY", KEY)


@pytest.fixture
def cache(tmp_path):
    c = Cache(tmp_path / "cache")
    yield c
    c.close()


def server(**kw):
    return FakeOpenAI(api_key=KEY, models=("fake-model", "fake-embed"), **kw)


def test_survives_faults_and_every_sample_arrives_once(cache, tmp_path):
    faults = {2: "429", 3: "500", 5: "slow", 7: "malformed", 8: "500", 11: "429"}
    # by the server's request count, shared by the client's tasks: one task may meet all six
    # in a row, and may retry six times (max_retries), so no run depends on the interleaving
    # the slow answer is held until the client has given up and asked again (an event, not a
    # race between two clocks); the client's timeout is the one short deadline, the path tested
    with server(faults=faults, slow_seconds=60.0, slow_until_retry=True) as srv:
        res = run_audit(spec_for(srv, timeout=3.0), cache=cache)
        delivered = list(srv.delivered)
    # 3 arms x 5 samples; each (prompt, seed) delivered exactly once... except that the
    # 'slow' request timed out on our side while the server still finished it.
    seen = [(p, s) for p, s, _ in delivered]
    assert len(set(seen)) == 15
    assert len(seen) <= 16
    assert res.usage["calls"] == 15
    assert len(res.base.texts) == 5 and all(len(a.texts) == 5 for a in res.arms)
    names = [p.name for p in res.perturbations]
    assert names == ["name-change", "comedian"]
    comedian = res.perturbations[1]
    assert comedian.p_value < 0.05 and comedian.significant
    assert res.roc is not None and res.roc.auc == 1.0
    assert res.usage["prompt_tokens"] > 0 and res.usage["completion_tokens"] == 15 * 12


def test_rerun_makes_zero_calls(cache):
    with server() as srv:
        first = run_audit(spec_for(srv), cache=cache)
        n_after_first = srv.requests
        second = run_audit(spec_for(srv), cache=cache)
        assert srv.requests == n_after_first
    assert second.usage["calls"] == 0 and second.usage["cached_samples"] == 15
    assert second.usage["embeddings_computed"] == 0
    assert [p.p_value for p in first.perturbations] == [p.p_value for p in second.perturbations]
    assert first.base.texts == second.base.texts


def test_more_samples_draw_only_the_new_ones(cache):
    with server() as srv:
        run_audit(spec_for(srv, samples=4), cache=cache)
        before = srv.chat_ok
        res = run_audit(spec_for(srv, samples=6), cache=cache)
        assert srv.chat_ok - before == 3 * 2
    assert res.usage["cached_samples"] == 12


def test_stopped_run_resumes_with_only_missing_calls(cache):
    with server() as srv:
        spec = spec_for(srv)
        got = []

        def progress(p):
            if p.stage == "sampling":
                got.append(p.done)

        with pytest.raises(AuditCancelled, match="cached"):
            run_audit(spec, cache=cache, progress=progress, should_stop=lambda: bool(got) and max(got) >= 7)
        # the stopped run cancelled the calls it had in flight: the server may still be
        # answering them (answers nobody reads, so they are not cached): wait for that
        srv.wait_idle()
        done_first = srv.chat_ok
        assert 7 <= done_first <= 15
        res = run_audit(spec, cache=cache)
        cached = res.usage["cached_samples"]
        assert 7 <= cached < 15
        # only the missing ones: the samples not cached, each asked once
        assert res.usage["calls"] == 15 - cached
        assert srv.chat_ok - done_first == 15 - cached
        assert len({(p, s) for p, s, _ in srv.delivered}) == 15


def test_key_never_written(cache, tmp_path):
    with server() as srv:
        res = run_audit(spec_for(srv), cache=cache)
        assert all(h == f"Bearer {KEY}" for h in srv.auth_headers)
    res.write(tmp_path / "out")
    cache.close()
    for folder in (tmp_path / "cache", tmp_path / "out"):
        for path in Path(folder).rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in res.to_json(arrays=True)


def test_retry_after_is_honoured(cache):
    with server(faults={1: "429"}, retry_after="0.6") as srv:
        run_audit(
            spec_for(
                srv,
                samples=2,
                concurrency=1,
                perts="""
  - {name: p, prompt: "other prompt"}
""",
            ),
            cache=cache,
        )
        gap = srv.request_times[1] - srv.request_times[0]
    assert gap >= 0.55


def test_server_down_gives_clear_error(cache):
    with FakeOpenAI() as srv:
        url = srv.base_url
    # the server is gone: nothing listens on that port any more
    spec = parse_spec(f"""
model: {{backend: openai, name: fake-model, base_url: "{url}", max_retries: 2, timeout: 0.5}}
samples: 3
base: {{prompt: hi}}
perturbations: [{{name: p, prompt: ho}}]
""")
    # a refused connection reached no server: one quick second try, not max_retries
    with pytest.raises(
        ServerUnavailableError,
        match=r"Cannot reach http://127.0.0.1:\d+/v1 after 2 tries \(connection refused\)",
    ):
        run_audit(spec, cache=cache)


def test_persistent_500_gives_clear_error(cache):
    with server(faults={i: "500" for i in range(1, 100)}) as srv:
        spec = parse_spec(f"""
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", max_retries: 1,
         api_key_env: DBPA_TEST_KEY}}
samples: 2
base: {{prompt: hi}}
perturbations: [{{name: p, prompt: ho}}]
""")
        with pytest.raises(ServerUnavailableError, match=r"kept failing .* after 2 tries \(last: 500"):
            run_audit(spec, cache=cache)


def test_wrong_key_unknown_model_and_long_prompt(cache, monkeypatch):
    with server(max_prompt_chars=50) as srv:
        monkeypatch.setenv("DBPA_TEST_KEY", "sk-wrong")
        with pytest.raises(AuthError, match=r"rejected the API key \(401\).*\$DBPA_TEST_KEY"):
            run_audit(spec_for(srv), cache=cache)
        monkeypatch.setenv("DBPA_TEST_KEY", KEY)
        spec = parse_spec(f"""
model: {{backend: openai, name: no-such-model, base_url: "{srv.base_url}",
         api_key_env: DBPA_TEST_KEY}}
samples: 2
base: {{prompt: hi}}
perturbations: [{{name: p, prompt: ho}}]
""")
        with pytest.raises(ModelNotFoundError, match="does not know the model 'no-such-model'"):
            run_audit(spec, cache=cache)
        spec = parse_spec(f"""
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}",
         api_key_env: DBPA_TEST_KEY}}
samples: 2
base: {{prompt: "{"very long prompt " * 10}"}}
perturbations: [{{name: p, prompt: ho}}]
""")
        with pytest.raises(PromptTooLongError, match="too long"):
            run_audit(spec, cache=cache)


def test_missing_key_variable(cache, monkeypatch):
    monkeypatch.delenv("DBPA_TEST_KEY")
    with server() as srv:  # this server wants a key: its 401 names the unset variable
        with pytest.raises(AuthError, match=r"needs an API key \(401\).*DBPA_TEST_KEY is not set"):
            run_audit(spec_for(srv), cache=cache)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as open_srv:  # a keyless local server
        res = run_audit(spec_for(open_srv, samples=3), cache=cache)
    assert len(res.perturbations) == 2


def test_missing_key_for_openai_is_caught_before_any_call(monkeypatch, tmp_path):
    from dbpa_core.backends.openai_compat import OpenAIClientSettings

    monkeypatch.delenv("DBPA_TEST_KEY")
    s = OpenAIClientSettings(base_url="https://api.openai.com/v1", api_key_env="DBPA_TEST_KEY")
    with pytest.raises(AuthError, match="DBPA_TEST_KEY is not set"):
        s.api_key()


def test_key_given_in_memory(cache, monkeypatch):
    monkeypatch.delenv("DBPA_TEST_KEY")
    with server() as srv:
        res = run_audit(spec_for(srv, samples=3), cache=cache, api_keys={"DBPA_TEST_KEY": KEY})
    assert len(res.perturbations) == 2


def test_n_per_request(cache):
    with server() as srv:
        res = run_audit(spec_for(srv, samples=6, extra_model="  n_per_request: 3"), cache=cache)
        assert srv.chat_ok == 3 * 2  # 3 arms x 2 calls of n=3
        assert len(srv.delivered) == 18
    assert res.usage["calls"] == 18


def test_n_unsupported_falls_back_to_single_requests(cache):
    with server(support_n=False) as srv:
        res = run_audit(spec_for(srv, samples=4, extra_model="  n_per_request: 4"), cache=cache)
        assert len(srv.delivered) == 12
    assert all(len(a.texts) == 4 for a in (res.base, *res.arms))


def test_no_cache_repeats_calls(tmp_path):
    with server() as srv:
        off = Cache(tmp_path / "c", enabled=False)
        run_audit(spec_for(srv, samples=3), cache=off)
        run_audit(spec_for(srv, samples=3), cache=off)
        assert srv.chat_ok == 18
    assert not (tmp_path / "c").exists()


def test_embeddings_from_different_servers_are_cached_apart(cache):
    """The embedding cache key names the server, not just the model name."""
    with server() as a, server() as b:
        run_audit(spec_for(a, samples=3), cache=cache)
        assert a.embedding_ok > 0
        res = run_audit(spec_for(b, samples=3), cache=cache)
        # both servers return the same texts: only the host in the key keeps them apart
        assert b.embedding_ok > 0 and res.usage["embeddings_computed"] > 0
