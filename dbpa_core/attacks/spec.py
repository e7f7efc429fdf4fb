"""Battery specs (``dbpa attack SPEC.yaml``): YAML in, a validated :class:`BatterySpec` out.

The spec reuses the audit keys (``model``, ``seed``, ``samples``, ``temperature``,
``max_tokens``, ``system_prompt``, ``embedder``, ``measure``, ``permutations``,
``correction``, ``alpha``, ``prices``, ``name``) and adds::

    data: sample        # or a JSONL path, {file, format, limit, dataset, answers}, {sample: 5}, a list
    attacks:                     # each: level char|word|visual, rho list, op (optional), letters (visual)
      - {level: char, rho: [0.1, 0.5, 1.0]}
      - {level: visual, rho: [0.5], letters: 0.5}
    consistency: {instructions: true, option_orders: 6}   # instructions: true or a list of your own
    rti: true                    # or a list of word-level attacks: [insert, delete, replace]
    curve: true                  # DBPA robustness curve, or {rho: [...], items: 2, levels: [word]}
    template: "..."              # prompt template with {instruction} {passage} {question} {options}
    turns: 2                     # chat models: instruction and passage first, then question and options

The battery's answers use ``temperature`` (default 0: greedy) and ``max_tokens``
(default 16), one answer per prompt; ``samples`` (default 10) is *k*, the responses
per prompt of the DBPA robustness curve, sampled at ``curve.temperature`` (0.8).
Mistakes are rejected before any call, with the line that is wrong.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec import (
    check_test_work,
    embedder_section,
    prices_section,
    read_document,
    read_spec_file,
)
from ..spec_doc import SpecDoc, check_keys, existing_path, get_value, key_name, top_section
from ..spec_models import model_entry
from ..spec_schema import keys_of, validate_section
from .consistency import INSTRUCTIONS
from .items import (
    DEFAULT_TEMPLATE,
    FORMATS,
    Item,
    ItemsError,
    ItemsWarning,
    check_template,
    load_items,
)
from .sample import DATASETS, sample_items
from .schema import Attack, BatterySpecModel, Consistency, Curve, DataEntry
from .text import LEVELS, OPS

# The keys of each section: declared once, by the models of dbpa_core.attacks.schema
TOP_KEYS = keys_of(BatterySpecModel)
ATTACK_KEYS = keys_of(Attack)
DATA_KEYS = keys_of(DataEntry)
CONSISTENCY_KEYS = keys_of(Consistency)
CURVE_KEYS = keys_of(Curve)
RTI_OPS = OPS["word"]
DEFAULT_SAMPLE = 3  # items per sample data set: 12 in all
DEFAULT_ORDERS = 6
CURVE_RHOS = tuple(round(0.1 * i, 1) for i in range(1, 11))


@dataclass(frozen=True)
class AttackConfig:
    """One attack of the battery at each of ``rhos``."""

    level: str
    rhos: tuple[float, ...]
    op: str | None = None
    letters: float | None = None

    @property
    def name(self) -> str:
        """``char``, ``word:delete``, ``visual r=0.5`` — unique per (level, op, letters)."""
        s = self.level + (f":{self.op}" if self.op else "")
        return s + (f" r={self.letters:g}" if self.level == "visual" else "")

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "rho": list(self.rhos), "op": self.op, "letters": self.letters}


@dataclass(frozen=True)
class CurveConfig:
    """The DBPA robustness curve: ``levels`` at each ρ of ``rhos`` on the first ``items``
    items, k = ``BatterySpec.samples`` responses per prompt at ``temperature``."""

    rhos: tuple[float, ...] = CURVE_RHOS
    items: int = 1
    levels: tuple[AttackConfig, ...] = ()
    temperature: float = 0.8
    max_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rho": list(self.rhos),
            "items": self.items,
            "levels": [a.name for a in self.levels],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class BatterySpec:
    """A validated battery (see the module docstring for the keys)."""

    model: dict[str, Any]
    items: tuple[Item, ...]
    attacks: tuple[AttackConfig, ...] = ()
    instructions: tuple[str, ...] = ()
    option_orders: int = 0
    rti: tuple[str, ...] = ()
    curve: CurveConfig | None = None
    data: tuple[str, ...] = ()
    template: str = DEFAULT_TEMPLATE
    turns: int = 1
    seed: int = 0
    samples: int = 10
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 16
    system_prompt: str | None = None
    embedder: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})
    permutations: int = 2000
    measure: str = "jsd"
    correction: str = "holm"
    alpha: float = 0.05
    confidence: float = 0.95
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    name: str = "battery"
    description: str = ""
    source: str = "<spec>"
    notes: tuple[str, ...] = ()  # what loading the data said (items left out), for the result

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(it.dataset for it in self.items))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (names of key variables, never keys; items are counted)."""
        return {
            "name": self.name,
            "description": self.description,
            "model": dict(self.model),
            "data": list(self.data),
            "items": len(self.items),
            "datasets": list(self.datasets),
            "attacks": [a.to_dict() for a in self.attacks],
            "consistency": {"instructions": list(self.instructions), "option_orders": self.option_orders},
            "rti": list(self.rti),
            "curve": self.curve.to_dict() if self.curve else None,
            "template": self.template,
            "turns": self.turns,
            "seed": self.seed,
            "samples": self.samples,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "system_prompt": self.system_prompt,
            "embedder": dict(self.embedder),
            "permutations": self.permutations,
            "measure": self.measure,
            "correction": self.correction,
            "alpha": self.alpha,
            "confidence": self.confidence,
        }


