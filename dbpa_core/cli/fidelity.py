"""``dbpa fidelity``: calibrated quantile curves from the command line.

    dbpa fidelity DATA.csv --loss tv --gamma 0.5 --eta 0.05 --out DIR
    dbpa fidelity sample --out DIR                       # the built-in synthetic sample
    dbpa fidelity SURVEY_FOLDER --attribute SEX --group Female --out DIR   # OpinionQA layout
    dbpa fidelity --simulate SPEC.yaml --out DIR [--estimate]
    dbpa fidelity DATA.csv --plan                        # questions a verdict needs

``DIR`` receives ``fidelity.json``, ``fidelity.csv`` (per scenario), ``comparisons.csv``
and ``report.html``; with ``--simulate`` also ``data.csv`` (the real counts and the new
simulator columns, readable by ``dbpa fidelity``) and ``answers.jsonl`` (every simulated
answer and how it was read). Exit codes as the other commands: 2 bad input (one line,
with the file and line), 3 a backend failure, 130 stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any

from .common import add_gates, add_no_history, add_progress_options, gates, open_cache, progress_bars


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    f = sub.add_parser(
        "fidelity",
        help="calibrated quantile curves: how far simulated survey "
        "answers are from real ones, with a guarantee",
    )
    f.add_argument(
        "data",
        nargs="?",
        help="long CSV (scenario,option,real,<simulators>...), an OpinionQA survey folder, or 'sample'",
    )
    f.add_argument(
        "--simulate",
        metavar="SPEC_FILE",
        help="simulation spec: ask models to answer the "
        "questions as respondents, then analyse (see the manual: Simulator fidelity)",
    )
    f.add_argument(
        "--loss",
        choices=["tv", "kl", "w1", "squared", "absolute"],
        default=None,
        help="loss L(u, q) (default tv)",
    )
    f.add_argument("--gamma", type=float, default=None, help="coverage of each confidence set (default 0.5)")
    f.add_argument(
        "--eta",
        type=float,
        default=None,
        help="the guarantee fails with probability at most eta (default 0.05)",
    )
    f.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="level of the guarantee and the comparisons: at least 1 - alpha of scenarios (default 0.1)",
    )
    f.add_argument(
        "--sigma", type=float, default=None, help="w1 on real values: sub-Gaussian scale of the real values"
    )
    f.add_argument("--bounds", default=None, help="real values: their range a,b")
    f.add_argument(
        "--no-band",
        action="store_true",
        help="skip the tightness band (its lower pseudo-discrepancies need a solver for kl and w1)",
    )
    f.add_argument(
        "--baseline",
        choices=["drawn", "exact"],
        default="drawn",
        help="the uniform simulator: drawn like the simulators, k answers per "
        "question at random (default), or the exact 1/d",
    )
    f.add_argument(
        "--baseline-k",
        type=int,
        default=None,
        metavar="K",
        help="the drawn baseline's answers per question (default: the simulators' k)",
    )
    f.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the drawn baseline and of --plan's resampling (default 0)",
    )
    f.add_argument(
        "--attribute", default="NONE", help="OpinionQA: the demographic split (SEX, AGE, POLPARTY, ...)"
    )
    f.add_argument("--group", action="append", default=None, help="OpinionQA: keep this group (repeatable)")
    f.add_argument("--out", default="dbpa-fidelity", help="output folder (default: dbpa-fidelity)")
    f.add_argument(
        "--plan",
        action="store_true",
        help="print how many questions the "
        "guarantee and each pairwise verdict need (from these data); write nothing",
    )
    f.add_argument(
        "--estimate", action="store_true", help="with --simulate: print the answers it needs; call nothing"
    )
    f.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    f.add_argument(
        "--batch",
        action="store_true",
        help="with --simulate: send the uncached "
        "answers of OpenAI-compatible models as one Batch API job (half price)",
    )
    add_no_history(f, "analysis")
    add_gates(f, "guarantee and pairwise comparison")
    add_progress_options(f)
    f.add_argument(
        "--allow-key-env",
        action="append",
        default=[],
        metavar="NAME",
        help="let the spec send this environment variable as an API key",
    )
    return f


def _bounds(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--bounds must be two numbers a,b, got {text!r}.") from None
    return (a, b)


def run(args: argparse.Namespace) -> int:
    from ..fidelity.analysis import run_fidelity
    from ..fidelity.data import FidelityDataError, load_data
    from ..fidelity.discrepancy import SolverError
    from ..fidelity.simulate import (
        TemplateError,
        estimate_simulation,
        load_simulation_spec,
        run_simulation_spec,
    )
    from ..outputs import check_out_dir
    from ..sampling import RunCancelled

    if (args.data is None) == (args.simulate is None):
        print("error: give a data file (or 'sample'), or --simulate SPEC.yaml", file=sys.stderr)
        return 2
    fail_on = gates(args)
    if fail_on is None:
        return 2
    settings: dict[str, Any] = {
        "loss": "tv",
        "gamma": 0.5,
        "eta": 0.05,
        "alpha": 0.1,
        "sigma": None,
        "bounds": None,
    }
    sim = None
    try:
        if args.simulate:
            spec = load_simulation_spec(args.simulate, allow_key_env=args.allow_key_env)
            settings.update(spec.analysis)
            if args.estimate:
                e = estimate_simulation(spec.data, spec.models, cache=open_cache(args), **spec.settings())
                print(
                    f"{e['answers']} answers ({spec.data.m} questions x {len(spec.models)} "
                    f"model(s) x {spec.samples}): {e['cached']} cached, {e['calls']} calls to make"
                )
                return 0
        given = {
            "loss": args.loss,
            "gamma": args.gamma,
            "eta": args.eta,
            "alpha": args.alpha,
            "sigma": args.sigma,
            "bounds": _bounds(args.bounds),
        }
        settings.update({k: v for k, v in given.items() if v is not None})
        if not args.plan:
            check_out_dir(args.out)  # before any paid call
        if args.simulate:
            bars = progress_bars(args)
            if getattr(args, "batch", False):  # the answers as one Batch API job, then cached
                from ..batch import jobs_cli
                from ..fidelity.simulate import plan_jobs

                rc = jobs_cli(
                    [
                        (j.model, j.request)
                        for _, _, j in plan_jobs(spec.data, spec.models, **spec.settings())
                    ],
                    open_cache(args),
                    bars,
                )
                if rc is not None:
                    return rc
                bars.close()  # the batch stage's
                bars = progress_bars(args)
            try:
                sim = run_simulation_spec(spec, cache=open_cache(args), progress=bars)
            except RunCancelled as exc:
                print(str(exc), file=sys.stderr)
                return 130
            finally:
                bars.close()
            if sim.data is None:
                from ..outputs import write_files

                paths = write_files(args.out, {"answers.jsonl": sim.answers_jsonl()})
                print(f"error: {sim.error} They are in {paths[0]}.", file=sys.stderr)
                return 3
            data = sim.data
        else:
            data = load_data(args.data, attribute=args.attribute, groups=args.group)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # they are in result.warnings, printed below
            result = run_fidelity(
                data,
                band=not args.no_band,
                baseline=args.baseline,
                baseline_k=args.baseline_k,
                seed=args.seed,
                **settings,
            )
    except (FidelityDataError, TemplateError, ValueError, TypeError, SolverError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.plan:
        print(result.plan().text())
        for w in result.warnings:
            print(f"note: {w}", file=sys.stderr)
        return 0
    files = {}
    if sim is not None:
        files = {"data.csv": data.to_csv(), "answers.jsonl": sim.answers_jsonl()}
    try:
        paths = result.write(args.out)
        if files:
            from ..outputs import write_files

            paths += write_files(args.out, files)
    except OSError as exc:
        print(
            f"error: cannot write the results to {args.out} ({exc.strerror or exc})"
            + ("; every answer is cached, so running again costs nothing." if sim else "."),
            file=sys.stderr,
        )
        return 2
    print(result.summary_text())
    if sim is not None:
        u = sim.usage
        print(
            f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, "
            f"{u['seconds']:.1f} s; unparsed answers: "
            + ", ".join(f"{m} {sim.unparsed_total(m)}" for m in sim.models)
            + "."
        )
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    from ..runs import as_run
    from .common import finish, record_run_in_history

    # recorded with its analysis; a simulation as the Simulator fidelity page keys it
    parts = {"simulation": sim, "analysis": result} if sim is not None else {"analysis": result}
    title = spec.name if sim is not None else f"fidelity of {os.path.basename(str(args.data))}"
    run = as_run(parts, title=title)
    record_run_in_history(args, run)
    return finish(args, run, fail_on)
