"""The Simulator fidelity page's helpers: reading the chosen data, the simulation task
for the run section, the analysis (remembered per inputs), and the tables (no widgets)."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pandas as pd

from dbpa_core.fidelity import FidelityData, FidelityResult, run_fidelity
from dbpa_core.fidelity.data import FidelityDataError, parse_csv
from dbpa_core.fidelity.discrepancy import LOSSES
from dbpa_core.fidelity.sample import sample_data
from dbpa_core.fidelity.simulate import (
    DEFAULT_TEMPLATE,
    SimulationResult,
    estimate_simulation,
    plan_jobs,
    render_prompt,
    simulate,
)
from dbpa_core.sampling import Progress

from .export import slug

SOURCES = ("Sample data", "Upload a CSV", "Simulate now")
QUESTION_SOURCES = ("The sample's", "From my CSV")
BASELINE_TEXT = {
    "drawn": "drawn like the simulators (k answers per question)",
    "exact": "exact 1/d (no sampling noise)",
}
LOSS_TEXT = {
    "tv": "total variation (tv)",
    "kl": "KL(real ‖ simulated)",
    "w1": "Wasserstein-1 (w1)",
    "squared": "squared error of the mean",
    "absolute": "absolute error of the mean",
}
DEFAULTS: dict[str, Any] = {
    "w_fid_source": SOURCES[0],
    "w_fid_qsource": QUESTION_SOURCES[0],
    "w_fid_loss": "tv",
    "w_fid_gamma": 0.5,
    "w_fid_eta": 0.05,
    "w_fid_alpha": 0.1,
    "w_fid_baseline": "drawn",
    "w_fid_sigma": "",
    "w_fid_bounds": "",
    "w_fid_questions": 6,
    "w_fid_k": 10,
    "w_fid_temperature": 1.0,
    "w_fid_max_tokens": 12,
    "w_fid_template": DEFAULT_TEMPLATE,
    "w_fid_persona": [{"field": "Country", "value": "United States"}, {"field": "Age", "value": "30-49"}],
}


def losses_for(data: FidelityData) -> list[str]:
    """The losses that fit the data: every one for options, w1 / squared / absolute for values."""
    return list(LOSSES) if data.kind == "categorical" else ["w1", "squared", "absolute"]


def read_upload(content: bytes, name: str) -> FidelityData:
    """An uploaded long CSV (FidelityDataError with the line when it is malformed)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = content.count(b"\n", 0, exc.start) + 1
        raise FidelityDataError(f"{name}, line {line}: not UTF-8 text; save the file as UTF-8.") from None
    return parse_csv(text, source=name)


def sample_questions(n: int) -> FidelityData:
    """The sample's first n questions (their real answers are synthetic)."""
    data = sample_data()
    return data.select(list(data.ids[: max(2, n)])).without_simulators()


def questions_of(data: FidelityData) -> FidelityData:
    """An uploaded file's questions for Simulate now: its real counts without its simulator
    columns; FidelityDataError when it cannot be asked (no option or question column)."""
    from dbpa_core.fidelity.simulate import check_questions

    questions = data.without_simulators()
    check_questions(questions)
    return questions


def persona_pairs(rows) -> list[tuple[str, str]]:
    """The persona editor's rows -> (field, value) pairs (empty rows skipped)."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows or [])
    out = []
    for r in records:
        f = str(r.get("field") or "").strip()
        v = str(r.get("value") or "").strip()
        if f and f.lower() != "nan":
            out.append((f, v))
    return out


def simulation_settings(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "samples": int(values["w_fid_k"]),
        "temperature": float(values["w_fid_temperature"]),
        "max_tokens": int(values["w_fid_max_tokens"]),
        "template": values["w_fid_template"],
        "persona": persona_pairs(values["w_fid_persona"]),
        "seed": int(values.get("seed", 0)),
    }


def first_prompt(data: FidelityData, settings: dict) -> str:
    """The prompt of the first question, as the model will read it."""
    return render_prompt(data.scenarios[0], settings["template"], settings["persona"])


def check_simulation(data: FidelityData, models: list[dict], settings: dict) -> None:
    """Raise what would stop the simulation (a bad template, questions without text) before
    anything is drawn; the cache is not read (the estimate does that)."""
    plan_jobs(data, models, **settings)


def estimate(data: FidelityData, models: list[dict], settings: dict, cache) -> dict[str, int]:
    return estimate_simulation(data, models, cache=cache, **settings)


def simulation_task(
    data: FidelityData, models: list[dict], settings: dict, cache, api_keys: dict
) -> Callable[[Callable[[Progress], None]], SimulationResult]:
    """A task for ``runner.task_section``: simulates on the session's cache."""
    return lambda progress: simulate(
        data, models, cache=cache, progress=progress, api_keys=api_keys, keep_simulators=False, **settings
    )


