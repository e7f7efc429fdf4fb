"""The Robustness battery page's helpers: form values -> a validated spec, the estimate,
the task for the run section, and result tables (no Streamlit widgets here)."""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from dbpa_core.attacks.battery import (
    ALL,
    BatteryResult,
    highlighted_html,
    position_rows,
    run_battery,
)
from dbpa_core.attacks.items import Item
from dbpa_core.attacks.leaks import (
    ALPHA,
    MARGIN,
    LeakRow,
    leak_notes,
    option_leaks,
    strongest,
    strongest_first,
)
from dbpa_core.attacks.spec import BatterySpec, parse_attack_spec
from dbpa_core.sampling import Progress
from dbpa_core.spec import SpecError

RHO_CHOICES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
OP_CHOICES = {
    "char": ("any", "repeat", "delete", "insert"),
    "word": ("any", "insert", "delete", "replace"),
    "visual": ("any",),
}
LEVEL_TEXT = {"char": "Typos", "word": "Word edits", "visual": "Homoglyphs"}
LEVEL_HELP = {
    "char": "Character level: a letter repeated or deleted (1-3 times), or a random "
    "letter inserted — typing and speech-to-text noise.",
    "word": "Word level: a word inserted, deleted or replaced (by a word of the passage, "
    "a WordNet synonym or a random word).",
    "visual": "Visual level: a share r of a word's letters replaced by look-alike "
    "Unicode characters (Cyrillic а for a, ...) — scanned or spoofed text.",
}

# widget defaults: small enough for the embedded model in a few minutes
DEFAULTS: dict[str, Any] = {
    "w_bat_data": "Sample data set",
    "w_bat_per_set": 2,
    "w_bat_char": True,
    "w_bat_char_rho": [0.1, 0.5, 1.0],
    "w_bat_char_op": "any",
    "w_bat_word": True,
    "w_bat_word_rho": [0.1, 0.5, 1.0],
    "w_bat_word_op": "any",
    "w_bat_visual": True,
    "w_bat_visual_rho": [0.5],
    "w_bat_visual_letters": 0.5,
    "w_bat_instr": True,
    "w_bat_own": "",
    "w_bat_orders": 3,
    "w_bat_rti": ["replace"],
    "w_bat_curve": False,
    "w_bat_curve_levels": ["word"],
    "w_bat_curve_items": 1,
    "w_bat_max_tokens": 16,
    "w_bat_answer_temperature": 0.0,
    "w_bat_format": "auto",
    "w_bat_limit": 0,
    "w_bat_sets": ["deduction", "induction", "true/false", "arithmetic"],
}


def spec_data(values: dict[str, Any], settings: dict[str, Any], model: dict) -> dict[str, Any]:
    """The spec (as a dict) the form describes. ``values`` are the page's widget values
    (keys of :data:`DEFAULTS`), ``settings`` the sidebar's (``ui.state.settings()``)."""
    attacks = []
    for level in ("char", "word", "visual"):
        if not values.get(f"w_bat_{level}"):
            continue
        a: dict[str, Any] = {"level": level, "rho": sorted(values.get(f"w_bat_{level}_rho") or [])}
        op = values.get(f"w_bat_{level}_op", "any")
        if op and op != "any":
            a["op"] = op
        if level == "visual":
            a["letters"] = float(values.get("w_bat_visual_letters", 0.5))
        attacks.append(a)
    own = [s.strip() for s in str(values.get("w_bat_own") or "").splitlines() if s.strip()]
    instructions: Any = (own or True) if values.get("w_bat_instr") else (own or False)
    data: dict[str, Any] = {
        "model": dict(model),
        "attacks": attacks,
        "consistency": {"instructions": instructions, "option_orders": int(values.get("w_bat_orders") or 0)},
        "rti": list(values.get("w_bat_rti") or []) or False,
        "seed": settings["seed"],
        "samples": settings["samples"],
        "permutations": settings["permutations"],
        "measure": settings["measure"],
        "correction": settings["correction"],
        "alpha": settings["alpha"],
        "embedder": settings["embedder"],
        "temperature": float(values.get("w_bat_answer_temperature", 0.0)),
        "max_tokens": int(values.get("w_bat_max_tokens", 16)),
        "name": "robustness-battery",
    }
    if values.get("w_bat_curve"):
        data["curve"] = {
            "levels": list(values.get("w_bat_curve_levels") or ["word"]),
            "items": int(values.get("w_bat_curve_items", 1)),
            "temperature": settings["temperature"],
            "max_tokens": settings["max_tokens"],
        }
    if values.get("w_bat_data") == "Sample data set":
        data["data"] = {"sample": int(values.get("w_bat_per_set", 2))}
        if values.get("w_bat_sets"):
            data["data"]["datasets"] = list(values["w_bat_sets"])
    return data


