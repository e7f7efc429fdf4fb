"""Fast local decoding (dbpa_core.backends.decoding) on a tiny random Llama: the same
forward pass as transformers, per-sample draws, a sample identical alone and in any
batch, continuous batching, stop and token progress. The embedded SmolLM2 itself is
tested in test_local_models.py (slow)."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dbpa_core.backends import BackendError  # noqa: E402
from dbpa_core.backends import decoding as dec  # noqa: E402
from dbpa_core.backends.decoding import (  # noqa: E402
    LlamaDecoder,
    ThreadTuner,
    draw_tokens,
    expected_tokens,
    fast_path_supported,
    generate_continuous,
    local_precision,
    splitmix_uniforms,
)

# the tests that build and decode the tiny Llama (about 20 of the file's 30, most of its
# five minutes on 2 cores): the slow tier, which `make test` runs and `make test-fast` leaves out
SLOW = pytest.mark.slow

VOCAB = 300  # not a multiple of the inverse CDF's block: its padding is exercised


@pytest.fixture(autouse=True, scope="module")
def one_row_policy_per_kind_of_product():
    """Every tiny Llama's first call probes the machine's row policy (dec.row_policy: a few
    hundred products on one thread and on torch's count, 10-40 s on a busy 2-core machine
    where the decoding itself takes a second or two). What it finds depends on the product
    function, the weights' shapes and dtype, the ranges and the thread counts, never on the
    weights' values: here it is probed once per such kind and reused by the next model. A
    product function the test made itself (a patched or rounding-dependent one) is another
    key, so the tests of row_policy and of a refused prepack probe for real."""
    real = dec.row_policy
    found = {}

    def kind(w):
        return None if w is None else (tuple(w.shape), w.dtype)

    def memo(linear, weights, *, head=None, ranges=dec.ROW_RANGES, threads=None):
        key = (
            linear,
            tuple(kind(w) for w in weights),
            kind(head),
            tuple(ranges),
            tuple(threads) if threads else None,
            torch.get_num_threads(),
        )
        if key not in found:
            found[key] = real(linear, weights, head=head, ranges=ranges, threads=threads)
        return found[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dec, "row_policy", memo)
        yield


def tiny_llama(dtype=torch.float32, seed=0):
    # SmolLM2's widths (576 wide, 9 heads of 64 sharing 3 key/value heads), 2 layers: the
    # matrix kernels see the shapes they see on the real model
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=2,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger logits than the init's: varied, not uniform, draws
        model.lm_head.weight.mul_(2.0)
    return model.to(dtype)


def splitmix64_reference(seed: int, n: int) -> list[float]:
    """The textbook SplitMix64 (Steele et al. 2014): state += γ, then mix."""
    m = (1 << 64) - 1
    state, out = seed & m, []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & m
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        z ^= z >> 31
        out.append((z >> 11) * 2.0**-53)
    return out


# --------------------------------------------------------------------------- draws
def test_uniforms_are_the_splitmix64_stream_of_each_seed():
    for seed in (0, 1, 2**63 - 1, 123456789):
        got = splitmix_uniforms(np.full(5, seed, dtype=np.uint64), np.arange(5))
        assert got.tolist() == splitmix64_reference(seed, 5)
    # element (seed, t) does not depend on what else is computed with it
    seeds = np.array([5, 9, 5, 11], dtype=np.uint64)
    counters = np.array([3, 0, 1, 7])
    u = splitmix_uniforms(seeds, counters)
    for i in range(4):
        assert u[i] == splitmix_uniforms(seeds[i : i + 1], counters[i : i + 1])[0]
    assert ((u >= 0) & (u < 1)).all()


def test_draws_follow_the_distribution_and_skip_zero_probability_tokens():
    probs = torch.tensor([0.1, 0.0, 0.2, 0.7] + [0.0] * 296)
    n = 10_000  # every bound below is 4 binomial standard errors at this n
    u = splitmix_uniforms(np.arange(n, dtype=np.uint64), np.zeros(n))
    tok = draw_tokens(torch.log(probs).expand(n, -1), u, temperature=1.0)
    freq = torch.bincount(tok, minlength=VOCAB).double() / n
    assert freq[1] == 0 and freq[4:].sum() == 0
    # within 4 binomial standard errors
    for j, p in ((0, 0.1), (2, 0.2), (3, 0.7)):
        assert abs(float(freq[j]) - p) < 4 * (p * (1 - p) / n) ** 0.5
    # the nucleus: top_p = 0.75 keeps 0.7 and 0.2, renormalised
    tok = draw_tokens(torch.log(probs).expand(n, -1), u, temperature=1.0, top_p=0.75)
    freq = torch.bincount(tok, minlength=VOCAB).double() / n
    p = 0.7 / 0.9
    assert freq[0] == 0 and abs(float(freq[3]) - p) < 4 * (p * (1 - p) / n) ** 0.5
    # temperature 0 is greedy
    assert draw_tokens(torch.log(probs)[None], u[:1], temperature=0).tolist() == [3]


def test_a_row_draws_the_same_token_alone_and_among_others():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(33, 49152, generator=g) * 4
    u = splitmix_uniforms(np.arange(33, dtype=np.uint64), np.full(33, 5))
    for top_p in (1.0, 0.9):
        batch = draw_tokens(logits, u, temperature=0.8, top_p=top_p)
        # every fourth row, first and last included: 33 rows drawn one by one cost more than
        # the batch (each sorts SmolLM2's 49,152 tokens for the nucleus)
        rows = range(0, 33, 4)
        alone = [
            int(draw_tokens(logits[i : i + 1], u[i : i + 1], temperature=0.8, top_p=top_p)[0]) for i in rows
        ]
        assert [batch.tolist()[i] for i in rows] == alone
    # the two-level inverse CDF picks what a flat running sum picks
    p = torch.exp((logits - logits.max(-1, keepdim=True).values) / 0.8)
    c = p.cumsum(-1, dtype=torch.float64)
    flat = torch.searchsorted(c, (torch.from_numpy(u) * c[:, -1]).unsqueeze(1), right=True)
    assert draw_tokens(logits, u, temperature=0.8).tolist() == flat.squeeze(1).tolist()


def test_expected_tokens_counts_max_tokens_until_samples_end_then_a_hazard():
    assert expected_tokens(0, 0, [(0, 10), (0, 10)]) == 20
    assert expected_tokens(30, 0, [(5, 10)]) == 35  # nobody ended: the cap
    # one end in 10 draws: h = 0.1, a fresh sample with cap 100 yields ~9 more
    h = 0.1
    assert expected_tokens(9, 1, [(0, 100)]) == 9 + round((1 - h) * (1 - (1 - h) ** 100) / h)
    assert expected_tokens(50, 50, [(99, 100)]) == 50  # at most what the cap allows


# --------------------------------------------------------------------------- precision
@pytest.fixture
def fresh_precision(monkeypatch):
    local_precision.cache_clear()
    yield monkeypatch
    local_precision.cache_clear()


def test_precision_is_bfloat16_only_with_native_support(fresh_precision):
    fresh_precision.delenv("DBPA_LOCAL_PRECISION", raising=False)
    fresh_precision.setattr(dec, "_cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert local_precision() == "bfloat16"
    local_precision.cache_clear()
    fresh_precision.setattr(dec, "_cpu_flags", lambda: {"avx2", "avx512f"})
    assert local_precision() == "float32"
    local_precision.cache_clear()
    fresh_precision.setattr(dec, "_cpu_flags", lambda: set())  # no /proc/cpuinfo
    assert local_precision() == "float32"
    local_precision.cache_clear()
    fresh_precision.setenv("DBPA_LOCAL_PRECISION", "bfloat16")
    assert local_precision() == "bfloat16"
    local_precision.cache_clear()
    fresh_precision.setenv("DBPA_LOCAL_PRECISION", "fp8")
    with pytest.raises(BackendError, match="DBPA_LOCAL_PRECISION must be one of bfloat16, float32"):
        local_precision()


def test_precision_is_part_of_the_local_cache_keys(fresh_precision):
    from dbpa_core.backends import GenerationParams
    from dbpa_core.sampling import backend_identity, requests_for, sample_key

    req = requests_for("hi", n=1, seed=0, params=GenerationParams())[0]
    keys = {}
    for p in ("bfloat16", "float32"):
        local_precision.cache_clear()
        fresh_precision.setenv("DBPA_LOCAL_PRECISION", p)
        ident = backend_identity({"backend": "local"})
        assert ident["precision"] == p
        keys[p] = sample_key(ident, req)
        assert backend_identity({"backend": "hf", "path": "/m"})["precision"] == p
    assert keys["bfloat16"] != keys["float32"]
    assert "precision" not in backend_identity({"backend": "openai", "name": "m"})


# --------------------------------------------------------------------------- the decoder
@SLOW
def test_decoder_computes_what_transformers_computes():
    model = tiny_llama()
    assert fast_path_supported(model)
    d = LlamaDecoder(model, slots=2, max_len=64)
    ids = [5, 17, 42, 99, 7, 3]
    state = d.prefill(ids)
    with torch.inference_mode():
        ref = model(input_ids=torch.tensor([ids])).logits[0]
    assert torch.allclose(state.logits, ref[-1], atol=1e-4)
    d.admit(0, state)
    seq, pos = list(ids), len(ids)
    for t in (11, 250, 3, 64):
        seq.append(t)
        got = d.step([t], [pos])[0]
        with torch.inference_mode():
            want = model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        pos += 1


@SLOW
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_logits_do_not_depend_on_its_batch_mates_bit_for_bit(dtype):
    """What makes a sample independent of its batch: a row's next-token logits are the
    same bits alone (a batch of one, attention over its own span) and among 20 rows of
    other prompts whose longer spans set the batch's."""
    model = tiny_llama(dtype)
    d = LlamaDecoder(model, slots=24, max_len=256)
    short, long = d.prefill([5, 17, 42, 99]), d.prefill(list(range(3, 150)))
    d.admit(0, short)
    alone = d.step([11], [4])[0]
    for slot in range(1, 21):
        d.admit(slot, long if slot % 2 else short)
    tokens = [11] + [7 + r for r in range(1, 21)]
    positions = [4] + [147 if r % 2 else 4 for r in range(1, 21)]
    d.admit(0, short)
    batch = d.step(tokens, positions)
    assert torch.equal(batch[0], alone)
    d.admit(5, short)  # and in another row of the batch
    tokens[5], positions[5] = 11, 4
    assert torch.equal(d.step(tokens, positions)[5], alone)


