"""Fast sampling from a local causal LM on a CPU: the machinery of :mod:`.local`.

Three pieces, each usable on its own:

* :func:`splitmix_uniforms` and :func:`draw_tokens` — vectorised sampling in which sample
  ``i`` depends only on its own seed: the uniform that picks its ``t``-th token is the
  ``t``-th output of SplitMix64 seeded with the sample's seed (counter-based, like the
  permutation engine's splits), turned into a token by the inverse CDF of the sample's own
  next-token distribution. No generator object, no state shared between samples.
* :class:`LlamaDecoder` — a Llama forward pass written for batched CPU decoding: one
  preallocated key/value cache with a *slot* per sample, fused q/k/v and gate/up
  projections, attention as two batched matrix products over a span rounded up to
  :data:`SPAN` positions. Every row is computed by the same kernels whatever the other
  rows hold (row-wise operations only; a batch padded to at least :data:`MIN_ROWS` rows;
  and every matrix product kept to a range of row counts that this CPU's library computes
  with one kernel, checked when the model is loaded: :func:`row_policy`), so a sample's
  logits do not depend on its batch mates: tested bit for bit, in bfloat16 and in float32,
  on a CPU with AVX-512 BF16 and on one with AMX, whose bfloat16 products of 16–32 rows and
  of 37–255 rows round differently (there products are padded to 40 rows and split above
  224). In bfloat16 the weights are reordered once for oneDNN where that
  gives the same products (:func:`_prepack`), and a finished call's key/value cache is handed
  to the model's next call (:func:`_take_buffers`).
* :func:`generate_continuous` — continuous batching over those slots: every pending
  sample of a call is queued, the prompt of each is processed once for all its samples,
  a finished sample leaves the batch at once (and is handed to the caller at once) and the
  next queued sample takes its slot; ``should_stop`` is polled before every decoding step.
  With more samples than slots, the first wave joins in groups (:func:`admission_plan`), so
  that samples end a group at a time and a stop keeps the groups that ended.
  The prompts of the samples joining the batch are processed together, in packs of about
  :data:`PACK_TOKENS` tokens (:meth:`LlamaDecoder.prefill_many`: the prompts' rows
  multiplied together, attention per prompt), each pack on a worker thread of its own with
  one torch thread, so that a core taken by another process does not stall them all.

Precision: bfloat16 where the CPU multiplies it natively (AVX-512 BF16 or AMX; about 2.5×
the float32 matrix speed on the development machine), float32 elsewhere; ``DBPA_LOCAL_PRECISION``
(``bfloat16`` or ``float32``) overrides the choice. The precision changes the samples, so it
is part of the local backends' cache identity (:func:`dbpa_core.sampling.backend_identity`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cores import free_cores

if TYPE_CHECKING:
    import torch

#: a transformers Llama-style causal LM, read by duck typing (``model.model.layers``,
#: ``config``, ...): transformers gives its models no static type for these internals
HFModel = Any

PRECISIONS = ("bfloat16", "float32")
MIN_ROWS = 16  # a decoding step never multiplies fewer rows than this (see LlamaDecoder)
SPAN = 64  # attention spans are rounded up to a multiple of this many positions
MAX_ROWS = 64  # default cap on the samples decoded together
KV_BUDGET = 1 << 30  # bytes of key/value cache at most (and at most 1/8 of free memory)
ATTENTION_BLOCK = 1024  # a prompt's queries are attended in blocks of this many
PACK_TOKENS = 512  # prompt tokens prefilled together (a longer prompt makes a pack alone)
MIN_SHARED = 16  # a prompt reuses the keys and values of a shared prefix from this many tokens
KEEP_PROMPTS = 32  # processed prompts kept per call, whose prefixes later prompts may reuse
STORE_BYTES = 128 << 20  # keys and values of processed prompts kept across calls, per model
PREFILL_WAVES = 3  # a request's prompts feed each other's prefixes over at most this many waves

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# --------------------------------------------------------------------------- precision
def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def local_precision() -> str:
    """``"bfloat16"`` when this CPU multiplies bfloat16 natively, else ``"float32"``.

    Decided without importing torch (the dashboard asks on every rerun, for cache keys):
    the ``avx512_bf16`` or ``amx_bf16`` flag of ``/proc/cpuinfo``; on a machine without
    that file (macOS, Windows) float32. ``DBPA_LOCAL_PRECISION=bfloat16|float32`` overrides it.

    Examples
    --------
    >>> local_precision() in PRECISIONS
    True
    """
    forced = os.environ.get("DBPA_LOCAL_PRECISION", "").strip().lower()
    if forced:
        if forced not in PRECISIONS:
            from .base import BackendError

            raise BackendError(
                f"DBPA_LOCAL_PRECISION must be one of {', '.join(PRECISIONS)}, not {forced!r}."
            )
        return forced
    flags = _cpu_flags()
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def cpu_kernels() -> str:
    """The kind of matrix kernels this CPU runs the local model's products on: ``"amx"``
    (Intel AMX tiles, bfloat16), ``"avx512_bf16"`` or ``"float32"``. Kernels of different
    kinds round a product differently, so samples drawn from the same seeds are the same
    only on CPUs of the same kind."""
    flags = _cpu_flags()
    if local_precision() == "float32":
        return "float32"
    return "amx" if "amx_bf16" in flags else "avx512_bf16"


def torch_dtype(precision: str) -> torch.dtype:
    import torch

    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[precision]


# --------------------------------------------------------------------------- sampling
def splitmix_uniforms(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """``u[i]``: output number ``counters[i] + 1`` of SplitMix64 seeded with ``seeds[i]``,
    as a double in [0, 1) (53 bits).

    SplitMix64's ``n``-th output is a fixed mix of ``seed + n·γ``, so any element of any
    stream is computed directly: a sample's ``t``-th uniform depends on its seed and ``t``
    only — not on the batch, the order or the thread.

    Parameters
    ----------
    seeds, counters : array_like of int, shape (n,)
        Seeds (taken modulo 2**64) and 0-based positions in each stream.

    Returns
    -------
    ndarray of float64, shape (n,)

    Examples
    --------
    >>> u = splitmix_uniforms(np.array([7, 7, 8]), np.array([0, 1, 0]))
    >>> bool(u[0] != u[1] and u[0] != u[2] and ((0 <= u) & (u < 1)).all())
    True
    """
    s = np.asarray(seeds, dtype=np.uint64)
    c = np.asarray(counters, dtype=np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        z = s + c * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def draw_tokens(
    logits: torch.Tensor, uniforms: np.ndarray, *, temperature: float, top_p: float = 1.0
) -> torch.Tensor:
    """One token per row of ``logits`` by the inverse CDF of its own distribution.

    Row ``i`` takes the first token whose cumulative probability (in vocabulary order, or
    by decreasing probability within the nucleus when ``top_p < 1``) exceeds
    ``uniforms[i]``: the same token for the same row and uniform, whatever the other rows.
    Tokens of probability 0 are never drawn. ``temperature <= 0`` is greedy (argmax).

    Parameters
    ----------
    logits : torch.Tensor, shape (n, vocab)
    uniforms : ndarray of float64, shape (n,), in [0, 1)
    temperature : float
    top_p : float in (0, 1]

    Returns
    -------
    torch.LongTensor, shape (n,)
    """
    import torch

    z = logits.float()
    if temperature <= 0:
        return z.argmax(dim=-1)
    p = torch.exp((z - z.max(dim=-1, keepdim=True).values) / temperature)  # max 1
    u = torch.from_numpy(np.ascontiguousarray(uniforms, dtype=np.float64))
    if top_p >= 1.0:
        return _inverse_cdf(p, u)
    p, order = p.sort(dim=-1, descending=True, stable=True)
    c = p.cumsum(dim=-1, dtype=torch.float64)
    p = p * ((c - p.double()) < top_p * c[:, -1:])  # the nucleus (always >= 1 token)
    return order.gather(1, _inverse_cdf(p, u).unsqueeze(1)).squeeze(1)


_BLOCK = 128


def _inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first column where the running sum of row ``p[i]`` exceeds
    ``u[i]`` times the row's total, never one of weight 0.

    Two levels, so that no pass runs a sequential sum over the whole vocabulary: sums of
    blocks of :data:`_BLOCK` columns (float64), their running sum picks the block, a
    running sum inside it the column.
    """
    import torch

    n, width = p.shape
    pad = (-width) % _BLOCK
    if pad:
        p = torch.nn.functional.pad(p, (0, pad))
    blocks = p.view(n, -1, _BLOCK)
    sums = blocks.sum(dim=-1, dtype=torch.float64)  # (n, blocks)
    cum = sums.cumsum(dim=-1)
    target = u * cum[:, -1]
    b = torch.searchsorted(cum, target.unsqueeze(1), right=True).squeeze(1)
    b = torch.minimum(b, (cum < cum[:, -1:]).sum(dim=-1))  # last block with weight
    rows = torch.arange(n)
    rest = target - (cum[rows, b] - sums[rows, b])
    inner = blocks[rows, b].cumsum(dim=-1, dtype=torch.float64)  # (n, block)
    j = torch.searchsorted(inner, rest.unsqueeze(1), right=True).squeeze(1)
    j = torch.minimum(j, (inner < inner[:, -1:]).sum(dim=-1))  # last column with weight
    return b * _BLOCK + j


