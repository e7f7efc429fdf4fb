"""The robustness battery: a thin orchestrator over :class:`~dbpa_core.sampling.Sampler`.

``run_battery(spec)`` renders every prompt the spec asks for — each item clean, under
each attack at each ρ, with each synonymous instruction, in each option order — and
sends them to the model in **one** ``sampler.sample`` call (so a concurrent backend
answers them in parallel), together with the k samples per prompt of the DBPA
robustness curve, and RTI's first ρ (every item is asked at ρ = 0.1). RTI then raises
ρ in steps of 0.1 for the items whose answer has not changed yet (one ``sample`` call
per round). On a model that decodes many prompts together (the embedded model), a round
with few items open asks the next ρ levels too, up to :data:`RTI_AHEAD` prompts, and the
first of them go with the first call: a call's fixed cost (a pass over the weights) is
most of what a round of one or two prompts costs there. The items are still scanned ρ by
ρ and stop at their first change, so RTI's numbers and records are those of one level
per round; answers asked ahead and not needed are counted in ``usage`` as
``rti_ahead_unused``. Every answer is cached as it arrives: a rerun makes no call and a
stopped run resumes.

Answers are parsed (:func:`~dbpa_core.attacks.answers.parse_answer`; unparsed answers
are counted, never guessed) and summarised as ER, ASR (per attack, per ρ, per data
set), RTI, consistency spreads, word-pattern tables and the robustness curve
(ω, p and adjusted p of the base prompt's response distribution against each
attacked prompt's).
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends import GenerationParams, SampleRequest
from ..cache import Cache
from ..fmt import table
from ..multitest import multiple_testing
from ..permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from ..render import document, markup
from ..render import section as render_section
from ..sampling import Job, Progress, Sampler, requests_for
from ..similarity import TEXT_SIMILARITIES, text_similarity_matrix
from ..spec import model_label
from ..types import DBPAResult, jsonable
from .answers import ParsedAnswer, parse_answer
from .consistency import option_orders, reorder
from .items import LETTERS, Item, render_asked, split_turns
from .leaks import ALPHA as LEAK_ALPHA
from .leaks import MARGIN as LEAK_MARGIN
from .leaks import LeakRow, leak_notes, option_leaks, strongest, strongest_first
from .metrics import (
    Rate,
    RTIResult,
    accuracy,
    attack_success_rate,
    error_rate,
    first_change,
    relative_training_index,
    spread,
)
from .patterns import PatternRow, SpacyMissing, tag_words, word_patterns
from .phrases import PhraseAnalysis, analyse_battery
from .spec import AttackConfig, BatterySpec
from .text import AttackedText, attack_texts, derive_seed, highlight_segments

if TYPE_CHECKING:
    from ..backends.base import SampleRequest
    from ..sampling import SampleRecord


RTI_RHOS = tuple(round(0.1 * i, 1) for i in range(1, 11))
RTI_AHEAD = 16  # prompts a round of RTI fills with the next ρ levels on a batching model
ALL = "all"
# every file a battery may write: one a rerun does not write is removed from the folder
BATTERY_FILES = (
    "results.json",
    "results.csv",
    "rti.csv",
    "consistency.csv",
    "patterns.csv",
    "curve.csv",
    "phrases.csv",
    "phrase_words.csv",
    "importances.csv",
    "answer_blind.csv",
    "attacked.jsonl",
    "report.html",
)


def _no_nan(value: Any) -> Any:
    """NaN (an undefined rate, e.g. ER among parsed answers when none was parsed) -> None,
    so that results.json is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


# --------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class Query:
    """One prompt of the battery: ``item`` as asked (attacked, re-instructed or
    re-ordered) of the original ``base`` item."""

    kind: str  # clean | attack | instruction | order | rti | curve
    item: Item
    base: Item
    prompt: str
    attack: AttackedText | None = None
    name: str = ""  # attack name (char, word:delete, visual r=0.5) or variant
    rho: float = 0.0
    variant: int = 0  # instruction / order number
    order: tuple[int, ...] | None = None

    @property
    def changed(self) -> bool:
        """Whether an attack changed the prompt (a query without an attack changed nothing)."""
        return self.attack is not None and bool(self.attack.changes)


def _render(spec: BatterySpec, item: Item) -> str:
    """The prompt's text (both turns of a two-turn prompt, see :func:`render_asked`)."""
    return render_asked(item, spec.template, spec.turns)


def _seed(spec: BatterySpec, item: Item, cfg: AttackConfig) -> int:
    return derive_seed(spec.seed, item.dataset, item.id, cfg.level, cfg.op, cfg.letters)


def attack_queries(
    spec: BatterySpec, items: Sequence[Item], cfg: AttackConfig, rho: float, kind: str = "attack"
) -> list[Query]:
    """The prompts of ``items`` under attack ``cfg`` at ``rho``, each seeded by the spec's
    seed, the item and the attack — not by ρ: a higher ρ attacks a superset of the words."""
    atts = attack_texts(
        [it.target_text for it in items],
        cfg.level,
        rho,
        seeds=[_seed(spec, it, cfg) for it in items],
        op=cfg.op,
        letters=cfg.letters if cfg.letters is not None else 0.5,
    )
    out = []
    for item, att in zip(items, atts, strict=True):
        asked = item.with_target(att.text)
        out.append(Query(kind, asked, item, _render(spec, asked), att, cfg.name, rho))
    return out


def attack_query(spec: BatterySpec, item: Item, cfg: AttackConfig, rho: float, kind: str = "attack") -> Query:
    """The prompt of one item under attack ``cfg`` at ``rho`` (see :func:`attack_queries`)."""
    return attack_queries(spec, [item], cfg, rho, kind)[0]


def instruction_variants(spec: BatterySpec, item: Item) -> list[str]:
    """The spec's instructions, each once, in the spec's order (variant j is the same
    instruction for every item). The item's own instruction is no variant: it is the
    clean baseline, asked once; a variant equal to it asks the same prompt, which costs
    no second call."""
    return list(dict.fromkeys(spec.instructions))