def build_spec(
    values: dict[str, Any], settings: dict[str, Any], model: dict, items: list[Item] | None = None
) -> BatterySpec:
    """A validated spec (raises SpecError naming what is wrong: a sidebar setting out of
    its range in the sidebar's words)."""
    from .state import number_problem

    if problem := number_problem():
        raise SpecError(problem.removesuffix("."))
    return parse_attack_spec(spec_data(values, settings, model), source="The form", items=items)


def wordnet_problem(spec: BatterySpec) -> str | None:
    """What to do when the spec needs WordNet and it is not installed (else None)."""
    from dbpa_core.attacks.battery import needs_wordnet
    from dbpa_core.attacks.wordnet import HINT, available

    if needs_wordnet(spec) and not available():
        return HINT + " Or untick word edits and RTI (word deletions need no WordNet)."
    return None


def estimate(spec: BatterySpec, cache) -> dict[str, Any]:
    from dbpa_core.runs import estimate as estimate_run  # counted from the requests the run asks

    return estimate_run(spec, cache=cache)


def task(spec: BatterySpec, cache, api_keys: dict) -> Callable[[Callable[[Progress], None]], Any]:
    """A task for ``runner.task_section``: runs the battery on the session's cache."""
    return lambda progress: run_battery(spec, cache=cache, progress=progress, api_keys=api_keys)


def _ci(lo: float, hi: float) -> str:
    return "–" if lo != lo else f"{lo:.2f}–{hi:.2f}"


def table7(result: BatteryResult, dataset: str = ALL) -> pd.DataFrame:
    """Clean and every attack × ρ: ER and ASR with intervals, n, unparsed."""
    rows = []
    c = result.clean(dataset)
    rows.append(
        {
            "attack": "clean",
            "ρ": 0.0,
            "ER": c.er.value,
            "ER 95% CI": _ci(c.er.low, c.er.high),
            "ASR": float("nan"),
            "ASR 95% CI": "",
            "n": c.er.n,
            "unparsed": c.er.unparsed,
        }
    )
    for r in result.attacks(dataset):
        rows.append(
            {
                "attack": r.attack,
                "ρ": r.rho,
                "ER": r.er.value,
                "ER 95% CI": _ci(r.er.low, r.er.high),
                "ASR": r.asr.value,
                "ASR 95% CI": _ci(r.asr.low, r.asr.high),
                "n": r.er.n,
                "unparsed": r.er.unparsed,
            }
        )
    return pd.DataFrame(rows)


def dataset_table(result: BatteryResult) -> pd.DataFrame:
    """ER / ASR per data set: one row per data set, one column pair per attack × ρ."""
    rows = []
    for ds in result.datasets:
        d = ds if len(result.datasets) > 1 else ALL
        row: dict[str, Any] = {
            "data set": ds,
            "items": result.clean(d).er.n,
            "clean ER": result.clean(d).er.value,
        }
        for r in result.attacks(d):
            row[f"{r.attack} ρ={r.rho:g} ER"] = r.er.value
            row[f"{r.attack} ρ={r.rho:g} ASR"] = r.asr.value
        rows.append(row)
    return pd.DataFrame(rows)


def rti_table(result: BatteryResult) -> pd.DataFrame:
    """RTI per data set (rows) and word-level attack (columns), as the paper's Table 13."""
    rows = []
    for ds in [ALL] + [d for d in result.datasets if len(result.datasets) > 1]:
        row: dict[str, Any] = {"data set": ds}
        for r in result.rti:
            if r.dataset == ds:
                row[r.attack] = r.rti
                row[f"{r.attack} 95% CI"] = _ci(r.result.low, r.result.high)
        row["items"] = next(r.result.n for r in result.rti if r.dataset == ds)
        rows.append(row)
    return pd.DataFrame(rows)


