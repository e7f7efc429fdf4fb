"""The simulation runner: ask a model to answer survey questions as a respondent.

For each scenario (a question with its options) and each model, ``samples`` answers are
drawn with the prompt made from an editable template::

    You are taking part in a survey. Answer as a respondent with these characteristics:
    - Age: 30-49
    - Sex: Female

    Question: How often do you read a printed book?
    (A) Never
    (B) Rarely
    ...
    Reply with the letter of one option only.
    Answer:

Each answer is read with the battery's parser (:func:`~dbpa_core.attacks.answers.parse_answer`:
"B", "(b)", "The answer is B", the option's text, ...); an answer that names no option or
two is **unparsed**: counted and listed, never guessed. The counts of parsed answers
become a simulator column of the data. Every answer goes through
:class:`~dbpa_core.sampling.Sampler` (cached the moment it arrives: a rerun makes no call,
a stopped run resumes), so it works offline on the embedded model (``{backend: local}``)
and on any OpenAI-compatible server.

A simulation spec (``dbpa fidelity --simulate SPEC.yaml``) holds the data, the models and
these settings (see :func:`parse_simulation_spec`).
"""

from __future__ import annotations

import json
import os
import string
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..backends import GenerationParams
from ..cache import Cache
from ..sampling import Job, Progress, Sampler, is_cached, requests_for
from ..spec_doc import (
    SpecDoc,
    check_keys,
    existing_path,
    get_value,
    key_name,
    read_document,
    read_spec_file,
)
from ..spec_models import model_entry
from .data import FidelityData, FidelityDataError, Scenario, load_csv, load_opinionqa

DEFAULT_TEMPLATE = (
    "You are taking part in a survey. Answer as a respondent with these characteristics:\n"
    "{persona}\n\n"
    "Question: {question}\n"
    "{options}\n"
    "Reply with the letter of one option only.\n"
    "Answer:"
)
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
NO_PERSONA = "- (no characteristics given)"
TOP_KEYS = {
    "name",
    "description",
    "data",
    "model",
    "models",
    "samples",
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "system_prompt",
    "persona",
    "template",
    "limit",
    "keep_simulators",
    "loss",
    "gamma",
    "eta",
    "alpha",
    "sigma",
    "bounds",
}
DATA_KEYS = {"file", "opinionqa", "attribute", "groups", "keep_refused", "limit"}


class TemplateError(ValueError):
    """A persona template that cannot be filled (the message says why)."""


def template_fields(template: str) -> list[str]:
    """The ``{placeholders}`` of a template (TemplateError on unbalanced braces)."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise TemplateError(
            f"the template has unbalanced braces ({exc}); write {{{{ and }}}} for literal braces."
        ) from None


def check_template(template: str, persona_fields: Sequence[str] = ()) -> str:
    """The template if it can be filled: it must hold ``{question}`` and ``{options}``; any
    other placeholder must be ``{persona}`` or a persona field (``{Age}``)."""
    if not isinstance(template, str) or not template.strip():
        raise TemplateError("the template is empty.")
    fields = template_fields(template)
    for need in ("question", "options"):
        if need not in fields:
            raise TemplateError(f"the template must contain {{{need}}}.")
    allowed = {"question", "options", "persona", *persona_fields}
    bad = [f for f in fields if f not in allowed]
    if bad:
        raise TemplateError(
            f"the template has an unknown placeholder {{{bad[0]}}}; use {{question}}, "
            "{options}, {persona} or a persona field"
            + (f" ({', '.join(persona_fields)})" if persona_fields else "")
            + "."
        )
    return template


def persona_text(persona: Sequence[tuple[str, str]]) -> str:
    """``- Field: value`` lines (or a line saying none were given)."""
    return "\n".join(f"- {k}: {v}" for k, v in persona) if persona else NO_PERSONA


def render_prompt(
    scenario: Scenario, template: str = DEFAULT_TEMPLATE, persona: Sequence[tuple[str, str]] = ()
) -> str:
    """The prompt for one scenario: the scenario's own persona fields (e.g. an OpinionQA
    group) override the shared ``persona``."""
    fields = dict(persona)
    fields.update(dict(scenario.persona))
    options = "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(scenario.options))
    values = {
        "question": scenario.question,
        "options": options,
        "persona": persona_text(list(fields.items())),
        **fields,
    }
    try:
        return template.format_map(_Strict(values))
    except (KeyError, IndexError, ValueError) as exc:
        raise TemplateError(f"the template cannot be filled for {scenario.id!r} ({exc}).") from None


class _Strict(dict):
    def __missing__(self, key: str) -> NoReturn:
        raise KeyError(f"no value for {{{key}}}")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SimulatedAnswer:
    """One simulated respondent's answer and how it was read."""

    scenario: str
    model: str
    index: int
    prompt: str
    response: str
    letter: str | None
    how: str
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "model": self.model,
            "index": self.index,
            "prompt": self.prompt,
            "response": self.response,
            "answer": self.letter,
            "parsed_by": self.how,
            "cached": self.cached,
        }


