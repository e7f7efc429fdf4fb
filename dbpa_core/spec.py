"""Audit specs: YAML in, a validated :class:`AuditSpec` out.

Mistakes (an unknown key, a missing prompt, samples < 2, a replay file that
does not exist, ...) are rejected before any call, with the line that is wrong.
So is hostile input: a file that is not UTF-8, a YAML alias bomb or deep nesting,
NaN or infinite numbers, a lone surrogate escape (``"\\ud800"``) in a text, a
section of the wrong type, samples whose similarity matrices cannot fit in memory,
and an ``api_key_env`` that is not an LLM provider's key variable (a spec decides
which variable is sent to which server: other variables must be allowed by the
user, with ``allow_key_env`` or in ``$DBPA_HOME/settings.yaml``, never by a spec).

The keys of each section, their types, bounds and defaults are declared once, in
:mod:`dbpa_core.spec_schema` (which also exports them as a JSON Schema for editors);
this module checks what relates keys to each other, files and servers.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ._validate import file_problem, first_surrogate
from .backends.base import redact_url
from .measures import DEFAULT_MEASURE
from .spec_schema import BACKENDS as BACKENDS  # declared with the schema, used from here
from .spec_schema import EMBEDDER_BACKENDS as EMBEDDER_BACKENDS
from .spec_schema import ROLES as ROLES
from .spec_schema import (
    AuditSpecModel,
    Base,
    Embedder,
    ModelEntry,
    Prices,
    keys_of,
    validate_section,
)
from .spec_schema import Perturbation as PerturbationModel

# The keys each section accepts: declared once, by the models of dbpa_core.spec_schema
TOP_KEYS = keys_of(AuditSpecModel)
MODEL_KEYS = keys_of(ModelEntry)
EMBEDDER_KEYS = keys_of(Embedder)
BASE_KEYS = keys_of(Base)
MAX_SPEC_BYTES = 10 * 1024**2  # a spec is a page of YAML; anything this large is not one
MAX_DEPTH = 32  # nesting levels
MAX_VALUES = 20_000  # values after YAML aliases are expanded
# The environment variables a spec may send to its server as an API key: those of LLM
# providers (and DBPA_*). A spec decides which variable goes to which URL, so any other
# name (a cloud, CI, registry or chat-bot token) must be allowed by the user: on the command
# line (--allow-key-env NAME) or in their own settings file ($DBPA_HOME/settings.yaml,
# `allow_key_env: [NAME, ...]`) — never by a spec alone.
LLM_KEY_ENVS = frozenset(
    {
        "OPENAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_KEY",
        "AZURE_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "CODESTRAL_API_KEY",
        "TOGETHER_API_KEY",
        "TOGETHERAI_API_KEY",
        "GROQ_API_KEY",
        "OPENROUTER_API_KEY",
        "FIREWORKS_API_KEY",
        "FIREWORKS_AI_API_KEY",
        "DEEPSEEK_API_KEY",
        "GEMINI_API_KEY",
        "XAI_API_KEY",
        "PERPLEXITY_API_KEY",
        "PPLX_API_KEY",
        "COHERE_API_KEY",
        "CO_API_KEY",
        "AI21_API_KEY",
        "CEREBRAS_API_KEY",
        "DEEPINFRA_API_KEY",
        "DEEPINFRA_API_TOKEN",
        "NVIDIA_API_KEY",
        "NVIDIA_NIM_API_KEY",
        "SAMBANOVA_API_KEY",
        "NEBIUS_API_KEY",
        "HYPERBOLIC_API_KEY",
        "NOVITA_API_KEY",
        "LEPTON_API_KEY",
        "ANYSCALE_API_KEY",
        "OCTOAI_TOKEN",
        "REPLICATE_API_TOKEN",
        "VOYAGE_API_KEY",
        "JINA_API_KEY",
        "DASHSCOPE_API_KEY",
        "MOONSHOT_API_KEY",
        "ZHIPUAI_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACEHUB_API_TOKEN",
        "HF_API_TOKEN",
        "LITELLM_API_KEY",
        "LITELLM_MASTER_KEY",
        "VLLM_API_KEY",
        "OLLAMA_API_KEY",
        "LM_STUDIO_API_KEY",
        "LLAMA_API_KEY",
        "OPENAI_COMPATIBLE_API_KEY",
    }
)
DBPA_KEY_ENV = re.compile(r"DBPA_[A-Z0-9_]+")


def key_env_allowed(name: str, allow_key_env: Iterable[str] | None = ()) -> bool:
    """May a spec send the variable ``name`` as an API key? Yes for an LLM provider's key
    variable (:data:`LLM_KEY_ENVS`) or a ``DBPA_*`` name, and for what the user allowed:
    ``allow_key_env`` (the command line) or ``allow_key_env`` in their settings file
    (:func:`dbpa_core.home.allowed_key_envs`)."""
    from .home import allowed_key_envs

    return (
        name in LLM_KEY_ENVS
        or bool(DBPA_KEY_ENV.fullmatch(name))
        or name in set(allow_key_env or ())
        or name in allowed_key_envs()
    )


PERTURBATION_KEYS = keys_of(PerturbationModel)


class SpecError(ValueError):
    """A spec mistake; the message names the file and line."""


@dataclass(frozen=True)
class PromptAttack:
    """A perturbation's ``attack:``: the robustness battery's seeded text attack at one
    rate ρ (``level`` char, word or visual; see :mod:`dbpa_core.attacks.text`)."""

    level: str
    rho: float
    seed: int = 0
    op: str | None = None
    letters: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"level": self.level, "rho": self.rho, "seed": self.seed}
        if self.op:
            out["op"] = self.op
        if self.level == "visual" and self.letters != 0.5:  # 0.5: the default
            out["letters"] = self.letters
        return out

    def apply(self, text: str, *where: Any) -> str:
        """``text`` attacked, seeded by this attack's seed and ``where`` (a case's id), so
        each case gets its own draw and a higher ρ attacks the same words and more."""
        from .attacks.text import attack_texts, derive_seed

        seed = derive_seed(self.seed, self.level, self.op, *where)
        return attack_texts([text], self.level, self.rho, seeds=[seed], op=self.op, letters=self.letters)[
            0
        ].text


@dataclass(frozen=True)
class Perturbation:
    name: str
    prompt: str
    role: str | None = None
    system_prompt: str | None = None
    # for suites (``cases:``): how the prompt is made from each case's filled base prompt
    prefix: str | None = None
    suffix: str | None = None
    template: bool = False  # ``prompt`` was given: a template filled from each case
    set_fields: tuple[tuple[str, Any], ...] = ()  # ``set: {field: value}``
    swap: tuple[str, str] | None = None  # ``swap: [field1, field2]``: two columns' values exchanged
    swap_text: tuple[str, str] | None = None  # ``swap_text: [a, b]``: two spans of the prompt exchanged
    reorder: str | None = None  # ``reorder: reverse | rotate | shuffle``: the options' order
    attack: PromptAttack | None = None  # ``attack: {level, rho, seed}``: the prompt attacked

    @property
    def operations(self) -> dict[str, Any]:
        """What this perturbation does to a case besides its prompt text (for to_dict)."""
        out: dict[str, Any] = {}
        if self.swap:
            out["swap"] = list(self.swap)
        if self.swap_text:
            out["swap_text"] = list(self.swap_text)
        if self.reorder:
            out["reorder"] = self.reorder
        if self.attack:
            out["attack"] = self.attack.to_dict()
        return out


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
    sequential_sampling: Any = None  # a dbpa_core.sequential.SequentialSampling, or None
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    name: str = "audit"
    description: str = ""
    source: str = "<spec>"
    checks: tuple = ()  # answer checks (dbpa_core.checks.Check)
    cases: tuple = ()  # a suite's cases (dbpa_core.cases.Case); empty for one base prompt
    options: tuple[str, ...] = ()  # a suite's answer options: templates over a case's columns
    expect: str | None = None  # a suite's expected answer per case (a template)

    def __post_init__(self) -> None:
        if not isinstance(self.options, tuple):
            object.__setattr__(self, "options", tuple(self.options))
        if any(isinstance(c, dict) for c in self.cases):  # as to_dict wrote them
            from .cases import Case

            object.__setattr__(
                self, "cases", tuple(Case.from_dict(c) if isinstance(c, dict) else c for c in self.cases)
            )
        if any(isinstance(c, dict) for c in self.checks):  # as to_dict wrote them
            from .checks import checks_from_dicts

            object.__setattr__(self, "checks", checks_from_dicts(self.checks))
        if self.sequential_sampling is not None:  # True, or a mapping as to_dict wrote it
            from .sequential import SequentialSampling

            object.__setattr__(
                self, "sequential_sampling", SequentialSampling.from_value(self.sequential_sampling)
            )

    @property
    def mode(self) -> str:
        return "models" if len(self.models) > 1 or not self.perturbations else "perturbation"

    @property
    def model(self) -> dict[str, Any]:
        return self.models[0]

    @property
    def n_tests(self) -> int:
        """Tests corrected together: the perturbations (times the cases of a suite), or the
        models but the reference."""
        return max(
            1,
            len(self.perturbations) * max(1, len(self.cases))
            if self.mode == "perturbation"
            else len(self.models) - 1,
        )

    def attainability(self) -> Any:
        """What this spec's k, B, correction and α allow at best: an
        :class:`~dbpa_core.types.Attainability` (no call is made)."""
        from .power import attainable_significance

        return attainable_significance(
            self.samples,
            n_permutations=self.permutations,
            n_tests=self.n_tests,
            correction=self.correction,
            alpha=self.alpha,
            measure=self.measure,
            null=self.null,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (holds names of key variables, never keys)."""
        return {
            "name": self.name,
            "description": self.description,
            "mode": self.mode,
            "models": [_shown(m) for m in self.models],
            "embedder": _shown(self.embedder),
            "base": {"prompt": self.base_prompt, "system_prompt": self.system_prompt},
            "perturbations": [
                {"name": p.name, "prompt": p.prompt, "role": p.role, "system_prompt": p.system_prompt}
                | (
                    {
                        "prefix": p.prefix,
                        "suffix": p.suffix,
                        "template": p.template,
                        "set_fields": dict(p.set_fields),
                    }
                    | p.operations
                    if self.cases
                    else {}
                )
                for p in self.perturbations
            ],
            "samples": self.samples,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "permutations": self.permutations,
            "measure": self.measure,
            "correction": self.correction,
            "alpha": self.alpha,
            "seed": self.seed,
            "sequential": self.sequential,
            "null": self.null,
            "min_effect": self.min_effect,
            "sequential_sampling": (
                None if self.sequential_sampling is None else self.sequential_sampling.to_dict()
            ),
            "checks": [c.to_dict() for c in self.checks],
        } | (
            {
                "cases": [c.to_dict() for c in self.cases],
                "options": list(self.options),
                "expect": self.expect,
            }
            if self.cases
            else {}
        )