def _items(prompts, per_prompt, *, max_tokens=(12, 20, 7), temps=(0.9, 1.3)):
    out = []
    for a, ids in enumerate(prompts):
        for i in range(per_prompt):
            out.append(
                (
                    (a, i),
                    ids,
                    1000 * a + i,
                    temps[(a + i) % len(temps)],
                    1.0,
                    max_tokens[(a + i) % len(max_tokens)],
                )
            )
    return out


def _run(model, items, *, cap=None, eos=frozenset(range(12)), keep_store=False, **kw):
    """Samples of ``items``; every prompt computed afresh unless ``keep_store`` (then the
    prefixes kept from earlier calls on ``model`` are reused)."""
    got = {}
    if not keep_store:
        dec.prefix_store(model).clear()

    def factory(n, max_len):
        return LlamaDecoder(
            model, max_len=max_len, slots=dec.slots_for(model, samples=n, max_len=max_len, cap=cap)
        )

    stats = generate_continuous(
        factory, items, eos=set(eos), on_done=lambda r, toks, n: got.__setitem__(r, list(toks)), **kw
    )
    return got, stats


PROMPTS = [[5, 17, 42, 99], [7, 3, 250, 8, 12, 13, 14, 15, 16], [200]]


@SLOW
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sample_is_identical_alone_and_in_any_batch(dtype):
    """Sample i depends on its own seed only: drawn alone, in a batch with other prompts,
    or in a small batch that samples keep joining as others finish, it has the same tokens."""
    model = tiny_llama(dtype)
    items = _items(PROMPTS, 6)
    together, stats = _run(model, items)
    assert stats.samples == len(items) and stats.prompts == 3
    assert len({tuple(t) for t in together.values()}) > len(items) // 2  # samples differ
    assert any(len(t) < it[5] for it, t in zip(items, together.values(), strict=True))  # some ended
    joining, stats2 = _run(model, items, cap=3)  # continuous batching, 3 slots
    assert stats2.steps > stats.steps
    assert joining == together
    for it in items[::4]:
        alone, _ = _run(model, [it])
        assert alone[it[0]] == together[it[0]], it[0]
    # reproducible from the seeds, and a new seed gives a new sample
    again, _ = _run(model, items)
    assert again == together
    other, _ = _run(model, [(("x", 0), PROMPTS[0], 999_999, 0.9, 1.0, 20)])
    assert other[("x", 0)] != together[(0, 0)]


