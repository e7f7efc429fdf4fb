"""Sequential sampling against a fixed k, on recorded real answers (issue 34's targets).

Run: ``.venv/bin/python benchmarks/bench_sequential.py`` (several minutes; ``--quick`` for a
smoke run). Reads ``assets/real_responses.jsonl`` (SmolLM2-135M answers to the NICE prompt:
60 to the base prompt, 40 to each of eight persona prompts and to three near-nulls; recorded
by ``assets/record_real_responses.py``) and embeds them with MiniLM (offline, cached in
``$DBPA_CACHE_DIR``). Everything is simulated on the embeddings: no model is called. The
audit's own pieces run: :func:`dbpa_core.sequential.run_rounds` with the default plan, the
permutation test (energy-l2, the default measure) and the futility bound.

* **calls and power** (the persona audit): one base and the eight personas, Holm at
  α = .05 over the 8 tests, at most ``--max`` answers per arm. Each simulation draws the
  order in which the answers arrive (the base's from its 60 without replacement, each
  persona's 40 shuffled); the fixed-k audit tests all ``--max`` of them, the sequential one
  draws round by round and stops each test by its rules. Calls = answers drawn (base
  included). Targets: >= 40 % fewer calls, power within 0.02 of fixed k.
* **false-positive rate, every look taken**: two disjoint groups of 20 answers to *one*
  prompt (each of the 12 on-topic prompts in turn; a true null), p_seq at α = .05 with
  every look taken (no stop), for the default plan (looks 12, 20) and a plan of four equal
  looks (5, 10, 15, 20). Target: <= α + 2 SE over >= 2,000 simulations.
* **futility**: null controls (two disjoint groups of the base prompt's answers) with
  ``min_effect`` δ (0.05 and 0.1), at most ``--futility-max`` (40) answers per arm; share
  stopped for futility before half the maximum. Target: >= 80 %. A test can stop for
  futility only before its last look, so each draws answers up to the look before the
  last (k = 18 at 40) and ends there: the recording's 60 answers to the base prompt are
  enough for a maximum of 40.
* **futility at a change of exactly δ** (is the stated confidence honest?): the perturbed
  arm draws each answer from a persona with probability λ and from the base prompt's other
  answers otherwise, λ chosen so that the energy distance between the two populations is
  exactly δ (for such a mixture it is λ² times the persona's: the populations are the
  recorded answers). Share of these tests wrongly stopped as "no change above δ" over all
  the looks (drawn, likewise, up to the look before the last). Target: <= 1 - confidence
  (0.05).

Not run by default (``--only schedules,measures``):

* **schedules**: the null-control share and the changes of δ wrongly stopped, for each
  maximum (20, 30, 40, 80) and several round schedules; fresh recorded answers are drawn
  only up to the looks that decide what is measured (see :func:`schedules`); ``--looks
  "12,18,40;15,40"`` measures chosen schedules instead.
  ``--bound first-order`` repeats it with a narrower bound (the first-order variance
  alone), to see what the null-control target would cost the stated confidence.
* **measures**: how often the futility bound covers the mean effect above chance, for
  energy-l2, jsd, wasserstein and ks (k = 10; no change and two mixtures of a persona).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_measures import embed_arms, load_responses  # noqa: E402

from dbpa_core.multitest import multiple_testing  # noqa: E402
from dbpa_core.permutation import dbpa_test_similarity  # noqa: E402
from dbpa_core.sequential import (  # noqa: E402
    Plan,
    SequentialSampling,
    effect_upper_bound,
    energy_u_statistic,
    run_rounds,
    sequential_p,
    statistic_matrix,
    stop_level,
)
from dbpa_core.similarity import cosine_similarity_matrix  # noqa: E402

ALPHA = 0.05
MEASURE = "energy-l2"
PERMUTATIONS = 2000  # the spec's default B


class Answers:
    """Every recorded answer's embedding, their pooled similarity matrix, the arms."""

    def __init__(self, path: Path) -> None:
        arms = load_responses(path)
        emb = embed_arms(arms)
        self.role = {n: a["role"] for n, a in arms.items()}
        names = list(arms)
        self.index: dict[str, np.ndarray] = {}
        start = 0
        for n in names:
            self.index[n] = np.arange(start, start + emb[n].shape[0])
            start += emb[n].shape[0]
        self.sim = cosine_similarity_matrix(np.vstack([emb[n] for n in names]).astype(np.float64))

    bound = "audit"  # the futility bound: the audit's, or "first-order" (a variant measured)

    def named(self, role: str) -> list[str]:
        return [n for n, r in self.role.items() if r == role]

    def test(
        self,
        x: np.ndarray,
        y: np.ndarray,
        b: int,
        seed: int,
        confidence: float | None = None,
        measure: str = MEASURE,
    ):
        """The audit's test of answers ``x`` (base) against ``y``, and the futility bound
        (with ``self.bound = "first-order"``, the variant without the split variance)."""
        idx = np.concatenate([x, y])
        s = self.sim[np.ix_(idx, idx)]
        r = dbpa_test_similarity(s, len(x), measure=measure, n_permutations=b, rng=seed)
        if confidence is None:
            return r, None
        if self.bound == "first-order":
            return r, first_order_bound(statistic_matrix(similarity=s, measure=measure), len(x), confidence)
        upper = effect_upper_bound(
            statistic_matrix(similarity=s, measure=measure),
            len(x),
            measure=measure,
            effect_above_chance=r.effect_above_chance,
            confidence=confidence,
        )
        return r, upper


