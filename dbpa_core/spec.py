"""Audit specs: YAML in, a validated :class:`AuditSpec` out.

Mistakes (an unknown key, a missing prompt, samples < 2, a replay file that
does not exist, ...) are rejected before any call, with the line that is wrong.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .measures import DEFAULT_MEASURE, MEASURES, NULLS
from .multitest import METHODS

BACKENDS = ("local", "openai", "hf", "replay")
EMBEDDER_BACKENDS = ("local", "sentence-transformers", "openai", "bleu", "rouge1", "rouge2",
                     "rougeL")
ROLES = ("control", "target")

TOP_KEYS = {"name", "description", "model", "models", "embedder", "samples", "temperature",
            "top_p", "max_tokens", "permutations", "measure", "correction", "alpha", "seed",
            "system_prompt", "base", "perturbations", "prices", "sequential", "min_effect",
            "null"}
MODEL_KEYS = {"backend", "name", "label", "base_url", "api_key_env", "path", "file",
              "concurrency", "max_retries", "timeout", "n_per_request", "batch_size",
              "temperature"}
EMBEDDER_KEYS = {"backend", "name", "path", "base_url", "api_key_env", "concurrency",
                 "max_retries", "timeout"}
BASE_KEYS = {"prompt", "system_prompt"}
PERTURBATION_KEYS = {"name", "prompt", "prefix", "suffix", "system_prompt", "role"}


class SpecError(ValueError):
    """A spec mistake; the message names the file and line."""


@dataclass(frozen=True)
class Perturbation:
    name: str
    prompt: str
    role: str | None = None
    system_prompt: str | None = None


@dataclass(frozen=True)
class AuditSpec:
    """A validated audit.

    ``models`` holds one backend config per model: a single entry for a
    perturbation audit, or the reference model first for a model comparison
    (``mode == "models"``), where ``perturbations`` is empty.
    """

    models: tuple[dict[str, Any], ...]
    embedder: dict[str, Any]
    base_prompt: str
    perturbations: tuple[Perturbation, ...] = ()
    system_prompt: str | None = None
    samples: int = 20
    temperature: float = 0.8
    top_p: float = 1.0
    max_tokens: int = 300
    permutations: int = 2000
    measure: str = DEFAULT_MEASURE
    correction: str = "holm"
    alpha: float = 0.05
    seed: int = 0
    sequential: int | None = None
    null: str = "base"
    min_effect: float | None = None
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    name: str = "audit"
    description: str = ""
    source: str = "<spec>"

    @property
    def mode(self) -> str:
        return "models" if len(self.models) > 1 or not self.perturbations else "perturbation"

    @property
    def model(self) -> dict[str, Any]:
        return self.models[0]

    @property
    def n_tests(self) -> int:
        """Tests corrected together: the perturbations, or the models but the reference."""
        return max(1, len(self.perturbations) if self.mode == "perturbation"
                   else len(self.models) - 1)

    def attainability(self):
        """What this spec's k, B, correction and α allow at best: an
        :class:`~dbpa_core.types.Attainability` (no call is made)."""
        from .power import attainable_significance

        return attainable_significance(self.samples, n_permutations=self.permutations,
                                       n_tests=self.n_tests, correction=self.correction,
                                       alpha=self.alpha, measure=self.measure, null=self.null)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (holds names of key variables, never keys)."""
        return {
            "name": self.name, "description": self.description, "mode": self.mode,
            "models": [dict(m) for m in self.models], "embedder": dict(self.embedder),
            "base": {"prompt": self.base_prompt, "system_prompt": self.system_prompt},
            "perturbations": [{"name": p.name, "prompt": p.prompt, "role": p.role,
                               "system_prompt": p.system_prompt} for p in self.perturbations],
            "samples": self.samples, "temperature": self.temperature, "top_p": self.top_p,
            "max_tokens": self.max_tokens, "permutations": self.permutations,
            "measure": self.measure, "correction": self.correction, "alpha": self.alpha,
            "seed": self.seed, "sequential": self.sequential, "null": self.null,
            "min_effect": self.min_effect,
        }


def model_label(config: dict[str, Any]) -> str:
    """A short display name of a model config."""
    if config.get("label"):
        return str(config["label"])
    if config.get("backend", "local") == "local":
        t = config.get("temperature")
        return "SmolLM2-135M (local)" + (f" T={t:g}" if t is not None else "")
    if config.get("name"):
        return str(config["name"])
    return os.path.basename(str(config.get("path") or config.get("file") or "model"))