def _shown(config: dict[str, Any]) -> dict[str, Any]:
    """A model or embedder config fit to be written out: no password in ``base_url``."""
    out = dict(config)
    if "base_url" in out:
        out["base_url"] = redact_url(out["base_url"])
    return out


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
    def __init__(self, source: str) -> None:
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
        self.values = getattr(self, "values", 0) + 1
        if self.values > MAX_VALUES:
            raise self.err(
                path,
                f"the spec expands to more than {MAX_VALUES} values (YAML aliases that repeat each other?)",
            )
        if len(path) > MAX_DEPTH:
            raise self.err(path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            _flatten_merge_keys(self, node, path)
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    self.lines[path + ("?",)] = knode.start_mark.line + 1
                    raise self.err(path + ("?",), "keys must be plain text, not lists or mappings")
                key = knode.value
                if key in out:
                    self.lines[path + (key,)] = knode.start_mark.line + 1
                    raise self.err(path + (key,), f"key {key!r} appears twice")
                self.lines[path + (key,)] = knode.start_mark.line + 1
                out[key] = self.convert(vnode, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, path + (i,)) for i, v in enumerate(node.value)]
        try:
            value = self.scalar(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            raise self.err(
                path, f"cannot read the value {node.value[:40]!r} ({getattr(exc, 'problem', None) or exc})"
            ) from None
        bad = first_surrogate(value) if isinstance(value, str) else None
        if bad:  # "\ud800" in a quoted string: half of a UTF-16 pair, not a character
            raise self.err(
                path,
                f"the text holds the escape {bad}, which is not a character "
                "(half of a UTF-16 surrogate pair): write the character itself",
            )
        return value

    def scalar(self, node: yaml.Node) -> Any:
        if not hasattr(self, "_loader"):
            self._loader = yaml.SafeLoader("")
        return self._loader.construct_object(node, deep=True)


#: the spec being read (its source and where each key stands), as the sections' parsers
#: in other modules (cases, checks) take it to name the line of an error
SpecDoc = _Doc


def _flatten_merge_keys(doc: _Doc, node: yaml.MappingNode, path: tuple) -> None:
    """Resolve ``<<: *alias`` merge keys in place, as YAML loaders do."""
    if not any(k.tag == "tag:yaml.org,2002:merge" for k, _ in node.value):
        return
    explicit = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader = yaml.SafeLoader("")
    try:
        loader.flatten_mapping(node)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or exc
        raise doc.err(path, f"a '<<' merge key must refer to a mapping ({problem})") from None
    finally:
        loader.dispose()
    # merged keys come first; a key given here, or merged again later, overrides them
    own = {k.value for k, _ in explicit if isinstance(k, yaml.ScalarNode)}
    merged: dict[Any, tuple] = {}
    for k, v in node.value[: len(node.value) - len(explicit)]:
        if isinstance(k, yaml.ScalarNode) and k.value not in own:
            merged.pop(k.value, None)
            merged[k.value] = (k, v)
    node.value = list(merged.values()) + explicit


class _DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's composer is recursive: refuse nesting deeper than MAX_DEPTH before it
    can end in a RecursionError."""

    def __init__(self, stream: str, source: str = "<spec>") -> None:
        super().__init__(stream)
        self.depth = 0
        self.spec_source = source

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise SpecError(
                    f"{self.spec_source}, line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of ``text`` (one pass; nesting limited to MAX_DEPTH)."""
    loader = None
    try:
        loader = _DepthLimitedLoader(text, source)
        return loader.get_single_node()
    except yaml.reader.ReaderError as exc:  # a control character the YAML reader refuses
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise SpecError(
            f"{source}, line {line}: not valid YAML (character #x{exc.character:04x} is not allowed)"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}, line {mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{where}: not valid YAML ({problem})") from None
    except RecursionError:  # belt and braces: the depth limit comes first
        raise SpecError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _name(path: tuple) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")


def _check_keys(doc: _Doc, obj: Any, allowed: set[str], path: tuple, what: str) -> dict:
    if not isinstance(obj, dict):
        raise doc.err(path, f"{what} must be a mapping of keys to values")
    for key in obj:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(sorted(allowed))})"
            raise doc.err(path + (key,), f"unknown key {key!r} in {what}{extra}")
    return obj


