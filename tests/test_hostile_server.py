"""A hostile OpenAI-compatible server: the audit never hangs, never caches garbage,
and says in one short line what went wrong (issue 7)."""

import dataclasses
import threading
import time

import pytest

from dbpa_core.audit import AuditCancelled, run_audit
from dbpa_core.backends import BackendError, ServerUnavailableError
from dbpa_core.cache import Cache
from dbpa_core.spec import parse_spec

from .fake_openai import FakeOpenAI, fake_text

KEY = "sk-test-hostile-0123456789"
BASE = "John has these features: age 70"
PERTS = {
    "ahmed": "Ahmed has these features: age 70",
    "comedian": "Act as a comedian. John has these features: age 70",
}


def spec_for(
    srv,
    *,
    samples=3,
    model_extra="",
    embedder="openai",
    embed_extra="",
    concurrency=2,
    max_retries=2,
    timeout=5.0,
    base_url=None,
):
    url = base_url or srv.base_url
    emb = (
        f"""embedder:
  backend: openai
  name: fake-embed
  base_url: {url}
  api_key_env: DBPA_TEST_KEY
  max_retries: {max_retries}
  timeout: {timeout}
{embed_extra}"""
        if embedder == "openai"
        else f"embedder: {{backend: {embedder}}}"
    )
    return parse_spec(
        f"""
model:
  backend: openai
  name: fake-model
  base_url: {url}
  api_key_env: DBPA_TEST_KEY
  concurrency: {concurrency}
  max_retries: {max_retries}
  timeout: {timeout}
{model_extra}
{emb}
samples: {samples}
permutations: 200
base: {{prompt: "{BASE}"}}
perturbations:
  - {{name: ahmed, prompt: "{PERTS["ahmed"]}", role: control}}
  - {{name: comedian, prompt: "{PERTS["comedian"]}", role: target}}
""",
        source="hostile.yaml",
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
    kw.setdefault("api_key", KEY)
    return FakeOpenAI(models=("fake-model", "fake-embed"), **kw)


def good_texts(res) -> bool:
    """Every response is one the fake server really generated (no garbage)."""
    words = set(" ".join(fake_text(p, s) for p in (BASE, *PERTS.values()) for s in range(50)).split())
    return all(
        isinstance(t, str) and len(t.split()) >= 8 and set(t.split()) <= words
        for a in (res.base, *res.arms)
        for t in a.texts
    )


# --------------------------------------------------------------------------- hangs
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kw", [{"fault": "few_choices"}, {"support_n": False}, {"faults": {1: "refuse_n"}}])
def test_n_per_request_never_deadlocks_even_with_concurrency_1(cache, kw):
    """Follow-up requests for missing choices must not wait for the slot their parent holds."""
    with server(**kw) as srv:
        t = time.monotonic()
        res = run_audit(
            spec_for(srv, samples=4, concurrency=1, embedder="rouge1", model_extra="  n_per_request: 3"),
            cache=cache,
        )
        assert time.monotonic() - t < 45
        seen = list(srv.delivered)
    assert len(seen) == len(set(seen)) == 12 and res.usage["calls"] == 12
    assert all(len(a.texts) == 4 for a in (res.base, *res.arms))


@pytest.mark.timeout(60)
def test_retry_after_is_capped_and_shown_on_the_progress_line(cache):
    seen = []
    with server(faults={1: "retry_after_long"}) as srv:
        t = time.monotonic()
        run_audit(
            spec_for(srv, samples=2, concurrency=1, embedder="rouge1", model_extra="  max_retry_wait: 0.5"),
            cache=cache,
            progress=lambda p: seen.append(p.detail),
        )
        took = time.monotonic() - t
    assert took < 30  # not 3600 s
    assert any("429" in d and "retry in 0.5 s" in d for d in seen), seen


def test_retry_wait_cap_defaults_to_60_seconds():
    from dbpa_core.backends.openai_compat import OpenAIClientSettings

    assert OpenAIClientSettings().max_retry_wait == 60.0
    s = parse_spec(
        "model: {backend: openai, name: m, max_retry_wait: 5}\nbase: hi\nperturbations: [{prompt: ho}]"
    )
    assert s.model["max_retry_wait"] == 5


def test_retries_back_off_exponentially_with_jitter(cache, monkeypatch):
    """Without Retry-After the n-th retry waits 0.5 * 2**n s times a random 0.5-1 (the test
    suite shrinks the base: here the product's own is put back and the pauses are recorded,
    not waited)."""
    from dbpa_core.backends import openai_compat

    assert openai_compat.OpenAIClientSettings(backoff_base=0.5).backoff_base == 0.5
    monkeypatch.setattr(openai_compat, "BACKOFF_BASE", 0.5)
    assert openai_compat.OpenAIClientSettings().backoff_base == 0.5
    pauses = []

    async def record(seconds, should_stop):
        pauses.append(seconds)

    monkeypatch.setattr(openai_compat, "_sleep", record)
    with server(faults={1: "500", 2: "500", 3: "500"}) as srv:
        run_audit(spec_for(srv, samples=2, concurrency=1, embedder="rouge1", max_retries=3), cache=cache)
    assert len(pauses) == 3
    for n, pause in enumerate(pauses):
        assert 0.5 * 2**n * 0.5 <= pause <= 0.5 * 2**n, pauses


@pytest.mark.timeout(60)
def test_stop_interrupts_a_long_retry_wait(cache):
    """Stop is pressed once the audit waits to retry (the progress line says so): the wait
    of an hour ends at once. Without the check during the wait, the timeout fails it."""
    waiting = threading.Event()
    with server(fault="retry_after_long") as srv:
        t0 = time.monotonic()
        with pytest.raises(AuditCancelled):
            run_audit(
                spec_for(
                    srv, samples=2, concurrency=1, embedder="rouge1", model_extra="  max_retry_wait: 3600"
                ),
                cache=cache,
                progress=lambda p: "retry in" in (p.detail or "") and waiting.set(),
                should_stop=waiting.is_set,
            )
        took = time.monotonic() - t0
    assert waiting.is_set()  # stopped during the wait, not before the first answer
    assert took < 30  # not 3600 s


@pytest.mark.timeout(60)
def test_junk_retry_after_is_retried_not_a_traceback(cache):
    with server(faults={1: "retry_after_junk", 2: "retry_after_junk"}) as srv:
        res = run_audit(spec_for(srv, samples=2, concurrency=1, embedder="rouge1"), cache=cache)
    assert res.usage["calls"] == 6


@pytest.mark.timeout(60)
def test_a_trickling_server_hits_the_total_deadline(cache):
    """Every read is quick, so a per-read timeout never fires; the request deadline does."""
    with server(fault="trickle", trickle_seconds=0.05) as srv:
        with pytest.raises(ServerUnavailableError, match=r"timed out.*1(\.0)? s") as ei:
            run_audit(
                spec_for(srv, samples=2, concurrency=1, max_retries=1, timeout=1.0, embedder="rouge1"),
                cache=cache,
            )
    # each read is quick and the whole answer trickles for minutes: only the request's
    # deadline (1 s, named in the message) can end it this way
    assert "Cannot reach" not in str(ei.value) and "running" not in str(ei.value)
    assert cache.count() == 0


@pytest.mark.timeout(60)
def test_a_hung_request_says_timed_out_not_cannot_reach(cache):
    with server(fault="slow", slow_seconds=4.0) as srv:
        with pytest.raises(ServerUnavailableError, match="timed out") as ei:
            run_audit(
                spec_for(srv, samples=2, concurrency=1, max_retries=1, timeout=0.5, embedder="rouge1"),
                cache=cache,
            )
    assert "Cannot reach" not in str(ei.value)


# --------------------------------------------------------------------------- garbage
CHAT_GARBAGE = [
    "no_message",
    "nonstring_content",
    "empty_content",
    "choices_str",
    "no_choices",
    "junk",
    "error_200",
    "malformed",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", CHAT_GARBAGE)
def test_a_malformed_chat_answer_is_retried_and_never_cached(cache, fault):
    with server(faults={1: fault, 4: fault}) as srv:
        res = run_audit(spec_for(srv, samples=2, concurrency=1, embedder="rouge1"), cache=cache)
    assert good_texts(res)
    assert res.usage["calls"] == 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", CHAT_GARBAGE)
def test_persistent_chat_garbage_fails_short_and_a_later_run_asks_again(cache, fault):
    # max_retries 1: the first request is tried twice, both garbage; then the server is fixed
    with server(faults={1: fault, 2: fault}) as srv:
        with pytest.raises(ServerUnavailableError) as ei:
            run_audit(spec_for(srv, samples=2, concurrency=1, max_retries=1, embedder="rouge1"), cache=cache)
        msg = str(ei.value)
        assert "malformed" in msg and "\n" not in msg and len(msg) < 400, msg
        assert cache.count() == 0  # nothing stored
        res = run_audit(spec_for(srv, samples=2, embedder="rouge1"), cache=cache)
        assert srv.requests == 2 + 6  # the fixed server is asked for every sample again
    assert good_texts(res)


EMBED_GARBAGE = ["nan_embedding", "zero_embedding", "uneven_embedding", "few_embeddings"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", EMBED_GARBAGE)
def test_malformed_embeddings_are_retried_and_never_cached(cache, fault):
    # requests 1-6 are the chat completions (concurrency 1); 7 is the first embedding batch
    with server(faults={7: fault}) as srv:
        res = run_audit(spec_for(srv, samples=2, concurrency=1), cache=cache)
        assert srv.embedding_ok == 1 and srv.requests == 8  # the bad batch, then a good one
    assert res.usage["embeddings_computed"] == 6
    assert all(p.p_value == p.p_value for p in res.perturbations)  # no NaN


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", EMBED_GARBAGE)
def test_persistent_embedding_garbage_fails_short_and_is_asked_again(cache, fault):
    with server(faults={7: fault, 8: fault}) as srv:
        with pytest.raises(ServerUnavailableError, match="malformed"):
            run_audit(spec_for(srv, samples=2, concurrency=1, max_retries=1), cache=cache)
        chat = srv.chat_ok
        res = run_audit(spec_for(srv, samples=2), cache=cache)
        assert srv.chat_ok == chat  # the samples were good and cached
        assert srv.embedding_ok == 1  # the embeddings were not: asked again
    assert res.usage["embeddings_computed"] == 6


@pytest.mark.timeout(60)
def test_a_huge_answer_is_refused_before_it_is_read(cache):
    with server(fault="huge", huge_bytes=64 * 1024**2) as srv:
        spec = spec_for(srv, samples=2, concurrency=1, embedder="rouge1", model_extra="  max_response_mb: 2")
        # max_tokens large enough that max_response_mb, not max_tokens, is the tighter cap
        spec = dataclasses.replace(spec, max_tokens=100_000)
        with pytest.raises(BackendError, match=r"larger than 2 MB.*max_response_mb"):
            run_audit(spec, cache=cache)
        srv.wait_idle()  # the server has stopped writing: the client hung up
        # 64 MB cannot fit in the sockets' buffers: had the client read on, it would be sent whole
        assert srv.huge_sent_whole == 0
    assert cache.count() == 0


def test_response_cap_defaults():
    from dbpa_core.backends.openai_compat import OpenAIClientSettings

    assert OpenAIClientSettings().max_response_bytes == 8 * 1024**2


@pytest.mark.timeout(60)
def test_server_text_is_stripped_of_control_characters(cache):
    with server(fault="ansi") as srv:
        with pytest.raises(ServerUnavailableError) as ei:
            run_audit(spec_for(srv, samples=2, concurrency=1, max_retries=0, embedder="rouge1"), cache=cache)
    msg = str(ei.value)
    assert "boom" in msg
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in msg), repr(msg)


@pytest.mark.timeout(60)
def test_credentials_in_base_url_are_never_echoed(cache, tmp_path):
    with server(api_key=None) as srv:
        url = srv.base_url.replace("http://", "http://alice:hunter2@")
        res = run_audit(spec_for(srv, samples=2, embedder="rouge1", base_url=url), cache=cache)
        res.write(tmp_path / "out")
    for f in (tmp_path / "out").iterdir():
        assert "hunter2" not in f.read_text(), f
    # and in error messages: the server is gone
    with pytest.raises(ServerUnavailableError) as ei:
        run_audit(
            spec_for(srv, samples=2, embedder="rouge1", base_url=url, max_retries=0),
            cache=Cache(tmp_path / "c2"),
        )
    assert "hunter2" not in str(ei.value) and "alice" not in str(ei.value)


@pytest.mark.timeout(60)
def test_every_sample_paid_once_under_mixed_faults(cache):
    faults = {
        2: "few_choices",
        3: "no_message",
        5: "retry_after_junk",
        6: "choices_str",
        8: "refuse_n",
        9: "500",
    }
    with server(faults=faults) as srv:
        # faults are by the server's request count, and two tasks share it: a task may meet
        # all six in a row, so it may retry six times (no run depends on how they interleave)
        res = run_audit(
            spec_for(
                srv,
                samples=4,
                concurrency=2,
                embedder="rouge1",
                max_retries=6,
                model_extra="  n_per_request: 2",
            ),
            cache=cache,
        )
        seen = list(srv.delivered)
    assert len(seen) == len(set(seen)) == 12
    assert good_texts(res)


def test_threads_are_not_left_behind(cache):
    before = threading.active_count()
    with server(faults={1: "few_choices"}) as srv:
        run_audit(spec_for(srv, samples=2, embedder="rouge1", model_extra="  n_per_request: 2"), cache=cache)
    time.sleep(0.2)
    assert threading.active_count() <= before + 1