# --------------------------------------------------------------------------- helpers
def _rhos(doc: SpecDoc, value: Any, path: tuple) -> tuple[float, ...]:
    vals = value if isinstance(value, list) else [value]
    if not vals:
        raise doc.err(path, f"{key_name(path)} must list at least one ρ in [0, 1]")
    out = []
    for i, v in enumerate(vals):
        here = path + (i,) if isinstance(value, list) else path
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise doc.err(here, f"{key_name(path)}: every ρ must be a number in [0, 1], got {v!r}")
        out.append(float(v))
    if len(set(out)) != len(out):
        raise doc.err(path, f"{key_name(path)} lists a ρ twice")
    return tuple(sorted(out))


def _attack(doc: SpecDoc, obj: Any, path: tuple) -> AttackConfig:
    level = obj["level"]  # keys and types: checked against the schema's Attack
    rhos = _rhos(doc, obj["rho"], path + ("rho",))
    op = get_value(doc, obj, "op", path, str, choices=OPS[level])
    letters = None
    if level == "visual":
        letters = get_value(doc, obj, "letters", path, float, 0.5, minimum=0.01, maximum=1.0)
    elif obj.get("letters") is not None:
        raise doc.err(
            path + ("letters",), "'letters' (the fraction r of a word's letters) is only for the visual level"
        )
    return AttackConfig(level, rhos, op, letters)


def _data(
    doc: SpecDoc, raw: Any, base_dir: Path, seed: int, notes: list[str] | None = None
) -> tuple[list[Item], list[str]]:
    entries = raw if isinstance(raw, list) else [raw]
    if not entries:
        raise doc.err(("data",), "'data' is empty: give 'sample' or a file")
    items: list[Item] = []
    described: list[str] = []
    for i, entry in enumerate(entries):
        path = ("data", i) if isinstance(raw, list) else ("data",)
        if isinstance(entry, str):
            entry = {"sample": True} if entry.strip() == "sample" else {"file": entry}
        check_keys(doc, entry, DATA_KEYS, path, "a data entry")
        if "sample" in entry and "file" in entry:
            raise doc.err(path, "a data entry is either 'sample' or a 'file', not both")
        if "sample" in entry:
            n = entry["sample"]
            n = DEFAULT_SAMPLE if n is True else n
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1000:
                raise doc.err(
                    path + ("sample",),
                    "'sample' is true or the number of items per "
                    f"sample data set (1..1000), got {entry['sample']!r}",
                )
            sets = entry.get("datasets") or list(DATASETS)
            if not isinstance(sets, list) or any(s not in DATASETS for s in sets):
                raise doc.err(
                    path + ("datasets",), f"'datasets' lists sample data sets from {', '.join(DATASETS)}"
                )
            items += sample_items(n, seed=seed, datasets=tuple(sets))
            described.append(f"sample ({n} per set: {', '.join(sets)})")
            continue
        if "datasets" in entry:
            raise doc.err(path + ("datasets",), "'datasets' is for the sample data")
        file = existing_path(doc, entry, path, "file", base_dir, "data file")
        fmt = get_value(doc, entry, "format", path, str, "auto", choices=("auto", *FORMATS))
        limit = get_value(doc, entry, "limit", path, int, None, minimum=1)
        name = get_value(doc, entry, "dataset", path, str)
        instr = get_value(doc, entry, "instruction", path, str)
        answers = get_value(doc, entry, "answers", path, str)
        if answers is not None:  # a Sen-Making subtask's gold answers, when not beside it
            answers = Path(answers) if os.path.isabs(answers) else (base_dir / answers).resolve()
            if not answers.is_file():
                raise doc.err(path + ("answers",), f"gold-answer file {entry['answers']!r} does not exist")
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", ItemsWarning)
                got = load_items(
                    file, format=fmt, limit=limit, dataset=name, seed=seed, instruction=instr, answers=answers
                )
        except ItemsError as exc:
            raise doc.err(path, f"cannot read the data: {exc}") from None
        for w in said:  # items left out: said in the result, not as a Python warning
            if issubclass(w.category, ItemsWarning):
                if notes is not None:
                    notes.append(f"{file}: {w.message}")
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        items += got
        described.append(f"{file} ({fmt}, {len(got)} items)")
    ids = [(it.dataset, it.id) for it in items]
    if len(set(ids)) != len(ids):
        raise doc.err(
            ("data",), "two data entries give the same data set and item id: name them apart with 'dataset'"
        )
    return items, described