def simulation_signature(data: FidelityData, models: list[dict], settings: dict) -> str:
    """What a simulation's answers depend on, in the shape ``runner.task_section`` compares
    (a JSON object of jobs, each an object of fields), so that a changed input marks the
    results "Outdated … (k)" and names what changed."""
    asked = [(s.id, s.question, list(s.options), s.real.tolist()) for s in data.scenarios]
    job = {
        "questions": hashlib.sha256(json.dumps(asked).encode()).hexdigest()[:16],
        "models": list(models),
        **settings,
    }
    return json.dumps({"simulation": job}, default=str, sort_keys=True)


def parse_bounds(text: str) -> tuple[float, float] | None:
    """'0, 10' -> (0.0, 10.0); empty -> None (the data's range); else ValueError."""
    if not str(text or "").strip():
        return None
    parts = [p for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        a, b = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"Bounds must be two numbers such as 0, 10; got {text!r}.") from None
    return (a, b)


def parse_sigma(text: str) -> float | None:
    """'1.5' -> 1.5; empty -> None (the pooled standard deviation, as the CLI); else ValueError."""
    if not str(text or "").strip():
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise ValueError(
            f"σ must be a positive number such as 1.5, or empty for the pooled "
            f"standard deviation; got {text!r}."
        )
    return value


def replay_shortfall(
    data: FidelityData, models: list[dict], settings: dict, offered: list[dict] | None = None
) -> str | None:
    """When a chosen model is a replay file that lacks some of the simulation's prompts
    (k answers each), one message saying so; else None. Checked before Simulate, as the
    other pages check theirs. ``offered`` (every model the page lists) names a live model
    to choose instead — or, where every one is a recording (the demo), what works."""
    from dbpa_core.spec import model_label

    from .runner import replay_lacking
    from .widgets import md_escape

    replays = [m for m in models if m.get("backend") == "replay"]
    if not replays:
        return None
    live = [model_label(m) for m in (offered or []) if m.get("backend") != "replay"]
    need = {
        render_prompt(s, settings["template"], settings["persona"]): settings["samples"]
        for s in data.scenarios
    }
    for m in replays:
        lacking, unreadable = replay_lacking(m, need)
        if unreadable:
            return unreadable
        if lacking:
            head = (
                f"The replay file of **{md_escape(model_label(m))}** holds fewer than "
                f"{settings['samples']} recorded answers for {len(lacking)} of the "
                f"{len(need)} survey prompts. A replay model answers only the prompts "
                "recorded in its file (the instant demo's recording holds the landing "
                "audit, not these questions)"
            )
            if live:
                return head + f": choose a live model, such as **{md_escape(live[0])}**, to simulate."
            return head + (
                ", and every model listed here is a recording. Without simulating, "
                "the **Sample data** and **Upload a CSV** sources work here; to "
                "simulate, add a live model (an OpenAI-compatible server) on the "
                "Settings page."
            )
    return None


def analysis_key(fingerprint: str, settings: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps([fingerprint, settings], sort_keys=True, default=str).encode()
    ).hexdigest()


def analyse(
    data: FidelityData, settings: dict[str, Any], progress: Callable[[Progress], None] | None = None
) -> FidelityResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # they are in result.warnings, shown by the page
        return run_fidelity(data, progress=progress, **settings)


def summary_table(result: FidelityResult) -> pd.DataFrame:
    """One row per simulator: what its answers were, how many per question (k), AUC_cal,
    CVaR_10, V̂_m(1 - α/2)."""
    q = f"V̂_m({1 - result.alpha / 2:g})"
    return pd.DataFrame(
        [
            {
                "simulator": s.name,
                "answers": s.kind,
                "k per question": result.sample_size_summary(s.name),
                "worst case": s.method_text,
                "AUC_cal": s.auc_cal,
                "CVaR₁₀": s.cvar(),
                q: s.guarantee_quantile,
            }
            for s in result.simulators
        ]
    )


def guarantee_sentence(result: FidelityResult) -> str:
    """The guarantee in words, or why there is none (γ < ½, or too few questions): the
    library's sentence, as the CLI and the report say it."""
    return result.guarantee_text()


def curve_caption(result: FidelityResult, band: bool) -> str:
    """The caption under the curves: how to read them at τ = 1 − α, the guarantee (or why
    there is none) and, with a band, what it is."""
    t = 1 - result.alpha
    text = (
        f"Each curve: at τ = {t:g}, {100 * t:g} % of questions are at most that far off "
        "(worst case over their confidence sets). " + guarantee_sentence(result)
    )
    if band:
        text += (
            " Shaded: the tightness band V̂⁻_m(γτ) … V̂_m(γ + (1 − γ)τ), where the curve "
            "of the real discrepancies lies (asymptotically). Its upper edge is a looser, "
            "asymptotic bound: for γ > ½ it can lie above the calibrated curve."
        )
    return text


def best_sentence(result: FidelityResult) -> str:
    """Which curve has the lowest AUC_cal, the uniform baseline's included, and the
    ranking (the library's sentence, as the CLI and the report say it)."""
    return result.ranking_sentence()