def first_order_bound(d: np.ndarray, k: int, confidence: float) -> float:
    """A variant of the energy futility bound, measured against the audit's: the unbiased
    energy distance plus z times the first-order (plug-in Hoeffding projection) standard
    error alone, without the variance over random splits."""
    from scipy.stats import norm

    m = d.shape[0] - k
    a = 2.0 * d[:k, k:].mean(axis=1) - 2.0 * d[:k, :k].sum(axis=1) / (k - 1)
    b = 2.0 * d[:k, k:].mean(axis=0) - 2.0 * d[k:, k:].sum(axis=1) / (m - 1)
    var = a.var(ddof=1) / k + b.var(ddof=1) / m
    return float(energy_u_statistic(d, k) + norm.ppf(confidence) * np.sqrt(max(var, 0.0)))


def persona_audit(
    data: Answers,
    *,
    sims: int,
    most: int,
    min_effect: float | None,
    seed: int,
    looks: tuple[int, ...] = (),
) -> dict:
    """Fixed k against sequential on the same draws: calls and Holm-corrected power (the
    default looks at ``most``, or ``looks``)."""
    base = data.named("base")[0]
    personas = data.named("persona")
    m = len(personas)
    plan = SequentialSampling(looks=looks).plan(most)
    level = stop_level(ALPHA, "holm", m)
    gen = np.random.default_rng(seed)
    fixed_hits = seq_hits = 0
    seq_calls = 0
    stops: list[int] = []
    for s in range(sims):
        xb = gen.permutation(data.index[base])[:most]
        ys = [gen.permutation(data.index[p])[:most] for p in personas]
        fixed = [data.test(xb, y, PERMUTATIONS, s * 100 + i)[0].p_value for i, y in enumerate(ys)]
        fixed_hits += int(multiple_testing(fixed, "holm", alpha=ALPHA).reject.sum())

        def test(i: int, k: int, b: int, confidence: float | None, xb=xb, ys=ys, s=s):
            return data.test(xb[:k], ys[i][:k], b, s * 100 + i, confidence)

        _, records = run_rounds(
            plan,
            m,
            level=level,
            min_effect=min_effect,
            permutations=PERMUTATIONS,
            draw=lambda k, open_tests: None,
            test=test,
        )
        seq_hits += int(multiple_testing([r.p_value for r in records], "holm", alpha=ALPHA).reject.sum())
        used = [r.stopped_at for r in records]
        stops += used
        seq_calls += max(used) + sum(used)
    fixed_calls = sims * (m + 1) * most
    return {
        "plan": plan.describe(),
        "fixed_power": fixed_hits / (sims * m),
        "seq_power": seq_hits / (sims * m),
        "fixed_calls": fixed_calls,
        "seq_calls": seq_calls,
        "saving": 1 - seq_calls / fixed_calls,
        "stops": {k: stops.count(k) / len(stops) for k in plan.looks},
    }


