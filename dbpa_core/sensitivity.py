"""Sensitivity studies (the DBPA paper's Appendix C): does the verdict hold?

The same DBPA test, repeated on the responses of an audit spec:

* **measures side by side** — every ω on the same responses and embeddings:
  zero new model calls;
* **embedders side by side** — MiniLM, a sentence-transformers folder, OpenAI
  embeddings, BLEU / ROUGE: responses come from the cache, only embeddings not
  yet cached are computed;
* **prompt length** — the base prompt (and every perturbation, with the same
  padding) preceded by a shipped neutral text up to a number of tokens; these
  padded prompts are new prompts, so they are sampled (through the cache);
* **cost table** — tokens × price per million tokens for the generation and
  embedding models used (and any model priced for comparison).

A thin orchestrator over :class:`~dbpa_core.sampling.Sampler` (samples and
embeddings, cached) and the permutation engine; ``run_sensitivity`` after
``run_audit`` on the same spec makes no model call for the measures and
embedders studies. In every study the setting equal to the spec (its measure,
its embedder, the unpadded prompt) is the *baseline* and reproduces the audit's
numbers exactly (same seeds).

Examples
--------
>>> spec = load_spec("examples/nice_personas.yaml")                  # doctest: +SKIP
>>> cfg = SensitivityConfig(measures=parse_measures("all"),
...                         embedders=parse_embedders("spec,bleu", spec))  # doctest: +SKIP
>>> res = run_sensitivity(spec, cfg)                                 # doctest: +SKIP
>>> res.write("out/sensitivity")                                     # doctest: +SKIP
"""

from __future__ import annotations

import csv
import functools
import html
import io
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .audit import Arm, arm_requests, build_arms
from .cache import Cache
from .fmt import fmt_p
from .measures import MEASURES, get_measure
from .multitest import multiple_testing
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from .pricing import estimate_tokens, price_of
from .render import document, markup
from .render import section as render_section
from .resources import asset
from .sampling import Job, Progress, Sampler, SampleRecord, is_cached, model_key
from .similarity import TEXT_SIMILARITIES, text_similarity_matrix
from .spec import AuditSpec, model_label
from .types import DBPAResult, jsonable

STUDIES = ("measure", "embedder", "length")
STUDY_TITLES = {"measure": "Distance measures", "embedder": "Embedders", "length": "Prompt length"}
NEUTRAL_TEXT = asset("neutral_context.txt")
SEPARATOR = "\n\n"
MAX_LENGTH = 32_000
EMBEDDER_NAMES = ("spec", "local", "openai", "openai:NAME", "st:FOLDER", *TEXT_SIMILARITIES)


class SensitivityError(ValueError):
    """A mistake in the sensitivity settings; the message says what to change."""


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class SensitivityConfig:
    """What to vary. Empty tuples skip a study.

    ``embedders`` holds embedder configs as in a spec's ``embedder:`` section
    (see :func:`parse_embedders`); ``lengths`` target prompt lengths in tokens
    (~4 characters each); ``cost_models`` names priced models whose cost for
    this study's tokens is shown for comparison.
    """

    measures: tuple[str, ...] = ()
    embedders: tuple[dict[str, Any], ...] = ()
    lengths: tuple[int, ...] = ()
    cost_models: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "measures": list(self.measures),
            "embedders": [dict(e) for e in self.embedders],
            "lengths": list(self.lengths),
            "cost_models": list(self.cost_models),
        }


