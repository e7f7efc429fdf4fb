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

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .measures import DEFAULT_MEASURE
from .spec_doc import MAX_SPEC_BYTES as MAX_SPEC_BYTES  # the document reader, one floor down
from .spec_doc import SpecDoc as SpecDoc
from .spec_doc import SpecError as SpecError
from .spec_doc import decode_utf8 as decode_utf8
from .spec_doc import existing_path, shown_config, top_section
from .spec_doc import model_label as model_label
from .spec_doc import read_document as read_document
from .spec_doc import read_spec_file as read_spec_file
from .spec_models import LLM_KEY_ENVS as LLM_KEY_ENVS  # model entries, one floor down
from .spec_models import check_server, model_entry
from .spec_models import key_env_allowed as key_env_allowed
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

PERTURBATION_KEYS = keys_of(PerturbationModel)


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
            "models": [shown_config(m) for m in self.models],
            "embedder": shown_config(self.embedder),
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


def embedder_section(
    doc: SpecDoc, raw: Any, base_dir: Path, allow_key_env: Iterable[str] | None = ()
) -> dict[str, Any]:
    """The ``embedder:`` section (of an audit or a battery spec): checked against
    :class:`~dbpa_core.spec_schema.Embedder`, then its server's URL and key variable, and a
    sentence-transformers folder that must exist."""
    validate_section(doc, Embedder, raw, ("embedder",))
    check_server(doc, raw, ("embedder",), allow_key_env)
    embedder = {k: v for k, v in raw.items() if v is not None}
    embedder.setdefault("backend", "local")
    if embedder["backend"] == "sentence-transformers":
        embedder["path"] = existing_path(doc, raw, ("embedder",), "path", base_dir, "embedding model folder")
    return embedder


def prices_section(doc: SpecDoc, top: dict) -> dict[str, dict[str, float]]:
    """The optional ``prices:`` section: model -> {input, output} $ per 1M tokens."""
    prices = top_section(top, "prices")
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
            model_entry(doc, mod, ("models", i), base_dir, allow_key_env)
            for i, mod in enumerate(top["models"])
        )
        labels = [model_label(mod) for mod in models]
        if len(set(labels)) != len(labels):
            raise doc.err(("models",), "two models have the same name: give each a distinct 'label'")
    else:
        models = (model_entry(doc, top_section(top, "model"), ("model",), base_dir, allow_key_env),)

    embedder = embedder_section(doc, top_section(top, "embedder"), base_dir, allow_key_env)
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
    raw_perts = top_section(top, "perturbations", [])
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


def _sequential_sampling(doc: SpecDoc, value: Any, samples: int) -> Any:
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


def _set_fields(doc: SpecDoc, p: dict, path: tuple, name: str, cases: Sequence[Any]) -> tuple:
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


def _operations(doc: SpecDoc, pm: Any, path: tuple, name: str, cases: tuple, options: Any) -> dict[str, Any]:
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


def _attack(doc: SpecDoc, am: Any, path: tuple, name: str) -> PromptAttack:
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


def _check_memory(doc: SpecDoc, spec: AuditSpec) -> None:
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


def _check_work(doc: SpecDoc, spec: AuditSpec) -> None:
    check_test_work(doc, spec.samples, spec.permutations, spec.measure)


def check_test_work(doc: SpecDoc, samples: int, permutations: int, measure: str) -> None:
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
        from .cases import case_warnings

        out += case_warnings(
            spec.base_prompt, spec.perturbations, spec.cases, options=spec.options, seed=spec.seed
        )
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
    ``***`` with B = 2000 and Holm over 3 or more perturbations) and controls that ask the
    base prompt again."""
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