def null_groups(data: Answers, sims: int, size: int, gen: np.random.Generator, roles: tuple[str, ...] = ()):
    """Two disjoint groups of ``size`` answers to one prompt, the prompts (of ``roles``, or
    all on-topic ones) in turn."""
    prompts = [
        n
        for n, r in data.role.items()
        if (r in roles if roles else r != "off-topic") and data.index[n].size >= 2 * size
    ]
    for s in range(sims):
        z = gen.permutation(data.index[prompts[s % len(prompts)]])[: 2 * size]
        yield s, z[:size], z[size:]


def null_rate(data: Answers, *, sims: int, plans: list[Plan], seed: int) -> list[dict]:
    """Share of nulls with p_seq <= α when every look is taken (nothing stops)."""
    gen = np.random.default_rng(seed)
    hits = np.zeros(len(plans))
    for s, x, y in null_groups(data, sims, plans[0].looks[-1], gen):
        for j, plan in enumerate(plans):
            ps = [data.test(x[:k], y[:k], PERMUTATIONS, s)[0].p_value for k in plan.looks]
            hits[j] += sequential_p(ps, plan.weights) <= ALPHA
    se = np.sqrt(ALPHA * (1 - ALPHA) / sims)
    return [
        {"plan": p.describe(), "rate": h / sims, "limit": ALPHA + 2 * se, "sims": sims}
        for p, h in zip(plans, hits, strict=True)
    ]


def futility(
    data: Answers, *, sims: int, most: int, deltas: list[float], seed: int, confidence: float = 0.95
) -> list[dict]:
    """Share of null controls (the base prompt's answers split in two) that stop for futility
    before half the maximum, and at all, for each δ (the same nulls). A test can stop for
    futility only before its last look, so each null draws answers up to the look before
    the last and ends there (the rules at those looks are the full plan's)."""
    gen = np.random.default_rng(seed)
    plan = SequentialSampling(confidence=confidence).plan(most)
    need = plan.looks[-2] if len(plan.looks) > 1 else 0
    early = np.zeros(len(deltas))
    futile = np.zeros(len(deltas))
    bounds = []
    for s, x, y in null_groups(data, sims if need else 0, need, gen, roles=("base",)):
        for j, delta in enumerate(deltas):
            rec = one_run(data, plan, x, y, delta, s, need + 1)
            if rec is None:
                continue
            futile[j] += rec.reason == "futility"
            early[j] += rec.reason == "futility" and rec.stopped_at < most / 2
            if j == 0:
                bounds.append(rec.looks[0].upper_bound)
    return [
        {
            "plan": plan.describe(),
            "min_effect": d,
            "share_early": e / sims,
            "share_futile": f / sims,
            "median_first_bound": float(np.median(bounds)) if bounds else float("nan"),
            "sims": sims,
        }
        for d, e, f in zip(deltas, early, futile, strict=True)
    ]


def mixture_population(data: Answers, persona: str, delta: float) -> float | None:
    """λ such that base answers against a λ-mixture of ``persona`` with base answers are
    δ apart in energy distance (λ² times the persona's), or None when δ is out of reach."""
    base = data.named("base")[0]
    idx = np.concatenate([data.index[base], data.index[persona]])
    d = statistic_matrix(similarity=data.sim[np.ix_(idx, idx)], measure=MEASURE)
    full = energy_u_statistic(d, data.index[base].size)
    lam = float(np.sqrt(delta / full))
    return lam if lam <= 1 else None


