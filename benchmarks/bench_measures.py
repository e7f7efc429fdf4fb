"""Which ω is the most powerful calibrated default? Measured on recorded real responses.

Run: ``.venv/bin/python benchmarks/bench_measures.py`` (a few minutes; ``--quick`` for a
smoke run). Reads ``assets/real_responses.jsonl`` (SmolLM2-135M answers to the NICE
prompt, its eight personas, three near-nulls and an off-topic prompt; recorded by
``assets/record_real_responses.py``), embeds them with MiniLM (offline; cached in
``$DBPA_CACHE_DIR``), then for k = 5, 10, 20 responses per group and every measure
(and null variant) on *the same* random draws:

* **power**: k responses to the base prompt against k to one persona prompt, for
  each of the eight personas; share of p <= .05;
* **FPR**: two disjoint groups of k responses to *one* prompt (every on-topic
  prompt in turn): a true null; share of p <= .05 (should be about .05);
* **+ outlier**: the same with one of the 2k pooled responses replaced by an
  off-topic one (a poem about the sea) at a random position;
* **near-null**: base against a name change (Ahmed, David) or a paraphrase of
  the instruction: not a true null (the model may answer them differently),
  reported as the share flagged;
* **chance ω** under the null and the mean **effect above chance** under the null
  (should be about 0 at every k).

Each test uses B = 499 permutations. The default measure (``DEFAULT_MEASURE``) is
the one with the highest mean power (over k and with/without the outlier) among
those whose FPR stays within its binomial 99 % interval around .05 everywhere; a
measure that compares whole distributions (``energy-l2``, ``energy-l1``: zero only
when the two distributions coincide) is preferred when its mean power is within
0.01 of the best, below the Monte Carlo error of these power estimates.
``energy-cosine`` only compares the mean embeddings, so a change in spread alone is
invisible to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.measures import DEFAULT_MEASURE, MEASURES, _prepare_jsd  # noqa: E402
from dbpa_core.permutation import _test_on_matrices, single_threaded_blas  # noqa: E402
from dbpa_core.similarity import cosine_similarity_matrix, pairwise_distance_matrix  # noqa: E402

ALPHA = 0.05
WHOLE_DISTRIBUTION = ("energy-l2", "energy-l1")  # preferred on a tie, in this order
TIE = 0.01


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    measure: str
    null: str = "base"
    bins: int = 30
    robust: bool = True

    def measure_object(self):
        m = MEASURES[self.measure]
        if self.measure == "jsd" and not self.robust:
            return dataclasses.replace(m, prepare=functools.partial(_prepare_jsd, robust=False))
        return m


VARIANTS = [
    Variant("energy-l2", "energy-l2"),
    Variant("energy-l1", "energy-l1"),
    Variant("energy-cosine", "energy-cosine"),
    Variant("jsd", "jsd"),
    Variant("jsd, min..max bins (before)", "jsd", robust=False),
    Variant("jsd, 10 bins", "jsd", bins=10),
    Variant("jsd, 60 bins", "jsd", bins=60),
    Variant("jsd, pooled null", "jsd", null="pooled"),
    Variant("wasserstein", "wasserstein"),
    Variant("wasserstein, pooled null", "wasserstein", null="pooled"),
    Variant("ks", "ks"),
    Variant("ks, pooled null", "ks", null="pooled"),
]


def load_responses(path: Path) -> dict[str, dict]:
    """arm -> {"role", "prompt", "texts"} from a recorded JSONL file."""
    arms: dict[str, dict] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            a = arms.setdefault(r["arm"], {"role": r["role"], "prompt": r["prompt"], "texts": []})
            a["texts"].append(r["response"])
    return arms


def embed_arms(arms: dict[str, dict]) -> dict[str, np.ndarray]:
    """MiniLM embeddings of every response, through the sampling layer's cache."""
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    sampler = Sampler(Cache())
    texts = [t for a in arms.values() for t in a["texts"]]
    emb = sampler.embed(texts, {"backend": "local"}).astype(np.float64)
    out, i = {}, 0
    for name, a in arms.items():
        out[name] = emb[i : i + len(a["texts"])]
        i += len(a["texts"])
    return out