# --------------------------------------------------------------------------- YAML with lines
class _Doc:
    def __init__(self, source: str):
        self.source = source
        self.lines: dict[tuple, int] = {}

    def err(self, path: tuple, message: str) -> SpecError:
        line = None
        p = path
        while line is None and p:
            line = self.lines.get(p)
            p = p[:-1]
        where = f"{self.source}, line {line}" if line else self.source
        return SpecError(f"{where}: {message}")

    def convert(self, node: yaml.Node, path: tuple = ()) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                key = knode.value
                if key in out:
                    self.lines[path + (key,)] = knode.start_mark.line + 1
                    raise self.err(path + (key,), f"key {key!r} appears twice")
                self.lines[path + (key,)] = knode.start_mark.line + 1
                out[key] = self.convert(vnode, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, path + (i,)) for i, v in enumerate(node.value)]
        return _scalar(node)


def _scalar(node: yaml.ScalarNode) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _name(path: tuple) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")


def _check_keys(doc: _Doc, obj: Any, allowed: set[str], path: tuple, what: str) -> dict:
    if not isinstance(obj, dict):
        raise doc.err(path, f"{what} must be a mapping of keys to values")
    for key in obj:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else \
                f" (allowed: {', '.join(sorted(allowed))})"
            raise doc.err(path + (key,), f"unknown key {key!r} in {what}{extra}")
    return obj