def plan(spec: BatterySpec) -> dict[str, list[Query]]:
    """Every prompt of the battery except RTI's, by kind (``clean``, ``attack``,
    ``instruction``, ``order``, ``curve``)."""
    out: dict[str, list[Query]] = {k: [] for k in ("clean", "attack", "instruction", "order", "curve")}
    attacked = {
        (cfg.name, rho): attack_queries(spec, spec.items, cfg, rho)
        for cfg in spec.attacks
        for rho in cfg.rhos
    }
    for n, item in enumerate(spec.items):
        clean = Query("clean", item, item, _render(spec, item))
        out["clean"].append(clean)
        for cfg in spec.attacks:
            for rho in cfg.rhos:
                out["attack"].append(attacked[(cfg.name, rho)][n])
        for j, text in enumerate(instruction_variants(spec, item)):
            asked = item.replace(instruction=text)
            out["instruction"].append(
                Query("instruction", asked, item, _render(spec, asked), name=text, variant=j)
            )
        if spec.option_orders > 1:
            orders = option_orders(
                len(item.options),
                spec.option_orders,
                seed=derive_seed(spec.seed, item.dataset, item.id, "orders"),
            )
            for j, order in enumerate(orders):
                asked = reorder(item, order)
                out["order"].append(
                    Query(
                        "order",
                        asked,
                        item,
                        _render(spec, asked),
                        name="".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] for i in order),
                        variant=j,
                        order=order,
                    )
                )
    if spec.curve is not None:
        for item in spec.items[: spec.curve.items]:
            for cfg in spec.curve.levels:
                out["curve"].append(Query("curve", item, item, _render(spec, item), name=cfg.name))
                for rho in spec.curve.rhos:
                    out["curve"].append(attack_query(spec, item, cfg, rho, kind="curve"))
    return out


def needs_wordnet(spec: BatterySpec) -> bool:
    """True when the spec asks for new words (word-level insert or replace, RTI's, or a
    word-level curve): WordNet must then be installed."""
    word = [a for a in spec.attacks if a.level == "word"] + (
        [a for a in spec.curve.levels if a.level == "word"] if spec.curve else []
    )
    return any(a.op != "delete" for a in word) or any(op != "delete" for op in spec.rti)


def _answer_params(spec: BatterySpec) -> GenerationParams:
    return GenerationParams(temperature=spec.temperature, top_p=spec.top_p, max_tokens=spec.max_tokens)


def _curve_params(spec: BatterySpec) -> GenerationParams:
    c = spec.curve
    assert c is not None  # asked only of a battery with a robustness curve
    return GenerationParams(
        temperature=c.temperature, top_p=spec.top_p, max_tokens=c.max_tokens or max(spec.max_tokens, 64)
    )


def answer_request(spec: BatterySpec, prompt: str) -> SampleRequest:
    """The one sample the battery asks for an answer to ``prompt`` (its turns split as the
    spec says)."""
    history, last = split_turns(prompt)
    return requests_for(
        last,
        n=1,
        seed=spec.seed,
        params=_answer_params(spec),
        system_prompt=spec.system_prompt,
        history=history,
    )[0]


def curve_requests(spec: BatterySpec, prompt: str) -> list[SampleRequest]:
    """The ``spec.samples`` samples of ``prompt`` behind the robustness curve."""
    history, last = split_turns(prompt)
    return requests_for(
        last,
        n=spec.samples,
        seed=spec.seed,
        params=_curve_params(spec),
        system_prompt=spec.system_prompt,
        history=history,
    )


def rti_queries(spec: BatterySpec, items: Sequence[Item], op: str, rho: float) -> list[Query]:
    """RTI's prompts: word-level attack ``op`` at ``rho`` (the battery's word attack with
    the same ``op`` asks the same prompts: they are answered once)."""
    return attack_queries(spec, items, AttackConfig("word", RTI_RHOS, op), rho, kind="rti")


@dataclass(frozen=True)
class BatteryRequest:
    """One sample a battery may ask its model for: ``part`` is 'answers' (clean, attacked,
    re-instructed, re-ordered), 'rti' (a round of RTI whose prompt is not already an
    answer's) or 'curve' (a sample of the robustness curve)."""

    part: str
    prompt: str
    request: SampleRequest


def battery_requests(spec: BatterySpec) -> list[BatteryRequest]:
    """Every sample a battery spec may ask for, each once: the one list that
    :meth:`dbpa_core.runs.BatteryRun.requests_of` gives the estimate, the Batch API job and
    the replay check.
    RTI counts every round of ρ, an upper bound (an item stops at the ρ where its answer
    changes); an attack that changed nothing reuses the clean answer."""
    p = plan(spec)
    answers = dict.fromkeys(q.prompt for k in ("clean", "attack", "instruction", "order") for q in p[k])
    out = [BatteryRequest("answers", x, answer_request(spec, x)) for x in answers]
    rti = dict.fromkeys(
        q.prompt
        for op in spec.rti
        for rho in RTI_RHOS
        for q in rti_queries(spec, spec.items, op, rho)
        if q.changed and q.prompt not in answers
    )
    out += [BatteryRequest("rti", x, answer_request(spec, x)) for x in rti]
    if spec.curve is not None:
        for x in dict.fromkeys(q.prompt for q in p["curve"]):
            out += [BatteryRequest("curve", x, r) for r in curve_requests(spec, x)]
    return out


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class AnswerRecord:
    """A query, the model's answer and the option read from it."""

    query: Query
    response: str
    parsed: ParsedAnswer
    cached: bool = False

    @property
    def correct(self) -> bool:
        return self.parsed.index == self.query.item.answer

    def to_dict(self) -> dict[str, Any]:
        q = self.query
        d = {
            "kind": q.kind,
            "item": q.base.id,
            "dataset": q.base.dataset,
            "attack": q.name,
            "rho": q.rho,
            "variant": q.variant,
            "field": q.base.attack_field,
            "prompt": q.prompt,
            "response": self.response,
            "answer": self.parsed.letter,
            "parsed_by": self.parsed.how,
            "gold": q.item.answer_letter,
            "correct": self.correct,
        }
        if q.attack is not None:
            d.update(
                original=q.attack.original,
                attacked=q.attack.text,
                level=q.attack.level,
                op=q.attack.op,
                letters=q.attack.letters,
                changes=[c.to_dict() for c in q.attack.changes],
            )
        if q.order is not None:
            d["options"] = list(q.item.options)
        return d