@dataclass(frozen=True)
class SimulationResult:
    """The data with one new simulator column per model (counts of parsed answers), every
    answer, and the parsed and unparsed counts per model and scenario.

    ``data`` is None when fewer than two scenarios got a readable answer from every model
    (``error`` says so); the answers are still here (and cached) to be looked at.
    """

    data: FidelityData | None
    answers: tuple[SimulatedAnswer, ...]
    counts: dict[str, dict[str, np.ndarray]]
    unparsed: dict[str, dict[str, int]]
    models: tuple[str, ...]
    samples: int
    dropped: tuple[str, ...] = ()
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    error: str | None = None

    def unparsed_total(self, model: str) -> int:
        return sum(self.unparsed.get(model, {}).values())

    def parsed_total(self, model: str) -> int:
        return int(sum(float(c.sum()) for c in self.counts.get(model, {}).values()))

    def answers_jsonl(self) -> str:
        return "".join(json.dumps(a.to_dict(), ensure_ascii=False) + "\n" for a in self.answers)


# --------------------------------------------------------------------------- running


def _labels(models: Sequence[Mapping[str, Any]]) -> list[str]:
    from ..spec import model_label

    out: list[str] = []
    for m in models:
        base = model_label(dict(m))
        label, k = base, 2
        while label in out:
            label, k = f"{base} ({k})", k + 1
        out.append(label)
    return out


def _params(model: Mapping[str, Any], temperature: float, top_p: float, max_tokens: int) -> GenerationParams:
    return GenerationParams(
        temperature=float(model.get("temperature", temperature)), top_p=top_p, max_tokens=max_tokens
    )


def plan_jobs(
    data: FidelityData,
    models: Sequence[Mapping[str, Any]],
    *,
    samples: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_tokens: int = 16,
    seed: int = 0,
    template: str = DEFAULT_TEMPLATE,
    persona: Sequence[tuple[str, str]] = (),
    system_prompt: str | None = None,
) -> list[tuple[str, Scenario, Job]]:
    """Every (model label, scenario, job) of a simulation, in order."""
    check_questions(data)
    fields = sorted({k for k, _ in persona} | {k for s in data.scenarios for k, _ in s.persona})
    check_template(template, fields)
    out = []
    for label, model in zip(_labels(models), models, strict=True):
        params = _params(model, temperature, top_p, max_tokens)
        for s in data.scenarios:
            prompt = render_prompt(s, template, persona)
            for req in requests_for(prompt, n=samples, seed=seed, params=params, system_prompt=system_prompt):
                out.append((label, s, Job(dict(model), req, f"{label}: {s.id}")))
    return out


def check_questions(data: FidelityData) -> None:
    """:class:`FidelityDataError` unless the simulation can ask ``data``'s questions: a
    categorical file, every scenario with its question text and at most as many options
    as there are letters."""
    if data.kind != "categorical":
        raise FidelityDataError(
            "the simulation runner asks multiple-choice questions: the data need an option column."
        )
    missing = [s.id for s in data.scenarios if not s.question.strip()]
    if missing:
        raise FidelityDataError(
            f"scenario {missing[0]!r} has no question text (and "
            f"{len(missing) - 1} more): add a 'question' column to the CSV."
        )
    big = [s.id for s in data.scenarios if len(s.options) > len(LETTERS)]
    if big:
        raise FidelityDataError(f"scenario {big[0]!r} has more than {len(LETTERS)} options.")