# --------------------------------------------------------------------------- the decoder
def fast_path_supported(model: HFModel) -> bool:
    """True when ``model`` is a plain Llama (SmolLM2's architecture) that
    :class:`LlamaDecoder` computes exactly like transformers does."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return False
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else None
    inner = getattr(model, "model", None)
    return (
        getattr(cfg, "hidden_act", None) == "silu"
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and rope_type == "default"
        and inner is not None
        and hasattr(inner, "rotary_emb")
        and hasattr(inner, "layers")
    )


@dataclass
class PromptState:
    """A prompt processed once for all its samples: its keys and values, and the logits
    of the first token to draw."""

    length: int
    keys: Any  # (layers, kv heads, length, head dim)
    values: Any
    logits: Any  # (vocab,) float32


@dataclass
class _Weights:
    """A model's projection weights as the decoder multiplies them: q/k/v and gate/up fused
    per layer, and prepacked for oneDNN where that gives the same bits (:func:`_prepack`)."""

    qkv: list[Any]
    gate_up: list[Any]
    o: list[Any]
    down: list[Any]
    head: Any
    packed: bool
    rows: RowPolicy = field(default_factory=lambda: RowPolicy(MIN_ROWS, None, True))


# model -> its weights as the decoder uses them (built once per model)
_WEIGHTS: weakref.WeakKeyDictionary[Any, _Weights] = weakref.WeakKeyDictionary()
PACK_MAX_BYTES = 2 << 30  # weights are prepacked (a second copy: +130 MB for SmolLM2) up to this size


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _packed_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


def _prepack(weights: list[Any]) -> list[Any] | None:
    """``weights`` reordered once into oneDNN's blocked layout, or None.

    A bfloat16 matrix product on the CPU goes through oneDNN, which reorders the weight
    matrix on every call: for the few rows of a decoding step that copy costs more than the
    product (a SmolLM2 step: 35 ms of products, 19 ms with the weights reordered once). The
    reordered weights are used only when they give exactly ``F.linear``'s numbers: checked
    here on each weight shape for a step's rows and a pack's, on one thread and on torch's
    count (the products' kernel is the same, only the copy is saved), so a sample never
    depends on whether they are used. None in float32 (its products go through another
    library), without oneDNN, or when the check fails.
    """
    import torch
    import torch.nn.functional as F

    mkldnn: Any = getattr(torch.ops, "mkldnn", None)
    if (
        mkldnn is None
        or not weights
        or weights[0].dtype != torch.bfloat16
        or not torch.backends.mkldnn.is_available()
        or not hasattr(mkldnn, "_reorder_linear_weight")
        or _nbytes(weights) > PACK_MAX_BYTES
    ):
        return None
    try:
        with torch.inference_mode():
            packed = [mkldnn._reorder_linear_weight(w, MIN_ROWS) for w in weights]
            gen = torch.Generator().manual_seed(0)
            shapes = {tuple(w.shape): (w, p) for w, p in zip(weights, packed, strict=True)}
            before = torch.get_num_threads()
            try:
                for threads in sorted({1, before}):
                    torch.set_num_threads(threads)
                    for w, p in shapes.values():
                        for rows in (MIN_ROWS, MIN_ROWS + 1, 3 * MIN_ROWS + 5):
                            x = torch.randn(rows, w.shape[1], generator=gen).to(w.dtype)
                            if not torch.equal(F.linear(x, w), _packed_linear(x, p)):
                                return None
            finally:
                torch.set_num_threads(before)
    except (RuntimeError, TypeError, AttributeError):
        return None
    return packed


@dataclass(frozen=True)
class RowPolicy:
    """How many rows one matrix product may have so that a row's numbers do not depend on
    the others: at least ``lo`` (fewer are padded with zero rows), at most ``hi`` (more
    are split into near-equal chunks, each at least ``lo``; None: no limit). ``exact``:
    the load-time check found such a range (see :func:`row_policy`)."""

    lo: int
    hi: int | None
    exact: bool = True


# the ranges tried, in order: the first is no constraint beyond MIN_ROWS. Seen on an AMX
# CPU (oneDNN, bfloat16): products of 16-32 rows, of 37-255 rows and of larger counts
# each rounded their own way (another kernel, or another blocking of the sum, the last
# only on two threads), and MKL's float32 products on two threads split at ~57 rows;
# within the second range bfloat16, within the third float32 gave every row count the
# same bits there.
ROW_RANGES: tuple[tuple[int, int | None], ...] = ((MIN_ROWS, None), (40, 224), (MIN_ROWS, 48), (MIN_ROWS, 32))


def rows_product(linear: Callable[[Any, Any], Any], policy: RowPolicy) -> Callable[[Any, Any], Any]:
    """``linear`` with the rows of every product kept within ``policy``'s range (padded,
    or split into chunks): a row then goes through one kernel whatever else is multiplied
    with it. ``linear`` itself when the range is that of the product anyway (the rows the
    decoder multiplies are never fewer than :data:`MIN_ROWS`).

    Examples
    --------
    >>> import torch
    >>> seen = []
    >>> f = rows_product(lambda x, w: seen.append(len(x)) or x @ w.T, RowPolicy(40, 100))
    >>> x = torch.arange(230 * 2, dtype=torch.float32).view(230, 2)
    >>> bool(torch.equal(f(x, torch.eye(2)), x)), seen
    (True, [77, 77, 76])
    >>> seen.clear(); f(x[:5], torch.eye(2)).shape, seen
    (torch.Size([5, 2]), [40])
    """
    lo, hi = policy.lo, policy.hi
    if lo <= MIN_ROWS and hi is None:
        return linear

    def product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        import torch

        n = x.shape[0]
        if n < lo:
            padded = x.new_zeros((lo,) + tuple(x.shape[1:]))
            padded[:n] = x
            return linear(padded, w)[:n]
        if hi is None or n <= hi:
            return linear(x, w)
        size = math.ceil(n / math.ceil(n / hi))
        return torch.cat([product(x[i : i + size], w) for i in range(0, n, size)])

    return product


def row_policy(
    linear: Callable[[Any, Any], Any],
    weights: Sequence[Any],
    *,
    head: Any = None,
    ranges: Sequence[tuple[int, int | None]] = ROW_RANGES,
    threads: Sequence[int] | None = None,
) -> RowPolicy:
    """The first range of ``ranges`` within which this machine's ``linear`` gives every
    row the same bits whatever the row count and the row's place in the product, on one
    thread and on torch's count; checked on random rows against each of ``weights`` (one
    matrix of each shape the decoder multiplies; ``head`` the output layer's, checked at
    the few rows it multiplies: at most 128). No range passing: the first, not exact.

    A matrix library picks its kernel, and how it blocks a sum, by the shape of the
    product: on some CPUs a product of 16 rows and one of 64 round a row differently, so a
    sample would depend on what else was in its batch. Multiplying only row counts of one
    range keeps the guarantee there (at a cost: padded steps, split packs).
    """
    import torch

    before = torch.get_num_threads()
    counts = sorted(set(threads) if threads else {1, before})
    gen = torch.Generator().manual_seed(0)
    cases = [(w, False) for w in weights] + ([(head, True)] if head is not None else [])
    inputs = {id(w): torch.randn(640, w.shape[1], generator=gen).to(w.dtype) for w, _ in cases}

    def same(lo: int, hi: int | None) -> bool:
        top = hi or 512
        for w, is_head in cases:
            x = inputs[id(w)]
            # the ends of the range and row counts ~30 % apart between them (a kernel's
            # choice changes at thresholds such as 33, 57 or 256 rows)
            grid = {round(lo * 1.3**i) for i in range(40) if lo * 1.3**i < top}
            sizes = sorted(m for m in {*grid, lo + 1, lo + 7, top - 1, top} if lo <= m <= top)
            if is_head:
                sizes = sorted({lo, min(lo + 17, top, 128), min(top, 128)})
            ref = None
            for n in counts:
                torch.set_num_threads(n)
                for m in sizes:
                    got = [linear(x[:m], w)[:8]]
                    if not is_head and m > 16:  # the same rows at the end of a product
                        got.append(linear(torch.cat([x[100 : 100 + m - 8], x[:8]]), w)[m - 8 :])
                    for g in got:
                        if ref is None:
                            ref = g
                        elif not torch.equal(g, ref):
                            return False
        return True

    try:
        with torch.inference_mode():
            for lo, hi in ranges:
                if same(lo, hi):
                    return RowPolicy(lo, hi, True)
    finally:
        torch.set_num_threads(before)
    lo, hi = ranges[0]
    return RowPolicy(lo, hi, False)


def _weights(model: HFModel) -> _Weights:
    import torch

    got = _WEIGHTS.get(model)
    if got is not None:
        return got
    lay = model.model.layers
    with torch.inference_mode():
        qkv = [
            torch.cat(
                [m.self_attn.q_proj.weight, m.self_attn.k_proj.weight, m.self_attn.v_proj.weight]
            ).contiguous()
            for m in lay
        ]
        gate_up = [torch.cat([m.mlp.gate_proj.weight, m.mlp.up_proj.weight]).contiguous() for m in lay]
        o = [m.self_attn.o_proj.weight for m in lay]
        down = [m.mlp.down_proj.weight for m in lay]
        head = model.lm_head.weight
        n = len(lay)
        packed = _prepack([*qkv, *gate_up, *o, *down, head])
    if packed is None:
        got = _Weights(qkv, gate_up, o, down, head, False)
    else:
        got = _Weights(
            packed[:n], packed[n : 2 * n], packed[2 * n : 3 * n], packed[3 * n : 4 * n], packed[4 * n], True
        )
    linear = _packed_linear if got.packed else torch.nn.functional.linear
    got.rows = row_policy(linear, [got.qkv[0], got.gate_up[0], got.o[0], got.down[0]], head=got.head)
    if not got.rows.exact:
        import warnings

        warnings.warn(
            "This CPU's matrix kernels round a row differently depending on how "
            "many rows are multiplied with it: a sample of the local model can "
            "differ in rare tokens between a run alone and one in a batch.",
            RuntimeWarning,
            stacklevel=2,
        )
    _WEIGHTS[model] = got
    return got


class PrefixStore:
    """Processed prompts of one model kept across calls (at most :data:`STORE_BYTES` of
    keys and values, the least recently used dropped first), so that a later call's prompts
    reuse the prefixes they share with earlier calls' (a battery's rounds re-ask a
    question with more words changed). Reuse gives the same bits as computing the prompt
    afresh, so what is kept never changes a sample. Safe for concurrent calls."""

    def __init__(self, budget: int = STORE_BYTES) -> None:
        from collections import OrderedDict

        self.budget = budget
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, PromptState] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _size(state: PromptState) -> int:
        return int(state.keys.nbytes + state.values.nbytes + state.logits.nbytes)

    def snapshot(self) -> dict[tuple, PromptState]:
        """The prompts kept now (most recently used last)."""
        with self._lock:
            return dict(self._kept)

    def touch(self, prompt: tuple) -> None:
        """``prompt`` was reused: it is the last to be dropped."""
        with self._lock:
            if prompt in self._kept:
                self._kept.move_to_end(prompt)

    def put(self, prompt: tuple, state: PromptState) -> None:
        size = self._size(state)
        if size > self.budget:
            return
        with self._lock:
            old = self._kept.pop(prompt, None)
            if old is not None:
                self._bytes -= self._size(old)
            self._kept[prompt] = state
            self._bytes += size
            while self._bytes > self.budget:
                _, gone = self._kept.popitem(last=False)
                self._bytes -= self._size(gone)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._kept)


_STORES: weakref.WeakKeyDictionary[Any, PrefixStore] = weakref.WeakKeyDictionary()


def clear_prefix_stores() -> None:
    """Forget every model's kept prompts (benchmarks: each run starts from nothing)."""
    for store in list(_STORES.values()):
        store.clear()