@dataclass(frozen=True)
class AttackRow:
    """ER (and ASR against the clean answers) of one attack at one ρ on one data set
    (``ALL`` for every item). The clean row has ``attack == "clean"`` and no ASR."""

    dataset: str
    attack: str
    level: str
    rho: float
    op: str | None
    letters: float | None
    er: Rate
    asr: Rate | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "dataset": self.dataset,
            "attack": self.attack,
            "level": self.level,
            "rho": self.rho,
            "op": self.op,
            "letters": self.letters,
            **self.er.to_dict("er"),
        }
        d.pop("count")
        if self.asr is not None:
            a = self.asr.to_dict("asr")
            d.update({k: v for k, v in a.items() if k.startswith("asr")})
            d["asr_unparsed"] = self.asr.unparsed
        return d


@dataclass(frozen=True)
class ConsistencyRow:
    """Accuracy under one instruction or one option order on one data set."""

    kind: str  # instructions | option_orders
    dataset: str
    variant: int
    label: str  # the instruction, or the order as letters (CAB)
    accuracy: Rate

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind,
            "dataset": self.dataset,
            "variant": self.variant,
            "label": self.label,
            **self.accuracy.to_dict("accuracy"),
        }
        d.pop("count")
        return d


@dataclass(frozen=True)
class RTIRow:
    attack: str  # insert | delete | replace
    dataset: str
    result: RTIResult

    @property
    def rti(self) -> float:
        return self.result.rti

    def to_dict(self) -> dict[str, Any]:
        return {"attack": self.attack, "dataset": self.dataset, **self.result.to_dict()}


@dataclass(frozen=True)
class CurveRow:
    """The DBPA test of one item's base prompt against its attacked prompt at ρ."""

    attack: str
    item: str
    dataset: str
    rho: float
    changed_words: int
    effect_size: float
    chance_effect_size: float
    p_value: float
    p_adjusted: float
    significant: bool
    stars: str
    test: DBPAResult | None = None  # None: the attack changed no word (nothing to test)

    @property
    def effect_above_chance(self) -> float:
        return self.effect_size - self.chance_effect_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "item": self.item,
            "dataset": self.dataset,
            "rho": self.rho,
            "changed_words": self.changed_words,
            "effect_size": self.effect_size,
            "chance_effect_size": self.chance_effect_size,
            "effect_above_chance": self.effect_above_chance,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "significant": self.significant,
            "stars": self.stars,
            "tested": self.test is not None,
        }