def _get(
    doc: _Doc,
    obj: Any,
    key: str,
    path: tuple,
    kind: Any,
    default: Any = None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: Iterable[Any] | None = None,
    required: bool = False,
) -> Any:
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
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise doc.err(here, f"{_name(here)} must be a finite number, got {value!r}")
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
    if key == "file" and full.exists() and file_problem(full):
        raise doc.err(path + (key,), f"{what} {given!r} {file_problem(full)}")
    if not (full.is_file() if key == "file" else full.is_dir()):
        raise doc.err(path + (key,), f"{what} {given!r} does not exist")
    return str(full)


def _server(doc: _Doc, obj: dict, path: tuple, allow_key_env: Iterable[str] | None) -> None:
    """What the schema cannot say about the connection keys shared by an openai model and an
    openai embedder (their types are checked by :func:`validate_section` first): the URL
    must be http(s), and the key variable one a spec may send."""
    url = obj.get("base_url")
    if url is not None:
        from urllib.parse import urlsplit

        try:
            u = urlsplit(url)
            ok = u.scheme in ("http", "https") and bool(u.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise doc.err(
                path + ("base_url",),
                f"{_name(path + ('base_url',))} must be an http(s) "
                f"URL such as http://localhost:8000/v1, got {redact_url(url)!r}",
            )
    env = obj.get("api_key_env")
    if env is not None and not key_env_allowed(env, allow_key_env):
        from .home import settings_file

        raise doc.err(
            path + ("api_key_env",),
            (
                f"{_name(path + ('api_key_env',))} {env!r} is not an LLM provider's API key variable "
                "(such as OPENAI_API_KEY, ANTHROPIC_API_KEY or HF_TOKEN, or a DBPA_* name); a spec "
                f"decides which variable is sent to which server, so other names must be allowed by "
                f"you: --allow-key-env {env} on the command line, or 'allow_key_env: [{env}]' in "
                f"{settings_file()}"
            ),
        )


_REPLAY_CHECKED: dict[tuple, str | None] = {}


def _check_replay(doc: _Doc, path: tuple, file: str) -> None:
    """A replay file must be UTF-8 JSON lines (read once per version of the file)."""
    from .backends.base import BackendError
    from .backends.replay import load_replay_file

    st = os.stat(file)
    stamp = (file, st.st_mtime_ns, st.st_size)
    if stamp not in _REPLAY_CHECKED:
        try:
            load_replay_file(file)
            _REPLAY_CHECKED[stamp] = None
        except BackendError as exc:
            _REPLAY_CHECKED[stamp] = str(exc)
    problem = _REPLAY_CHECKED[stamp]
    if problem:
        raise doc.err(path + ("file",), problem)


def _model(
    doc: _Doc, obj: Any, path: tuple, base_dir: Path, allow_key_env: Iterable[str] | None = ()
) -> dict[str, Any]:
    """A model entry: checked against :class:`~dbpa_core.spec_schema.ModelEntry`, then what
    the schema cannot say (the files it names exist, a server's URL and key variable)."""
    validate_section(doc, ModelEntry, obj, path)
    cfg = {k: v for k, v in obj.items() if v is not None}
    backend = cfg.setdefault("backend", "local")
    _server(doc, obj, path, allow_key_env)
    if backend == "openai":
        if not _get(doc, obj, "name", path, str, required=True).strip():
            raise doc.err(
                path + ("name",),
                f"{_name(path + ('name',))} is empty: give the model "
                "name the server knows (e.g. gpt-4o-mini)",
            )
    elif backend == "hf":
        cfg["path"] = _existing(doc, obj, path, "path", base_dir, "Hugging Face model folder")
    elif backend == "replay":
        cfg["file"] = _existing(doc, obj, path, "file", base_dir, "replay file")
        _check_replay(doc, path, cfg["file"])
    return cfg


def embedder_section(
    doc: _Doc, raw: Any, base_dir: Path, allow_key_env: Iterable[str] | None = ()
) -> dict[str, Any]:
    """The ``embedder:`` section (of an audit or a battery spec): checked against
    :class:`~dbpa_core.spec_schema.Embedder`, then its server's URL and key variable, and a
    sentence-transformers folder that must exist."""
    validate_section(doc, Embedder, raw, ("embedder",))
    _server(doc, raw, ("embedder",), allow_key_env)
    embedder = {k: v for k, v in raw.items() if v is not None}
    embedder.setdefault("backend", "local")
    if embedder["backend"] == "sentence-transformers":
        embedder["path"] = _existing(doc, raw, ("embedder",), "path", base_dir, "embedding model folder")
    return embedder


def read_document(data: str | dict, source: str) -> tuple[_Doc, Any]:
    """YAML text (or an already loaded dict) -> the line-keeping document and its data,
    with the limits every spec gets (size, nesting depth, alias expansion)."""
    doc = _Doc(source)
    if not isinstance(data, str):
        return doc, data
    node = _compose(data, source)
    if node is None:
        raise SpecError(f"{source}: the spec is empty")
    return doc, doc.convert(node)


def read_spec_file(path: str | os.PathLike) -> str:
    """A spec file's text: it must exist, be at most MAX_SPEC_BYTES and be UTF-8."""
    p = Path(path)
    problem = file_problem(p)
    if problem:
        raise SpecError(
            f"{path}: no such spec file"
            if problem == "no such file"
            else f"{path}: {problem}; give the path of a spec file (YAML)"
        )
    try:
        if p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES // 1024**2} MB, not a spec")
        data = p.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return decode_utf8(data, str(path))


def prices_section(doc: _Doc, top: dict) -> dict[str, dict[str, float]]:
    """The optional ``prices:`` section: model -> {input, output} $ per 1M tokens."""
    prices = _section(top, "prices")
    validate_section(doc, Prices, prices, ("prices",))
    return {k: {key: x for key, x in v.items() if x is not None} for k, v in prices.items()}


def parse_spec(
    data: str | dict,
    *,
    source: str = "<spec>",
    base_dir: str | os.PathLike = ".",
    allow_key_env: Iterable[str] | None = (),
) -> AuditSpec:
    """Validate a spec given as YAML text (or an already loaded dict).

    ``allow_key_env`` names environment variables that may be sent as API keys
    although they are not an LLM provider's key variable (``dbpa --allow-key-env``;
    see :func:`key_env_allowed`).
    """
    from .checks import case_checks, parse_checks

    doc, raw = read_document(data, source)
    base_dir = Path(base_dir)
    # keys, types, bounds and defaults: the schema's (one declaration, spec_schema.py);
    # what relates keys to each other, files and servers: below
    m = validate_section(doc, AuditSpecModel, raw)
    top = raw

    if "models" in top and "model" in top:
        raise doc.err(("models",), "give either 'model' (one model) or 'models' (a comparison), not both")
    if m.models is not None:
        models = tuple(
            _model(doc, mod, ("models", i), base_dir, allow_key_env) for i, mod in enumerate(top["models"])
        )
        labels = [model_label(mod) for mod in models]
        if len(set(labels)) != len(labels):
            raise doc.err(("models",), "two models have the same name: give each a distinct 'label'")
    else:
        models = (_model(doc, _section(top, "model"), ("model",), base_dir, allow_key_env),)

    embedder = embedder_section(doc, _section(top, "embedder"), base_dir, allow_key_env)
    emb_backend = embedder["backend"]

    base_prompt = m.base.prompt
    if not base_prompt.strip():
        raise doc.err(("base", "prompt"), "base.prompt is empty")
    system_prompt = m.base.system_prompt or m.system_prompt

    cases: tuple = ()
    if top.get("cases") is not None:
        from .cases import parse_cases

        if len(models) > 1:
            raise doc.err(
                ("cases",), "'cases' take perturbations of one model, not a model comparison ('models')"
            )
        cases = parse_cases(doc, top["cases"], base_dir)

    perturbations: list[Perturbation] = []
    raw_perts = _section(top, "perturbations", [])
    if len(models) > 1 and raw_perts:
        raise doc.err(
            ("perturbations",),
            "a model comparison ('models') takes no perturbations: every model answers the base prompt",
        )
    if len(models) == 1 and not raw_perts:
        raise doc.err((), "nothing to compare: add 'perturbations' (or list several 'models')")
    seen: set[str] = set()
    for i, (p, pm) in enumerate(zip(raw_perts, m.perturbations, strict=True)):
        path = ("perturbations", i)
        name = pm.name or f"perturbation-{i + 1}"
        if name in seen or name == "base":
            raise doc.err(path + ("name",), f"perturbation name {name!r} is used twice (or is 'base')")
        seen.add(name)
        prompt, prefix, suffix = pm.prompt, pm.prefix, pm.suffix
        changes = _set_fields(doc, p, path, name, cases)
        ops = _operations(doc, pm, path, name, cases, m.options)
        if pm.attack is not None:
            ops["attack"] = _attack(doc, pm.attack, path + ("attack",), name)
        if prompt is not None and (prefix or suffix):
            raise doc.err(path, f"perturbation {name!r}: give 'prompt' or 'prefix'/'suffix', not both")
        template = prompt is not None
        if prompt is None:
            if not (prefix or suffix or pm.system_prompt or changes or ops):
                raise doc.err(
                    path,
                    f"perturbation {name!r} has no prompt (give 'prompt', "
                    "'prefix', 'suffix', 'system_prompt'"
                    + (", 'set', 'swap', 'swap_text', 'reorder' or 'attack')" if cases else " or 'attack')"),
                )
            prompt = " ".join(s for s in (prefix, base_prompt, suffix) if s)
        if not prompt.strip():
            raise doc.err(path + ("prompt",), f"perturbation {name!r} has an empty prompt")
        if "attack" in ops and not cases:  # one prompt: attacked once, here
            prompt = ops["attack"].apply(prompt)
        perturbations.append(
            Perturbation(
                name,
                prompt,
                pm.role,
                pm.system_prompt or system_prompt,
                prefix,
                suffix,
                template,
                changes,
                **ops,
            )
        )
    from .cases import check_cases, no_case_placeholders

    options = tuple(m.options or ())
    for key in ("options", "expect"):
        if top.get(key) is not None and not cases:
            raise doc.err(
                (key,), f"'{key}' holds templates filled from each case, and the spec gives no 'cases'"
            )
    if cases:
        check_cases(doc, cases, base_prompt, perturbations, options=options, expect=m.expect, seed=m.seed)
    else:
        no_case_placeholders(doc, base_prompt, perturbations)

    prices = prices_section(doc, top)

    measure = m.measure
    if emb_backend in ("bleu", "rouge1", "rouge2", "rougeL") and measure == "energy-l1":
        raise doc.err(
            ("measure",),
            f"measure energy-l1 needs embeddings; with embedder "
            f"{emb_backend} use energy-l2, energy-cosine, jsd, wasserstein or ks",
        )

    checks = parse_checks(doc, top.get("checks"), base_dir=base_dir, allow_key_env=allow_key_env)
    checks = case_checks(doc, checks, cases, options=options, expect=m.expect, seed=m.seed)
    spec = AuditSpec(
        models=models,
        embedder=embedder,
        base_prompt=base_prompt,
        perturbations=tuple(perturbations),
        system_prompt=system_prompt,
        samples=m.samples,
        temperature=m.temperature,
        top_p=m.top_p,
        max_tokens=m.max_tokens,
        permutations=m.permutations,
        measure=measure,
        correction=m.correction or ("bh" if cases else "holm"),
        alpha=m.alpha,
        seed=m.seed,
        sequential=m.sequential,
        null=m.null,
        min_effect=m.min_effect,
        sequential_sampling=_sequential_sampling(doc, m.sequential_sampling, m.samples),
        prices=prices,
        name=m.name if m.name is not None else (Path(source).stem if source != "<spec>" else "audit"),
        description=m.description,
        source=source,
        checks=checks,
        cases=cases,
        options=options,
        expect=m.expect,
    )
    _check_memory(doc, spec)
    _check_work(doc, spec)
    return spec


def _sequential_sampling(doc: _Doc, value: Any, samples: int) -> Any:
    """The spec's ``sequential_sampling`` (true or a mapping), its looks and weights checked
    against ``samples``; None when off."""
    from .sequential import SequentialSampling, plan_problem

    if value is None:
        return None
    looks = tuple(value.looks or ())
    weights = tuple(value.weights or ())
    problem = plan_problem(looks, weights, samples)
    if problem:
        raise doc.err(("sequential_sampling",), f"sequential_sampling: {problem}")
    return SequentialSampling(looks, weights, value.confidence)


def _set_fields(doc: _Doc, p: dict, path: tuple, name: str, cases: Sequence[Any]) -> tuple:
    """A perturbation's ``set: {field: value}`` (covariate changes of every case)."""
    raw = p.get("set")
    if raw is None:
        return ()
    if not cases:
        raise doc.err(
            path + ("set",),
            f"perturbation {name!r}: 'set' changes the columns of cases, and the spec gives no 'cases'",
        )
    return tuple((str(k), v) for k, v in raw.items())


def _operations(doc: _Doc, pm: Any, path: tuple, name: str, cases: tuple, options: Any) -> dict[str, Any]:
    """A perturbation's operations on a case: ``swap``, ``swap_text``, ``reorder``."""
    out: dict[str, Any] = {}
    for key in ("swap", "swap_text", "reorder"):
        value = getattr(pm, key)
        if value is None:
            continue
        if not cases:
            raise doc.err(
                path + (key,),
                f"perturbation {name!r}: '{key}' changes each case, and the spec gives no 'cases'",
            )
        if key != "reorder":
            a, b = (v.strip() if key == "swap" else v for v in value)
            if a == b:
                raise doc.err(path + (key,), f"perturbation {name!r}: '{key}' names the same thing twice")
            value = (a, b)
        elif not options:
            raise doc.err(
                path + (key,),
                f"perturbation {name!r}: 'reorder' changes the order of the options, and the "
                "spec gives no 'options'",
            )
        out[key] = value
    return out


def _attack(doc: _Doc, am: Any, path: tuple, name: str) -> PromptAttack:
    """A perturbation's ``attack:``, its operation and WordNet (word level) checked."""
    from .attacks.text import OPS
    from .attacks.wordnet import HINT, available

    if am.op is not None and am.op not in OPS[am.level]:
        raise doc.err(
            path + ("op",),
            f"perturbation {name!r}: a {am.level} attack's op is one of {', '.join(OPS[am.level])}; "
            f"got {am.op!r}",
        )
    if am.letters is not None and am.level != "visual":
        raise doc.err(
            path + ("letters",),
            f"perturbation {name!r}: 'letters' (the fraction of a word's letters) is only for "
            "the visual attack",
        )
    if am.level == "word" and not available():
        raise doc.err(path + ("level",), f"perturbation {name!r}: a word attack needs WordNet. {HINT}")
    return PromptAttack(
        am.level, float(am.rho), am.seed, am.op, 0.5 if am.letters is None else float(am.letters)
    )


def _section(top: dict, key: str, default: Any = None) -> Any:
    """A top-level section: missing or null gives the default, anything else is
    returned as it is, to be checked (``model: []`` must not mean the local model)."""
    value = top.get(key)
    if value is None:
        return {} if default is None else default
    return value


# --------------------------------------------------------------------------- memory
MATRICES_PER_TEST = 4  # pooled similarity, distances and the measure's working copies


def memory_limit_bytes() -> float:
    """``$DBPA_MEMORY_LIMIT_GB`` or half of this machine's memory."""
    env = os.environ.get("DBPA_MEMORY_LIMIT_GB")
    if env:
        try:
            gb = float(env)
        except ValueError:
            gb = math.nan
        if not (math.isfinite(gb) and gb > 0):
            raise SpecError(f"DBPA_MEMORY_LIMIT_GB must be a number of GB > 0, got {env!r}")
        return gb * 1024**3
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def memory_needed(samples: int, comparisons: int, permutations: int) -> float:
    """Bytes the tests of one audit hold at their peak: the (2k)² pooled matrices of
    one comparison at a time (several per measure), plus what every result keeps
    (P0 and P1, k(k-1)/2 + k² values, and the B permutation statistics)."""
    n = 2 * samples
    working = MATRICES_PER_TEST * n * n * 8
    kept = comparisons * ((samples * (samples - 1) // 2 + samples * samples) + permutations) * 8
    return float(working + kept)


def _check_memory(doc: _Doc, spec: AuditSpec) -> None:
    comparisons = max(1, len(spec.perturbations) or len(spec.models) - 1)
    need = memory_needed(spec.samples, comparisons, spec.permutations)
    limit = memory_limit_bytes()
    if need <= limit:
        return
    lo, hi = 2, spec.samples  # the largest k that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory_needed(mid, comparisons, spec.permutations) <= limit:
            lo = mid
        else:
            hi = mid - 1
    why = (
        "DBPA_MEMORY_LIMIT_GB"
        if os.environ.get("DBPA_MEMORY_LIMIT_GB")
        else "half of this machine's memory; set DBPA_MEMORY_LIMIT_GB to change it"
    )
    fix = (
        f"lower samples to at most {lo}"
        if memory_needed(lo, comparisons, spec.permutations) <= limit
        else "lower permutations"
    )
    raise doc.err(
        ("samples",),
        (
            f"samples: {spec.samples} needs about {need / 1024**3:.1f} GB for the similarity matrices "
            f"({MATRICES_PER_TEST} of {2 * spec.samples} x {2 * spec.samples} pooled responses per "
            f"comparison, and what {comparisons} results keep), more than the "
            f"{limit / 1024**3:.1f} GB allowed ({why}): {fix}"
        ),
    )


def _check_work(doc: _Doc, spec: AuditSpec) -> None:
    check_test_work(doc, spec.samples, spec.permutations, spec.measure)


def check_test_work(doc: _Doc, samples: int, permutations: int, measure: str) -> None:
    """Each test of ``samples`` against ``samples`` answers with ``permutations`` must fit
    the library's bound on one test's work (:data:`dbpa_core._validate.MAX_WORK`): checked
    when the spec is read, before any answer is paid for, not after sampling. An error
    names the ``permutations`` line and the largest value that fits."""
    from ._validate import MAX_WORK, pair_visits

    bins = 30 if measure == "jsd" else 0  # the engine's default bins
    k, b = samples, permutations
    if pair_visits(k, k, b, bins) <= MAX_WORK:
        return
    most = max(1, MAX_WORK // ((2 * k) ** 2 // 2 + bins) - 1)
    raise doc.err(
        ("permutations",),
        (
            f"permutations: {b} with samples: {k} would take each test {pair_visits(k, k, b, bins):.2g} "
            f"pair visits, over the {MAX_WORK:.0e} one test may take (about two minutes of one "
            f"core): lower permutations to at most {most}, or samples"
        ),
    )


def dump_spec(spec: AuditSpec, *, header: str | None = None) -> str:
    """A spec as YAML that :func:`parse_spec` reads back to the same audit (for the CLI and
    CI: the dashboard's "download spec"). Key names of API keys travel, keys never do."""
    from .checks import EXPECT_CHECK  # added again by 'expect' when it is read back

    d = spec.to_dict()
    d.pop("mode", None)
    models = d.pop("models")
    checks = [c for c in d.pop("checks") if spec.expect is None or c["name"] != EXPECT_CHECK]
    base = {k: v for k, v in d.pop("base").items() if v is not None}
    perts = []
    for p in d.pop("perturbations"):
        entry = {k: v for k, v in p.items() if v is not None}
        if entry.get("system_prompt") == spec.system_prompt:
            entry.pop("system_prompt", None)  # inherited from the base
        if spec.cases:  # a suite: the prompt is made per case from these
            if not entry.pop("template"):
                entry.pop("prompt")
            if entry.pop("set_fields"):
                entry["set"] = dict(p["set_fields"])
        perts.append(entry)
    out: dict[str, Any] = {"name": d.pop("name")}
    if d.get("description"):
        out["description"] = d["description"]
    d.pop("description", None)
    if spec.mode == "models":
        out["models"] = models
    else:
        out["model"] = models[0]
    options, expect = d.pop("options", None), d.pop("expect", None)
    out.update({k: v for k, v in d.items() if v is not None})
    if spec.prices:
        out["prices"] = spec.prices
    out["base"] = base
    if options:
        out["options"] = options
    if expect is not None:
        out["expect"] = expect
    if perts:
        out["perturbations"] = perts
    if checks:
        out["checks"] = checks
    text = yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100)
    return (f"# {header}\n" if header else "") + text


def spec_warnings(spec: AuditSpec) -> list[str]:
    """What a spec cannot show, found before any call (the spec check).

    * no result can be significant at its k, B, correction and α — e.g. k = 2,
      or B = 499 with Holm over 40 tests
      (see :func:`dbpa_core.power.attainable_significance`);
    * a perturbation whose prompt (and system prompt) equals the base's and is not marked
      control: it is another sample of the base, not a perturbation (marked control, it is
      a deliberate check of the false-positive rate, a note of :func:`spec_notes`).

    :func:`spec_notes` holds the milder news (not every star is in reach).
    """
    out: list[str] = []
    reach = spec.attainability()
    if not reach.reachable:
        out.append(reach.message)
    if spec.cases:
        from .cases import shared_prompt_warnings, unchanged_warnings

        args = (spec.base_prompt, spec.perturbations, spec.cases)
        out += shared_prompt_warnings(*args, options=spec.options, seed=spec.seed)
        out += unchanged_warnings(*args, options=spec.options, seed=spec.seed)
    for p in spec.perturbations:
        if p.role != "control" and _same_as_base(spec, p) and not p.set_fields:
            out.append(
                f"Perturbation {p.name!r} has the same prompt as the base: it tests the "
                "model against itself (a check of the false-positive rate), not a change. "
                "Mark it 'control' if that is what it is for."
            )
    return out


def _same_as_base(spec: AuditSpec, p: Any) -> bool:
    if p.set_fields or p.operations:  # it changes each case (dbpa_core.cases)
        return False
    return (" ".join(p.prompt.split()), p.system_prompt or "") == (
        " ".join(spec.base_prompt.split()),
        spec.system_prompt or "",
    )


def spec_notes(spec: AuditSpec) -> list[str]:
    """Informational results of the spec check: which stars are out of reach (e.g.
    ``***`` with B = 2000 and Holm over 3 or more perturbations)."""
    reach = spec.attainability()
    out = [reach.message] if reach.reachable and reach.message else []
    out += [
        f"Control {p.name!r} asks the base prompt again: it draws answers of its own and "
        "checks the false-positive rate (it should pass, and fails only by chance, at "
        "rate α)."
        for p in spec.perturbations
        if p.role == "control" and _same_as_base(spec, p)
    ]
    return out


def load_spec(path: str | os.PathLike, *, allow_key_env: Iterable[str] | None = ()) -> AuditSpec:
    """Read and validate a spec file (relative paths inside resolve next to it)."""
    return parse_spec(
        read_spec_file(path), source=str(path), base_dir=Path(path).parent, allow_key_env=allow_key_env
    )


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` as text, or a SpecError naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"{source}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None
