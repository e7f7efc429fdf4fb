"""The calls, tokens and cost of a run before it runs, read from the requests the run
declares (:meth:`~dbpa_core.runs.RunResult.requests_of`): the very list its runner asks,
so an estimate and the run it estimates cannot disagree on what is called.

:func:`audit_estimate` counts an audit spec's requests (one row per arm) and
:func:`suite_estimate` a suite's (each case as its plain audit, a row per arm summed over
the cases); :func:`battery_estimate` a battery's (the answers, RTI's rounds and the
robustness curve). :func:`dbpa_core.runs.estimate` picks the kind of a spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..pricing import estimate_tokens, price_of, prompt_token_counter
from ..sampling import is_cached, model_key
from .base import Request

if TYPE_CHECKING:
    from ..attacks.spec import BatterySpec
    from ..backends.base import SampleRequest
    from ..cache import Cache
    from ..spec import AuditSpec

CHAT_TEMPLATE_TOKENS = 8  # what an audit's estimate adds to each call for the chat format


def by_arm(reqs: Sequence[Request]) -> list[tuple[str, Mapping[str, Any], list[SampleRequest]]]:
    """``(arm, model, samples)`` per arm of ``reqs`` (an arm is its ``arm``, else its
    ``part``, with its model), in the order first asked, each arm's samples in order."""
    out: dict[tuple[str, str], tuple[str, Mapping[str, Any], list[SampleRequest]]] = {}
    for r in reqs:
        name = r.arm or r.part
        out.setdefault((name, model_key(r.model)), (name, r.model, []))[2].append(r.sample)
    return list(out.values())


def _cost(model: Mapping[str, Any], prices: Any, in_tok: float, out_tok: float) -> tuple[float, str | None]:
    """The cost of ``in_tok`` and ``out_tok`` on ``model`` (NaN and the model's name when
    its price is unknown); a model that is not OpenAI's costs nothing."""
    name = str(model.get("name", "")) if model.get("backend") == "openai" else ""
    price = price_of(name, prices) if name else {"input": 0.0, "output": 0.0}
    if price is None:
        return float("nan"), name
    return in_tok / 1e6 * price["input"] + out_tok / 1e6 * price["output"], None