def _get(doc, obj, key, path, kind, default=None, *, minimum=None, maximum=None,
         choices=None, required=False):
    if key not in obj or obj[key] is None:
        if required:
            raise doc.err(path, f"missing {_name(path + (key,))}")
        return default
    value = obj[key]
    here = path + (key,)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise doc.err(here, f"{_name(here)} must be a whole number, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise doc.err(here, f"{_name(here)} must be a number, got {value!r}")
        value = float(value)
    if kind is str and not isinstance(value, str):
        raise doc.err(here, f"{_name(here)} must be text, got {value!r}")
    if minimum is not None and value < minimum:
        raise doc.err(here, f"{_name(here)} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise doc.err(here, f"{_name(here)} must be <= {maximum}, got {value!r}")
    if choices is not None and value not in choices:
        raise doc.err(here, f"{_name(here)} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _existing(doc: _Doc, obj: dict, path: tuple, key: str, base_dir: Path, what: str) -> str:
    """A required file (``key == "file"``) or folder, relative to the spec's folder."""
    given = _get(doc, obj, key, path, str, required=True)
    full = Path(given) if os.path.isabs(given) else (base_dir / given).resolve()
    if not (full.is_file() if key == "file" else full.is_dir()):
        raise doc.err(path + (key,), f"{what} {given!r} does not exist")
    return str(full)


def _model(doc: _Doc, obj: Any, path: tuple, base_dir: Path) -> dict[str, Any]:
    _check_keys(doc, obj, MODEL_KEYS, path, _name(path))
    backend = _get(doc, obj, "backend", path, str, "local", choices=BACKENDS)
    cfg = {k: v for k, v in obj.items() if v is not None}
    cfg["backend"] = backend
    if backend == "openai":
        _get(doc, obj, "name", path, str, required=True)
        _get(doc, obj, "base_url", path, str)
        _get(doc, obj, "api_key_env", path, str)
        _get(doc, obj, "concurrency", path, int, minimum=1, maximum=256)
        _get(doc, obj, "max_retries", path, int, minimum=0, maximum=20)
        _get(doc, obj, "timeout", path, float, minimum=0.1)
        _get(doc, obj, "n_per_request", path, int, minimum=1, maximum=128)
    elif backend == "hf":
        cfg["path"] = _existing(doc, obj, path, "path", base_dir, "Hugging Face model folder")
    elif backend == "replay":
        cfg["file"] = _existing(doc, obj, path, "file", base_dir, "replay file")
    _get(doc, obj, "batch_size", path, int, minimum=1, maximum=256)
    # a model variant: the same weights sampled at another temperature
    _get(doc, obj, "temperature", path, float, minimum=0.0, maximum=2.0)
    return cfg


def parse_spec(data: str | dict, *, source: str = "<spec>", base_dir: str | os.PathLike = ".") -> AuditSpec:
    """Validate a spec given as YAML text (or an already loaded dict)."""
    doc = _Doc(source)
    base_dir = Path(base_dir)
    if isinstance(data, str):
        try:
            node = yaml.compose(data, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{source}, line {mark.line + 1}" if mark else source
            raise SpecError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if node is None:
            raise SpecError(f"{source}: the spec is empty")
        raw = doc.convert(node)
    else:
        raw = data
    top = _check_keys(doc, raw, TOP_KEYS, (), "the spec")

    if "models" in top and "model" in top:
        raise doc.err(("models",), "give either 'model' (one model) or 'models' (a comparison), not both")
    if "models" in top:
        if not isinstance(top["models"], list) or len(top["models"]) < 2:
            raise doc.err(("models",), "'models' must list at least 2 models; the first is the reference")
        models = tuple(_model(doc, m, ("models", i), base_dir) for i, m in enumerate(top["models"]))
        labels = [model_label(m) for m in models]
        if len(set(labels)) != len(labels):
            raise doc.err(("models",), "two models have the same name: give each a distinct 'label'")
    else:
        models = (_model(doc, top.get("model") or {}, ("model",), base_dir),)

    emb = _check_keys(doc, top.get("embedder") or {}, EMBEDDER_KEYS, ("embedder",), "embedder")
    emb_backend = _get(doc, emb, "backend", ("embedder",), str, "local", choices=EMBEDDER_BACKENDS)
    embedder = {k: v for k, v in emb.items() if v is not None}
    embedder["backend"] = emb_backend
    if emb_backend == "sentence-transformers":
        embedder["path"] = _existing(doc, emb, ("embedder",), "path", base_dir,
                                     "embedding model folder")

    base = top.get("base")
    if base is None:
        raise doc.err((), "missing 'base' with the base prompt (base: {prompt: ...})")
    if isinstance(base, str):
        base = {"prompt": base}
    _check_keys(doc, base, BASE_KEYS, ("base",), "base")
    base_prompt = _get(doc, base, "prompt", ("base",), str, required=True)
    if not base_prompt.strip():
        raise doc.err(("base", "prompt"), "base.prompt is empty")
    system_prompt = _get(doc, base, "system_prompt", ("base",), str) or \
        _get(doc, top, "system_prompt", (), str)

    perturbations: list[Perturbation] = []
    raw_perts = top.get("perturbations") or []
    if not isinstance(raw_perts, list):
        raise doc.err(("perturbations",), "'perturbations' must be a list")
    if len(models) > 1 and raw_perts:
        raise doc.err(("perturbations",), "a model comparison ('models') takes no perturbations: "
                      "every model answers the base prompt")
    if len(models) == 1 and not raw_perts:
        raise doc.err((), "nothing to compare: add 'perturbations' (or list several 'models')")
    seen: set[str] = set()
    for i, p in enumerate(raw_perts):
        path = ("perturbations", i)
        _check_keys(doc, p, PERTURBATION_KEYS, path, f"perturbation {i + 1}")
        name = _get(doc, p, "name", path, str) or f"perturbation-{i + 1}"
        if name in seen or name == "base":
            raise doc.err(path + ("name",), f"perturbation name {name!r} is used twice (or is 'base')")
        seen.add(name)
        prompt = _get(doc, p, "prompt", path, str)
        prefix = _get(doc, p, "prefix", path, str)
        suffix = _get(doc, p, "suffix", path, str)
        psys = _get(doc, p, "system_prompt", path, str)
        if prompt is not None and (prefix or suffix):
            raise doc.err(path, f"perturbation {name!r}: give 'prompt' or 'prefix'/'suffix', not both")
        if prompt is None:
            if not (prefix or suffix or psys):
                raise doc.err(path, f"perturbation {name!r} has no prompt (give 'prompt', "
                              "'prefix', 'suffix' or 'system_prompt')")
            prompt = " ".join(s for s in (prefix, base_prompt, suffix) if s)
        if not prompt.strip():
            raise doc.err(path + ("prompt",), f"perturbation {name!r} has an empty prompt")
        role = _get(doc, p, "role", path, str, choices=ROLES)
        perturbations.append(Perturbation(name, prompt, role, psys or system_prompt))

    prices = top.get("prices") or {}
    if not isinstance(prices, dict) or not all(
            isinstance(v, dict) and set(v) <= {"input", "output"}
            and all(isinstance(x, (int, float)) for x in v.values()) for v in prices.values()):
        raise doc.err(("prices",), "'prices' maps a model name to {input: $ per 1M tokens, "
                      "output: $ per 1M tokens}")

    measure = _get(doc, top, "measure", (), str, DEFAULT_MEASURE, choices=tuple(MEASURES))
    if emb_backend in ("bleu", "rouge1", "rouge2", "rougeL") and measure == "energy-l1":
        raise doc.err(("measure",), f"measure energy-l1 needs embeddings; with embedder "
                      f"{emb_backend} use energy-l2, energy-cosine, jsd, wasserstein or ks")

    return AuditSpec(
        models=models, embedder=embedder, base_prompt=base_prompt,
        perturbations=tuple(perturbations), system_prompt=system_prompt,
        samples=_get(doc, top, "samples", (), int, 20, minimum=2, maximum=10_000),
        temperature=_get(doc, top, "temperature", (), float, 0.8, minimum=0.0, maximum=2.0),
        top_p=_get(doc, top, "top_p", (), float, 1.0, minimum=0.01, maximum=1.0),
        max_tokens=_get(doc, top, "max_tokens", (), int, 300, minimum=1, maximum=100_000),
        permutations=_get(doc, top, "permutations", (), int, 2000, minimum=1, maximum=10_000_000),
        measure=measure,
        correction=_get(doc, top, "correction", (), str, "holm", choices=METHODS),
        alpha=_get(doc, top, "alpha", (), float, 0.05, minimum=1e-9, maximum=0.999),
        seed=_get(doc, top, "seed", (), int, 0, minimum=0),
        sequential=_get(doc, top, "sequential", (), int, None, minimum=1),
        null=_get(doc, top, "null", (), str, "base", choices=NULLS),
        min_effect=_get(doc, top, "min_effect", (), float, None, minimum=0.0),
        prices={k: dict(v) for k, v in prices.items()},
        name=_get(doc, top, "name", (), str, Path(source).stem if source != "<spec>" else "audit"),
        description=_get(doc, top, "description", (), str, ""),
        source=source,
    )


def spec_warnings(spec: AuditSpec) -> list[str]:
    """What a spec cannot show, found before any call (the spec check).

    * no result can be significant at its k, B, correction and α — e.g. k = 2,
      or B = 499 with Holm over 40 tests
      (see :func:`dbpa_core.power.attainable_significance`);
    * its statistics would need more memory than the machine has;
    * a perturbation whose prompt (and system prompt) equals the base's: it is
      another sample of the base, not a perturbation.

    :func:`spec_notes` holds the milder news (not every star is in reach).
    """
    out: list[str] = []
    reach = spec.attainability()
    if not reach.reachable:
        out.append(reach.message)
    need, have = memory_needed(spec), _physical_memory()
    if have and need > 0.5 * have:
        out.append(f"The statistics of this spec need about {need / 2**30:.1f} GiB (the "
                   f"similarity matrices of {2 * spec.samples} responses and "
                   f"{spec.permutations} permutation statistics per test), "
                   f"{'more than' if need > have else 'over half of'} this machine's "
                   f"{have / 2**30:.1f} GiB: lower 'samples' or 'permutations' before paying "
                   "for the sampling.")
    base = (" ".join(spec.base_prompt.split()), spec.system_prompt or "")
    for p in spec.perturbations:
        if (" ".join(p.prompt.split()), p.system_prompt or "") == base:
            out.append(f"Perturbation {p.name!r} has the same prompt as the base: it tests the "
                       "model against itself (a check of the false-positive rate), not a change.")
    return out


def spec_notes(spec: AuditSpec) -> list[str]:
    """Informational results of the spec check: which stars are out of reach (e.g.
    ``***`` with B = 2000 and Holm over 3 or more perturbations)."""
    reach = spec.attainability()
    return [reach.message] if reach.reachable and reach.message else []


def memory_needed(spec: AuditSpec) -> int:
    """Bytes the spec's tests need: one test's matrices at a time, plus the permutation
    statistics every result keeps (see :func:`dbpa_core.permutation.memory_estimate`)."""
    from .permutation import memory_estimate

    one = memory_estimate(spec.samples, spec.samples, n_permutations=spec.permutations,
                          measure=spec.measure)
    return one + 8 * spec.permutations * (spec.n_tests - 1)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def load_spec(path: str | os.PathLike) -> AuditSpec:
    """Read and validate a spec file (relative paths inside resolve next to it)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{path}: no such spec file")
    return parse_spec(p.read_text(encoding="utf-8"), source=str(path), base_dir=p.parent)