def verdicts(result: FidelityResult) -> list[tuple[str, str, str, bool]]:
    """(verdict, sentence, detail, guaranteed) per pair, decided pairs first: ``guaranteed``
    is True only when the verdict carries a guarantee for new questions (the page's green)."""
    order = {"first": 0, "second": 0, "both": 1, "neither": 2}
    rows = [
        (
            c.verdict,
            c.sentence(),
            f"Û = {c.u_hat:+.4f}, reverse {c.u_hat_reverse:+.4f} (≤ 0: at least as good)",
            c.guaranteed,
        )
        for c in result.comparisons
    ]
    return sorted(rows, key=lambda r: (order[r[0]], not r[3]))


def undecided_sentence(result: FidelityResult) -> str | None:
    """The pairs whose order these data cannot tell, in one sentence (None if none)."""
    pairs = [f"{c.first} and {c.second}" for c in result.comparisons if c.verdict == "neither"]
    if not pairs:
        return None
    return (
        f"Undecided: these data cannot say which is better on {100 * (1 - result.alpha):g} % "
        f"of questions — {'; '.join(pairs)} (neither is shown to be at least as good as the "
        "other; that does not mean they are equal)."
    )


def plan_table(result: FidelityResult) -> pd.DataFrame:
    """One row per pair (both ways): the chance it is decided at each planned m, the
    questions needed for an 80 % chance, and the plug-in share (no guarantee)."""
    plan = result.plan()
    rows = []
    for p in plan.pairs:
        row = {"verdict": f"{p.first} ≥ {p.second}"}
        row.update({f"m = {m:,}": p.chance[m] for m in sorted(p.chance)})
        row["questions needed"] = f"{p.needed:,}" if p.needed else "never"
        row["plug-in share (no guarantee)"] = p.plugin_share
        rows.append(row)
    return pd.DataFrame(rows)


def question_labels(result: FidelityResult) -> list[str]:
    return [f"{s.id} — {s.question[:70]}" if s.question else s.id for s in result.data.scenarios]


def question_table(result: FidelityResult, index: int) -> pd.DataFrame:
    """One question: each simulator's sample size (its answers behind the bars), worst-case
    and best-case discrepancy."""
    rows = []
    for s in result.simulators:
        row = {
            "simulator": s.name,
            "answers": sample_size_text(result, s.name, index),
            "worst case Δ̂": float(s.upper[index]),
        }
        if s.lower is not None:
            row["best case Δ⁻"] = float(s.lower[index])
        rows.append(row)
    return pd.DataFrame(rows)


def sample_size_text(result: FidelityResult, name: str, index: int) -> str:
    """How many answers a simulator's distribution on one question rests on: 'n = 3' for
    counts, 'probabilities' when only shares were given, 'exact' for uniform."""
    kind = result.data.sim_kinds.get(name)
    if name == "uniform":
        k = result.baseline_k
        return "exact" if k is None else f"n = {int(k[index])} (drawn)"
    if kind is None:
        return "exact"
    if kind == "counts":
        return f"n = {float(result.data.simulated[name][index].sum()):g}"
    return kind


def unparsed_table(sim: SimulationResult, *, only_unparsed: bool = True) -> pd.DataFrame:
    rows = [
        {
            "question": a.scenario,
            "model": a.model,
            "#": a.index,
            "answer": a.response,
            "read as": a.letter or "unparsed",
            "rule": a.how,
        }
        for a in sim.answers
        if not only_unparsed or a.letter is None
    ]
    return pd.DataFrame(rows, columns=["question", "model", "#", "answer", "read as", "rule"])


def unparsed_summary(sim: SimulationResult) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "model": m,
                "answers": sim.samples * len(sim.counts[m]),
                "read": sim.parsed_total(m),
                "unparsed": sim.unparsed_total(m),
            }
            for m in sim.models
        ]
    )


def file_stem(name: str, created: datetime) -> str:
    """``<name>_<YYYY-MM-DD_HHMM>``: what and when."""
    return f"{slug(name or 'fidelity')}_{created:%Y-%m-%d_%H%M}"


__all__ = [
    "BASELINE_TEXT",
    "DEFAULTS",
    "LOSS_TEXT",
    "QUESTION_SOURCES",
    "SOURCES",
    "analyse",
    "analysis_key",
    "best_sentence",
    "check_simulation",
    "curve_caption",
    "estimate",
    "file_stem",
    "first_prompt",
    "guarantee_sentence",
    "losses_for",
    "parse_bounds",
    "parse_sigma",
    "persona_pairs",
    "plan_table",
    "question_labels",
    "question_table",
    "questions_of",
    "read_upload",
    "replay_shortfall",
    "sample_questions",
    "sample_size_text",
    "simulation_settings",
    "simulation_signature",
    "simulation_task",
    "summary_table",
    "undecided_sentence",
    "unparsed_summary",
    "unparsed_table",
    "verdicts",
]