def mixture_arms(
    gen: np.random.Generator, base: np.ndarray, persona: np.ndarray, lam: float, n: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """A test at a change of exactly δ: ``n`` base answers, and ``n`` answers each drawn from
    the persona's with probability ``lam`` and from the base prompt's other answers
    otherwise, without replacement (rows of the recording). Where the recording has too few
    of either, the second arm is shorter, and the third value says so."""
    order = gen.permutation(base)
    x, rest = order[:n], order[n:]
    n_persona = int(gen.binomial(n, lam))
    n_base = n - n_persona
    short = n_persona > persona.size or n_base > rest.size
    if short:
        n_persona = min(n_persona, persona.size)
        n_base = min(n - n_persona, rest.size)
    y = gen.permutation(np.concatenate([gen.permutation(persona)[:n_persona], rest[:n_base]]))
    return x, y, short


def futility_at_delta(
    data: Answers, *, sims: int, most: int, deltas: list[float], seed: int, confidence: float = 0.95
) -> list[dict]:
    """Tests whose change is exactly δ: the share wrongly stopped for futility (at any look;
    each test draws answers up to the look before the last, the last that can stop one)."""
    base = data.named("base")[0]
    plan = SequentialSampling(confidence=confidence).plan(most)
    need = plan.looks[-2] if len(plan.looks) > 1 else 0
    gen = np.random.default_rng(seed)
    rows = []
    for persona in data.named("persona"):
        for delta in deltas:
            lam = mixture_population(data, persona, delta)
            if lam is None:
                continue
            wrong = 0
            for s in range(sims if need else 0):
                x, y, _ = mixture_arms(gen, data.index[base], data.index[persona], lam, need)
                rec = one_run(data, plan, x, y, delta, s, need + 1)
                wrong += rec is not None and rec.reason == "futility"
            rows.append(
                {"persona": persona, "min_effect": delta, "lambda": lam, "wrong": wrong / sims, "sims": sims}
            )
    return rows


# ------------------------------------------------------------------ schedules
# The recording holds 60 answers to the base prompt and 40 to each persona, too few to run
# a null control of two disjoint groups to a maximum of 40 or 80. But only some looks
# matter: a null counts as stopped "before half the maximum" only at looks below it, and a
# test can stop for futility only before its last look. Each simulation below draws fresh
# (disjoint, without replacement) recorded answers up to the looks that matter and stops
# there; the decisions at those looks are exactly a full run's (the plan, its looks,
# weights and the futility bound's confidence at each look are the full plan's).
SCHEDULES = {
    20: [(12, 20), (10, 20)],
    30: [(12, 18, 30), (10, 20, 30), (10, 30)],
    40: [
        (12, 18, 40),
        (10, 20, 40),
        (10, 15, 40),
        (15, 40),
        (10, 15, 20, 40),
        (12, 40),
        (5, 10, 20, 40),
        (10, 40),
    ],
    80: [(12, 18, 36, 80), (10, 20, 40, 80), (5, 10, 20, 40, 80), (10, 20, 80)],
}


class _Enough(Exception):
    """The simulation reached a look that cannot change what is measured."""


def one_run(data: Answers, plan: Plan, x: np.ndarray, y: np.ndarray, delta: float, s: int, until: float):
    """The test's record up to the looks below ``until`` (None when it was still open)."""

    def test(i: int, k: int, b: int, conf: float | None):
        if k >= until:
            raise _Enough
        return data.test(x[:k], y[:k], b, s, conf)

    try:
        _, (rec,) = run_rounds(
            plan,
            1,
            level=ALPHA,
            min_effect=delta,
            permutations=PERMUTATIONS,
            draw=lambda k, o: None,
            test=test,
        )
    except _Enough:
        return None
    return rec


def schedules(
    data: Answers,
    *,
    maxima: list[int],
    nulls: int,
    delta_sims: int,
    delta: float,
    seed: int,
    confidence: float = 0.95,
    looks_list: list[tuple[int, ...]] | None = None,
) -> list[dict]:
    """For each maximum and round schedule (or each of ``looks_list``, its maximum the last
    look): the share of null controls (two disjoint groups
    of the base prompt's answers) that stop for futility before half the maximum, and the
    share of changes of exactly δ (base answers against a λ-mixture of a persona's and the
    base prompt's other answers) wrongly stopped for futility at any look."""
    base = data.index[data.named("base")[0]]
    lams = {p: mixture_population(data, p, delta) for p in data.named("persona")}
    lams = {p: lam for p, lam in lams.items() if lam is not None}
    rows = []
    runs = (
        [(ls[-1], ls) for ls in looks_list]
        if looks_list
        else [(m, ls) for m in maxima for ls in SCHEDULES[m]]
    )
    for most, looks in runs:
        plan = SequentialSampling(looks=looks, confidence=confidence).plan(most)
        gen = np.random.default_rng(seed)
        early = 0
        need = max([k for k in looks if k < most / 2], default=0)
        for s in range(nulls if need else 0):
            z = gen.permutation(base)[: 2 * need]
            rec = one_run(data, plan, z[:need], z[need:], delta, s, most / 2)
            early += rec is not None and rec.reason == "futility"
        wrong: dict[str, float] = {}
        short = 0
        last = looks[-2] if len(looks) > 1 else 0  # the last look that can stop for futility
        for p, lam in lams.items():
            bad = 0
            for s in range(delta_sims if last else 0):
                x, y, was_short = mixture_arms(gen, base, data.index[p], lam, last)
                short += was_short
                k = min(len(x), len(y))
                rec = one_run(data, plan, x[:k], y[:k], delta, s, last + 1)
                bad += rec is not None and rec.reason == "futility"
            wrong[p] = bad / delta_sims if last else 0.0
        rows.append(
            {
                "max": most,
                "plan": plan.describe(),
                "early": early / nulls if need else 0.0,
                "wrong_mean": float(np.mean(list(wrong.values()))),
                "wrong_max": max(wrong.values()),
                "pooled_se": float(np.sqrt((1 - confidence) * confidence / (delta_sims * len(wrong)))),
                "populations": len(wrong),
                "short": short,
            }
        )
        r = rows[-1]
        print(
            f"  max {most:3d}, {r['plan']}: nulls stopped for futility before k = {most / 2:g}: "
            f"{r['early']:.1%}; changes of δ wrongly stopped: mean {r['wrong_mean']:.3f} "
            f"(SE {r['pooled_se']:.3f}), worst {r['wrong_max']:.3f} over {r['populations']} personas"
            + (f" ({r['short']} draws short of answers)" if r["short"] else ""),
            flush=True,
        )
    return rows


# ------------------------------------------------------------------ the bound, other measures
def bound_coverage(
    data: Answers,
    *,
    measures: list[str],
    personas: list[str],
    k: int,
    sims: int,
    lams: list[float],
    seed: int,
    confidence: float,
) -> list[dict]:
    """How often the futility bound at ``confidence`` lies at or above the effect it bounds,
    for each measure: ``k`` base answers against ``k`` answers each drawn from a persona
    with probability λ and from the base prompt's other answers otherwise (λ = 0: no
    change), all drawn without replacement. The effect bounded is the mean effect above
    chance at that k (over the same simulations), which is what ω minus chance estimates
    for every measure."""
    base = data.index[data.named("base")[0]]
    rows = []
    for measure in measures:
        for persona in personas:
            for lam in lams:
                gen = np.random.default_rng(seed)
                eac, upper = [], []
                for s in range(sims):
                    order = gen.permutation(base)
                    n_persona = int(gen.binomial(k, lam))
                    y = np.concatenate(
                        [gen.permutation(data.index[persona])[:n_persona], order[k : 2 * k - n_persona]]
                    )
                    r, up = data.test(order[:k], gen.permutation(y), 199, s, confidence, measure=measure)
                    eac.append(r.effect_above_chance)
                    upper.append(up)
                truth = float(np.mean(eac))
                rows.append(
                    {
                        "measure": measure,
                        "persona": persona,
                        "lambda": lam,
                        "truth": truth,
                        "coverage": float(np.mean(np.array(upper) >= truth)),
                        "sims": sims,
                    }
                )
                r = rows[-1]
                print(
                    f"  {measure:12s} {persona:24s} λ = {lam:.2f}: mean effect above chance "
                    f"{truth:+.3f}; bound at or above it in {r['coverage']:.1%} (stated {confidence:.0%})",
                    flush=True,
                )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", default=str(ROOT / "assets" / "real_responses.jsonl"))
    ap.add_argument("--audits", type=int, default=200, help="simulated persona audits")
    ap.add_argument("--max", type=int, default=40, help="most answers per arm in the persona audit")
    ap.add_argument(
        "--audit-looks", default="", help="the persona audit's looks (default: the audit's default looks)"
    )
    ap.add_argument("--nulls", type=int, default=2000, help="null simulations (false-positive rate)")
    ap.add_argument("--futility-nulls", type=int, default=500)
    ap.add_argument(
        "--delta-sims", type=int, default=200, help="simulations per persona and δ at a change of exactly δ"
    )
    ap.add_argument("--null-max", type=int, default=20, help="most answers per group of a null")
    ap.add_argument("--futility-max", type=int, default=40, help="most answers per arm of a null control")
    ap.add_argument(
        "--min-effect", default="0.05,0.1", help="δ values for the futility rows, comma-separated"
    )
    ap.add_argument("--confidence", type=float, default=0.95, help="the futility bound's confidence")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a smoke run (few simulations)")
    ap.add_argument(
        "--only",
        default="audit,null,futility,delta",
        help="which parts to run (comma-separated: audit, null, futility, delta; and, not by "
        "default, schedules and measures)",
    )
    ap.add_argument(
        "--maxima", default="20,30,40,80", help="the maxima of the schedules part (of 20, 30, 40, 80)"
    )
    ap.add_argument(
        "--looks",
        default="",
        help="schedules part: these schedules instead of the built-in ones, ';'-separated "
        "(e.g. '10,15,40;15,40'; the maximum is the last look)",
    )
    ap.add_argument("--schedule-nulls", type=int, default=300, help="null controls per schedule")
    ap.add_argument(
        "--schedule-delta-sims", type=int, default=60, help="changes of δ per persona and schedule"
    )
    ap.add_argument("--coverage-sims", type=int, default=200, help="simulations per measure, persona and λ")
    ap.add_argument(
        "--bound",
        choices=("audit", "first-order"),
        default="audit",
        help="the futility bound simulated: the audit's, or the first-order variance alone",
    )
    args = ap.parse_args()
    import numba

    numba.set_num_threads(1)  # thousands of small tests: one thread each
    if args.quick:
        args.audits, args.nulls, args.futility_nulls, args.delta_sims = 6, 60, 30, 10
        args.schedule_nulls, args.schedule_delta_sims, args.coverage_sims = 20, 4, 20
    t0 = time.perf_counter()
    data = Answers(Path(args.responses))
    data.bound = args.bound
    print(f"answers embedded in {time.perf_counter() - t0:.0f} s")
    deltas = [float(d) for d in args.min_effect.split(",")]
    audit_looks = tuple(int(k) for k in args.audit_looks.split(",") if k.strip())

    if "audit" in args.only:
        t = time.perf_counter()
        a = persona_audit(
            data, sims=args.audits, most=args.max, min_effect=None, seed=args.seed, looks=audit_looks
        )
        print(
            f"\npersona audit: 8 personas, Holm at α = {ALPHA}, at most {args.max} answers per arm, "
            f"{args.audits} audits"
        )
        print(
            f"  {a['plan']}; tests stopped at k: " + ", ".join(f"{k}: {v:.0%}" for k, v in a["stops"].items())
        )
        print(
            f"  calls:  fixed {a['fixed_calls']}, sequential {a['seq_calls']}: {a['saving']:.1%} fewer "
            "(target >= 40 %)"
        )
        print(
            f"  power:  fixed {a['fixed_power']:.3f}, sequential {a['seq_power']:.3f}: "
            f"difference {a['seq_power'] - a['fixed_power']:+.3f} (target >= -0.02)"
        )
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "null" in args.only:
        t = time.perf_counter()
        four = Plan((5, 10, 15, 20), (0.25, 0.25, 0.25, 0.25))
        rates = null_rate(
            data, sims=args.nulls, plans=[SequentialSampling().plan(args.null_max), four], seed=args.seed + 1
        )
        print(
            f"\nfalse-positive rate, every look taken: {args.nulls} nulls (one prompt's answers split in two)"
        )
        for r in rates:
            print(f"  {r['plan']}: {r['rate']:.4f} (target <= α + 2 SE = {r['limit']:.4f})")
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "futility" in args.only:
        t = time.perf_counter()
        fut = futility(
            data,
            sims=args.futility_nulls,
            most=args.futility_max,
            deltas=deltas,
            seed=args.seed + 2,
            confidence=args.confidence,
        )
        print(
            f"\nfutility: {args.futility_nulls} null controls (two disjoint groups of the base prompt's "
            f"60 answers, drawn up to the last look that can stop one), at most {args.futility_max} "
            f"per arm, {fut[0]['plan']}, confidence {args.confidence}"
        )
        for f in fut:
            print(
                f"  min_effect δ = {f['min_effect']}: stopped for futility before k = "
                f"{args.futility_max / 2:g}: {f['share_early']:.1%} (target >= 80 %); "
                f"at all: {f['share_futile']:.1%}"
            )
        print(f"  median bound at the first look: {fut[0]['median_first_bound']:.3f}")
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "delta" in args.only:
        t = time.perf_counter()
        rows = futility_at_delta(
            data,
            sims=args.delta_sims,
            most=args.futility_max,
            deltas=deltas,
            seed=args.seed + 3,
            confidence=args.confidence,
        )
        print(
            f"\nfutility at a change of exactly δ: {args.delta_sims} tests per persona and δ "
            f"(base answers against a λ-mixture of the persona's and the base prompt's), at most "
            f"{args.futility_max} per arm, confidence {args.confidence}"
        )
        for r in rows:
            print(
                f"  {r['persona']:24s} δ = {r['min_effect']:<5g} λ = {r['lambda']:.2f}: wrongly stopped "
                f"for futility {r['wrong']:.3f} (target <= {1 - args.confidence:.2f})"
            )
        worst = max(r["wrong"] for r in rows)
        mean = float(np.mean([r["wrong"] for r in rows]))
        se = np.sqrt((1 - args.confidence) * args.confidence / args.delta_sims)
        print(
            f"  mean {mean:.3f} (SE {se / np.sqrt(len(rows)):.3f}), worst {worst:.3f} "
            f"(one binomial SE at the target: {se:.3f})"
        )
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "schedules" in args.only:
        t = time.perf_counter()
        print(
            f"\nfutility by maximum and round schedule ({args.bound} bound; fresh recorded answers, "
            f"drawn without replacement up to the looks that decide; δ = {deltas[-1]}, "
            f"confidence {args.confidence}; "
            f"{args.schedule_nulls} nulls, {args.schedule_delta_sims} changes of δ per persona):"
        )
        schedules(
            data,
            maxima=[int(m) for m in args.maxima.split(",")],
            nulls=args.schedule_nulls,
            delta_sims=args.schedule_delta_sims,
            delta=deltas[-1],
            seed=args.seed + 4,
            confidence=args.confidence,
            looks_list=[tuple(int(k) for k in ls.split(",")) for ls in args.looks.split(";") if ls.strip()],
        )
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "measures" in args.only:
        t = time.perf_counter()
        print(
            f"\nthe futility bound's coverage by measure: k = 10 per arm, {args.coverage_sims} "
            f"simulations per measure, persona and λ (answers drawn without replacement), "
            f"confidence {args.confidence}:"
        )
        bound_coverage(
            data,
            measures=["energy-l2", "jsd", "wasserstein", "ks"],
            personas=["doctor", "comedian"],
            k=10,
            sims=args.coverage_sims,
            lams=[0.0, 0.5, 1.0],
            seed=args.seed + 5,
            confidence=args.confidence,
        )
        print(f"  ({time.perf_counter() - t:.0f} s)")

    if "audit" in args.only and "futility" in args.only:
        t = time.perf_counter()
        b = persona_audit(
            data, sims=args.audits, most=args.max, min_effect=deltas[-1], seed=args.seed, looks=audit_looks
        )
        print(f"\npersona audit with min_effect δ = {deltas[-1]} (the same draws)")
        print("  tests stopped at k: " + ", ".join(f"{k}: {v:.0%}" for k, v in b["stops"].items()))
        print(
            f"  calls: {b['saving']:.1%} fewer than fixed k; power {b['seq_power']:.3f} "
            f"(fixed {b['fixed_power']:.3f})"
        )
        print(f"  ({time.perf_counter() - t:.0f} s)")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