def consistency_table(result: BatteryResult) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "kind": r.kind.replace("_", " "),
                "variant": r.label,
                "accuracy": r.accuracy.value,
                "95% CI": _ci(r.accuracy.low, r.accuracy.high),
                "n": r.accuracy.n,
                "unparsed": r.accuracy.unparsed,
            }
            for r in result.consistency
            if r.dataset == ALL
        ]
    )


def phrase_table(result: BatteryResult) -> pd.DataFrame:
    """The phrase table (all attack levels): per phrase type, the attacked words, their share
    among successful attacks and among all, the lift, and the ASR of attacks touching it."""
    from dbpa_core.attacks.phrases import GROUP_TEXT

    def num(x: float) -> str:  # text: "–" where undefined (a phrase type never attacked)
        return "–" if x != x else f"{x:.2f}"

    ph = result.phrases
    return pd.DataFrame(
        [
            {
                "phrase": r.value,
                "what": GROUP_TEXT[r.value],
                "attacked words": r.words,
                "share (answer changed)": num(r.share),
                "share (all attacks)": num(r.base_share),
                "lift": num(r.lift),
                "attacks hitting it": r.hit,
                "ASR when hit": num(r.asr_when_hit),
            }
            for r in (ph.rows() if ph is not None else [])
        ]
    )


def importance_table(result: BatteryResult) -> pd.DataFrame:
    """The forest's importances, most important first (empty when it was not fit)."""
    f = result.phrases.forest if result.phrases is not None else None
    return pd.DataFrame(
        [
            {
                "feature": i.feature,
                "permutation importance": i.mean,
                "sd": i.std,
                "impurity importance": i.impurity,
            }
            for i in (f.ranked() if f is not None else [])
        ]
    )


def forest_text(result: BatteryResult) -> str:
    """One sentence on the forest: its held-out accuracy beside the majority baseline, or
    why it was not fit."""
    ph = result.phrases
    if ph is None:
        return "No attack changed a word: no phrase analysis."
    f = ph.forest
    if f is None:
        return ph.note or "No phrase analysis."
    if not f.fitted:
        return f.note
    return (
        f"A random forest predicts whether an attack changed the answer from the phrase "
        f"types it hit and the share of words it attacked: **held-out accuracy {f.accuracy:.2f}"
        f"** against **{f.baseline:.2f}** for always guessing the more frequent outcome "
        f"({f.rows} attacks of {f.items} items, {f.changed} changed the answer; "
        f"{f.folds}-fold cross-validation by item)."
        + ("" if f.beats_baseline else " That is no better than guessing: the importances below say little.")
    )


def answers_table(result: BatteryResult, *, only_unparsed: bool = False) -> pd.DataFrame:
    """Every answer: item, what was asked, the model's text and what it was read as."""
    rows = []
    for r in result.records:
        if only_unparsed and r.parsed.parsed:
            continue
        q = r.query
        rows.append(
            {
                "item": q.base.id,
                "data set": q.base.dataset,
                "kind": q.kind,
                "attack / variant": q.name
                if q.kind != "instruction"
                else (q.name[:40] or "(no instruction)"),
                "ρ": q.rho if q.kind in ("attack", "rti") else None,
                "response": r.response,
                "read as": r.parsed.letter or "unparsed",
                "gold": q.item.answer_letter,
                "correct": r.correct,
            }
        )
    return pd.DataFrame(rows)


def example_choices(result: BatteryResult) -> list[tuple[str, float]]:
    """(attack, ρ) pairs that changed some text."""
    seen = dict.fromkeys(
        (r.query.name, r.query.rho)
        for r in result.records
        if r.query.kind == "attack" and r.query.attack.changes
    )
    return list(seen)


def examples_html(result: BatteryResult, attack: str, rho: float, *, limit: int = 20) -> list[dict]:
    """Attacked examples of one attack at one ρ: escaped HTML with the changes marked,
    and the answer (all model and item text escaped)."""
    out = []
    for r in result.records:
        q = r.query
        if q.kind != "attack" or q.name != attack or q.rho != rho:
            continue
        out.append(
            {
                "item": html.escape(q.base.id),
                "field": q.base.attack_field,
                "html": highlighted_html(q.attack),
                "response": r.response,
                "read": r.parsed.letter or "unparsed",
                "gold": q.item.answer_letter,
                "changed": len(q.attack.changes),
                "words": q.attack.n_words,
            }
        )
        if len(out) >= limit:
            break
    return out