def estimate_simulation(
    data: FidelityData, models: Sequence[Mapping[str, Any]], *, cache: Cache | None = None, **settings: Any
) -> dict[str, int]:
    """How many answers a simulation needs and how many are cached (calls nothing)."""
    jobs = plan_jobs(data, models, **settings)
    cached = sum(is_cached(cache, j.model, j.request) for _, _, j in jobs)
    return {"answers": len(jobs), "cached": cached, "calls": len(jobs) - cached}


def simulate(
    data: FidelityData,
    models: Sequence[Mapping[str, Any]],
    *,
    samples: int = 20,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_tokens: int = 16,
    seed: int = 0,
    template: str = DEFAULT_TEMPLATE,
    persona: Sequence[tuple[str, str]] = (),
    system_prompt: str | None = None,
    keep_simulators: bool = True,
    cache: Cache | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: Mapping[str, str] | None = None,
    sampler: Sampler | None = None,
) -> SimulationResult:
    """Ask every model ``samples`` times per scenario; return the data with their columns.

    Parameters
    ----------
    data : FidelityData
        Categorical scenarios with question texts (the real counts stay as they are).
    models : list of dict
        Model configs as in a spec (``{"backend": "local"}``, an openai one, ...); each
        becomes a simulator column named by its label.
    samples : int
        k, answers per scenario and model (>= 1).
    temperature, top_p, max_tokens, seed, system_prompt
        Sampling (a model's own ``temperature`` wins); answer i of a prompt has its own
        seed, so raising ``samples`` reuses the cached answers.
    template, persona
        The prompt template and the respondent's fields, e.g. ``[("Age", "30-49")]``
        (a scenario's own persona, as from OpinionQA, overrides them).
    keep_simulators : bool
        Keep the data's own simulator columns beside the new ones.
    cache, progress, should_stop, api_keys, sampler
        As for the other runners (stage ``simulating``).

    Scenarios where a model's answers could not be read at all are dropped (named in
    ``warnings``): a simulator with no answer has no distribution. When fewer than two
    remain, ``data`` is None and ``error`` says why (the answers are kept).
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"`samples` must be a whole number >= 1, got {samples!r}.")
    if not models:
        raise ValueError("`models` must list at least one model.")
    from ..attacks.answers import parse_answer

    t0 = time.perf_counter()
    planned = plan_jobs(
        data,
        models,
        samples=samples,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        template=template,
        persona=persona,
        system_prompt=system_prompt,
    )
    sampler = sampler or Sampler(cache, progress=progress, should_stop=should_stop, api_keys=api_keys)
    records = sampler.sample([j for _, _, j in planned], stage="simulating")
    labels = _labels(models)
    counts = {lab: {s.id: np.zeros(len(s.options)) for s in data.scenarios} for lab in labels}
    unparsed = {lab: {s.id: 0 for s in data.scenarios} for lab in labels}
    answers = []
    for (label, s, job), rec in zip(planned, records, strict=True):
        parsed = parse_answer(rec.text, s.options)
        if parsed.index is None:
            unparsed[label][s.id] += 1
        else:
            counts[label][s.id][parsed.index] += 1
        answers.append(
            SimulatedAnswer(
                s.id,
                label,
                job.request.index,
                job.request.prompt,
                rec.text,
                parsed.letter,
                parsed.how,
                rec.cached,
            )
        )
    notes: list[str] = []
    for lab in labels:
        n = sum(unparsed[lab].values())
        if n:
            notes.append(
                f"{lab}: {n} of {samples * data.m} answers named no option (unparsed: "
                "counted, never guessed)."
            )
    empty = [s.id for s in data.scenarios if any(counts[lab][s.id].sum() == 0 for lab in labels)]
    base = data if keep_simulators else data.without_simulators()
    error = None
    if empty:
        who = {lab: [sid for sid in empty if counts[lab][sid].sum() == 0] for lab in labels}
        notes.append(
            "dropped "
            + ", ".join(repr(s) for s in empty[:5])
            + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
            + ": no answer of "
            + "; ".join(f"{lab} ({len(v)})" for lab, v in who.items() if v)
            + " could be read there (see the unparsed answers)."
        )
        keep = [s.id for s in data.scenarios if s.id not in empty]
        if len(keep) < 2:
            error = (
                f"fewer than 2 questions got a readable answer from every model ({len(keep)} "
                f"of {data.m}): look at the unparsed answers; the model may not follow the "
                "template (try more tokens, another template or another model)."
            )
        else:
            base = base.select(keep)
    if error is None:
        for lab in labels:
            if lab in base.simulated:
                raise FidelityDataError(
                    f"the data already have a simulator column named {lab!r}; give the model a 'label'."
                )
            base = base.with_simulator(lab, [counts[lab][s.id] for s in base.scenarios], "counts")
        base = replace(base, notes=tuple(base.notes) + tuple(notes))
    usage = dict(sampler.usage, seconds=round(time.perf_counter() - t0, 3))
    return SimulationResult(
        None if error else base,
        tuple(answers),
        counts,
        unparsed,
        tuple(labels),
        samples,
        tuple(empty),
        usage,
        tuple(notes),
        error,
    )


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class SimulationSpec:
    """A validated simulation spec (:func:`parse_simulation_spec`)."""

    data: FidelityData
    models: tuple[dict[str, Any], ...]
    samples: int = 20
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    seed: int = 0
    system_prompt: str | None = None
    persona: tuple[tuple[str, str], ...] = ()
    template: str = DEFAULT_TEMPLATE
    keep_simulators: bool = False
    analysis: dict[str, Any] = field(default_factory=dict)
    name: str = "fidelity"
    source: str = "<spec>"

    def settings(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "template": self.template,
            "persona": self.persona,
            "system_prompt": self.system_prompt,
        }


def _data_section(doc: SpecDoc, raw: Any, base_dir: Path, limit: int | None) -> FidelityData:
    from .sample import sample_data

    if raw is None or raw == "sample":
        data = sample_data()
    else:
        entry = {"file": raw} if isinstance(raw, str) else raw
        check_keys(doc, entry, DATA_KEYS, ("data",), "data")
        try:
            if "opinionqa" in entry:
                folder = get_value(doc, entry, "opinionqa", ("data",), str)
                full = Path(folder) if os.path.isabs(folder) else (base_dir / folder).resolve()
                if not full.is_dir():
                    raise doc.err(("data", "opinionqa"), f"OpinionQA folder {folder!r} does not exist")
                groups = entry.get("groups")
                if groups is not None and (
                    not isinstance(groups, list) or not all(isinstance(g, str) for g in groups)
                ):
                    raise doc.err(("data", "groups"), "'groups' lists group names, e.g. [Female]")
                data = load_opinionqa(
                    full,
                    attribute=get_value(doc, entry, "attribute", ("data",), str, "NONE"),
                    groups=groups,
                    keep_refused=bool(entry.get("keep_refused", False)),
                    limit=get_value(doc, entry, "limit", ("data",), int, None, minimum=2),
                )
            else:
                path = existing_path(doc, entry, ("data",), "file", base_dir, "data file")
                data = load_csv(path)
                lim = get_value(doc, entry, "limit", ("data",), int, None, minimum=2)
                if lim:
                    data = data.select(list(data.ids[:lim]))
        except FidelityDataError as exc:
            raise doc.err(("data",), f"cannot read the data: {exc}") from None
    if limit:
        data = data.select(list(data.ids[:limit]))
    return data


def parse_simulation_spec(
    text_or_dict: str | dict,
    *,
    source: str = "<spec>",
    base_dir: str | os.PathLike = ".",
    allow_key_env: Iterable[str] = (),
) -> SimulationSpec:
    """Validate a simulation spec given as YAML text or a dict::

        name: my-survey
        data: sample            # or survey.csv, {file, limit}, {opinionqa: FOLDER, attribute: SEX,
                                #    groups: [Female], limit: 20, keep_refused: false}
        models:                 # or model: {...}; each becomes a simulator column
          - {backend: local}
          - {backend: openai, name: gpt-4o-mini, base_url: http://localhost:8000/v1}
        samples: 20             # k answers per question and model
        temperature: 1.0
        max_tokens: 16
        persona: {Age: 30-49, Sex: Female}
        template: "..."         # {question} {options} {persona} or a persona field
        limit: 10               # only the first questions
        keep_simulators: false  # keep the data file's own simulator columns
        loss: tv                # analysis: loss, gamma, eta, alpha, sigma, bounds

    Mistakes raise :class:`~dbpa_core.spec.SpecError` with the line before any call.
    """
    doc, raw = read_document(text_or_dict, source)
    base = Path(base_dir)
    top = check_keys(doc, raw, TOP_KEYS, (), "the spec")
    if "model" in top and "models" in top:
        raise doc.err(("models",), "give 'model' or 'models', not both")
    if "models" in top:
        models_raw = top["models"]
        if not isinstance(models_raw, list) or not models_raw:
            raise doc.err(("models",), "'models' must list at least one model")
        models = tuple(
            model_entry(doc, m, ("models", i), base, allow_key_env) for i, m in enumerate(models_raw)
        )
    else:
        m = top.get("model")
        models = (model_entry(doc, {} if m is None else m, ("model",), base, allow_key_env),)
    limit = get_value(doc, top, "limit", (), int, None, minimum=2)
    data = _data_section(doc, top.get("data"), base, limit)
    persona_raw = top.get("persona") or {}
    if not isinstance(persona_raw, dict) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in persona_raw.values()
    ):
        raise doc.err(("persona",), "'persona' maps a field to its value, e.g. {Age: 30-49}")
    persona = tuple((str(k), str(v)) for k, v in persona_raw.items())
    template = get_value(doc, top, "template", (), str, DEFAULT_TEMPLATE)
    fields = sorted({k for k, _ in persona} | {k for s in data.scenarios for k, _ in s.persona})
    try:
        check_template(template, fields)
        check_questions(data)
    except (TemplateError, FidelityDataError) as exc:
        raise doc.err(("template",) if isinstance(exc, TemplateError) else ("data",), str(exc)) from None
    analysis: dict[str, Any] = {}
    for key, kind in (("loss", str), ("gamma", float), ("eta", float), ("alpha", float), ("sigma", float)):
        v = get_value(doc, top, key, (), kind, None)
        if v is not None:
            analysis[key] = v
    if top.get("bounds") is not None:
        b = top["bounds"]
        if not (
            isinstance(b, list)
            and len(b) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in b)
        ):
            raise doc.err(("bounds",), "'bounds' is [a, b]")
        analysis["bounds"] = [float(x) for x in b]
    keep = top.get("keep_simulators")
    if keep is not None and not isinstance(keep, bool):
        raise doc.err(("keep_simulators",), "'keep_simulators' is true or false")
    keep = bool(keep)
    from .discrepancy import LOSSES

    if analysis.get("loss") is not None and analysis["loss"] not in LOSSES:
        raise doc.err(
            ("loss",), f"{key_name(('loss',))} must be one of {', '.join(LOSSES)}; got {analysis['loss']!r}"
        )
    return SimulationSpec(
        data=data,
        models=models,
        samples=get_value(doc, top, "samples", (), int, 20, minimum=1, maximum=10_000),
        temperature=get_value(doc, top, "temperature", (), float, 1.0, minimum=0.0, maximum=2.0),
        top_p=get_value(doc, top, "top_p", (), float, 1.0, minimum=0.01, maximum=1.0),
        max_tokens=get_value(doc, top, "max_tokens", (), int, 16, minimum=1, maximum=100_000),
        seed=get_value(doc, top, "seed", (), int, 0, minimum=0),
        system_prompt=get_value(doc, top, "system_prompt", (), str),
        persona=persona,
        template=template,
        keep_simulators=keep,
        analysis=analysis,
        name=get_value(doc, top, "name", (), str, Path(source).stem if source != "<spec>" else "fidelity"),
        source=source,
    )


def load_simulation_spec(path: str | os.PathLike, *, allow_key_env: Iterable[str] = ()) -> SimulationSpec:
    """Read and validate a simulation spec file (relative paths resolve next to it)."""
    return parse_simulation_spec(
        read_spec_file(path), source=str(path), base_dir=Path(path).parent, allow_key_env=allow_key_env
    )


def run_simulation_spec(spec: SimulationSpec, **runner: Any) -> SimulationResult:
    """:func:`simulate` with a spec's data, models and settings."""
    return simulate(spec.data, spec.models, keep_simulators=spec.keep_simulators, **spec.settings(), **runner)


__all__ = [
    "DEFAULT_TEMPLATE",
    "SimulatedAnswer",
    "SimulationResult",
    "SimulationSpec",
    "TemplateError",
    "check_template",
    "estimate_simulation",
    "load_simulation_spec",
    "parse_simulation_spec",
    "persona_text",
    "plan_jobs",
    "render_prompt",
    "run_simulation_spec",
    "simulate",
    "template_fields",
]