def _consistency(doc: SpecDoc, raw: Any) -> tuple[tuple[str, ...], int]:
    if raw is None or raw is False:
        return (), 0
    if raw is True:
        return INSTRUCTIONS, DEFAULT_ORDERS
    path = ("consistency",)
    check_keys(doc, raw, CONSISTENCY_KEYS, path, "consistency")
    ins = raw.get("instructions", False)
    instructions: tuple[str, ...]
    if ins is True:
        instructions = INSTRUCTIONS
    elif ins is False or ins is None:
        instructions = ()
    elif isinstance(ins, list) and all(isinstance(s, str) for s in ins):
        # the paper's five, then the user's own, each once
        instructions = tuple(dict.fromkeys(INSTRUCTIONS + tuple(ins)))
    else:
        raise doc.err(
            path + ("instructions",),
            "'instructions' is true (the paper's five "
            "synonymous instructions) or a list of your own instructions (added to them)",
        )
    orders = raw.get("option_orders", 0)
    if orders is False or orders is None:
        orders = 0
    elif orders is True:
        orders = DEFAULT_ORDERS
    orders = get_value(doc, {"option_orders": orders}, "option_orders", path, int, 0, minimum=0, maximum=120)
    return instructions, orders


def _rti(doc: SpecDoc, raw: Any) -> tuple[str, ...]:
    if raw is None or raw is False:
        return ()
    if raw is True:
        return RTI_OPS
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or any(o not in RTI_OPS for o in raw):
        raise doc.err(
            ("rti",), f"'rti' is true or a list of word-level attacks from {', '.join(RTI_OPS)}; got {raw!r}"
        )
    return tuple(dict.fromkeys(raw))


def _curve(doc: SpecDoc, raw: Any, attacks: tuple[AttackConfig, ...]) -> CurveConfig | None:
    if raw is None or raw is False:
        return None
    raw = {} if raw is True else raw
    path = ("curve",)
    check_keys(doc, raw, CURVE_KEYS, path, "curve")
    rhos = _rhos(doc, raw["rho"], path + ("rho",)) if "rho" in raw else CURVE_RHOS
    if 0.0 in rhos:
        raise doc.err(path + ("rho",), "curve.rho starts above 0 (ρ = 0 is the base prompt)")
    by_level: dict[str, AttackConfig] = {}
    for a in attacks:  # a level's first attack gives its op and letters
        by_level.setdefault(a.level, a)
    levels_raw = raw.get("levels")
    if levels_raw is None:
        levels = tuple(by_level.values()) or (AttackConfig("word", rhos),)
    else:
        if not isinstance(levels_raw, list) or not levels_raw or any(lv not in LEVELS for lv in levels_raw):
            raise doc.err(path + ("levels",), f"curve.levels lists levels from {', '.join(LEVELS)}")
        levels = tuple(
            by_level.get(lv, AttackConfig(lv, rhos, None, 0.5 if lv == "visual" else None))
            for lv in dict.fromkeys(levels_raw)
        )
    return CurveConfig(
        rhos=rhos,
        items=get_value(doc, raw, "items", path, int, 1, minimum=1, maximum=1000),
        levels=tuple(AttackConfig(a.level, rhos, a.op, a.letters) for a in levels),
        temperature=get_value(doc, raw, "temperature", path, float, 0.8, minimum=0.01, maximum=2.0),
        max_tokens=get_value(doc, raw, "max_tokens", path, int, None, minimum=1, maximum=100_000),
    )