def run_variants(x: np.ndarray, y: np.ndarray, variants, gen, n_permutations: int):
    """p-value, ω and chance ω of every variant on one data set (same matrices)."""
    pooled = np.vstack([x, y])
    k = x.shape[0]
    sim = cosine_similarity_matrix(pooled)
    dist = {
        "l2": pairwise_distance_matrix(pooled, "l2"),
        "l1": pairwise_distance_matrix(pooled, "l1"),
        "cosine": pairwise_distance_matrix(pooled, "cosine"),
    }
    seed = int(gen.integers(0, 2**63 - 1))
    out = []
    for v in variants:
        m = v.measure_object()
        r = _test_on_matrices(
            sim,
            dist.get(m.metric),
            k,
            m,
            n_permutations=n_permutations,
            rng=np.random.default_rng(seed),
            sequential=None,
            batch=None,
            bins=v.bins,
            null=v.null,
        )
        out.append((r.p_value, r.effect_size, r.chance_effect_size))
    return out


def draws(arms, emb, k: int, reps: int, null_reps: int, gen):
    """(condition, x, y) data sets; every variant sees the same ones."""
    base = next(n for n, a in arms.items() if a["role"] == "base")
    personas = [n for n, a in arms.items() if a["role"] == "persona"]
    near = [n for n, a in arms.items() if a["role"] == "near-null"]
    on_topic = [n for n, a in arms.items() if a["role"] != "off-topic"]
    off = emb[next(n for n, a in arms.items() if a["role"] == "off-topic")]

    def pick(name, size):
        return emb[name][gen.choice(emb[name].shape[0], size=size, replace=False)]

    def with_outlier(x, y):
        pooled = np.vstack([x, y])
        pooled[gen.integers(pooled.shape[0])] = off[gen.integers(off.shape[0])]
        return pooled[: x.shape[0]], pooled[x.shape[0] :]

    for p in personas:
        if emb[p].shape[0] < k or emb[base].shape[0] < k:
            continue
        for _ in range(reps):
            x, y = pick(base, k), pick(p, k)
            yield "power", x, y
            yield "power + outlier", *with_outlier(x, y)
    for p in near:
        for _ in range(reps):
            yield "near-null", pick(base, k), pick(p, k)
    for p in on_topic:
        if emb[p].shape[0] < 2 * k:
            continue
        for _ in range(null_reps):
            z = pick(p, 2 * k)
            yield "FPR", z[:k], z[k:]
            yield "FPR + outlier", *with_outlier(z[:k], z[k:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--responses", default=str(ROOT / "assets" / "real_responses.jsonl"))
    ap.add_argument("--ks", default="5,10,20")
    ap.add_argument("--reps", type=int, default=40, help="draws per persona and k")
    ap.add_argument("--null-reps", type=int, default=60, help="null draws per prompt and k")
    ap.add_argument("--permutations", type=int, default=499)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a smoke run (few draws)")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    # thousands of small tests: one thread each (a parallel region per tiny kernel call
    # costs more than it saves, much more on a busy machine)
    import numba

    numba.set_num_threads(1)
    if args.quick:
        args.reps, args.null_reps = 4, 4
    arms = load_responses(Path(args.responses))
    counts = {n: len(a["texts"]) for n, a in arms.items()}
    print(
        f"{args.responses}: {sum(counts.values())} responses, "
        + ", ".join(f"{n} {c}" for n, c in counts.items())
    )
    t0 = time.perf_counter()
    emb = embed_arms(arms)
    print(
        f"embedded with MiniLM in {time.perf_counter() - t0:.0f} s; B = {args.permutations}, "
        f"alpha = {ALPHA}, {os.cpu_count()} cores"
    )
    gen = np.random.default_rng(args.seed)
    results: dict = {}
    for k in [int(v) for v in args.ks.split(",")]:
        t0 = time.perf_counter()
        acc: dict[str, list] = defaultdict(list)
        with single_threaded_blas():
            for cond, x, y in draws(arms, emb, k, args.reps, args.null_reps, gen):
                acc[cond].append(run_variants(x, y, VARIANTS, gen, args.permutations))
        res = {}
        for cond, rows in acc.items():
            a = np.asarray(rows)  # (draws, variants, 3)
            res[cond] = {
                "n": a.shape[0],
                "reject": (a[:, :, 0] <= ALPHA).mean(axis=0).tolist(),
                "omega": a[:, :, 1].mean(axis=0).tolist(),
                "chance": a[:, :, 2].mean(axis=0).tolist(),
                "above": (a[:, :, 1] - a[:, :, 2]).mean(axis=0).tolist(),
                "above_se": ((a[:, :, 1] - a[:, :, 2]).std(axis=0, ddof=1) / np.sqrt(a.shape[0])).tolist(),
            }
        results[k] = res
        print(f"\nk = {k} ({sum(v['n'] for v in res.values())} data sets, {time.perf_counter() - t0:.0f} s)")
        print_table(res)
    best = choose_default(results)
    print(
        f"Most powerful calibrated measure (ties within {TIE} to whole-distribution tests): {best}"
        f" (DEFAULT_MEASURE = {DEFAULT_MEASURE}: {'agrees' if best == DEFAULT_MEASURE else 'DIFFERS'})"
    )
    print("\nREADME table (power / FPR at alpha = .05):\n")
    print(readme_table(results))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"variants": [v.label for v in VARIANTS], "results": results}, indent=1)
        )
    return 0