def _items(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    return [str(v).strip() for v in value if str(v).strip()]


def parse_measures(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"all"``, ``"none"`` or names of :data:`~dbpa_core.measures.MEASURES` (comma-separated)."""
    names = _items(value)
    if names == ["all"]:
        return tuple(MEASURES)
    if names == ["none"]:
        return ()
    for n in names:
        if n not in MEASURES:
            raise SensitivityError(f"unknown measure {n!r}: choose 'all' or some of {', '.join(MEASURES)}")
    return tuple(dict.fromkeys(names))


def parse_embedders(
    value: str | Sequence[str] | None, spec: AuditSpec | None = None
) -> tuple[dict[str, Any], ...]:
    """Embedder configs from short names (comma-separated).

    ``spec`` (the spec's own embedder), ``local`` (MiniLM), ``bleu``, ``rouge1``,
    ``rouge2``, ``rougeL`` (``rouge`` = ``rougeL``), ``openai`` or
    ``openai:MODEL`` (the spec's embedder server and key variable when it is an
    OpenAI one, else api.openai.com and ``OPENAI_API_KEY``), ``st:FOLDER`` or an
    existing folder (a sentence-transformers model).
    """
    out: list[dict[str, Any]] = []
    names = _items(value)
    for n in [] if names == ["none"] else names:
        low = n.lower()
        if low == "spec":
            if spec is None:
                raise SensitivityError("'spec' names the spec's embedder, but there is no spec")
            cfg = dict(spec.embedder)
        elif low in ("local", "minilm"):
            cfg = {"backend": "local"}
        elif low == "rouge":
            cfg = {"backend": "rougeL"}
        elif low in {t.lower() for t in TEXT_SIMILARITIES}:
            cfg = {"backend": next(t for t in TEXT_SIMILARITIES if t.lower() == low)}
        elif low == "openai" or low.startswith("openai:"):
            cfg = {
                "backend": "openai",
                "name": n.split(":", 1)[1] if ":" in n else "text-embedding-3-small",
                "api_key_env": "OPENAI_API_KEY",
            }
            if spec is not None and spec.embedder.get("backend") == "openai":
                for key in ("base_url", "api_key_env", "concurrency", "max_retries", "timeout"):
                    if key in spec.embedder:
                        cfg[key] = spec.embedder[key]
        elif low.startswith("st:") or os.path.isdir(n):
            path = n[3:] if low.startswith("st:") else n
            if not os.path.isdir(path):
                raise SensitivityError(f"embedding model folder {path!r} does not exist")
            cfg = {"backend": "sentence-transformers", "path": os.path.abspath(path)}
        else:
            raise SensitivityError(
                f"unknown embedder {n!r}: use {', '.join(EMBEDDER_NAMES)} or a sentence-transformers folder"
            )
        if cfg not in out:
            out.append(cfg)
    return tuple(out)


def parse_lengths(value: str | Sequence[int | str] | None) -> tuple[int, ...]:
    """Prompt lengths in tokens (comma-separated whole numbers, 1 .. 32000), ascending."""
    out: set[int] = set()
    for n in _items([str(v) for v in value] if value is not None and not isinstance(value, str) else value):
        try:
            v = int(n)
        except ValueError:
            raise SensitivityError(f"prompt length {n!r} is not a whole number of tokens") from None
        if not 1 <= v <= MAX_LENGTH:
            raise SensitivityError(f"prompt length {v} must lie between 1 and {MAX_LENGTH} tokens")
        out.add(v)
    return tuple(sorted(out))


def embedder_label(config: Mapping[str, Any]) -> str:
    """A short display name of an embedder config."""
    kind = config.get("backend", "local")
    if kind == "local":
        return "MiniLM (local)"
    if kind == "sentence-transformers":
        return str(config.get("name") or os.path.basename(os.path.normpath(config["path"])))
    if kind == "openai":
        return str(config.get("name", "text-embedding-3-small"))
    return {"bleu": "BLEU", "rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L"}.get(
        kind, str(kind)
    )


def _applicable(measure: str, embedder: Mapping[str, Any]) -> bool:
    """False only where a text similarity (BLEU / ROUGE) cannot feed ``measure``: the
    energy measures on a similarity matrix use ``1 - S`` (cosine) or ``sqrt(2 (1 - S))``
    (l2), as :func:`~dbpa_core.permutation.dbpa_test_similarity` does; l1 needs vectors."""
    m = get_measure(measure)
    text = embedder.get("backend") in TEXT_SIMILARITIES
    return not (text and m.uses == "distance" and m.metric == "l1")


# --------------------------------------------------------------------------- padding
@functools.lru_cache(maxsize=4)
def neutral_text(path: str | None = None) -> str:
    """The shipped neutral passage (``assets/neutral_context.txt``) used for padding."""
    p = Path(path) if path else NEUTRAL_TEXT
    if not p.is_file():
        raise SensitivityError(f"the neutral text for padding is missing: {p}")
    return p.read_text(encoding="utf-8").strip()


def padding(prompt: str, target_tokens: int, *, neutral: str | None = None) -> str:
    """Neutral text that, put before ``prompt`` (with a blank line), makes a prompt
    of about ``target_tokens`` tokens (~4 characters each; within ~5 %).

    Empty when ``prompt`` alone already reaches the target. The text is cut at a
    sentence end when one lies near the target, else at a word boundary; for
    targets longer than the passage it repeats.
    """
    text = neutral if neutral is not None else neutral_text()
    if not text.strip():
        raise SensitivityError("the neutral text for padding is empty")
    need = 4 * int(target_tokens) - len(prompt) - len(SEPARATOR)
    if need <= 0:
        return ""
    source = text
    body = text.split(SEPARATOR, 1)[-1]  # repeats leave out the opening line
    while len(source) < need + 1:
        source += SEPARATOR + body
    cut = source[:need]
    if not source[need].isspace():
        cut = cut[: max(cut.rfind(" "), cut.rfind("\n"))] if (" " in cut or "\n" in cut) else cut
    tolerance = max(8, int(0.05 * need))
    end = max(cut.rfind(". "), cut.rfind(".\n"), cut.rfind(".") if cut.endswith(".") else -1)
    if end >= 0 and len(cut) - (end + 1) <= tolerance:
        cut = cut[: end + 1]
    return cut.rstrip()


def pad_prompt(prompt: str, target_tokens: int, *, pad: str | None = None, neutral: str | None = None) -> str:
    """``prompt`` preceded by neutral context up to ``target_tokens``; the original
    prompt is kept verbatim at the end. ``pad`` reuses a padding computed for
    another prompt (so that base and perturbations get the same context)."""
    if pad is None:
        pad = padding(prompt, target_tokens, neutral=neutral)
    return f"{pad}{SEPARATOR}{prompt}" if pad else prompt


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class SensitivityRow:
    """One perturbation under one setting of one study."""

    study: str
    setting: str
    perturbation: str
    role: str | None
    measure: str
    embedder: str
    length: int | None
    prompt_tokens: int
    effect_size: float
    chance_effect_size: float
    effect_above_chance: float
    p_value: float
    p_adjusted: float
    significant: bool
    stars: str
    k: int
    m: int
    baseline: bool = False
    note: str = ""

    @property
    def applicable(self) -> bool:
        return not math.isnan(self.p_value)

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        return jsonable({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()})


@dataclass(frozen=True)
class CostRow:
    """Tokens and dollars of one model in the study (``cost_new``: what this run paid)."""

    kind: str  # "generation", "embedding" or "comparison"
    model: str
    items: int  # samples or texts the study used
    new: int  # of which obtained in this run (calls / embeddings made)
    input_tokens: int
    output_tokens: int
    price_input: float
    price_output: float
    cost: float
    cost_new: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                f: (
                    None
                    if isinstance(getattr(self, f), float) and math.isnan(getattr(self, f))
                    else getattr(self, f)
                )
                for f in self.__dataclass_fields__
            }
        )


ROW_COLUMNS = [
    "study",
    "setting",
    "perturbation",
    "role",
    "measure",
    "embedder",
    "length",
    "prompt_tokens",
    "effect_size",
    "chance_effect_size",
    "effect_above_chance",
    "p_value",
    "p_adjusted",
    "significant",
    "stars",
    "k",
    "m",
    "baseline",
    "note",
]
COST_COLUMNS = [
    "kind",
    "model",
    "items",
    "new",
    "input_tokens",
    "output_tokens",
    "price_input",
    "price_output",
    "cost",
    "cost_new",
    "note",
]


@dataclass(frozen=True)
class SensitivityResult:
    """Rows of every study (one per perturbation × setting), the cost table, usage."""

    spec: AuditSpec
    config: SensitivityConfig
    rows: tuple[SensitivityRow, ...]
    cost: tuple[CostRow, ...]
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    padded_prompts: dict[int, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))  # names the files

    @property
    def perturbations(self) -> list[str]:
        return list(dict.fromkeys(r.perturbation for r in self.rows))

    @property
    def studies(self) -> list[str]:
        return [s for s in STUDIES if any(r.study == s for r in self.rows)]

    def study(self, name: str) -> list[SensitivityRow]:
        return [r for r in self.rows if r.study == name]

    def settings(self, name: str) -> list[str]:
        return list(dict.fromkeys(r.setting for r in self.study(name)))

    def verdicts(self) -> list[dict[str, Any]]:
        """Per perturbation: its baseline verdict and, per study, in how many of the
        applicable settings it is significant (after correction)."""
        out = []
        for name in self.perturbations:
            mine = [r for r in self.rows if r.perturbation == name]
            base = next((r for r in mine if r.baseline), None)
            d: dict[str, Any] = {
                "perturbation": name,
                "role": mine[0].role,
                "baseline_significant": base.significant if base else None,
                "baseline_p_adjusted": base.p_adjusted if base else None,
            }
            holds = True
            for s in self.studies:
                rs = [r for r in mine if r.study == s and r.applicable]
                n_sig = sum(r.significant for r in rs)
                d[s] = {"significant": n_sig, "settings": len(rs)}
                if base is not None and n_sig != (len(rs) if base.significant else 0):
                    holds = False
            d["holds"] = holds
            out.append(d)
        return out

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "spec": self.spec.to_dict(),
                "config": self.config.to_dict(),
                "rows": [r.to_dict() for r in self.rows],
                "verdicts": self.verdicts(),
                "cost": [c.to_dict() for c in self.cost],
                "usage": self.usage,
                "warnings": list(self.warnings),
                "padded_prompts": {str(k): v for k, v in self.padded_prompts.items()},
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=ROW_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in self.rows:
            w.writerow(r.to_dict())
        return buf.getvalue()

    def cost_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COST_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for c in self.cost:
            w.writerow(c.to_dict())
        return buf.getvalue()

    def to_html(
        self, *, title: str | None = None, charts: Mapping[str, str] | None = None, section: bool = False
    ) -> str:
        """A self-contained HTML report (``templates/sensitivity.html.j2``): verdicts, one
        table and chart per study, cost.

        ``charts`` maps a section title to ready HTML (e.g. Plotly figures from the
        dashboard) to include; without it small inline SVG charts are drawn. ``section``:
        the report without the page around it (``dbpa report`` puts it into its own).
        """
        return _html_report(self, title=title, charts=charts, section=section)

    def write(self, out_dir: str | os.PathLike) -> list[str]:
        """results.json, results.csv, cost.csv and report.html; returns their paths."""
        from .outputs import write_files

        return write_files(
            out_dir,
            {
                "results.json": self.to_json(),
                "results.csv": self.to_csv(),
                "cost.csv": self.cost_csv(),
                "report.html": self.to_html(),
            },
        )


# --------------------------------------------------------------------------- planning
def _check(spec: AuditSpec, config: SensitivityConfig) -> None:
    if not (config.measures or config.embedders or config.lengths):
        raise SensitivityError("nothing to vary: choose measures, embedders or prompt lengths")
    parse_measures(list(config.measures))
    if config.lengths:
        replay = [model_label(m) for m in spec.models if m.get("backend") == "replay"]
        if replay:
            raise SensitivityError(
                f"the prompt-length study needs answers to new, padded prompts, but "
                f"{', '.join(replay)} replays recorded answers only: drop the lengths or "
                "audit a model that can answer"
            )
    for m in config.cost_models:
        if price_of(m, spec.prices) is None:
            raise SensitivityError(
                f"no price known for {m!r}: add it under 'prices:' in the spec ($ per 1M tokens)"
            )


def _padded_arms(spec: AuditSpec, length: int, neutral: str) -> tuple[str, list[Arm]]:
    arms = build_arms(spec)
    pad = padding(spec.base_prompt, length, neutral=neutral)
    return pad, [replace(a, prompt=pad_prompt(a.prompt, length, pad=pad)) for a in arms]


def plan(
    spec: AuditSpec, config: SensitivityConfig, *, cache: Cache | None = None, neutral: str | None = None
) -> dict[str, Any]:
    """Model calls, tokens and cost the study would need, without calling anything.

    The audit's own samples (measures and embedders studies) count only when
    not cached; padded prompts are new unless an earlier run sampled them.
    Output tokens are counted at ``max_tokens`` (an upper bound).
    """
    _check(spec, config)
    text = neutral if neutral is not None else (neutral_text() if config.lengths else "")
    arm_sets: list[list[Arm]] = []
    arm_sets.append(build_arms(spec))  # every study uses the audit's own answers
    for length in config.lengths:
        arm_sets.append(_padded_arms(spec, length, text)[1])
    calls = cached = in_tok = 0
    cost = 0.0
    unknown: set[str] = set()
    seen: set[str] = set()
    for arms in arm_sets:
        for arm in arms:
            key = (
                model_key(arm.model)
                + "\x1f"
                + (arm.system_prompt or "")
                + "\x1f"
                + arm.prompt
                + f"\x1f{arm.first_sample}"
            )  # a same-prompt arm: its own
            if key in seen:  # an unpadded length repeats the audit's arms
                continue
            seen.add(key)
            reqs = arm_requests(spec, arm)
            hit = sum(1 for r in reqs if is_cached(cache, arm.model, r))
            n = len(reqs) - hit
            calls += n
            cached += hit
            tokens_in = n * (
                estimate_tokens(arm.prompt)
                + (estimate_tokens(arm.system_prompt) if arm.system_prompt else 0)
                + 8
            )
            in_tok += tokens_in
            price = _generation_price(arm.model, spec)
            if price is None:
                unknown.add(model_label(arm.model))
            else:
                cost += tokens_in / 1e6 * price[0] + n * spec.max_tokens / 1e6 * price[1]
    return {
        "calls": calls,
        "cached": cached,
        "input_tokens": in_tok,
        "output_tokens": calls * spec.max_tokens,
        "cost": cost,
        "unknown_prices": sorted(unknown),
    }


def _generation_price(model: Mapping[str, Any], spec: AuditSpec) -> tuple[float, float] | None:
    if model.get("backend", "local") != "openai":
        return (0.0, 0.0)
    p = price_of(str(model.get("name", "")), spec.prices)
    return None if p is None else (float(p["input"]), float(p["output"]))


def _embedding_price(config: Mapping[str, Any], spec: AuditSpec) -> float | None:
    if config.get("backend") != "openai":
        return 0.0
    p = price_of(str(config.get("name", "text-embedding-3-small")), spec.prices)
    return None if p is None else float(p["input"])


# --------------------------------------------------------------------------- running
@dataclass
class _Material:
    """One embedder's view of a set of arms: embeddings per arm, or (BLEU / ROUGE)
    the pooled similarity matrix of the base and each other arm."""

    config: dict[str, Any]
    label: str
    embeddings: list[np.ndarray] | None = None
    similarities: list[np.ndarray] | None = None


class _Study:
    def __init__(self, spec: AuditSpec, sampler: Sampler, progress: Callable[[Progress], None]):
        self.spec = spec
        self.sampler = sampler
        self.progress = progress
        self.caught: list[str] = []
        self.embedded: dict[str, dict[str, Any]] = {}  # embedder label -> texts, new

    def material(self, texts: list[tuple[str, ...]], config: Mapping[str, Any], what: str = "") -> _Material:
        label = embedder_label(config)
        kind = config.get("backend", "local")
        if kind in TEXT_SIMILARITIES:
            sims = []
            stage = f"similarity: {label}{what}"
            for j, other in enumerate(texts[1:]):
                self.sampler.check_stop()
                self.progress(Progress(stage, j, len(texts) - 1))
                sims.append(text_similarity_matrix(list(texts[0]) + list(other), kind))
            self.progress(Progress(stage, len(texts) - 1, len(texts) - 1))
            return _Material(dict(config), label, similarities=sims)
        flat = [t for arm in texts for t in arm]
        before = self.sampler.usage["embeddings_computed"]
        emb = self.sampler.embed(flat, config, stage=f"embedding: {label}{what}")
        rec = self.embedded.setdefault(label, {"config": dict(config), "texts": set(), "new": 0})
        rec["texts"].update(flat)
        rec["new"] += self.sampler.usage["embeddings_computed"] - before
        out, start = [], 0
        for arm in texts:
            out.append(emb[start : start + len(arm)])
            start += len(arm)
        return _Material(dict(config), label, embeddings=out)

    def tests(self, mat: _Material, measure: str, names: Sequence[str], what: str) -> list[DBPAResult | None]:
        spec = self.spec
        out: list[DBPAResult | None] = []
        applicable = _applicable(measure, mat.config)
        for j, name in enumerate(names):
            self.sampler.check_stop()
            self.progress(Progress("testing", j, len(names), f"{what}: {name}"))
            if not applicable:
                out.append(None)
                continue
            rng = np.random.default_rng([spec.seed, j])  # the audit's seeds: same p at baseline
            with warnings.catch_warnings(record=True) as wl:
                warnings.simplefilter("always", DBPAWarning)
                if mat.similarities is not None:
                    r = dbpa_test_similarity(
                        mat.similarities[j],
                        spec.samples,
                        measure=measure,
                        n_permutations=spec.permutations,
                        rng=rng,
                        sequential=spec.sequential,
                    )
                else:
                    # a material has similarities (BLEU / ROUGE) or embeddings, never neither
                    assert mat.embeddings is not None
                    r = dbpa_test(
                        mat.embeddings[0],
                        mat.embeddings[j + 1],
                        measure=measure,
                        n_permutations=spec.permutations,
                        rng=rng,
                        sequential=spec.sequential,
                    )
            for w in wl:
                msg = f"{what}, {name}: {w.message}"
                if msg not in self.caught:
                    self.caught.append(msg)
            out.append(r)
        self.progress(Progress("testing", len(names), len(names), what))
        return out

    def rows(
        self,
        study: str,
        setting: str,
        arms: Sequence[Arm],
        results: list[DBPAResult | None],
        *,
        measure: str,
        embedder: str,
        length: int | None,
        prompt_tokens: int,
        baseline: bool,
        note: str = "",
    ) -> list[SensitivityRow]:
        spec = self.spec
        done = [r for r in results if r is not None]
        mt = multiple_testing([r.p_value for r in done], spec.correction, alpha=spec.alpha) if done else None
        out, i = [], 0
        for arm, r in zip(arms[1:], results, strict=True):
            if r is None:
                nan = float("nan")
                out.append(
                    SensitivityRow(
                        study,
                        setting,
                        arm.name,
                        arm.role,
                        measure,
                        embedder,
                        length,
                        prompt_tokens,
                        nan,
                        nan,
                        nan,
                        nan,
                        nan,
                        False,
                        "",
                        spec.samples,
                        spec.samples,
                        baseline,
                        note or "needs embeddings (not BLEU / ROUGE)",
                    )
                )
                continue
            assert mt is not None  # r is a result, so ``done`` was not empty
            out.append(
                SensitivityRow(
                    study,
                    setting,
                    arm.name,
                    arm.role,
                    measure,
                    embedder,
                    length,
                    prompt_tokens,
                    r.effect_size,
                    r.chance_effect_size,
                    r.effect_above_chance,
                    r.p_value,
                    float(mt.p_adjusted[i]),
                    bool(mt.reject[i]),
                    mt.stars[i],
                    r.k,
                    r.m,
                    baseline,
                    note,
                )
            )
            i += 1
        return out


def _used(
    arms: Sequence[Arm], records: Sequence[SampleRecord], k: int
) -> list[tuple[Arm, int, SampleRecord]]:
    return [(a, j, records[i * k + j]) for i, a in enumerate(arms) for j in range(k)]


def _texts(records: Sequence[SampleRecord], n_arms: int, k: int) -> list[tuple[str, ...]]:
    return [tuple(r.text for r in records[i * k : (i + 1) * k]) for i in range(n_arms)]


def run_sensitivity(
    spec: AuditSpec,
    config: SensitivityConfig,
    *,
    cache: Cache | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: Mapping[str, str] | None = None,
    backends: Mapping[str, Any] | None = None,
    embedders: Mapping[str, Any] | None = None,
    neutral: str | None = None,
) -> SensitivityResult:
    """Run the chosen studies on ``spec``'s responses.

    Parameters
    ----------
    spec : AuditSpec
        The audit whose verdict is examined (base, perturbations or models,
        k, B, measure, correction, seed).
    config : SensitivityConfig
        Measures, embedders, prompt lengths and cost models to compare.
    cache, progress, should_stop, api_keys
        As for :func:`~dbpa_core.audit.run_audit`. Stages: ``sampling``,
        ``embedding: <embedder>``, ``similarity: <BLEU/ROUGE>``, ``testing``,
        ``sampling padded prompts``.
    backends, embedders : dict, optional
        Ready-made backends and embedders by :func:`~dbpa_core.sampling.model_key`
        of their config (tests; callers that keep models loaded).
    neutral : str, optional
        Text to pad with instead of the shipped ``assets/neutral_context.txt``.

    Returns
    -------
    SensitivityResult
        One row per perturbation × setting; within a setting p-values are
        corrected across perturbations with the spec's correction, as in the audit.
        A study always includes the audit's own setting (its measure, its
        embedder, the unpadded prompt): the baseline the others are compared with.

    Raises
    ------
    SensitivityError
        Nothing to vary, an unknown measure, lengths with a replay model, ...
    RunCancelled, BackendError
        As the sampler raises them (what arrived is cached).
    """
    _check(spec, config)
    t0 = time.perf_counter()
    report = progress or (lambda p: None)
    sampler = Sampler(
        cache,
        progress=report,
        should_stop=should_stop,
        api_keys=api_keys,
        backends=backends,
        embedders=embedders,
    )
    study = _Study(spec, sampler, report)
    k = spec.samples
    arms = build_arms(spec)
    names = [a.name for a in arms[1:]]
    rows: list[SensitivityRow] = []
    used: list[tuple[Arm, int, SampleRecord]] = []  # (arm, sample index, record)
    base_tokens = estimate_tokens(spec.base_prompt)
    spec_emb = embedder_label(spec.embedder)

    if config.measures or config.embedders:
        sampler.check_stop()
        recs = sampler.sample([Job(a.model, r, a.name) for a in arms for r in arm_requests(spec, a)])
        used += _used(arms, recs, k)
        texts = _texts(recs, len(arms), k)
        materials: dict[str, _Material] = {}

        def mat_for(cfg: Mapping[str, Any]) -> _Material:
            key = model_key(cfg)
            if key not in materials:
                materials[key] = study.material(texts, cfg)
            return materials[key]

        # the audit's own setting is always part of a study: it is the reference
        measures = list(dict.fromkeys([spec.measure, *config.measures])) if config.measures else []
        studied = (
            [spec.embedder] + [e for e in config.embedders if model_key(e) != model_key(spec.embedder)]
            if config.embedders
            else []
        )
        for measure in measures:
            mat = mat_for(spec.embedder)
            res = study.tests(mat, measure, names, f"measure {measure}")
            rows += study.rows(
                "measure",
                measure,
                arms,
                res,
                measure=measure,
                embedder=spec_emb,
                length=None,
                prompt_tokens=base_tokens,
                baseline=measure == spec.measure,
            )
        for cfg in studied:
            mat = mat_for(cfg)
            res = study.tests(mat, spec.measure, names, f"embedder {mat.label}")
            note = (
                ""
                if _applicable(spec.measure, cfg)
                else f"{spec.measure} needs embeddings: choose another measure for BLEU / ROUGE"
            )
            rows += study.rows(
                "embedder",
                mat.label,
                arms,
                res,
                measure=spec.measure,
                embedder=mat.label,
                length=None,
                prompt_tokens=base_tokens,
                baseline=model_key(cfg) == model_key(spec.embedder),
                note=note,
            )

    padded: dict[int, str] = {}
    if config.lengths:
        text = neutral if neutral is not None else neutral_text()
        sets = [(None, arms)] + [(length, _padded_arms(spec, length, text)[1]) for length in config.lengths]
        jobs = [
            Job(a.model, r, f"{length or 'original'} tokens: {a.name}")
            for length, set_ in sets
            for a in set_
            for r in arm_requests(spec, a)
        ]
        sampler.check_stop()
        recs = sampler.sample(jobs, stage="sampling padded prompts")
        per = len(arms) * k
        for s, (length, set_) in enumerate(sets):
            chunk = recs[s * per : (s + 1) * per]
            used += _used(set_, chunk, k)
            if length is not None:
                padded[length] = set_[0].prompt
            texts = _texts(chunk, len(set_), k)
            what = f" ({length} tokens)" if length else ""
            mat = study.material(texts, spec.embedder, what)
            setting = f"{length} tokens" if length else "original"
            res = study.tests(mat, spec.measure, names, f"length {setting}")
            tokens = estimate_tokens(set_[0].prompt)
            measured = [r.prompt_tokens for r in chunk[:k] if r.prompt_tokens > 0]
            note = ""
            if length is not None and set_[0].prompt == spec.base_prompt:
                note = f"the prompt alone has ~{tokens} tokens: no padding"
            elif measured:
                note = f"the model counted {round(sum(measured) / len(measured))} prompt tokens"
            rows += study.rows(
                "length",
                setting,
                set_,
                res,
                measure=spec.measure,
                embedder=spec_emb,
                length=length or tokens,
                prompt_tokens=tokens,
                baseline=length is None,
                note=note,
            )

    cost = _cost_table(spec, config, used, study.embedded)
    usage = dict(sampler.usage, seconds=round(time.perf_counter() - t0, 3))
    return SensitivityResult(spec, config, tuple(rows), tuple(cost), usage, tuple(study.caught), padded)


def _cost_table(
    spec: AuditSpec,
    config: SensitivityConfig,
    used: Sequence[tuple[Arm, int, SampleRecord]],
    embedded: Mapping[str, Mapping[str, Any]],
) -> list[CostRow]:
    seen: set[tuple[str, str, str, int]] = set()
    by_model: dict[str, dict[str, Any]] = {}
    for arm, index, rec in used:
        # the same sample can appear in two studies (the unpadded arms): count it once
        key = (model_key(arm.model), arm.system_prompt or "", arm.prompt, index)
        if key in seen:
            continue
        seen.add(key)
        d = by_model.setdefault(
            model_label(arm.model),
            {"model": arm.model, "items": 0, "new": 0, "in": 0, "out": 0, "in_new": 0, "out_new": 0},
        )
        tin = rec.prompt_tokens or (
            estimate_tokens(arm.prompt) + 8 + (estimate_tokens(arm.system_prompt) if arm.system_prompt else 0)
        )
        tout = rec.completion_tokens or estimate_tokens(rec.text)
        d["items"] += 1
        d["in"] += tin
        d["out"] += tout
        if not rec.cached:
            d["new"] += 1
            d["in_new"] += tin
            d["out_new"] += tout
    rows: list[CostRow] = []
    for label, d in by_model.items():
        price = _generation_price(d["model"], spec)
        backend = d["model"].get("backend", "local")
        note = {
            "local": "runs on this machine: no fee",
            "hf": "runs on this machine: no fee",
            "replay": "recorded answers: no fee",
        }.get(backend, "")
        if price is None:
            pin = pout = cost = cost_new = float("nan")
            note = "no price known: add it under 'prices:' in the spec"
        else:
            pin, pout = price
            cost = d["in"] / 1e6 * pin + d["out"] / 1e6 * pout
            cost_new = d["in_new"] / 1e6 * pin + d["out_new"] / 1e6 * pout
        rows.append(
            CostRow(
                "generation", label, d["items"], d["new"], d["in"], d["out"], pin, pout, cost, cost_new, note
            )
        )
    total_in = sum(d["in"] for d in by_model.values())
    total_out = sum(d["out"] for d in by_model.values())
    for name in config.cost_models:
        p = price_of(name, spec.prices)
        assert p is not None  # _check refused cost models without a price
        rows.append(
            CostRow(
                "comparison",
                name,
                sum(d["items"] for d in by_model.values()),
                0,
                total_in,
                total_out,
                float(p["input"]),
                float(p["output"]),
                total_in / 1e6 * p["input"] + total_out / 1e6 * p["output"],
                0.0,
                "the same tokens, priced for this model",
            )
        )
    for label, e in embedded.items():
        tokens = sum(estimate_tokens(t) for t in e["texts"])
        e_price = _embedding_price(e["config"], spec)
        share = e["new"] / max(1, len(e["texts"]))
        if e_price is None:
            rows.append(
                CostRow(
                    "embedding",
                    label,
                    len(e["texts"]),
                    e["new"],
                    tokens,
                    0,
                    float("nan"),
                    0.0,
                    float("nan"),
                    float("nan"),
                    "no price known: add it under 'prices:' in the spec",
                )
            )
        else:
            cost = tokens / 1e6 * e_price
            rows.append(
                CostRow(
                    "embedding",
                    label,
                    len(e["texts"]),
                    e["new"],
                    tokens,
                    0,
                    e_price,
                    0.0,
                    cost,
                    cost * share,
                    "" if e["config"].get("backend") == "openai" else "runs on this machine: no fee",
                )
            )
    for cfg in config.embedders:
        if cfg.get("backend") in TEXT_SIMILARITIES:
            rows.append(
                CostRow(
                    "embedding",
                    embedder_label(cfg),
                    0,
                    0,
                    0,
                    0,
                    0.0,
                    0.0,
                    0.0,
                    0.0,
                    "text similarity: no model",
                )
            )
    return rows


# --------------------------------------------------------------------------- HTML report
PALETTE = [
    "#5B8DEF",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#B07AA1",
    "#76B7B2",
    "#EDC948",
    "#9C755F",
    "#FF9DA7",
    "#BAB0AC",
]


def _svg_bars(result: SensitivityResult, study: str) -> str:
    """Small multiples: one panel per setting, each on its own scale (ω of different
    measures or embedders are in different units); a bar per perturbation for ω above
    chance, pale when not significant after correction."""
    rows = result.study(study)
    if not any(r.applicable for r in rows):
        return ""
    perts = result.perturbations
    settings = result.settings(study)
    left, col_w, gap, row_h, top = 170, 120, 18, 22, 34
    width = left + len(settings) * (col_w + gap)
    height = top + row_h * len(perts) + 10
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        "font-family='sans-serif' font-size='12'>"
    ]
    for i, p in enumerate(perts):
        y = top + i * row_h + row_h / 2
        parts.append(f"<text x='{left - 8}' y='{y + 4:.1f}' text-anchor='end'>{html.escape(p[:26])}</text>")
    for j, s in enumerate(settings):
        x0 = left + j * (col_w + gap)
        color = PALETTE[j % len(PALETTE)]
        mine = {r.perturbation: r for r in rows if r.setting == s}
        vals = [r.effect_above_chance for r in mine.values() if r.applicable]
        lo, hi = min([0.0, *vals]), max([0.0, *vals])
        span = (hi - lo) or 1.0

        def x(v: float, x0: float = x0, lo: float = lo, span: float = span) -> float:
            return x0 + (v - lo) / span * (col_w - 22)

        base = " (audit)" if any(r.baseline for r in mine.values()) else ""
        parts.append(f"<text x='{x0}' y='16' font-weight='bold'>{html.escape(s[:18])}{base}</text>")
        parts.append(
            f"<line x1='{x(0):.1f}' y1='{top - 4}' x2='{x(0):.1f}' y2='{height - 6}' stroke='#9aa5b1'/>"
        )
        for i, p in enumerate(perts):
            r = mine.get(p)
            y = top + i * row_h + 4
            if r is None or not r.applicable:
                parts.append(f"<text x='{x0}' y='{y + 11}' fill='#9aa5b1'>n/a</text>")
                continue
            a, b = sorted((x(0), x(r.effect_above_chance)))
            parts.append(
                f"<rect x='{a:.1f}' y='{y}' width='{max(b - a, 1):.1f}' "
                f"height='{row_h - 8}' fill='{color}' "
                f"fill-opacity='{1.0 if r.significant else 0.3}'><title>"
                f"{html.escape(s)}, {html.escape(p)}: {r.effect_above_chance:.3f} "
                f"above chance, p (adj.) {fmt_p(r.p_adjusted)}</title></rect>"
            )
            parts.append(f"<text x='{b + 3:.1f}' y='{y + 11}' fill='#52606d'>{r.stars}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _study_part(result: SensitivityResult, study: str, charts: Mapping[str, str] | None) -> dict[str, Any]:
    """One study's section of the report: its chart, its table's cells (a row per
    perturbation, a cell per setting: the row found, or None) and the padded prompt."""
    title = STUDY_TITLES[study]
    settings = result.settings(study)
    found = {(r.perturbation, r.setting): r for r in result.study(study)}
    padded = None
    if study == "length" and result.padded_prompts:
        longest = max(result.padded_prompts)
        padded = (longest, result.padded_prompts[longest])
    return {
        "title": title,
        "settings": settings,
        "padded": padded,
        "chart": markup(charts[title] if charts and title in charts else _svg_bars(result, study)),
        "rows": [(p, [found.get((p, s)) for s in settings]) for p in result.perturbations],
    }


def _html_report(
    result: SensitivityResult, *, title: str | None, charts: Mapping[str, str] | None, section: bool = False
) -> str:
    s = result.spec
    context = dict(
        title=title or f"Sensitivity of {s.name}",
        spec=s,
        models=", ".join(model_label(m) for m in s.models),
        embedder=embedder_label(s.embedder),
        studies=result.studies,
        study_titles=STUDY_TITLES,
        verdicts=result.verdicts(),
        study_parts=[_study_part(result, st, charts) for st in result.studies],
        cost=result.cost,
        warnings=result.warnings,
        fmt_p=fmt_p,
    )
    return (render_section if section else document)("sensitivity.html.j2", **context)


__all__ = [
    "STUDIES",
    "CostRow",
    "SensitivityConfig",
    "SensitivityError",
    "SensitivityResult",
    "SensitivityRow",
    "embedder_label",
    "neutral_text",
    "pad_prompt",
    "padding",
    "parse_embedders",
    "parse_lengths",
    "parse_measures",
    "plan",
    "run_sensitivity",
]