def positions_table(pos: dict[str, Any]) -> pd.DataFrame:
    """Letters as columns: how many clean items have their right option there, and how
    often the model answered it."""
    return pd.DataFrame(position_rows(pos)).rename(columns={"what": ""})


LEAK_CAPTION = (
    "Answer-blind rules: how often a rule that never reads the question picks the "
    "right option (ties shared), beside chance. A rule that beats chance "
    f"significantly (Holm-adjusted one-sided p below {ALPHA:g}) by {MARGIN:.0%} of "
    "the items or more gives answers away: on those items a model can score "
    "without reading."
)


def leak_table(rows: Sequence[LeakRow]) -> pd.DataFrame:
    """The answer-blind rules, the strongest first (all items, then each data set)."""
    return pd.DataFrame(
        [
            {
                "data set": r.dataset,
                "rule": r.label,
                "right": r.share,
                "chance": r.chance,
                "p (Holm)": r.p_adjusted,
                "gives answers away": "yes" if r.leaks else "no",
                "n": r.n,
            }
            for r in strongest_first(rows)
        ]
    )


def leak_check(spec: BatterySpec) -> str:
    """One sentence, before the run: whether the items' options give answers away."""
    return _leak_check(tuple(spec.items))


@functools.lru_cache(maxsize=8)  # the page asks on every rerun; 5,000 items take ~1 s
def _leak_check(items: tuple[Item, ...]) -> str:
    rows = option_leaks(items)
    notes = leak_notes(rows)
    if notes:
        return "Answer-blind check: " + " ".join(n[:1].upper() + n[1:] for n in notes)
    best = strongest(rows)
    if best is None:
        return ""
    return (
        f"Answer-blind check: no rule that ignores the question beats chance significantly "
        f"(the best, {best.label}, is right in {best.share:.0%} of {best.n} items; chance "
        f"{best.chance:.0%})."
    )


def notes(result: BatteryResult) -> list[str]:
    """The run's warnings besides the unparsed count (which :func:`summary` gives)."""
    return [w for w in result.warnings if "named no option" not in w]


def summary(result: BatteryResult) -> str:
    """One plain sentence on what the battery found."""
    c = result.clean()
    rows = result.attacks()
    parts = [f"Clean: {c.er.count} of {c.er.n} items wrong (ER {c.er.value:.2f})"]
    if rows:
        worst = max(rows, key=lambda r: r.asr.value)
        parts.append(
            f"the strongest attack, {worst.attack} at ρ = {worst.rho:g}, changed "
            f"{worst.asr.count} of {worst.asr.n} answers (ASR {worst.asr.value:.2f})"
        )
    if result.unparsed:
        parts.append(
            f"{result.unparsed} of {len(result.records)} answers named no option "
            "(shown as unparsed, counted as wrong)"
        )
    return "; ".join(parts) + "."


def replay_shortfall(spec) -> str | None:
    """When the battery's model is a replay file that lacks some of the prompts the battery
    may send (RTI's every round included), one message saying how many and which; else
    None. Checked before Run, as the audit pages check theirs."""
    from dbpa_core.runs import replay_need, requests
    from dbpa_core.spec import model_label

    from .runner import replay_lacking
    from .widgets import md_escape

    m = spec.model
    if m.get("backend") != "replay":
        return None
    need = replay_need(requests(spec))
    lacking, unreadable = replay_lacking(m, need)
    if unreadable or not lacking:
        return unreadable
    first = " ".join(lacking[0].split())
    first = first if len(first) <= 80 else first[:77] + "..."
    return (
        f"The replay file of **{md_escape(model_label(m))}** holds no recorded answer for "
        f"{len(lacking)} of the {len(need)} prompts this battery may send "
        f'(e.g. "{md_escape(first)}"). A replay model answers only the prompts recorded in its '
        "file: choose another model, or record these prompts "
        "(assets/make_demo_replay.py shows how)."
    )