@dataclass(frozen=True)
class BatteryResult:
    """Everything a battery measured; ``to_dict``/``write`` give its files."""

    spec: BatterySpec
    records: tuple[AnswerRecord, ...]
    table: tuple[AttackRow, ...]  # clean + attacks, per data set and ALL
    consistency: tuple[ConsistencyRow, ...]
    rti: tuple[RTIRow, ...]
    patterns: tuple[PatternRow, ...]
    curve: tuple[CurveRow, ...]
    curve_responses: dict[tuple[str, str, float], tuple[str, ...]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))  # names the files
    phrases: PhraseAnalysis | None = None  # phrase types of attacked words, the forest
    leaks: tuple[LeakRow, ...] = ()  # answer-blind rules over the items

    # ---------------------------------------------------------------- views
    @property
    def datasets(self) -> tuple[str, ...]:
        return self.spec.datasets

    def clean(self, dataset: str = ALL) -> AttackRow:
        return next(r for r in self.table if r.attack == "clean" and r.dataset == dataset)

    def attacks(self, dataset: str = ALL) -> list[AttackRow]:
        return [r for r in self.table if r.attack != "clean" and r.dataset == dataset]

    def consistency_std(self, kind: str, dataset: str = ALL) -> float:
        return spread([r.accuracy.value for r in self.consistency if r.kind == kind and r.dataset == dataset])

    def records_of(self, kind: str) -> list[AnswerRecord]:
        return [r for r in self.records if r.query.kind == kind]

    @property
    def unparsed(self) -> int:
        return sum(not r.parsed.parsed for r in self.records)

    def answer_positions(self, dataset: str = ALL) -> dict[str, Any]:
        """Where the right options sit and which letters the model chose, over the clean
        items: a model that always answers "C" shows here (``top_share`` near 1 while
        the right answers spread over the letters)."""
        return answer_positions([r for r in self.records if r.query.kind == "clean" and _in(dataset, r)])

    # ---------------------------------------------------------------- serialising
    def to_dict(self) -> dict[str, Any]:
        def cons(kind: str) -> dict[str, Any] | None:
            if not any(r.kind == kind for r in self.consistency):
                return None
            by_dataset: dict[str, dict[str, Any]] = {}
            out: dict[str, Any] = {
                "accuracies": [r.to_dict() for r in self.consistency if r.kind == kind and r.dataset == ALL],
                "std": self.consistency_std(kind),
                "by_dataset": by_dataset,
            }
            if kind == "instructions":  # the item's own instruction: the clean answers
                out["baseline_accuracy"] = 1.0 - self.clean().er.value
            for ds in self.datasets if len(self.datasets) > 1 else ():
                by_dataset[ds] = {
                    "accuracies": [
                        r.to_dict() for r in self.consistency if r.kind == kind and r.dataset == ds
                    ],
                    "std": self.consistency_std(kind, ds),
                }
            return out

        clean = self.clean().to_dict()
        pats: dict[str, list] = {"position": [], "pos": [], "dep": []}
        for p in self.patterns:
            pats[p.feature].append(p.to_dict())
        return _no_nan(
            jsonable(
                {
                    "spec": self.spec.to_dict(),
                    "model": model_label(self.spec.model),
                    "clean": {
                        k: clean[k] for k in ("er", "er_low", "er_high", "er_parsed_only", "n", "unparsed")
                    },
                    "attacks": [r.to_dict() for r in self.attacks()],
                    "by_dataset": {
                        "clean": [
                            r.to_dict() for r in self.table if r.attack == "clean" and r.dataset != ALL
                        ],
                        "attacks": [
                            r.to_dict() for r in self.table if r.attack != "clean" and r.dataset != ALL
                        ],
                    },
                    "rti": [r.to_dict() for r in self.rti],
                    "consistency": {
                        "instructions": cons("instructions"),
                        "option_orders": cons("option_orders"),
                    },
                    "patterns": pats,
                    "curve": [r.to_dict() for r in self.curve],
                    "answer_positions": self.answer_positions(),
                    "answer_blind": [r.to_dict() for r in self.leaks],
                    "phrases": self.phrases.to_dict() if self.phrases is not None else None,
                    "unparsed_answers": self.unparsed,
                    "usage": self.usage,
                    "warnings": list(self.warnings),
                }
            )
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)

    @staticmethod
    def _csv(rows: Sequence[dict[str, Any]]) -> str:
        buf = io.StringIO()
        if rows:
            # the header is every key of every row, in order of appearance: the clean row
            # has no ASR columns, the attack rows after it do
            fields = list(dict.fromkeys(k for r in rows for k in r))
            w = csv.DictWriter(buf, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow(r)
        return buf.getvalue()

    def to_csv(self) -> str:
        """The Table-7-like table: clean and every attack × ρ, for all items and per data set."""
        return self._csv([_no_nan(r.to_dict()) for r in self.table])

    def csv_files(self) -> dict[str, str]:
        files = {"results.csv": self.to_csv()}
        if self.rti:
            files["rti.csv"] = self._csv([_no_nan(r.to_dict()) for r in self.rti])
        if self.consistency:
            files["consistency.csv"] = self._csv([_no_nan(r.to_dict()) for r in self.consistency])
        if self.patterns:
            files["patterns.csv"] = self._csv([_no_nan(p.to_dict()) for p in self.patterns])
        if self.curve:
            files["curve.csv"] = self._csv([_no_nan(r.to_dict()) for r in self.curve])
        if self.leaks:
            files["answer_blind.csv"] = self._csv([_no_nan(r.to_dict()) for r in self.leaks])
        if self.phrases is not None:
            files.update({k: self._csv([_no_nan(r) for r in v]) for k, v in self.phrases.csv_rows().items()})
        return files

    def attacked_jsonl(self) -> str:
        """Every prompt asked (attacked texts with their changes), answer and reading."""
        return "".join(
            json.dumps(_no_nan(jsonable(r.to_dict())), ensure_ascii=False) + "\n" for r in self.records
        )

    def files(self, *, report: str | None = None) -> dict[str, str]:
        """Every output file's name and text (what :meth:`write` writes)."""
        return {
            "results.json": self.to_json(),
            **self.csv_files(),
            "attacked.jsonl": self.attacked_jsonl(),
            "report.html": report if report is not None else report_html(self),
        }

    def write(self, out_dir: str | os.PathLike, *, report: str | None = None) -> list[str]:
        """results.json, results.csv (+ rti/consistency/patterns/curve CSVs),
        attacked.jsonl and report.html, written atomically (each file in full, then all
        renamed into place); returns their paths. A battery output of an earlier run in
        ``out_dir`` that this run does not write (its consistency.csv, say) is removed
        once the new files are in place, so the folder never mixes two runs."""
        from ..outputs import write_files

        files = self.files(report=report)
        paths = write_files(out_dir, files)
        for name in BATTERY_FILES:
            stale = Path(out_dir) / name
            if name not in files and stale.is_file():
                stale.unlink()
        return paths


def answer_positions(records: Sequence[AnswerRecord]) -> dict[str, Any]:
    """``gold`` (letter -> items whose right option has it), ``answered`` (letter -> items
    answered with it), ``unparsed``, and the most answered letter with its share among the
    read answers beside the share of right answers at that letter."""
    letters = sorted(
        {r.query.item.answer_letter for r in records} | {r.parsed.letter for r in records if r.parsed.letter}
    )
    gold = {x: sum(r.query.item.answer_letter == x for r in records) for x in letters}
    answered = {x: sum(r.parsed.letter == x for r in records) for x in letters}
    read = sum(answered.values())
    top = max(letters, key=lambda x: (answered[x], -letters.index(x))) if read else None
    return {
        "n": len(records),
        "gold": gold,
        "answered": answered,
        "unparsed": len(records) - read,
        "top": top,
        "top_share": answered[top] / read if top else None,
        "top_gold_share": gold[top] / len(records) if top else None,
    }


def position_rows(pos: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`answer_positions` as two rows, right options and answers per letter, every
    letter from A to the last one an item has its right option at (a B no item has
    shows as 0 between A and C)."""
    last = max((LETTERS.index(x) for x in pos["gold"]), default=-1)
    return [
        {"what": what, **{x: pos[key].get(x, 0) for x in LETTERS[: last + 1]}}
        for what, key in (("right option", "gold"), ("answered", "answered"))
    ]


def _position_note(pos: dict[str, Any]) -> str | None:
    """A note when the model picks one letter far more often than the right answers
    have it (it may answer a position, not the question)."""
    if not pos["top"] or pos["n"] < 5:
        return None
    if pos["top_share"] >= 0.6 and pos["top_share"] - pos["top_gold_share"] >= 0.3:
        return (
            f"the model answered {pos['top']} in {pos['top_share']:.0%} of the clean items it "
            f"answered, where {pos['top_gold_share']:.0%} have {pos['top']} right: it may pick "
            "a position rather than read (see answer positions)."
        )
    return None


# --------------------------------------------------------------------------- running
def _parse(q: Query, text: str) -> ParsedAnswer:
    return parse_answer(text, q.item.options)


def run_battery(
    spec: BatterySpec,
    *,
    cache: Cache | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: dict[str, str] | None = None,
    sampler: Sampler | None = None,
) -> BatteryResult:
    """Run a battery spec end to end (see the module docstring).

    Parameters
    ----------
    spec : BatterySpec
        From :func:`~dbpa_core.attacks.spec.load_attack_spec` / ``parse_attack_spec``.
    cache, progress, should_stop, api_keys
        As for :func:`dbpa_core.audit.run_audit` (stages: answering, rti, embedding,
        testing, patterns).
    sampler : Sampler, optional
        A ready sampler (tests; callers that keep models loaded).

    Raises
    ------
    RunCancelled
        When stopped (every answer received is cached).
    BackendError
        When the model cannot be reached.
    WordNetMissing
        Word-level attacks or RTI without WordNet installed.
    """
    t0 = time.perf_counter()
    sampler = sampler or Sampler(cache, progress=progress, should_stop=should_stop, api_keys=api_keys)
    caught: list[str] = list(spec.notes)  # what loading the data said (items left out)
    sampler.check_stop()
    p = plan(spec)
    asked = [q for k in ("clean", "attack", "instruction", "order") for q in p[k]]
    jobs = [Job(spec.model, answer_request(spec, q.prompt), f"{q.base.id} {q.name}".strip()) for q in asked]
    curve_jobs = []
    if spec.curve is not None:
        curve_jobs = [
            Job(spec.model, r, f"curve {q.base.id} {q.name} ρ={q.rho:g}")
            for q in p["curve"]
            for r in curve_requests(spec, q.prompt)
        ]
    # RTI's first round (every item at ρ = 0.1; more levels on a batching model) with them
    ahead = _rti_first_round(spec, sampler, {q.prompt for q in asked})
    ahead_jobs = [
        Job(spec.model, answer_request(spec, q.prompt), f"RTI {q.base.id} {q.name} ρ={q.rho:g}")
        for q in ahead
    ]
    recs = sampler.sample(jobs + curve_jobs + ahead_jobs, stage="answering")
    records = [
        AnswerRecord(q, r.text, _parse(q, r.text), r.cached)
        for q, r in zip(asked, recs[: len(jobs)], strict=True)
    ]
    curve_texts = recs[len(jobs) : len(jobs) + len(curve_jobs)]
    answered = {
        q.prompt: r
        for q, r in zip(asked + ahead, recs[: len(jobs)] + recs[len(jobs) + len(curve_jobs) :], strict=True)
    }

    clean = {(r.query.base.dataset, r.query.base.id): r for r in records if r.query.kind == "clean"}

    rti_records, r_values, unused = _run_rti(spec, sampler, clean, answered, {q.prompt for q in ahead})
    records += rti_records

    table = _table(spec, records, clean)
    consistency = _consistency(spec, records)
    rti = _rti_rows(spec, r_values)
    patterns = _patterns(spec, records, clean, sampler, caught)
    phrases = analyse_battery(records, clean, seed=spec.seed, progress=sampler.progress)
    curve, curve_responses = _curve(spec, sampler, p["curve"], curve_texts, caught)

    note = _position_note(answer_positions([r for r in records if r.query.kind == "clean"]))
    if note:
        caught.append(note)
    leaks = option_leaks(spec.items)
    caught += leak_notes(leaks)
    unparsed = sum(not r.parsed.parsed for r in records)
    if unparsed:
        caught.insert(
            0,
            f"{unparsed} of {len(records)} answers named no option and were "
            "counted as unparsed (wrong for ER; see attacked.jsonl).",
        )
    usage = dict(sampler.usage, seconds=round(time.perf_counter() - t0, 3))
    if spec.rti:
        usage["rti_ahead_unused"] = unused
    return BatteryResult(
        spec,
        tuple(records),
        tuple(table),
        tuple(consistency),
        tuple(rti),
        tuple(patterns),
        tuple(curve),
        curve_responses,
        usage,
        tuple(caught),
        phrases=phrases,
        leaks=tuple(leaks),
    )


def _batches_prompts(spec: BatterySpec, sampler: Sampler) -> bool:
    """True when the spec's model decodes many prompts in one pass, so that a few more
    prompts in a call cost little beside the call itself (the embedded model, or a local
    Llama folder once loaded); never for a server or a recording, whose answers are paid
    for or may not be there."""
    if spec.model.get("backend", "local") not in ("local", "hf"):
        return False
    return bool(getattr(sampler.backend(spec.model), "batches_prompts", False))


def _rti_levels(spec: BatterySpec, sampler: Sampler, start: int, n_open: int) -> tuple[float, ...]:
    """The ρ levels a round of RTI asks from ``RTI_RHOS[start]``: one, or on a batching
    model as many as fill :data:`RTI_AHEAD` prompts for the ``n_open`` open items."""
    depth = 1
    if n_open and _batches_prompts(spec, sampler):
        depth = max(1, RTI_AHEAD // n_open)
    return RTI_RHOS[start : start + depth]


def _rti_queries_at(spec: BatterySpec, open_: dict, rho: float) -> dict[tuple[str, str, str], Query]:
    """RTI's prompt at ``rho`` of every open ``(op, dataset, id)``."""
    qs: dict[tuple[str, str, str], Query] = {}
    for op in spec.rti:
        keys = [k for k in open_ if k[0] == op]
        qs.update(zip(keys, rti_queries(spec, [open_[k] for k in keys], op, rho), strict=True))
    return qs


def _rti_open(spec: BatterySpec) -> dict[tuple[str, str, str], Item]:
    """Every (op, dataset, id) of RTI, open at the first ρ."""
    return {(op, it.dataset, it.id): it for op in spec.rti for it in spec.items}


def _rti_first_round(spec: BatterySpec, sampler: Sampler, asked: set[str]) -> list[Query]:
    """The prompts of RTI's first round not asked already, sent with the battery's first
    call (every item is open at the first ρ, so nothing of it is asked in vain)."""
    if not spec.rti:
        return []
    open_ = _rti_open(spec)
    out: dict[str, Query] = {}
    for rho in _rti_levels(spec, sampler, 0, len(open_)):
        for q in _rti_queries_at(spec, open_, rho).values():
            if q.changed and q.prompt not in asked:
                out.setdefault(q.prompt, q)
    return list(out.values())


def _run_rti(
    spec: BatterySpec,
    sampler: Sampler,
    clean: dict,
    answered: dict[str, Any] | None = None,
    ahead: Collection[str] = (),
) -> tuple[list[AnswerRecord], dict, int]:
    """Raise ρ by 0.1 for every (op, item) whose answer has not changed yet; returns the
    RTI records, ``r_values`` and the number of answers asked ahead but not needed.

    ``answered`` maps prompts already answered (the first call's) to their records;
    ``ahead``: those of them asked for RTI only. A round asks the levels of
    :func:`_rti_levels`; they are then read one after the other, and an item stops at
    its first change, so the records and values are those of one level per round."""
    r_values: dict[tuple[str, str, str], tuple[float, bool]] = {}  # (r_x, changed)
    records: list[AnswerRecord] = []
    if not spec.rti:
        return records, r_values, 0
    got = dict(answered or {})
    asked_ahead, used = set(ahead), set()
    open_ = _rti_open(spec)
    history: dict[tuple[str, str, str], list[tuple[float, int | None]]] = defaultdict(list)
    j = 0
    while j < len(RTI_RHOS) and open_:
        levels = _rti_levels(spec, sampler, j, len(open_))
        sampler.check_stop()
        sampler.progress(Progress("rti", j, len(RTI_RHOS), f"ρ = {levels[0]:g}, {len(open_)} open"))
        qs = {rho: _rti_queries_at(spec, open_, rho) for rho in levels}
        ask = {
            q.prompt: (k, q)
            for rho in levels
            for k, q in qs[rho].items()
            if q.changed and q.prompt not in got
        }
        if ask:
            recs = sampler.sample(
                [
                    Job(spec.model, answer_request(spec, prompt), f"RTI {q.base.id} {k[0]} ρ={q.rho:g}")
                    for prompt, (k, q) in ask.items()
                ],
                stage="rti",
            )
            got.update(zip(ask, recs, strict=True))
            if len(levels) > 1:
                asked_ahead.update(ask)
        for i, rho in enumerate(levels):
            if i:
                sampler.progress(Progress("rti", j + i, len(RTI_RHOS), f"ρ = {rho:g}, {len(open_)} open"))
            for key, q in qs[rho].items():
                if key not in open_:  # changed at a lower level of this round
                    continue
                c = clean[key[1:]]
                if q.changed:
                    r = got[q.prompt]
                    used.add(q.prompt)
                    rec = AnswerRecord(q, r.text, _parse(q, r.text), r.cached)
                    records.append(rec)
                    answer = rec.parsed.index
                else:  # no word attacked at this ρ: the clean prompt, the clean answer
                    answer = c.parsed.index
                history[key].append((rho, answer))
                if answer != c.parsed.index:
                    r_values[key] = (rho, True)
                    del open_[key]
            if not open_:
                break
        j += len(levels)
    sampler.progress(Progress("rti", len(RTI_RHOS), len(RTI_RHOS)))
    for key in list(open_):  # never changed: r_x = 1.0
        r_values[key] = (
            first_change(
                [h[0] for h in history[key]], [h[1] for h in history[key]], clean=clean[key[1:]].parsed.index
            ),
            False,
        )
    return records, r_values, len(asked_ahead - used)


def _groups(spec: BatterySpec) -> list[str]:
    ds = list(spec.datasets)
    return [ALL] + ds if len(ds) > 1 else [ALL]


def _in(dataset: str, rec: AnswerRecord) -> bool:
    return dataset == ALL or rec.query.base.dataset == dataset


def _table(spec: BatterySpec, records: list[AnswerRecord], clean: dict) -> list[AttackRow]:
    conf = spec.confidence
    rows = []
    for ds in _groups(spec):
        cl = [r for r in records if r.query.kind == "clean" and _in(ds, r)]
        rows.append(
            AttackRow(
                ds,
                "clean",
                "none",
                0.0,
                None,
                None,
                error_rate([r.parsed.index for r in cl], [r.query.item.answer for r in cl], confidence=conf),
            )
        )
    for cfg in spec.attacks:
        for rho in cfg.rhos:
            att = [
                r
                for r in records
                if r.query.kind == "attack" and r.query.name == cfg.name and r.query.rho == rho
            ]
            for ds in _groups(spec):
                sel = [r for r in att if _in(ds, r)]
                base = [clean[(r.query.base.dataset, r.query.base.id)].parsed.index for r in sel]
                got = [r.parsed.index for r in sel]
                rows.append(
                    AttackRow(
                        ds,
                        cfg.name,
                        cfg.level,
                        rho,
                        cfg.op,
                        cfg.letters,
                        error_rate(got, [r.query.item.answer for r in sel], confidence=conf),
                        attack_success_rate(base, got, confidence=conf),
                    )
                )
    return rows


def _consistency(spec: BatterySpec, records: list[AnswerRecord]) -> list[ConsistencyRow]:
    rows = []
    for kind, qkind in (("instructions", "instruction"), ("option_orders", "order")):
        recs = [r for r in records if r.query.kind == qkind]
        if not recs:
            continue
        variants = sorted({r.query.variant for r in recs})
        for ds in _groups(spec):
            for v in variants:
                sel = [r for r in recs if r.query.variant == v and _in(ds, r)]
                if not sel:
                    continue
                if kind == "instructions":
                    label = sel[0].query.name or "(no instruction)"
                else:
                    label = "original order" if v == 0 else f"order {v + 1}"
                rows.append(
                    ConsistencyRow(
                        kind,
                        ds,
                        v,
                        label,
                        accuracy(
                            [r.parsed.index for r in sel],
                            [r.query.item.answer for r in sel],
                            confidence=spec.confidence,
                        ),
                    )
                )
    return rows


def _rti_rows(spec: BatterySpec, r_values: dict) -> list[RTIRow]:
    """``r_values[(op, dataset, id)] = (r_x, changed)``."""
    rows = []
    for op in spec.rti:
        for ds in _groups(spec):
            sel = [v for (o, d, _), v in r_values.items() if o == op and (ds == ALL or d == ds)]
            rows.append(
                RTIRow(
                    op,
                    ds,
                    relative_training_index(
                        [v[0] for v in sel], changed=[v[1] for v in sel], confidence=spec.confidence
                    ),
                )
            )
    return rows


def _patterns(
    spec: BatterySpec,
    records: Sequence[AnswerRecord],
    clean: dict[tuple[str, str], AnswerRecord],
    sampler: Sampler,
    caught: list[str],
) -> list[PatternRow]:
    att = [
        (r, r.query.attack)
        for r in records
        if r.query.kind == "attack" and r.query.attack is not None and r.query.attack.changes
    ]
    if not att:
        return []
    pairs = [
        (a, r.parsed.index != clean[(r.query.base.dataset, r.query.base.id)].parsed.index) for r, a in att
    ]
    tags = None
    sampler.progress(Progress("patterns", 0, 1, "parts of speech"))
    try:
        texts = {a.original: a.words for _, a in att}
        tags = tag_words(list(texts), texts)
    except SpacyMissing as exc:
        caught.append(str(exc))
    sampler.progress(Progress("patterns", 1, 1))
    return word_patterns(pairs, tags)


def _curve(
    spec: BatterySpec,
    sampler: Sampler,
    queries: Sequence[Query],
    texts: Sequence[SampleRecord],
    caught: list[str],
) -> tuple[list[CurveRow], dict[tuple[str, str, float], tuple[str, ...]]]:
    if spec.curve is None or not queries:
        return [], {}
    k = spec.samples
    groups: dict[tuple[str, str, str], list[tuple[Query, list[str]]]] = defaultdict(list)
    for i, q in enumerate(queries):
        groups[(q.base.dataset, q.base.id, q.name)].append((q, [t.text for t in texts[i * k : (i + 1) * k]]))
    text_sim = spec.embedder.get("backend") in TEXT_SIMILARITIES
    emb: dict[str, np.ndarray] = {}
    if not text_sim:
        unique = list(dict.fromkeys(t for g in groups.values() for _, ts in g for t in ts))
        vecs = sampler.embed(unique, spec.embedder)
        emb = {t: vecs[i] for i, t in enumerate(unique)}
    pending: list[tuple[Query, Query, DBPAResult | None]] = []
    responses: dict[tuple[str, str, float], tuple[str, ...]] = {}
    n_tests = sum(len(g) - 1 for g in groups.values())
    done = 0
    for (ds, iid, name), g in groups.items():
        base_q, base_t = g[0]
        responses[(iid, name, 0.0)] = tuple(base_t)
        for q, ts in g[1:]:
            sampler.check_stop()
            sampler.progress(Progress("testing", done, n_tests, f"{iid} {name} ρ={q.rho:g}"))
            done += 1
            responses[(iid, name, q.rho)] = tuple(ts)
            if q.prompt == base_q.prompt:
                pending.append((base_q, q, None))
                continue
            rng = np.random.default_rng(derive_seed(spec.seed, ds, iid, name, q.rho))
            with warnings.catch_warnings(record=True) as wl:
                warnings.simplefilter("always", DBPAWarning)
                if text_sim:
                    s = text_similarity_matrix(base_t + ts, spec.embedder["backend"])
                    r = dbpa_test_similarity(
                        s, k, measure=spec.measure, n_permutations=spec.permutations, rng=rng
                    )
                else:
                    r = dbpa_test(
                        np.vstack([emb[t] for t in base_t]),
                        np.vstack([emb[t] for t in ts]),
                        measure=spec.measure,
                        n_permutations=spec.permutations,
                        rng=rng,
                    )
            caught += [f"curve {iid} {name} ρ={q.rho:g}: {w.message}" for w in wl]
            pending.append((base_q, q, r))
    sampler.progress(Progress("testing", n_tests, n_tests))
    tested = [r for _, _, r in pending if r is not None]
    # the smallest p-value a test can give: 1/(B+1), or 1/C(k+m, k) when exact
    floor = min((1 / (r.n_permutations + (0 if r.exact else 1)) for r in tested), default=0.0)
    if spec.correction in ("bonferroni", "holm") and floor * len(tested) > spec.alpha:
        caught.append(
            f"the robustness curve runs {len(tested)} tests: with {spec.correction} "
            f"a p-value must fall below {spec.alpha / len(tested):.2g} to count, but "
            f"{spec.permutations} permutations cannot give one below {floor:.2g}, so "
            f"nothing can be significant — raise 'permutations' to at least "
            f"{int(len(tested) / spec.alpha)}, or test fewer rho values or items."
        )
    mt = multiple_testing([r.p_value for r in tested], spec.correction, alpha=spec.alpha) if tested else None
    rows = []
    j = 0
    for _base_q, q, res in pending:
        # no test (the attack left the prompt as it was): mt is None only when no row has one
        if res is None or mt is None:
            rows.append(
                CurveRow(q.name, q.base.id, q.base.dataset, q.rho, 0, 0.0, 0.0, 1.0, 1.0, False, "", None)
            )
            continue
        rows.append(
            CurveRow(
                q.name,
                q.base.id,
                q.base.dataset,
                q.rho,
                len(q.attack.changes) if q.attack is not None else 0,
                res.effect_size,
                res.chance_effect_size,
                res.p_value,
                float(mt.p_adjusted[j]),
                bool(mt.reject[j]),
                mt.stars[j],
                res,
            )
        )
        j += 1
    return rows, responses


# --------------------------------------------------------------------------- text summary
def summary_text(result: BatteryResult) -> str:
    """A plain-text summary for the terminal: clean ER, the Table-7-like ER/ASR table,
    RTI and the consistency spreads."""
    s = result.spec
    c = result.clean()
    pct = f"{s.confidence:.0%}"

    def ci(r: Rate) -> str:
        return "[   –,    –]" if r.low != r.low else f"[{r.low:.2f}, {r.high:.2f}]"

    pos = result.answer_positions()
    lines = [
        f"model: {model_label(s.model)}; {len(s.items)} items ({', '.join(s.datasets)})",
        f"clean: ER {c.er.value:.3f} {ci(c.er)}  n = {c.er.n}, unparsed = {c.er.unparsed}",
        "answer positions (clean): right "
        + " ".join(f"{k} {v}" for k, v in pos["gold"].items())
        + "; answered "
        + " ".join(f"{k} {v}" for k, v in pos["answered"].items())
        + (f", unparsed {pos['unparsed']}" if pos["unparsed"] else ""),
    ]
    best = strongest(result.leaks)
    if best is not None:
        lines.append(
            f"answer-blind rules: the best, {best.label}, is right in {best.share:.0%} "
            f"of {best.n} items (chance {best.chance:.0%})"
            + ("; the options give answers away" if best.leaks else ": no rule beats chance significantly")
        )
    rows = result.attacks()
    if rows:
        head = ("attack", "rho", "ER", f"{pct} CI", "ASR", f"{pct} CI", "unparsed")
        body = []
        for r in rows:
            asr = r.asr
            assert asr is not None  # every attack row (all but the clean one) has an ASR
            body.append(
                (
                    r.attack,
                    f"{r.rho:g}",
                    f"{r.er.value:.3f}",
                    ci(r.er),
                    f"{asr.value:.3f}",
                    ci(asr),
                    str(asr.unparsed),
                )
            )
        lines += ["", table(body, head)]
    rti = [r for r in result.rti if r.dataset == ALL]
    if rti:
        lines += [
            "",
            "RTI (mean rho at which the answer first changes; 1 = never): "
            + ", ".join(
                f"{r.attack} {r.rti:.2f} ({r.result.never_changed_share:.0%} of items never changed)"
                for r in rti
            ),
        ]
    for kind, what in (("instructions", "instructions"), ("option_orders", "option orders")):
        accs = [r for r in result.consistency if r.kind == kind and r.dataset == ALL]
        if accs:
            lines.append(
                f"consistency: accuracy over {len(accs)} {what} from "
                f"{min(a.accuracy.value for a in accs):.2f} to "
                f"{max(a.accuracy.value for a in accs):.2f}, std "
                f"{result.consistency_std(kind):.3f}"
            )
    if result.curve:
        sig = sum(r.significant for r in result.curve)
        lines.append(
            f"robustness curve: {sig} of {len(result.curve)} attacked prompts changed "
            f"the response distribution significantly ({s.correction}, "
            f"alpha = {s.alpha})"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- report
def highlighted_html(attacked: AttackedText) -> str:
    """The attacked text as escaped HTML, changed words in ``<mark>``, deleted ones in
    ``<del>``."""
    out: list[str] = []
    for piece, kind in highlight_segments(attacked):
        e = html.escape(piece)
        if kind == "deleted":  # where a word was; its space went with it
            lead = "" if not out or out[-1].endswith((" ", "\n")) else " "
            out.append(f"{lead}<del>{e}</del>")
        else:
            out.append(e if kind == "plain" else f"<mark>{e}</mark>")
    return "".join(out)


ER_COLUMNS = (
    ("attack", "attack"),
    ("rho", "ρ"),
    ("er", "ER"),
    ("er_low", "ER low"),
    ("er_high", "ER high"),
    ("asr", "ASR"),
    ("asr_low", "ASR low"),
    ("asr_high", "ASR high"),
    ("n", "n"),
    ("unparsed", "unparsed"),
)


LEAK_COLUMNS = (
    ("dataset", "data set"),
    ("label", "rule"),
    ("share", "right"),
    ("chance", "chance"),
    ("p_adjusted", "p (Holm)"),
    ("leaks", "gives answers away"),
    ("n", "n"),
)


def report_html(
    result: BatteryResult,
    *,
    charts_html: str = "",
    title: str = "Robustness battery",
    examples: int = 12,
    section: bool = False,
) -> str:
    """A self-contained HTML report (``templates/battery.html.j2``): tables, an
    explanation, attacked examples (all text escaped) and, when given, ``charts_html``
    (the dashboard adds its Plotly charts); ``section``: the report without the page
    around it (``dbpa report`` puts it into its own)."""
    d = result.to_dict()
    positions = position_rows(d["answer_positions"])
    by_dataset: list[dict[str, Any]] = []
    if d["by_dataset"]["attacks"] or len(result.datasets) > 1:
        order = list(result.datasets)
        by_dataset = sorted(
            d["by_dataset"]["clean"] + d["by_dataset"]["attacks"], key=lambda r: order.index(r["dataset"])
        )  # stable: clean, then attacks
    shown = [
        (r, a)
        for r in result.records
        if r.query.kind == "attack" and (a := r.query.attack) is not None and a.changes
    ]
    context = dict(
        title=title,
        spec=result.spec,
        model=model_label(result.spec.model),
        clean=d["clean"],
        warnings=result.warnings,
        positions=positions,
        position_cols=[("what", "")] + [(x, x) for x in positions[0] if x != "what"],
        leaks=[{**r.to_dict(), "leaks": "yes" if r.leaks else "no"} for r in strongest_first(result.leaks)],
        leak_cols=LEAK_COLUMNS,
        leak_alpha=f"{LEAK_ALPHA:g}",
        leak_margin=f"{LEAK_MARGIN:.0%}",
        er_cols=list(ER_COLUMNS),
        attacks=d["attacks"],
        by_dataset=by_dataset,
        rti=d["rti"],
        consistency=[
            (label, d["consistency"][kind])
            for kind, label in (
                ("instructions", "Synonymous instructions"),
                ("option_orders", "Option orders"),
            )
            if d["consistency"][kind]
        ],
        patterns=[p.to_dict() for p in result.patterns if p.level == ALL],
        phrases_html=result.phrases.html() if result.phrases is not None else "",
        curve=d["curve"] if result.curve else [],
        charts=markup(charts_html),
        examples=[
            {
                "id": r.query.base.id,
                "name": r.query.name,
                "rho": r.query.rho,
                "letter": r.parsed.letter or "unparsed",
                "gold": r.query.item.answer_letter,
                "attacked": markup(highlighted_html(a)),
                "response": r.response,
            }
            for r, a in shown[:examples]
        ],
    )
    return (render_section if section else document)("battery.html.j2", **context)


__all__ = [
    "ALL",
    "BATTERY_FILES",
    "RTI_RHOS",
    "AnswerRecord",
    "AttackRow",
    "BatteryRequest",
    "BatteryResult",
    "ConsistencyRow",
    "CurveRow",
    "Query",
    "RTIRow",
    "answer_positions",
    "attack_queries",
    "attack_query",
    "battery_requests",
    "highlighted_html",
    "needs_wordnet",
    "plan",
    "position_rows",
    "report_html",
    "run_battery",
    "summary_text",
]