def prefix_store(model: HFModel) -> PrefixStore:
    """The :class:`PrefixStore` of ``model`` (one per loaded model)."""
    store = _STORES.get(model)
    if store is None:
        store = _STORES[model] = PrefixStore()
    return store


# model -> key/value caches of finished calls, newest last (see _take_buffers)
_BUFFERS: weakref.WeakKeyDictionary[Any, list[tuple[Any, Any]]] = weakref.WeakKeyDictionary()
_BUFFERS_LOCK = threading.Lock()
BUFFER_BYTES = 256 << 20  # key/value caches kept for the next call, per model


def _take_buffers(model: HFModel, slots: int, max_len: int) -> tuple[Any, Any] | None:
    """A finished call's key/value cache of ``model`` with ``max_len`` positions and
    ``slots`` slots or more (taken out of the pool), or None.

    Its positions hold an earlier call's keys and values, never read as such: a slot's
    positions are written before they are attended (:meth:`LlamaDecoder.admit`, then one
    per step), a position after a row's own is masked out (its weight is exactly 0, and
    the values it multiplies are finite numbers), and a spare row's results are dropped —
    as when a slot takes over another's (:meth:`LlamaDecoder.move`). A slice of a larger
    cache has the same strides within a layer as a cache of its own size, so every product
    sees the same shapes and strides: the samples are the same bits (tested)."""
    with _BUFFERS_LOCK:
        kept = _BUFFERS.get(model, [])
        for i in range(len(kept) - 1, -1, -1):
            k, v = kept[i]
            if k.shape[-1] == max_len and k.shape[1] >= slots:
                del kept[i]
                return k, v
    return None


def _give_buffers(model: HFModel, buffers: tuple[Any, Any]) -> None:
    if _nbytes(buffers) > BUFFER_BYTES:
        return
    with _BUFFERS_LOCK:
        kept = _BUFFERS.setdefault(model, [])
        kept.append(buffers)
        while sum(_nbytes(pair) for pair in kept) > BUFFER_BYTES:
            del kept[0]


def clear_buffers() -> None:
    """Drop the key/value caches kept for later calls (of every model)."""
    with _BUFFERS_LOCK:
        _BUFFERS.clear()