@SLOW
def test_the_thread_count_does_not_change_a_sample():
    model = tiny_llama(torch.bfloat16)
    items = _items(PROMPTS, 3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = _run(model, items)
        torch.set_num_threads(max(2, before))
        two, _ = _run(model, items)
    finally:
        torch.set_num_threads(before)
    assert one == two


@SLOW
def test_weights_prepacked_for_onednn_give_the_same_samples(monkeypatch):
    """bfloat16 weights are reordered once for oneDNN (a step's products no longer copy
    them), and only where that is the same bits: the samples and a step's logits are those
    of plain ``F.linear``."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        pytest.skip("this torch has no oneDNN")
    assert not dec._weights(tiny_llama(torch.float32)).packed  # float32: another library
    model = tiny_llama(torch.bfloat16)
    if not dec._weights(model).packed:  # _prepack's own check refused them on this CPU
        pytest.skip(
            "on this CPU oneDNN's reordered bfloat16 weights do not give F.linear's bits (or "
            "cannot be made): they are not used (the next test covers that refusal)"
        )
    packed, _ = _run(model, _items(PROMPTS, 3))
    d = LlamaDecoder(model, slots=4, max_len=64)
    d.admit(0, d.prefill(PROMPTS[1]))
    step = d.step([9], [len(PROMPTS[1])])
    plain_model = tiny_llama(torch.bfloat16)
    monkeypatch.setattr(dec, "_prepack", lambda weights: None)
    assert not dec._weights(plain_model).packed
    plain, _ = _run(plain_model, _items(PROMPTS, 3))
    assert packed == plain
    d = LlamaDecoder(plain_model, slots=4, max_len=64)
    d.admit(0, d.prefill(PROMPTS[1]))
    assert torch.equal(d.step([9], [len(PROMPTS[1])]), step)


@SLOW
def test_prepacked_weights_that_change_a_bit_are_not_used(monkeypatch):
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        pytest.skip("this torch has no oneDNN")
    real = dec._packed_linear
    monkeypatch.setattr(dec, "_packed_linear", lambda x, w: real(x, w) * 1.25)
    assert not dec._weights(tiny_llama(torch.bfloat16)).packed


@SLOW
def test_a_later_call_reuses_a_key_value_cache_and_gives_the_same_samples():
    """A finished call's cache goes to the next call of the model, stale keys and values
    in it (a larger cache sliced to fewer slots): the samples are those of a zeroed one."""
    model = tiny_llama(torch.bfloat16)
    few = _items([PROMPTS[1], [9, 8, 7]], 2, max_tokens=(12,))
    dec.clear_buffers()
    fresh, _ = _run(model, few)
    _run(model, _items(PROMPTS + [list(range(20, 60))], 6, max_tokens=(12,)))  # 24 slots
    kept = dec._BUFFERS[model]  # the first call's 16 slots, the second's 24
    assert sorted(k.shape[1] for k, _ in kept) == [dec.MIN_ROWS, 24]
    ptrs = {k.data_ptr() for k, _ in kept}
    reused, _ = _run(model, few)  # takes the newest that fits: 24 slots, stale
    assert {k.data_ptr() for k, _ in dec._BUFFERS[model]} == ptrs  # nothing allocated
    assert reused == fresh
    dec.clear_buffers()
    d = LlamaDecoder(model, slots=2, max_len=64)
    assert d.k_cache.shape[1] == dec.MIN_ROWS  # a cache of its own when none is kept
    d.release()
    assert dec._take_buffers(model, 2, 64) is not None and dec._take_buffers(model, 2, 64) is None
    dec.clear_buffers()


@SLOW
def test_finished_samples_are_handed_over_at_once_and_leave_the_batch():
    model = tiny_llama()
    items = _items(PROMPTS, 4, max_tokens=(3, 30))
    order = []
    got = {}

    def factory(n, max_len):
        return LlamaDecoder(model, max_len=max_len, slots=4)

    def on_done(req, toks, n_prompt):
        order.append(req)
        got[req] = toks

    stats = generate_continuous(factory, items, eos={0}, on_done=on_done)
    short = [it[0] for it in items if it[5] == 3]
    # samples capped at 3 tokens are handed over before the long ones that started with them
    assert order.index(short[0]) < order.index(items[1][0])
    assert all(len(got[r]) <= 3 for r in short)
    assert stats.samples == len(items) and sorted(order) == sorted(it[0] for it in items)


@SLOW
def test_stop_is_checked_before_every_step_and_keeps_finished_samples(monkeypatch):
    # prompts prefilled here, not on worker threads: a wait for a worker also polls Stop
    # (every 0.1 s, test_stop_while_packs_are_prefilled_...), which made the count of
    # polls before the tenth step depend on the machine's load
    monkeypatch.setattr(dec, "prefill_workers", lambda: 1)
    model = tiny_llama()
    items = _items(PROMPTS, 4, max_tokens=(2, 40))
    done = []
    polls = []

    def should_stop():
        polls.append(len(done))
        return len(polls) > 10

    factory = lambda n, L: LlamaDecoder(model, max_len=L, slots=n)  # noqa: E731
    stats = generate_continuous(
        factory, items, eos=set(), should_stop=should_stop, on_done=lambda r, t, n: done.append((r, list(t)))
    )
    assert stats.packs_on_workers == 0  # every poll came before a step
    assert stats.stopped and stats.steps == 10  # one poll per step, then stop
    assert done and len(done) < len(items)  # the short ones, not the long ones
    assert all(len(t) == 2 for _, t in done)


@SLOW
def test_token_progress_after_every_step_and_before_each_handover():
    model = tiny_llama()
    items = _items(PROMPTS, 2)
    events = []
    factory = lambda n, L: LlamaDecoder(model, max_len=L, slots=n)  # noqa: E731
    stats = generate_continuous(
        factory,
        items,
        eos=set(range(12)),
        on_tokens=lambda n, exp: events.append(("tokens", n, exp)),
        on_done=lambda r, t, n: events.append(("done", r, len(t))),
    )
    reports = [e for e in events if e[0] == "tokens"]
    assert len(reports) >= stats.steps
    drawn = [n for _, n, _ in reports]
    assert drawn == sorted(drawn) and reports[-1][1:] == (stats.tokens, stats.tokens)
    assert all(exp >= n for _, n, exp in reports)
    assert reports[0][2] <= sum(it[5] for it in items)
    # a sample is handed over just after a report that counts its tokens
    assert all(events[i - 1][0] == "tokens" for i, e in enumerate(events) if e[0] == "done")


def _drive(tuner, steps, *, faster):
    """The thread counts ``tuner`` uses for ``steps`` steps, ``faster`` threads 5x faster."""
    used = []
    for _ in range(steps):
        n = tuner.threads()
        used.append(n)
        tuner.record(n, 0.1 if n == faster else 0.5)
    return used


def test_thread_tuner_keeps_the_faster_count(monkeypatch):
    state = {"n": 2}
    calls = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: state["n"])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), state.update(n=n)))
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 1)  # other work: a core busy
    tuner = ThreadTuner()
    used = _drive(tuner, 2 * ThreadTuner.PROBE_EVERY, faster=1)  # one thread 5x faster here
    # one thread first, two not probed early while a core is busy (each step on two
    # stalled threads costs as much as several on one); probed after PROBE_EVERY steps,
    # and the probe ends after its first step when that one is much slower
    every = ThreadTuner.PROBE_EVERY
    assert used[:every] == [1] * every and used[every : every + 2] == [2, 1]
    assert tuner.best == 1 and used[-1] == 1 and used.count(2) == 1
    assert tuner.interval == 2 * every  # a slow probe doubles the wait
    # nothing known and both cores free: two threads first, one probed early, and the
    # faster kept
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 2)
    state["n"] = 2
    tuner = ThreadTuner()
    assert tuner.settle() == 2 and not tuner.known
    used = _drive(tuner, 6, faster=1)
    assert used[:4] == [2, 2, 1, 1] and tuner.best == 1 and used[-1] == 1
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: None)  # cannot be told: one
    assert ThreadTuner().settle() == 1
    tuner.restore()
    assert calls[-1] == 2
    # probing a count that stalls (two threads on a busy machine) becomes rare
    tuner = ThreadTuner()
    tuner.best, tuner.other = 1, 2
    for _ in range(1000):
        n = tuner.threads()
        tuner.record(n, 0.1 if n == 1 else 0.5)
    assert tuner.best == 1 and tuner.probes <= 2 + 1000 // ThreadTuner.MAX_INTERVAL + 4
    assert tuner.interval == ThreadTuner.MAX_INTERVAL
    # a call that starts from the last call's choice keeps it and probes only later
    state["n"] = 2
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 2)  # nothing else running
    tuner = ThreadTuner(start=2)
    used = []
    for _ in range(ThreadTuner.PROBE_EVERY + 2):
        n = tuner.threads()
        used.append(n)
        tuner.record(n, 0.1)
    assert used[: ThreadTuner.PROBE_EVERY] == [2] * ThreadTuner.PROBE_EVERY and used[-1] == 1
    # ... unless other work keeps a core busy now: then one thread, two not probed early
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 1)
    state["n"] = 2
    tuner = ThreadTuner(start=2)
    assert _drive(tuner, 6, faster=1) == [1] * 6 and tuner.best == 1 and tuner.known
    # one thread kept from a busy spell, every core free now: all cores first, one probed
    # early (a later call would otherwise stay on one thread until PROBE_EVERY steps)
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 2)
    state["n"] = 2
    tuner = ThreadTuner(start=1)
    assert tuner.settle() == 2 and not tuner.known
    # (one thread 5x slower: the probe ends after its first step)
    assert _drive(tuner, 6, faster=2) == [2, 2, 1, 2, 2, 2] and tuner.best == 2
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 1)  # still busy: kept
    state["n"] = 2
    tuner = ThreadTuner(start=1)
    assert tuner.settle() == 1 and tuner.known


def test_a_probe_ends_early_only_when_its_first_step_is_much_slower(monkeypatch):
    state = {"n": 2}
    monkeypatch.setattr(torch, "get_num_threads", lambda: state["n"])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: state.update(n=n))
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 2)
    every = ThreadTuner.PROBE_EVERY
    # one thread 1.3x slower: both probe steps run, the wait is kept; 1.5x slower and more:
    # the probe ends after its first step and the wait doubles
    for slower, used, next_probe in [
        (1.3, [2, 2, 1, 1, 2, 2], 4 + every),
        (ThreadTuner.ABORT * 1.01, [2, 2, 1, 2, 2, 2], 3 + 2 * every),
    ]:
        tuner = ThreadTuner()
        got = []
        for _ in range(6):
            n = tuner.threads()
            got.append(n)
            tuner.record(n, 0.1 * (slower if n == 1 else 1.0))
        assert got == used and tuner.best == 2, (slower, got)
        assert tuner.next_probe == next_probe


@SLOW
def test_the_plain_path_for_other_architectures():
    """hf folders that are not plain Llama models decode through transformers' own forward
    pass: same draws, finished samples handed over at once, Stop and token reports."""
    from dbpa_core.backends.local import _generate_plain

    model = tiny_llama()
    items = _items(PROMPTS, 3)

    def run(its, **kw):
        got, events = {}, []
        _generate_plain(
            model,
            its,
            eos=set(range(12)),
            cap=4,
            on_done=lambda r, t, n: (got.__setitem__(r, list(t)), events.append("done")),
            on_tokens=lambda n, exp: events.append((n, exp)),
            **kw,
        )
        return got, events

    got, events = run(items)
    assert sorted(got) == sorted(it[0] for it in items)
    assert all(len(got[it[0]]) <= it[5] for it in items)
    assert any(len(got[it[0]]) < it[5] for it in items)  # some ended early
    assert run(items)[0] == got  # reproducible
    counts = [e for e in events if e != "done"]
    assert counts[-1] == (sum(map(len, got.values())),) * 2
    polls = []
    stopped, _ = run(items, should_stop=lambda: polls.append(1) or len(polls) > 3)
    assert len(stopped) < len(items)


# --------------------------------------------------------------------------- prefill in packs
@SLOW
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prompts_prefilled_together_are_the_same_bits_as_one_at_a_time(dtype):
    """A pack multiplies the rows of several prompts together and attends per prompt: each
    prompt's keys, values and first logits are the bits it gets alone (short prompts, fewer
    rows than MIN_ROWS, included)."""
    model = tiny_llama(dtype)
    d = LlamaDecoder(model, slots=2, max_len=256)
    prompts = [list(range(3, 150)), [5, 17, 42, 99], [200], list(range(7, 40))]
    packed = d.prefill_many(prompts)
    for ids, p in zip(prompts, packed, strict=True):
        alone = d.prefill(ids)
        assert p.length == len(ids)
        assert torch.equal(p.keys, alone.keys) and torch.equal(p.values, alone.values)
        assert torch.equal(p.logits, alone.logits)
    # and in another pack, in another place
    again = d.prefill_many(prompts[::-1])[::-1]
    assert all(torch.equal(a.logits, b.logits) for a, b in zip(again, packed, strict=True))


@SLOW
def test_a_long_prompt_is_attended_in_blocks_of_queries(monkeypatch):
    model = tiny_llama()
    ids = [(7 * i) % VOCAB for i in range(70)]
    with torch.inference_mode():
        ref = model(input_ids=torch.tensor([ids])).logits[0, -1]
    whole = LlamaDecoder(model, slots=1, max_len=128).prefill(ids)
    monkeypatch.setattr(dec, "ATTENTION_BLOCK", 16)  # 5 blocks, the last of 6
    blocked = LlamaDecoder(model, slots=1, max_len=128).prefill(ids)
    assert torch.allclose(blocked.logits, ref, atol=1e-4)
    assert torch.allclose(blocked.keys, whole.keys, atol=1e-5)


@SLOW
def test_packs_run_on_worker_threads_and_give_the_same_samples():
    """With two torch threads, the prompts joining the batch are prefilled in packs on
    worker threads (one torch thread each); the samples are those drawn one prompt at a
    time, and torch's thread count is as it was."""
    model = tiny_llama(torch.bfloat16)
    prompts = [[(p * 31 + j) % VOCAB for j in range(40 + 25 * p)] for p in range(12)]
    items = _items(prompts, 2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        pooled, stats = _run(model, items)
        assert torch.get_num_threads() == 2
        assert stats.packs_on_workers >= 2 and stats.prompts == 12
        assert stats.prompt_tokens == sum(map(len, prompts))
        assert stats.packs == stats.packs_on_workers
        torch.set_num_threads(1)  # one pack at a time, here
        inline, stats1 = _run(model, items)
        assert stats1.packs_on_workers == 0 and stats1.packs >= 1
    finally:
        torch.set_num_threads(before)
    assert pooled == inline
    for it in items[::7]:
        assert _run(model, [it])[0][it[0]] == pooled[it[0]]


@SLOW
def test_stop_while_packs_are_prefilled_returns_and_cancels_the_rest(monkeypatch):
    import threading

    model = tiny_llama()
    prompts = [[(p * 13 + j) % VOCAB for j in range(300)] for p in range(8)]  # 8 packs
    started = threading.Event()
    calls = []
    real = LlamaDecoder.prefill_many

    def slow(self, pack):
        calls.append(len(pack))
        started.set()
        time.sleep(0.3)
        return real(self, pack)

    monkeypatch.setattr(LlamaDecoder, "prefill_many", slow)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        got, stats = _run(model, _items(prompts, 1), should_stop=started.is_set)
    finally:
        torch.set_num_threads(before)
    assert stats.stopped and stats.steps == 0 and stats.prompts == 0 and got == {}
    assert len(calls) < len(prompts)  # the packs not started are cancelled


@SLOW
def test_a_stop_does_not_wait_for_a_pack_a_worker_is_computing(monkeypatch):
    """A stopped call returns while a worker is still inside a pack (its result is not
    needed): the sampler then gives up its claims at once, and the next run on the
    dashboard never waits for the stopped one (it used to wait for the pack to end)."""
    import threading

    model = tiny_llama()
    prompts = [[(p * 13 + j) % VOCAB for j in range(300)] for p in range(8)]  # 8 packs
    started, release = threading.Event(), threading.Event()
    finished = []
    real = LlamaDecoder.prefill_many

    def blocked(self, pack, prefixes=None):
        started.set()
        release.wait(30)  # held until the call below has returned
        finished.append(len(pack))
        return real(self, pack) if prefixes is None else real(self, pack, prefixes)

    monkeypatch.setattr(LlamaDecoder, "prefill_many", blocked)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # two workers: every pack goes to the pool
        got, stats = _run(model, _items(prompts, 1), should_stop=started.is_set)
        returned_while_busy = not finished
    finally:
        release.set()
        torch.set_num_threads(before)
    assert stats.stopped and got == {}
    assert returned_while_busy


@SLOW
def test_a_few_prompts_are_split_over_the_workers_and_a_lone_one_runs_on_one_thread(monkeypatch):
    """Two short prompts (one pack by size) make two packs, one per worker; a lone prompt
    runs in the calling thread, on one thread while the decoding steps have not yet shown
    that more are faster when other work keeps a core busy (several threads stall then)."""
    monkeypatch.setattr(dec, "free_cores", lambda samples=5: 1)
    d = LlamaDecoder(tiny_llama(), slots=2, max_len=64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        stats = dec.GenerationStats()
        pre = dec._Prefill(d, ThreadTuner(), stats)
        a, b = (5, 6, 7), (8, 9, 10, 11)
        assert len(dec.pack_prompts([a, b])) == 1
        pre.request([a, b])
        assert pre.waiting[a] is not pre.waiting[b]
        assert torch.equal(pre.get(a, None).logits, d.prefill(a).logits)
        assert pre.get(b, None).length == 4 and stats.packs_on_workers == 2
        pre.close()
        assert torch.get_num_threads() == 2
        tuner = ThreadTuner()
        pre = dec._Prefill(d, tuner, stats)
        pre.request([a])
        pre.get(a, None)
        assert stats.prefill_threads == {1: 1}
        tuner.best, tuner.known = 2, True  # the steps found two threads faster
        pre.request([b])
        pre.get(b, None)
        assert stats.prefill_threads == {1: 1, 2: 1}
        pre.close()
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- shared prefixes
@SLOW
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_prompt_reusing_a_shared_prefix_is_the_same_bits(dtype, monkeypatch):
    """Keys and values of a prefix taken from another prompt: only the rest is computed,
    and the keys, values and first logits are the bits of the whole prompt processed alone
    (also when the queries are attended in blocks and the prefix ends inside one)."""
    model = tiny_llama(dtype)
    d = LlamaDecoder(model, slots=2, max_len=256)
    head = list(range(3, 60))
    base = d.prefill(head + [7, 8, 9])
    others = [head + [11, 12, 13, 14], head + list(range(100, 180)), head[:30] + [5, 6]]
    shared = [len(head), len(head), 30]
    got = d.prefill_many(others, [(n, base) for n in shared])
    for ids, g in zip(others, got, strict=True):
        alone = d.prefill(ids)
        assert torch.equal(g.keys, alone.keys) and torch.equal(g.values, alone.values)
        assert torch.equal(g.logits, alone.logits)
    monkeypatch.setattr(dec, "ATTENTION_BLOCK", 16)
    blocked = LlamaDecoder(model, slots=1, max_len=256)
    g = blocked.prefill_many([others[1]], [(len(head), blocked.prefill(head + [1]))])[0]
    assert torch.equal(g.logits, blocked.prefill(others[1]).logits)
    with pytest.raises(ValueError, match="shorter than the prompt"):
        d.prefill_many([head], [(len(head), base)])


@SLOW
def test_later_calls_reuse_prefixes_kept_from_earlier_calls():
    """A battery asks again in rounds (the same question with more words changed): the
    model's PrefixStore keeps earlier calls' prompts, a later call reuses the prefix it
    shares with them (counted in the stats), and its samples are those computed afresh.
    The store keeps at most its byte budget, the least recently used dropped first."""
    model = tiny_llama(torch.bfloat16)
    head = [(13 * j) % VOCAB for j in range(48)]
    first = [head + [(p * 29 + j) % VOCAB for j in range(20)] for p in range(3)]
    later = [head[:40] + [(7 * j + 3) % VOCAB for j in range(25)]]
    _run(model, _items(first, 1))
    store = dec.prefix_store(model)
    assert len(store) == 3
    states = list(store.snapshot().items())
    items = _items(later, 2)
    reused, stats = _run(model, items, keep_store=True)
    assert stats.prompt_tokens_reused == 40
    fresh, stats2 = _run(model, items)
    assert stats2.prompt_tokens_reused == 0 and reused == fresh
    # the budget: room for two of these prompts; reuse refreshes a prompt
    one = dec.PrefixStore._size(states[0][1])
    small = dec.PrefixStore(budget=2 * one + one // 2)
    for p, st in states[:2]:
        small.put(p, st)
    small.touch(states[0][0])
    small.put(*states[2])
    assert list(small.snapshot()) == [states[0][0], states[2][0]]
    small.clear()
    assert len(small) == 0


@SLOW
@pytest.mark.parametrize("threads", [1, 2])
def test_prompts_sharing_a_prefix_reuse_it_and_give_the_same_samples(threads):
    """A battery's prompts begin alike: those sharing MIN_SHARED tokens or more with an
    earlier one reuse its keys and values (counted in the stats), on worker threads or in
    the calling thread, and every sample is the one drawn for its prompt alone."""
    model = tiny_llama(torch.bfloat16)
    head = [(11 * j) % VOCAB for j in range(40)]
    prompts = [head + [(p * 31 + j) % VOCAB for j in range(5 + 9 * p)] for p in range(6)]
    prompts.append([(5 * j) % VOCAB for j in range(30)])  # shares nothing
    items = _items(prompts, 2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        got, stats = _run(model, items)
        assert stats.prompts == len(prompts)
        assert stats.prompt_tokens_reused >= 5 * len(head)
        again, stats2 = _run(model, items, cap=3)  # fewer slots: more requests
        assert stats2.prompt_tokens_reused >= 5 * len(head)
    finally:
        torch.set_num_threads(before)
    assert again == got
    for it in items[::3]:
        assert _run(model, [it])[0][it[0]] == got[it[0]]


# --------------------------------------------------------------------------- rows per product
def _m_dependent(threshold):
    """A product whose rounding depends on the number of rows, as on CPUs whose matrix
    library switches kernels at ``threshold`` rows: the same row, other bits above it."""

    def linear(x, w):
        out = torch.nn.functional.linear(x, w)
        return out + 1e-3 if x.shape[0] > threshold else out

    return linear


def test_row_policy_finds_a_range_with_one_kernel_and_products_keep_to_it():
    w = torch.randn(96, 64)
    # a machine whose kernels agree on every row count: no constraint, the product itself
    plain = dec.row_policy(torch.nn.functional.linear, [w], head=torch.randn(40, 64))
    assert plain == dec.RowPolicy(dec.MIN_ROWS, None, True)
    assert dec.rows_product(torch.nn.functional.linear, plain) is torch.nn.functional.linear
    # another kernel above some row count: the first range on one side of it
    for threshold, want in [(20, (40, 224)), (39, (40, 224)), (100, (dec.MIN_ROWS, 32))]:
        linear = _m_dependent(threshold)
        policy = dec.row_policy(linear, [w], ranges=[(dec.MIN_ROWS, None), (40, 224), (dec.MIN_ROWS, 32)])
        assert (policy.lo, policy.hi, policy.exact) == (*want, True), threshold
        product = dec.rows_product(linear, policy)
        x = torch.randn(700, 64)
        alone = product(x[:1], w)
        for n in (1, 5, 16, 33, 40, 57, 224, 225, 500, 700):  # padded, whole, or split
            got = product(x[:n], w)
            assert got.shape == (n, 96)
            assert torch.equal(got[:1], alone), (threshold, n)

    # nothing helps (a kernel per row count): the first range, and said to be inexact
    def every_count(x, w):
        return torch.nn.functional.linear(x, w) + x.shape[0] * 1e-3

    policy = dec.row_policy(every_count, [w], ranges=[(dec.MIN_ROWS, None), (dec.MIN_ROWS, 32)])
    assert policy == dec.RowPolicy(dec.MIN_ROWS, None, False)


def test_row_policy_checks_a_row_at_the_end_of_a_product_and_on_each_thread_count(monkeypatch):
    w = torch.randn(32, 64)

    def by_place(x, w):  # the last rows of a long product are rounded otherwise
        out = torch.nn.functional.linear(x, w)
        if x.shape[0] > 100:
            out[-8:] += 1e-3
        return out

    assert dec.row_policy(by_place, [w], ranges=[(dec.MIN_ROWS, None), (dec.MIN_ROWS, 100)]).hi == 100
    state = {"n": 1}
    monkeypatch.setattr(torch, "set_num_threads", lambda n: state.update(n=n))
    monkeypatch.setattr(torch, "get_num_threads", lambda: state["n"])

    def by_threads(x, w):  # two threads sum otherwise above 57 rows
        out = torch.nn.functional.linear(x, w)
        return out + 1e-3 if state["n"] == 2 and x.shape[0] > 57 else out

    assert (
        dec.row_policy(by_threads, [w], threads=[1, 2], ranges=[(dec.MIN_ROWS, None), (dec.MIN_ROWS, 48)]).hi
        == 48
    )


def test_the_decoding_module_examples_hold():
    import doctest

    res = doctest.testmod(dec, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 4 and res.failed == 0


def test_admission_plan_staggers_only_a_first_wave_larger_than_the_slots():
    assert [dec.admission_plan(64, 64, 300)(s) for s in (0, 1000)] == [64, 64]  # one wave
    plan = dec.admission_plan(64, 65, 300)
    assert [plan(s) for s in (0, 74, 75, 150, 225, 10**6)] == [16, 16, 32, 48, 64, 64]
    assert dec.admission_plan(16, 100, 300)(0) == 16  # one group: nothing to stagger
    assert [dec.admission_plan(40, 100, 1)(s) for s in (0, 1, 2)] == [16, 32, 40]  # a group a step


@SLOW
def test_a_stop_keeps_the_samples_of_the_first_groups_before_the_batch_would_end():
    """More samples than slots, all running to max_tokens: the first wave joins a group at
    a time, so a stop just before a whole batch's worth of tokens has been drawn keeps the
    first groups' samples (with every sample starting together, none would have ended by
    then). Later samples fill the slots as before: same steps, same samples."""
    model = tiny_llama()
    slots, n, mt = 4 * dec.MIN_ROWS, 5 * dec.MIN_ROWS, 24
    items = [((0, i), PROMPTS[0], i, 0.9, 1.0, mt) for i in range(n)]
    factory = lambda k, L: LlamaDecoder(model, max_len=L, slots=slots)  # noqa: E731
    drawn = [0]
    done = {}

    def tokens(n_drawn, expected):
        drawn[0] = n_drawn

    stats = generate_continuous(
        factory,
        items,
        eos=set(),
        on_tokens=tokens,
        should_stop=lambda: drawn[0] >= slots * mt - 1,
        on_done=lambda r, t, k: done.__setitem__(r, list(t)),
    )
    assert stats.stopped and dec.MIN_ROWS <= len(done) < slots
    assert all(len(t) == mt for t in done.values())
    full, stats = _run(model, items, eos=(), cap=slots)
    assert stats.steps <= 2 * mt  # no more steps than two waves started together
    assert all(full[r] == t for r, t in done.items())