# --------------------------------------------------------------------------- parsing
def parse_attack_spec(
    data: str | dict,
    *,
    source: str = "<spec>",
    base_dir: str | os.PathLike = ".",
    items: list[Item] | None = None,
    allow_key_env: Iterable[str] | None = (),
) -> BatterySpec:
    """Validate a battery spec given as YAML text or a dict. ``items`` (e.g. uploaded in
    the dashboard) replace the spec's ``data``; ``allow_key_env`` as for audit specs."""
    doc, raw = read_document(data, source)
    base_dir = Path(base_dir)
    # keys, types, bounds and defaults: the schema's (dbpa_core.attacks.schema); the
    # sections of many forms and what relates keys to each other: below
    m = validate_section(doc, BatterySpecModel, raw)
    top = raw
    seed = m.seed
    model = model_entry(doc, top_section(top, "model"), ("model",), base_dir, allow_key_env)

    notes: list[str] = []
    if items is not None:
        if not items:
            raise doc.err((), "no items to test")
        its, described = list(items), [f"{len(items)} given items"]
    else:
        if "data" not in top or top["data"] is None:
            raise doc.err((), "missing 'data' (sample, or the path of a JSONL file of items)")
        its, described = _data(doc, top["data"], base_dir, seed, notes)

    raw_attacks = top.get("attacks") or []
    attacks = tuple(_attack(doc, a, ("attacks", i)) for i, a in enumerate(raw_attacks))
    names = [a.name for a in attacks]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        i = len(names) - 1 - names[::-1].index(dup)
        raise doc.err(("attacks", i), f"the attack {dup!r} is listed twice: merge their ρ lists")
    instructions, orders = _consistency(doc, top.get("consistency"))
    rti = _rti(doc, top.get("rti"))
    curve = _curve(doc, top.get("curve"), attacks)
    if not (attacks or instructions or orders > 1 or rti or curve):
        raise doc.err((), "nothing to run: add 'attacks', 'consistency', 'rti' or 'curve'")

    template = m.template
    try:
        check_template(template)
    except ValueError as exc:
        raise doc.err(("template",), str(exc)) from None

    turns = m.turns
    if turns == 2 and model.get("backend") not in ("openai", "local", "hf"):
        raise doc.err(
            ("turns",),
            "'turns: 2' sends a chat of two turns: it needs a chat "
            f"model (backend openai, local or hf), not {model.get('backend')}",
        )
    prices = prices_section(doc, top)
    system_prompt = m.system_prompt
    check_test_work(doc, m.samples, m.permutations, m.measure)
    return BatterySpec(
        model=model,
        items=tuple(its),
        attacks=attacks,
        instructions=instructions,
        option_orders=orders,
        rti=rti,
        curve=curve,
        data=tuple(described),
        notes=tuple(notes),
        template=template,
        turns=turns,
        seed=seed,
        samples=m.samples,
        temperature=m.temperature,
        top_p=m.top_p,
        max_tokens=m.max_tokens,
        system_prompt=system_prompt,
        embedder=embedder_section(doc, top_section(top, "embedder"), base_dir, allow_key_env),
        permutations=m.permutations,
        measure=m.measure,
        correction=m.correction,
        alpha=m.alpha,
        confidence=m.confidence,
        prices=prices,
        name=m.name if m.name is not None else (Path(source).stem if source != "<spec>" else "battery"),
        description=m.description,
        source=source,
    )


def load_attack_spec(path: str | os.PathLike, *, allow_key_env: Iterable[str] | None = ()) -> BatterySpec:
    """Read and validate a battery spec file (relative paths inside resolve next to it)."""
    return parse_attack_spec(
        read_spec_file(path), source=str(path), base_dir=Path(path).parent, allow_key_env=allow_key_env
    )


__all__ = [
    "CURVE_RHOS",
    "AttackConfig",
    "BatterySpec",
    "CurveConfig",
    "load_attack_spec",
    "parse_attack_spec",
]