class LlamaDecoder:
    """Batched decoding of a transformers Llama model with a slot per sample.

    ``slots`` samples can be decoded together, each up to ``max_len`` positions (prompt
    included). Rows ``0 .. n-1`` are the live samples; :meth:`step` multiplies at least
    :data:`MIN_ROWS` rows (the spare ones hold nothing that matters) and attends over a
    span rounded up to :data:`SPAN` positions, so that a row goes through the same
    kernels, blocked the same way, whatever the batch holds.
    """

    def __init__(self, model: HFModel, *, slots: int, max_len: int) -> None:
        import torch

        cfg = model.config
        inner = model.model
        self.dtype = next(model.parameters()).dtype
        self.store = prefix_store(model)  # processed prompts kept across calls
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.group = self.n_heads // self.n_kv
        self.scale = self.head_dim**-0.5
        self.eps = float(cfg.rms_norm_eps)
        self.capacity = max(1, int(slots))  # live samples at most
        self.slots = max(self.capacity, MIN_ROWS)  # rows allocated (spare rows pad a step)
        self.max_len = int(math.ceil(max_len / SPAN) * SPAN)
        w = _weights(model)  # built once per model
        self.w_qkv, self.w_gu, self.w_o, self.w_down = w.qkv, w.gate_up, w.o, w.down
        self.lm_head = w.head
        self._linear = rows_product(_packed_linear if w.packed else torch.nn.functional.linear, w.rows)
        with torch.inference_mode():
            lay = inner.layers
            self.ln1 = [m.input_layernorm.weight for m in lay]
            self.ln2 = [m.post_attention_layernorm.weight for m in lay]
            self.embed = inner.embed_tokens.weight
            self.norm = inner.norm.weight
            rot = inner.rotary_emb
            pos = torch.arange(self.max_len, dtype=torch.float32)
            freqs = pos[:, None] * rot.inv_freq.float()[None, :]
            emb = torch.cat([freqs, freqs], dim=-1)
            scaling = float(getattr(rot, "attention_scaling", 1.0))
            self.cos = (emb.cos() * scaling).to(self.dtype)
            self.sin = (emb.sin() * scaling).to(self.dtype)
            # keys stored transposed (positions last): a span of them is then a plain
            # strided matrix for the batched product, which copies nothing
            self._model = weakref.ref(model)
            self._buffers = _take_buffers(model, self.slots, self.max_len)
            if self._buffers is None:
                self._buffers = (
                    torch.zeros(
                        (self.n_layers, self.slots, self.n_kv, self.head_dim, self.max_len), dtype=self.dtype
                    ),
                    torch.zeros(
                        (self.n_layers, self.slots, self.n_kv, self.max_len, self.head_dim), dtype=self.dtype
                    ),
                )
            self.k_cache = self._buffers[0][:, : self.slots]
            self.v_cache = self._buffers[1][:, : self.slots]
        self.q_size = self.n_heads * self.head_dim
        self.kv_size = self.n_kv * self.head_dim

    @staticmethod
    def bytes_per_slot(model: HFModel, max_len: int) -> int:
        cfg = model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        item = next(model.parameters()).element_size()
        return (
            2
            * cfg.num_hidden_layers
            * cfg.num_key_value_heads
            * head_dim
            * item
            * int(math.ceil(max_len / SPAN) * SPAN)
        )

    def release(self) -> None:
        """Hand the key/value cache to the next decoder of this model (this one is not used
        afterwards): allocating and zeroing it cost a battery's short calls more than some
        of their steps (:func:`_take_buffers`)."""
        model, buffers = self._model(), self._buffers
        self._buffers = None
        if model is not None and buffers is not None:
            _give_buffers(model, buffers)

    # ------------------------------------------------------------------ pieces
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        import torch

        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * h.to(self.dtype)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        import torch

        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _mlp(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        import torch.nn.functional as F

        h = self._rms(x, self.ln2[layer])
        gate, up = self._linear(h, self.w_gu[layer]).chunk(2, dim=-1)
        return x + self._linear(F.silu(gate) * up, self.w_down[layer])

    def _logits(self, x: torch.Tensor) -> torch.Tensor:

        return self._linear(self._rms(x, self.norm), self.lm_head)

    # ------------------------------------------------------------------ prompts
    def prefill(self, ids: Sequence[int]) -> PromptState:
        """Process one prompt: :meth:`prefill_many` of one."""
        return self.prefill_many([ids])[0]

    def prefill_many(
        self,
        prompts: Sequence[Sequence[int]],
        prefixes: Sequence[tuple[int, PromptState] | None] | None = None,
    ) -> list[PromptState]:
        """Process several prompts in one pass; their keys and values are copied into a
        slot by :meth:`admit` for every sample of each prompt.

        The prompts' tokens are packed one after the other into one matrix (no padding
        between them): every projection, norm and MLP multiplies all their rows at once,
        at least :data:`MIN_ROWS` of them, and row-wise, so a row's numbers do not depend
        on the other prompts in the pack. Attention is computed per prompt (causal, over
        its own tokens only), by the same operations whatever the pack holds; a prompt
        longer than :data:`ATTENTION_BLOCK` tokens is attended in blocks of that many
        queries, so that its scores take ``heads × block × length`` floats, not
        ``heads × length²``.

        ``prefixes[j]`` = ``(L, state)``: the first L tokens of prompt j are those of an
        already processed prompt ``state``, whose keys and values are reused: only the
        rest of the prompt is computed, attending over both. Every row is computed by the
        same operations as without it (keys and values are row-wise; a query row attends
        over the same positions, in the same blocks), so the result is the same bits
        (tested).
        """
        import torch

        lengths = [len(ids) for ids in prompts]
        if not lengths:
            return []
        for n in lengths:
            if n < 1 or n + 1 > self.max_len:
                raise ValueError(f"prompt of {n} tokens does not fit {self.max_len} positions")
        pre = [0 if p is None else int(p[0]) for p in (prefixes or [None] * len(lengths))]
        for n, skip in zip(lengths, pre, strict=True):
            if not 0 <= skip < n:
                raise ValueError(
                    f"a reused prefix of {skip} tokens must be shorter than the prompt ({n} tokens)"
                )
        new = [n - skip for n, skip in zip(lengths, pre, strict=True)]  # rows computed
        total = sum(new)
        rows = max(total, MIN_ROWS)
        starts = np.concatenate([[0], np.cumsum(new)[:-1]]).tolist()
        d = self.head_dim
        with torch.inference_mode():
            tok = torch.zeros(rows, dtype=torch.long)
            tok[:total] = torch.as_tensor(
                [t for ids, skip in zip(prompts, pre, strict=True) for t in ids[skip:]], dtype=torch.long
            )
            pos = torch.zeros(rows, dtype=torch.long)
            pos[:total] = torch.cat([torch.arange(skip, n) for n, skip in zip(lengths, pre, strict=True)])
            x = self.embed[tok]  # (rows, hidden)
            cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
            keys = [torch.empty((self.n_layers, self.n_kv, n, d), dtype=self.dtype) for n in lengths]
            values = [torch.empty_like(k) for k in keys]
            for j, skip in enumerate(pre):
                if skip:
                    base = prefixes[j][1]  # type: ignore[index]  # skip > 0: a prefix given
                    keys[j][:, :, :skip] = base.keys[:, :, :skip]
                    values[j][:, :, :skip] = base.values[:, :, :skip]
            o = torch.zeros((rows, self.q_size), dtype=self.dtype)  # padding rows: zeros
            for i in range(self.n_layers):
                h = self._rms(x, self.ln1[i])
                qkv = self._linear(h, self.w_qkv[i])
                q = self._rope(qkv[:, : self.q_size].view(rows, self.n_heads, d), cos, sin)
                k = self._rope(
                    qkv[:, self.q_size : self.q_size + self.kv_size].view(rows, self.n_kv, d), cos, sin
                )
                v = qkv[:, self.q_size + self.kv_size :].view(rows, self.n_kv, d)
                for j, (s, n, skip) in enumerate(zip(starts, new, pre, strict=True)):
                    keys[j][i, :, skip:] = k[s : s + n].transpose(0, 1)
                    values[j][i, :, skip:] = v[s : s + n].transpose(0, 1)
                    o[s : s + n] = self._attend(q[s : s + n], keys[j][i], values[j][i], offset=skip)
                x = x + self._linear(o, self.w_o[i])
                x = self._mlp(x, i)
            last = torch.zeros(max(len(lengths), MIN_ROWS), dtype=torch.long)
            last[: len(lengths)] = torch.as_tensor([s + n - 1 for s, n in zip(starts, new, strict=True)])
            logits = self._logits(x[last])[: len(lengths)].float()
        return [PromptState(n, keys[j], values[j], logits[j].clone()) for j, n in enumerate(lengths)]

    def _attend(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, offset: int = 0
    ) -> torch.Tensor:
        """Causal attention of the queries of positions ``offset ..`` of one prompt: ``q``
        (n - offset, heads, d) over its ``keys`` and ``values`` (kv heads, n, d); returns
        (n - offset, heads × d). The blocks of queries are those of the whole prompt, and a
        block that starts before ``offset`` is multiplied whole (zero queries in front): the
        products have the shapes they have without a reused prefix, so the same kernels give
        the same bits (a matrix product's kernel, hence its rounding, can depend on its
        number of rows)."""
        import torch

        n = keys.shape[1]
        qh = q.transpose(0, 1)  # (heads, rows, d)
        kh = keys.repeat_interleave(self.group, dim=0)
        vh = values.repeat_interleave(self.group, dim=0)
        out = []
        for a0 in range((offset // ATTENTION_BLOCK) * ATTENTION_BLOCK, n, ATTENTION_BLOCK):
            a, b = max(a0, offset), min(n, a0 + ATTENTION_BLOCK)
            qb = qh[:, a - offset : b - offset]
            if a > a0:
                qb = torch.cat([qb.new_zeros((qb.shape[0], a - a0, qb.shape[2])), qb], dim=1)
            mask = torch.full((b - a0, b), float("-inf")).triu_(a0 + 1)
            s = torch.matmul(qb, kh[:, :b].transpose(1, 2)).float() * self.scale + mask
            o = torch.matmul(torch.softmax(s, dim=-1).to(self.dtype), vh[:, :b])[:, a - a0 :]
            out.append(o.transpose(0, 1).reshape(b - a, self.q_size))
        return out[0] if len(out) == 1 else torch.cat(out)

    def admit(self, slot: int, prompt: PromptState) -> None:
        """Give ``slot`` the keys and values of ``prompt``."""
        import torch

        n = prompt.length
        with torch.inference_mode():
            self.k_cache[:, slot, :, :, :n] = prompt.keys.transpose(-1, -2)
            self.v_cache[:, slot, :, :n] = prompt.values

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``src`` into slot ``dst``."""
        import torch

        with torch.inference_mode():
            self.k_cache[:, dst, ..., :length] = self.k_cache[:, src, ..., :length]
            self.v_cache[:, dst, :, :length] = self.v_cache[:, src, :, :length]

    # ------------------------------------------------------------------ one token
    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
        """Logits ``(len(tokens), vocab)`` (float32) of the next token of rows
        ``0 .. len(tokens)-1``, whose current token ``tokens[r]`` sits at ``positions[r]``
        (its keys and values are written there)."""
        import torch

        n = len(tokens)
        rows = max(n, MIN_ROWS)
        tok = torch.zeros(rows, dtype=torch.long)
        pos = torch.zeros(rows, dtype=torch.long)
        tok[:n] = torch.as_tensor(list(tokens), dtype=torch.long)
        pos[:n] = torch.as_tensor(list(positions), dtype=torch.long)
        span = int(math.ceil((int(pos.max()) + 1) / SPAN) * SPAN)
        kv, g, d = self.n_kv, self.group, self.head_dim
        with torch.inference_mode():
            hide = (torch.arange(span)[None, :] > pos[:, None])[:, None, None, :]
            mask = torch.zeros((rows, 1, 1, span)).masked_fill_(hide, float("-inf"))
            idx = torch.arange(rows)
            x = self.embed[tok]
            cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
            for i in range(self.n_layers):
                h = self._rms(x, self.ln1[i])
                qkv = self._linear(h, self.w_qkv[i])
                q = self._rope(qkv[:, : self.q_size].view(rows, self.n_heads, d), cos, sin)
                k = self._rope(qkv[:, self.q_size : self.q_size + self.kv_size].view(rows, kv, d), cos, sin)
                v = qkv[:, self.q_size + self.kv_size :].view(rows, kv, d)
                kc, vc = self.k_cache[i], self.v_cache[i]
                kc[idx, :, :, pos] = k
                vc[idx, :, pos] = v
                kt = kc[:rows, ..., :span].reshape(rows * kv, d, span)
                vs = vc[:rows, :, :span].reshape(rows * kv, span, d)
                s = torch.bmm(q.reshape(rows * kv, g, d), kt)
                s = s.float().view(rows, kv, g, span) * self.scale + mask
                p = torch.softmax(s, dim=-1).to(self.dtype).view(rows * kv, g, span)
                o = torch.bmm(p, vs).reshape(rows, self.q_size)
                x = x + self._linear(o, self.w_o[i])
                x = self._mlp(x, i)
            return self._logits(x)[:n].float()  # all rows: the same GEMM shape alone or not


# --------------------------------------------------------------------------- batching
@dataclass
class _Row:
    req: Any
    prompt: tuple
    seed: int
    temperature: float
    top_p: float
    max_tokens: int
    tokens: list[int] = field(default_factory=list)
    position: int = 0  # where the row's current (last drawn) token goes


@dataclass
class GenerationStats:
    """What one :func:`generate_continuous` call did (for progress and benchmarks)."""

    samples: int = 0
    tokens: int = 0
    ended: int = 0  # samples that ended with an end-of-sequence token
    steps: int = 0
    prompts: int = 0
    seconds: float = 0.0
    stopped: bool = False
    steps_on_threads: dict[int, int] = field(default_factory=dict)  # thread count -> steps
    prompt_tokens: int = 0  # tokens of the prompts processed
    prompt_tokens_reused: int = 0  # of them, those whose keys and values came from a shared prefix
    packs: int = 0  # prefill passes (several prompts each)
    packs_on_workers: int = 0  # of them, those run on the worker threads
    seconds_prefill_here: float = 0.0  # spent on the other packs (in the calling thread)
    prefill_threads: dict[int, int] = field(default_factory=dict)  # thread count -> those packs


def slots_for(model: HFModel, *, samples: int, max_len: int, cap: int | None = None) -> int:
    """How many of ``samples`` to decode together: at most ``cap`` (default
    :data:`MAX_ROWS`), with a key/value cache of at most :data:`KV_BUDGET` bytes and at
    most 1/8 of the free memory."""
    per = LlamaDecoder.bytes_per_slot(model, max_len)
    budget = KV_BUDGET
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        budget = min(budget, free // 8)
    except (ValueError, OSError, AttributeError):
        pass
    return max(1, min(samples, cap or MAX_ROWS, budget // per))


class ThreadTuner:
    """Picks torch's thread count for decoding steps by timing them.

    On a machine whose cores are shared with other work, torch's two threads wait for
    each other whenever one is descheduled: a step then takes 3–15 times longer than on
    one thread (measured on 2-core development machines with one core kept busy: ~1 s
    against 70–140 ms); on an idle one, two threads are ~1.5× faster. So a call starts on
    every core when no other work keeps one busy now (:func:`free_cores`, which does not
    count this process's own spinning threads), on one thread when some does or when it
    cannot be told, or on the count the last call kept. After :attr:`PROBE_EVERY` steps,
    and then every :attr:`PROBE_EVERY` steps, :attr:`PROBE_STEPS` steps run on the other
    count, and the faster one (median of the last three steps of each) is kept; a call
    that knows nothing and saw no busy core probes early, after two steps, since a
    battery's calls are often shorter than :attr:`PROBE_EVERY` steps.

    Probing is bounded in cost: a probe whose first step is much slower (:attr:`ABORT`
    times the kept count's median) ends at once, and a slow probe doubles the wait before
    the next one (up to :attr:`MAX_INTERVAL` steps). A call that starts on one thread
    because other work keeps a core busy does not probe more threads early: on such a
    machine each step on two stalled threads costs as much as ten on one, and an early
    probe cost a short battery two seconds in every call that started busy.

    A previous call's choice is not trusted when the machine has changed since: several
    threads while other work now keeps cores busy (:func:`free_cores` below that count),
    or one thread while every core is free now. The call then starts as if nothing were
    known (after a busy spell every later call had stayed on one thread). The thread
    count does not change a sample (tested): each row's numbers are computed the same way
    on one thread or two.
    """

    PROBE_EVERY = 24
    PROBE_STEPS = 2
    MAX_INTERVAL = 192
    ABORT = 1.5  # a probe step this much slower than the kept count ends the probe

    def __init__(self, start: int | None = None) -> None:
        import torch

        self._torch = torch
        self.initial = torch.get_num_threads()
        self.best = self.initial
        self.other = 1 if self.initial > 1 else None
        self.known = False  # True once steps were timed here, or a previous call's choice given
        busy = False  # other work keeps a core busy now: no early probe of more threads
        if self.other is not None:
            # nothing known: one thread first (several stall on a busy machine far more
            # than one loses on an idle one); a previous call's choice: kept, and the
            # other tried only after PROBE_EVERY
            self.best, self.other = 1, self.initial
            free = free_cores() if start is None or start in (1, self.initial) else None
            busy = free is not None and free < self.initial
            if start is not None and start > 1 and busy:
                start = None  # busy now: several would stall
            elif start == 1 and free is not None and free >= self.initial:
                start = None  # one thread was kept while busy; every core is free now
            if start in (1, self.initial):
                self.best, self.other = start, (self.initial if start == 1 else 1)
                self.known = True
            elif start is None and free is not None and free >= self.initial:
                # nothing known, but no other work keeps a core busy now: start on every
                # core (and still probe one thread after two steps)
                self.best, self.other = self.initial, 1
        self.recent: dict[int, list[float]] = {self.initial: [], 1: []}
        self.steps = 0
        self.interval = self.PROBE_EVERY
        self.next_probe = self.PROBE_EVERY if self.known or busy else 2
        self.probing = 0
        self.probes = 0
        self.steps_on: dict[int, int] = {}

    def threads(self) -> int:
        """Set (and return) the thread count for the next step."""
        if self.other is not None and not self.probing and self.steps >= self.next_probe:
            self.probing = self.PROBE_STEPS
            self.probes += 1
        n = self.other if self.probing else self.best
        assert n is not None  # probing only where there is another count to try
        return self._use(n)

    def record(self, threads: int, seconds: float) -> None:
        self.steps += 1
        self.known = self.known or self.steps > self.PROBE_STEPS + 2  # one probe at least
        self.steps_on[threads] = self.steps_on.get(threads, 0) + 1
        times = self.recent.setdefault(threads, [])
        times.append(seconds)
        del times[:-3]
        if not self.probing or threads != self.other:
            return
        self.probing -= 1
        mine = float(np.median(self.recent[self.best] or [np.inf]))
        if seconds > self.ABORT * mine:
            # a stalled probe (two threads on a busy machine): not worth another step
            self.probing = 0
            self.interval = min(2 * self.interval, self.MAX_INTERVAL)
            self.next_probe = self.steps + self.interval
            return
        if self.probing:
            return
        theirs = float(np.median(self.recent[self.other]))
        if theirs < 0.9 * mine:
            self.best, self.other = self.other, self.best
            self.interval = self.PROBE_EVERY
        elif theirs > 1.5 * mine:
            self.interval = min(2 * self.interval, self.MAX_INTERVAL)
        self.next_probe = self.steps + self.interval

    def settle(self) -> int:
        """Set (and return) the faster thread count so far — while nothing is timed, the
        count the call started on (one thread unless the cores were free: several threads
        stall on a busy machine far more than one loses on an idle one) — without probing
        (for work other than a decoding step)."""
        return self._use(self.best)

    def one_thread(self) -> None:
        """One torch thread for work between steps while other threads keep the cores busy
        (the next :meth:`threads` or :meth:`settle` sets the count again)."""
        self._use(1)

    def restore(self, *, force: bool = False) -> None:
        """Torch's thread count as it was; ``force``: set it even when this thread has it
        already (torch's default for new threads follows the last count set anywhere)."""
        if force or self._torch.get_num_threads() != self.initial:
            self._torch.set_num_threads(self.initial)

    def _use(self, n: int) -> int:
        """Torch's thread count set to ``n`` (only when it is another: setting it is not free)."""
        if self._torch.get_num_threads() != n:
            self._torch.set_num_threads(n)
        return n


def expected_tokens(drawn: int, ended: int, open_rows: Sequence[tuple[int, int]]) -> int:
    """Tokens drawn so far plus an estimate of those still to come, for an ETA.

    Each draw ends a sample with the same probability ``h`` (estimated as ``ended``
    end-of-sequence draws out of all draws, so samples cut at ``max_tokens`` count as
    censored, not as short): a sample that has ``n`` of its at most ``m`` tokens yields
    ``(1-h)(1-(1-h)^(m-n))/h`` more on average (``m - n`` while no sample has ended).

    Parameters
    ----------
    drawn : int
        Tokens drawn so far (end-of-sequence draws not counted).
    ended : int
        Samples ended by an end-of-sequence token so far.
    open_rows : sequence of (tokens so far, max_tokens)
        The samples still running or waiting.
    """
    h = ended / (drawn + ended) if drawn + ended else 0.0
    rest = 0.0
    for n, m in open_rows:
        left = max(0, m - n)
        rest += left if h <= 0 else (1 - h) * (1 - (1 - h) ** left) / h
    return drawn + round(rest)


_LAST_THREADS: int | None = None  # the thread count the last call's steps found faster


def pack_prompts(
    prompts: Sequence[tuple], budget: int = PACK_TOKENS, size: Callable[[tuple], int] = len
) -> list[list[tuple]]:
    """Consecutive prompts grouped into packs of at most ``budget`` tokens (a longer
    prompt is a pack of its own), in order.

    Examples
    --------
    >>> [len(p) for p in pack_prompts([(1,) * 300, (2,) * 200, (3,) * 100, (4,) * 900])]
    [2, 1, 1]
    """
    packs: list[list[tuple]] = []
    used = 0
    for p in prompts:
        n = size(p)  # the tokens to compute (all, or those after a reused prefix)
        if packs and used + n <= budget:
            packs[-1].append(p)
            used += n
        else:
            packs.append([p])
            used = n
    return packs


def _split_tail(
    packs: list[list[tuple]], workers: int, size: Callable[[tuple], int] = len
) -> list[list[tuple]]:
    """``packs`` with each of the last ``workers`` packs split in two halves (by tokens,
    as even as the prompts allow), the halves run largest first: the workers then finish
    within a fraction of a pack of each other (a worker otherwise sat idle for up to half a
    second at the end of a battery's prefill).

    Examples
    --------
    >>> packs = [[(1,) * 4] * 4, [(2,) * 4] * 4, [(3,) * 4] * 4, [(4,) * 2, (4,) * 8]]
    >>> [[len(p) for p in pack] for pack in _split_tail(packs, 2)]
    [[4, 4, 4, 4], [4, 4, 4, 4], [4, 4], [4, 4], [8], [2]]
    """
    if len(packs) < 2 * workers:
        return packs
    pieces = []
    for pack in packs[-workers:]:
        total = sum(map(size, pack))
        used, best, cut = 0, total, 0
        for i, p in enumerate(pack):
            if abs(2 * used - total) < best:
                best, cut = abs(2 * used - total), i
            used += size(p)
        pieces += [pack[:cut], pack[cut:]] if cut else [pack]
    pieces.sort(key=lambda pack: -sum(map(size, pack)))
    return packs[:-workers] + pieces


def prefill_workers() -> int:
    """How many packs of prompts are prefilled at once, each on one thread: as many as
    torch has threads (the cores this process may use)."""
    import torch

    return max(1, torch.get_num_threads())


class _Pack(list):
    """A pack of prompts to run in the calling thread, and its states once run."""

    done: dict[tuple, PromptState] | None = None


def _common_length(a: tuple, b: tuple) -> int:
    """The number of leading tokens that ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Prefill:
    """The prompts of the samples about to join the batch, processed in packs
    (:meth:`LlamaDecoder.prefill_many`), handed over in the order they are needed.

    When torch has two threads or more, the prompts make at least as many packs as that
    (when there are prompts enough), and each pack runs on a worker thread of its own that
    uses one torch thread: packs do not wait for each other, so a core taken by another
    process slows one pack down instead of stalling every matrix product at each of
    torch's barriers (with load average ~10 on 2 cores, 48 battery prompts took 230 s in
    packs on torch's two threads, 18 s on two workers). A lone prompt runs in the calling
    thread on the thread count that the decoding steps found faster, one thread while they
    have not shown it (:meth:`ThreadTuner.settle`). Neither changes a prompt's numbers:
    each row is computed the same way on any thread.

    Prompts that begin alike (a battery's variants of one item share the chat template,
    the instruction and often the passage) are not processed from scratch: a prompt that
    shares at least :data:`MIN_SHARED` leading tokens with one processed before (one of the
    last :data:`KEEP_PROMPTS` of this call, or one kept from an earlier call in the model's
    :class:`PrefixStore`) or with an earlier one of the same request reuses that
    prompt's keys and values for them and computes only the rest (in a wave after that
    prompt's: the instruction shared by all, then a passage shared by the variants of one
    question). The result is the same bits (tested)."""

    def __init__(self, dec: LlamaDecoder, tuner: ThreadTuner, stats: GenerationStats) -> None:
        self.dec, self.tuner, self.stats = dec, tuner, stats
        self.workers = prefill_workers()
        self.pool: Any = None  # a ThreadPoolExecutor, started when packs first run in parallel
        self.waiting: dict[tuple, Any] = {}  # prompt -> its pack (a Future or a list)
        # processed prompts: those kept from earlier calls, then this call's (the last few)
        self.known: dict[tuple, PromptState] = dec.store.snapshot()
        self.from_store = len(self.known)
        self.plan: dict[tuple, tuple[int, Any, Any]] = {}  # prompt -> (L, base, base's job)

    def _base_for(self, p: tuple, earlier: Sequence[tuple]) -> tuple[int, tuple | None]:
        best, src = 0, None
        for q in (*self.known, *earlier):
            n = _common_length(p, q)
            if n > best:
                best, src = n, q
        best = min(best, len(p) - 1)
        return (best, src) if best >= MIN_SHARED else (0, None)

    def request(self, prompts: Sequence[tuple]) -> None:
        """Start processing ``prompts`` (those not asked for yet): in packs of about
        :data:`PACK_TOKENS` tokens, and at least one per worker when there are prompts
        enough; a prompt sharing a prefix with an earlier one of the same request in a later
        wave than it (at most :data:`PREFILL_WAVES`)."""
        todo = [p for p in dict.fromkeys(prompts) if p not in self.waiting]
        waves: list[list[tuple]] = [[] for _ in range(PREFILL_WAVES)]
        level: dict[tuple, int] = {}
        bases: dict[tuple, tuple[int, tuple]] = {}
        for p in todo:
            # the longest shared prefix among the prompts kept and those of the waves
            # before the last (a prompt of the last wave cannot feed another)
            n, src = self._base_for(p, [q for q in level if level[q] < PREFILL_WAVES - 1])
            level[p] = 0 if src is None or src in self.known else level[src] + 1
            if src is not None:
                bases[p] = (n, src)
            waves[level[p]].append(p)
        for i, wave in enumerate(waves):
            if not wave:
                continue

            def new_tokens(p: tuple) -> int:
                return len(p) - bases.get(p, (0, None))[0]

            total = sum(map(new_tokens, wave))
            parts = min(len(wave), max(self.workers, math.ceil(total / PACK_TOKENS)))
            packs = pack_prompts(wave, budget=max(1, math.ceil(total / max(parts, 1))), size=new_tokens)
            pooled = self.workers > 1 and len(packs) > 1
            if pooled and not any(waves[i + 1 :]):
                packs = _split_tail(packs, self.workers, new_tokens)
            if pooled and i:
                # a worker never runs a pack meant for the calling thread: such a pack of an
                # earlier wave runs now, before the wave it feeds
                for p in {bases[p][1] for p in wave}:
                    if isinstance(self.waiting.get(p), _Pack):
                        self._materialize(self.waiting[p])
            if pooled and self.pool is None:
                import concurrent.futures

                self.pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix="dbpa-prefill", initializer=_one_thread
                )
            for pack in packs:
                for p in pack:
                    if p in bases:
                        n, src = bases[p]
                        ref: Any = self.known.get(src)
                        if ref is None:
                            ref = self.waiting[src]
                        else:
                            self.dec.store.touch(src)
                        if isinstance(ref, _Pack) and ref.done is not None:
                            ref = ref.done
                        self.plan[p] = (n, src, ref)
                job = self.pool.submit(self._run, pack) if pooled else _Pack(pack)
                for p in pack:
                    self.waiting[p] = job

    def _state_of(self, base: tuple, ref: Any) -> PromptState:
        """A processed prompt, from what :meth:`request` recorded for it."""
        if isinstance(ref, PromptState):
            return ref
        if isinstance(ref, _Pack):  # a pack for the calling thread
            return self._materialize(ref)[base]
        if isinstance(ref, dict):
            return ref[base]
        return ref.result()[base]  # a Future (a worker of the same pool)

    def _materialize(self, job: _Pack) -> dict[tuple, PromptState]:
        if job.done is None:
            n = self.tuner.settle()
            t = time.perf_counter()
            job.done = self._run(job)
            self.stats.seconds_prefill_here += time.perf_counter() - t
            self.stats.prefill_threads[n] = self.stats.prefill_threads.get(n, 0) + 1
            self.stats.packs += 1
        return job.done

    def _run(self, pack: list[tuple]) -> dict[tuple, PromptState]:
        prefixes = []
        for p in pack:
            plan = self.plan.get(p)
            prefixes.append(None if plan is None else (plan[0], self._state_of(plan[1], plan[2])))
        states = self.dec.prefill_many(pack, prefixes) if any(prefixes) else self.dec.prefill_many(pack)
        return dict(zip(pack, states, strict=True))

    def _keep(self, prompt: tuple, state: PromptState) -> None:
        self.known[prompt] = state
        self.dec.store.put(prompt, state)
        while len(self.known) > KEEP_PROMPTS + self.from_store:
            del self.known[next(iter(self.known))]

    def get(self, prompt: tuple, should_stop: Callable[[], bool] | None) -> PromptState | None:
        """The processed ``prompt`` (asked for with :meth:`request`); None when
        ``should_stop`` turned True while it was waited for."""
        job = self.waiting[prompt]
        if isinstance(job, _Pack):  # not started: run it here
            done = self._materialize(job)
            for p in job:
                if self.waiting.get(p) is job:
                    self.waiting[p] = done
            job = done
        elif not isinstance(job, dict):  # a Future
            import concurrent.futures

            while True:
                try:
                    result = job.result(timeout=0.1)
                    break
                except concurrent.futures.TimeoutError:
                    if should_stop is not None and should_stop():
                        return None
            self.stats.packs += 1
            self.stats.packs_on_workers += 1
            for p in result:
                if self.waiting.get(p) is job:
                    self.waiting[p] = result
            job = result
        del self.waiting[prompt]
        plan = self.plan.pop(prompt, None)
        self.stats.prompts += 1
        self.stats.prompt_tokens += len(prompt)
        self.stats.prompt_tokens_reused += 0 if plan is None else plan[0]
        state = job[prompt]
        self._keep(prompt, state)
        return state

    def close(self, *, wait: bool = True) -> None:
        """Shut the workers down. ``wait=False`` (a stopped or failed call) does not wait
        for a pack a worker is computing: its result is not needed, and the caller gives
        up its claims at once instead of seconds later (the next run never waits for it)."""
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
            self.pool = None
            self.tuner.restore(force=True)  # the workers' one thread is torch's default


def admission_plan(slots: int, samples: int, max_tokens: int) -> Callable[[int], int]:
    """How many samples may be decoded together at each step: ``step -> rows``.

    All ``slots`` at once when every sample fits in them (one wave: the fastest, and
    staggering it would only add steps). With more samples than slots, the first wave
    joins in groups of :data:`MIN_ROWS` (a step costs the same below that many rows), a
    group every ``max_tokens × group / slots`` steps, until the slots are full. Samples
    that start together end together (most run to ``max_tokens``); staggered, they end a
    group at a time from the first group's ``max_tokens`` steps on, on a batch still
    growing (cheaper steps), so a stop keeps the groups that ended instead of a whole
    unfinished batch. Every later sample takes a slot the moment one is free, so the
    steps are about as many as unstaggered (as many when the samples are 1.25 slots),
    and the first wave's are cheaper.

    Examples
    --------
    >>> plan = admission_plan(64, 200, 120)
    >>> [plan(s) for s in (0, 29, 30, 60, 90, 500)]
    [16, 16, 32, 48, 64, 64]
    >>> admission_plan(64, 40, 120)(0)
    64
    """
    group = min(MIN_ROWS, slots)
    if samples <= slots or group == slots:
        return lambda step: slots
    every = max(1, max_tokens * group // slots)

    def rows(step: int) -> int:
        return min(slots, group * (1 + step // every))

    return rows


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def generate_continuous(
    decoder_for: Callable[[int, int], LlamaDecoder],
    items: Sequence[tuple[Any, Sequence[int], int, float, float, int]],
    *,
    eos: set[int],
    on_done: Callable[[Any, list[int], int], None],
    on_tokens: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> GenerationStats:
    """Sample every item with continuous batching; returns what was done.

    Parameters
    ----------
    decoder_for : callable
        ``(number of samples, max_len) -> LlamaDecoder``: a decoder with as many slots as
        it should decode together (see :func:`slots_for`), each of ``max_len`` positions.
    items : sequence of (request, prompt token ids, seed, temperature, top_p, max_tokens)
    eos : set of int
        Tokens that end a sample (not part of it).
    on_done : callable
        ``(request, token ids, prompt length)``, called the moment a sample ends.
    on_tokens : callable, optional
        ``(tokens drawn so far, expected total)`` after every step and before every
        handover (see :func:`expected_tokens` for the estimate).
    should_stop : callable, optional
        Polled before every step; when True the call returns (finished samples are out).
    """
    t0 = time.perf_counter()
    stats = GenerationStats()
    if not items:
        return stats
    max_len = max(len(ids) + mt for _, ids, _, _, _, mt in items) + 1
    queue = [
        _Row(req, tuple(ids), int(seed), float(t), float(p), int(mt)) for req, ids, seed, t, p, mt in items
    ]
    queue.reverse()  # pop() takes them in order
    dec = decoder_for(len(queue), max_len)
    slots = dec.capacity
    admit = admission_plan(slots, len(queue), sorted(r.max_tokens for r in queue)[len(queue) // 2])
    remaining_by_prompt: dict[tuple, int] = {}
    for r in queue:
        remaining_by_prompt[r.prompt] = remaining_by_prompt.get(r.prompt, 0) + 1
    prompts: dict[tuple, PromptState] = {}
    live: list[_Row] = []

    def finish(row: _Row) -> None:
        stats.samples += 1
        if on_tokens is not None:  # counts first: the caller's report of this sample has them
            on_tokens(stats.tokens, expected_total())
        on_done(row.req, row.tokens, len(row.prompt))

    def expected_total() -> int:
        open_rows = [(len(r.tokens), r.max_tokens) for r in live]
        open_rows += [(0, r.max_tokens) for r in queue]
        return expected_tokens(stats.tokens, stats.ended, open_rows)

    def draw(rows: list[_Row], logits: torch.Tensor) -> list[int]:
        out = [0] * len(rows)
        groups: dict[tuple[float, float], list[int]] = {}
        for j, r in enumerate(rows):
            groups.setdefault((r.temperature, r.top_p), []).append(j)
        for (temp, top_p), js in groups.items():
            seeds = np.array([rows[j].seed for j in js], dtype=np.uint64)
            counters = np.array([len(rows[j].tokens) for j in js], dtype=np.uint64)
            u = splitmix_uniforms(seeds, counters)
            sel = logits if len(js) == len(rows) else logits[list(js)]
            toks = draw_tokens(sel, u, temperature=temp, top_p=top_p).tolist()
            for j, t in zip(js, toks, strict=True):
                out[j] = t
        return out

    def accept(row: _Row, token: int) -> bool:
        """Add a drawn token; True when the row is finished."""
        if token in eos:
            stats.ended += 1
            return True
        row.tokens.append(token)
        stats.tokens += 1
        return len(row.tokens) >= row.max_tokens

    def _decode_loop() -> None:
        while queue or live:
            if should_stop is not None and should_stop():
                stats.stopped = True
                break
            # new samples take the free slots; each prompt is processed once for all its
            # samples, the prompts of the samples joining now together (see _Prefill)
            room = admit(stats.steps)
            while queue and len(live) < room:
                row = queue[-1]
                state = prompts.get(row.prompt)
                if state is None:
                    if row.prompt not in prefill.waiting:
                        prefill.request(
                            [r.prompt for r in queue[-(room - len(live)) :][::-1] if r.prompt not in prompts]
                        )
                    state = prefill.get(row.prompt, should_stop)
                    if state is None:
                        stats.stopped = True
                        return
                    prompts[row.prompt] = state
                queue.pop()
                remaining_by_prompt[row.prompt] -= 1
                if not remaining_by_prompt[row.prompt]:
                    del prompts[row.prompt]
                row.position = state.length
                if row.max_tokens <= 0 or accept(row, draw([row], state.logits[None, :])[0]):
                    finish(row)
                    continue
                if prefill.pool is not None:
                    # workers may be computing packs on every core: torch's threads here
                    # would wait for a descheduled one at each barrier (14 ms for a 1 ms copy)
                    tuner.one_thread()
                dec.admit(len(live), state)
                live.append(row)
            if not live:
                continue
            n_threads = tuner.threads()
            t_step = time.perf_counter()
            logits = dec.step([r.tokens[-1] for r in live], [r.position for r in live])
            tuner.record(n_threads, time.perf_counter() - t_step)
            stats.steps += 1
            drawn = draw(live, logits)
            done = []
            for j, (row, token) in enumerate(zip(live, drawn, strict=True)):
                row.position += 1
                if accept(row, token):
                    done.append(j)
            for j in reversed(done):  # the last live row fills the hole
                row = live[j]
                last = len(live) - 1
                if j != last:
                    dec.move(last, j, live[last].position)
                    live[j] = live[last]
                live.pop()
                finish(row)
            if on_tokens is not None and not done:
                on_tokens(stats.tokens, expected_total())

    global _LAST_THREADS
    tuner = ThreadTuner(start=_LAST_THREADS)
    prefill = _Prefill(dec, tuner, stats)
    failed = False
    try:
        _decode_loop()
    except BaseException:
        failed = True
        raise
    finally:
        prefill.close(wait=not (failed or stats.stopped))
        dec.release()
        tuner.restore()
        if tuner.known:
            _LAST_THREADS = tuner.best  # the next call starts from it (and keeps probing)
    stats.steps_on_threads = dict(tuner.steps_on)
    stats.seconds = time.perf_counter() - t0
    return stats