def audit_estimate(
    spec: AuditSpec,
    reqs: Sequence[Request],
    cache: Cache | None = None,
    run_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Calls, tokens and cost of an audit spec whose run asks ``reqs``, without calling
    anything: ``{"arms": [row, ...], "totals": {...}, "unknown_prices": [...]}`` (and
    ``"sequential"`` with sequential sampling), a row per arm and per judge of a
    model-graded check. ``run_options``: the ``permutation_seed`` and ``family_size`` the
    run will be given (a suite's case: :func:`dbpa_core.suite.case_run_options`), so that
    a sequential pilot (:func:`dbpa_core.audit.sequential_pilot`) decides the cached
    rounds as that run will.

    Tokens are estimated at ~4 characters per token (the prompt, the system prompt and
    :data:`CHAT_TEMPLATE_TOKENS`); output tokens are counted at each request's
    ``max_tokens`` (an upper bound). Samples already in the cache cost nothing and are
    subtracted."""
    from ..audit import sequential_estimate, sequential_pilot
    from ..checks import judge_estimate

    arms = by_arm(reqs)
    plan = None if spec.sequential_sampling is None else spec.sequential_sampling.plan(spec.samples)
    best = 0
    # (arm, model, calls, cached, input tokens, output tokens)
    lines: list[tuple[str, Mapping[str, Any], int, int, int, int]] = []
    for name, model, samples in arms:
        hit = [is_cached(cache, model, s) for s in samples]
        todo = [s for s, h in zip(samples, hit, strict=True) if not h]
        if plan is not None:  # at best every test stops at the first look
            best += plan.looks[0] - sum(hit[: plan.looks[0]])
        in_tok = sum(
            estimate_tokens(s.prompt)
            + (estimate_tokens(s.system_prompt) if s.system_prompt else 0)
            + CHAT_TEMPLATE_TOKENS
            for s in todo
        )
        out_tok = sum(s.params.max_tokens for s in todo)
        lines.append((name, model, len(todo), len(samples) - len(todo), in_tok, out_tok))
    sampled = sum(line[2] for line in lines)
    # the judges of model-graded checks read every arm's answers
    lines += judge_estimate(spec, cache, arms=[(model, samples) for _, model, samples in arms])

    from ..spec import model_label

    rows: list[dict[str, Any]] = []
    totals: dict[str, float] = {"calls": 0, "cached": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    unknown: set[str] = set()
    for name, model, calls, cached, in_tok, out_tok in lines:
        cost, nameless = _cost(model, spec.prices, in_tok, out_tok)
        if nameless is not None:
            unknown.add(nameless)
        rows.append(
            {
                "arm": name,
                "model": model_label(dict(model)),
                "calls": calls,
                "cached": cached,
                "input_tokens": in_tok,
                "output_tokens": out_tok,
                "cost": cost,
            }
        )
        for k in ("calls", "cached", "input_tokens", "output_tokens"):
            totals[k] += rows[-1][k]
        totals["cost"] += cost if cost == cost else 0.0
    emb_cost = 0.0
    emb_tokens = totals["output_tokens"]
    if spec.embedder.get("backend") == "openai":
        p = price_of(spec.embedder.get("name", "text-embedding-3-small"), spec.prices)
        if p is None:
            unknown.add(spec.embedder.get("name", ""))
        else:
            emb_cost = emb_tokens / 1e6 * p["input"]
    totals["embedding_tokens"] = emb_tokens
    totals["embedding_cost"] = emb_cost
    totals["cost"] += emb_cost
    out: dict[str, Any] = {"arms": rows, "totals": totals, "unknown_prices": sorted(unknown)}
    if plan is not None:
        # the rows and totals are the worst case (every test to the last look)
        totals["sequential_best_calls"] = best
        totals["sequential_worst_calls"] = sampled
        pilot = sequential_pilot(spec, cache, **(run_options or {}))
        out["sequential"] = sequential_estimate(spec, totals, pilot)
    return out


def suite_estimate(spec: AuditSpec, reqs: Sequence[Request], cache: Cache | None = None) -> dict[str, Any]:
    """Calls, tokens and cost of a suite spec whose run asks ``reqs`` (each request's
    ``case`` names its case): each case counted as its plain audit
    (:func:`audit_estimate`), one row per arm summed over the cases, with ``cases`` and
    ``tests`` (cases x perturbations). With sequential sampling, the best and worst calls
    are summed over the cases, and so is each case's pilot (its cached rounds replayed
    with the suite run's seed and stop level): ``sequential["pilot"]``, see
    :func:`dbpa_core.suite.suite_pilot`."""
    from ..audit import sequential_estimate
    from ..suite import case_run_options, case_spec, suite_pilot

    of_case: dict[str, list[Request]] = {}
    for r in reqs:
        of_case.setdefault(r.case, []).append(r)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    totals: dict[str, float] = {}
    unknown: set[str] = set()
    case_seq: list[dict[str, Any]] = []
    for i, case in enumerate(spec.cases):
        est = audit_estimate(
            case_spec(spec, case), of_case.get(case.id, []), cache, run_options=case_run_options(spec, i)
        )
        for r in est["arms"]:
            row = rows.setdefault(
                (r["arm"], r["model"]), dict(r, calls=0, cached=0, input_tokens=0, output_tokens=0, cost=0.0)
            )
            for k in ("calls", "cached", "input_tokens", "output_tokens", "cost"):
                row[k] += r[k]
        for k, v in est["totals"].items():
            totals[k] = totals.get(k, 0) + v
        unknown.update(est["unknown_prices"])
        if "sequential" in est:
            case_seq.append(est["sequential"])
    out = {
        "arms": list(rows.values()),
        "totals": totals,
        "unknown_prices": sorted(unknown),
        "cases": len(spec.cases),
        "tests": len(spec.cases) * len(spec.perturbations),
    }
    if spec.sequential_sampling is not None:
        out["sequential"] = sequential_estimate(spec, totals, suite_pilot(case_seq, len(spec.perturbations)))
    return out


def battery_estimate(
    spec: BatterySpec, reqs: Sequence[Request], cache: Cache | None = None
) -> dict[str, Any]:
    """Calls, tokens and cost of a battery spec whose run asks ``reqs`` (parts
    ``answers``, ``rti`` and ``curve``), without calling anything.

    RTI's calls are an upper bound (an item stops at the ρ where its answer changes);
    prompts that repeat (an attack that changed no word is the clean prompt) are asked
    once, and answers already cached are not counted. Input tokens as the model reads
    them (:func:`dbpa_core.pricing.prompt_token_counter`), output at ``max_tokens``."""
    tokens = prompt_token_counter(
        spec.model, system_prompt=spec.system_prompt, cache_dir=cache.directory if cache is not None else None
    )
    count = {part: [0, 0, 0, 0] for part in ("answers", "rti", "curve")}  # calls, cached, in, out
    for r in reqs:
        c = count.setdefault(r.part, [0, 0, 0, 0])
        if is_cached(cache, r.model, r.sample):
            c[1] += 1
        else:
            c[0] += 1
            c[2] += tokens(r.prompt)
            c[3] += r.sample.params.max_tokens
    a, rti, curve = count["answers"], count["rti"], count["curve"]
    calls, cached, in_tok, out_tok = (sum(c[i] for c in count.values()) for i in range(4))
    cost, nameless = _cost(spec.model, spec.prices, in_tok, out_tok)
    return {
        "answers": a[0],
        "answers_cached": a[1],
        "rti_max": rti[0],
        "rti_cached": rti[1],
        "curve": curve[0],
        "curve_cached": curve[1],
        "calls": calls,
        "cached": cached,
        "input_tokens": in_tok,
        "output_tokens": out_tok,
        "cost": cost,
        "unknown_price": nameless is not None,
    }


__all__ = ["CHAT_TEMPLATE_TOKENS", "audit_estimate", "battery_estimate", "by_arm", "suite_estimate"]