def fpr_ok(rate: float, n: int) -> bool:
    lo, hi = stats.binom.ppf([0.005, 0.995], n, ALPHA) / n
    return lo <= rate <= hi


def print_table(res: dict) -> None:
    conds = [c for c in ("power", "power + outlier", "FPR", "FPR + outlier", "near-null") if c in res]
    print(
        f"{'measure':<30}" + "".join(f"{c:>17}" for c in conds) + f"{'chance ω (H0)':>15}{'above (H0)':>16}"
    )
    for i, v in enumerate(VARIANTS):
        cells = ""
        for c in conds:
            r = res[c]["reject"][i]
            flag = "" if not c.startswith("FPR") or fpr_ok(r, res[c]["n"]) else " !"
            cells += f"{r:>15.3f}{flag:<2}"
        h0 = res.get("FPR")
        extra = f"{h0['chance'][i]:>15.4f}{h0['above'][i]:>+10.4f}±{h0['above_se'][i]:.4f}" if h0 else ""
        print(f"{v.label:<30}{cells}{extra}")


def choose_default(results: dict) -> str:
    """Highest mean power (with and without the outlier) among the registered
    measures with the papers' null whose FPR is in its 99 % interval everywhere; a
    whole-distribution test within ``TIE`` of the best wins the tie."""
    scores = {}
    for i, v in enumerate(VARIANTS):
        if v.null != "base" or v.bins != 30 or not v.robust:
            continue
        ok = all(
            fpr_ok(res[c]["reject"][i], res[c]["n"])
            for res in results.values()
            for c in ("FPR", "FPR + outlier")
            if c in res
        )
        if ok:
            scores[v.label] = np.mean(
                [
                    res[c]["reject"][i]
                    for res in results.values()
                    for c in ("power", "power + outlier")
                    if c in res
                ]
            )
    if not scores:
        return "none"
    best = max(scores.values())
    print(
        "\nmean power of the calibrated measures: "
        + ", ".join(f"{n} {v:.3f}" for n, v in sorted(scores.items(), key=lambda kv: -kv[1]))
    )
    for name in WHOLE_DISTRIBUTION:
        if scores.get(name, -1.0) >= best - TIE:
            return name
    return max(scores, key=scores.get)


def readme_table(results: dict) -> str:
    ks = sorted(results)
    head = (
        "| measure | "
        + " | ".join(f"k = {k}" for k in ks)
        + " | "
        + " | ".join(f"k = {k} + outlier" for k in ks)
        + " |"
    )
    lines = [head, "|---|" + "---:|" * (2 * len(ks))]
    for i, v in enumerate(VARIANTS):
        cells = []
        for cond_p, cond_f in (("power", "FPR"), ("power + outlier", "FPR + outlier")):
            for k in ks:
                res = results[k]
                p = res.get(cond_p, {}).get("reject", [float("nan")] * len(VARIANTS))[i]
                f = res.get(cond_f, {}).get("reject", [float("nan")] * len(VARIANTS))[i]
                cells.append(f"{p:.2f} / {f:.3f}")
        name = f"**{v.label}**" if v.label == DEFAULT_MEASURE else v.label
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
