"""``dbpa``: run audits from spec files, for batch jobs and CI.

    dbpa audit SPEC.yaml --out DIR [--no-cache] [--fail-on-control]
    dbpa attack SPEC.yaml --out DIR [--no-cache] [--estimate]
    dbpa estimate SPEC.yaml
    dbpa cache info | clear

Exit codes: 0 done, 1 a control perturbation was significant (with
``--fail-on-control``), 2 a mistake in the spec or arguments, 3 a backend
failure (key, server, model), 130 stopped.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__


def _fmt_p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def _table(result) -> str:
    rows = [("name", "role", "omega", "p", "p_adj", "")]
    for p in result.perturbations:
        rows.append((p.name, p.role or "-", f"{p.effect_size:.3f}", _fmt_p(p.p_value),
                     _fmt_p(p.p_adjusted), p.stars))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class _Bars:
    """tqdm bars per stage, driven by the audit's progress callback."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bars: dict[str, object] = {}

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(p.stage)
        if bar is None:
            bar = self.bars[p.stage] = tqdm(total=p.total, desc=p.stage, unit=" item",
                                            file=sys.stderr, leave=True, dynamic_ncols=True)
        bar.total = p.total
        bar.n = p.done
        if p.detail:
            bar.set_postfix_str(p.detail[:30], refresh=False)
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _cache(args):
    from .cache import Cache

    return Cache(args.cache_dir, enabled=not getattr(args, "no_cache", False))


def cmd_audit(args) -> int:
    from .audit import AuditCancelled, run_audit
    from .spec import load_spec

    spec = load_spec(args.spec)
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    try:
        result = run_audit(spec, cache=_cache(args), progress=bars)
    except AuditCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    finally:
        bars.close()
    paths = result.write(args.out)
    print(_table(result))
    if result.roc is not None:
        print(f"\nROC over alpha: AUC = {result.roc.auc:.3f}; "
              f"TPR at FPR <= 5 %: {result.roc.tpr_at_fpr(0.05):.2f}")
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} samples from the cache, "
          f"{u['seconds']:.1f} s. Correction: {spec.correction}, alpha = {spec.alpha}.")
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    if args.fail_on_control:
        bad = [p.name for p in result.perturbations if p.role == "control" and p.significant]
        if bad:
            print(f"FAIL: control perturbation(s) changed the answers significantly: "
                  f"{', '.join(bad)}", file=sys.stderr)
            return 1
    return 0


def cmd_estimate(args) -> int:
    from .audit import estimate
    from .spec import load_spec

    spec = load_spec(args.spec)
    est = estimate(spec, cache=_cache(args))
    print(f"{'arm':<28} {'model':<24} {'calls':>6} {'cached':>7} {'in tok':>9} {'out tok':>9} {'cost $':>9}")
    for r in est["arms"]:
        cost = "?" if r["cost"] != r["cost"] else f"{r['cost']:.4f}"
        print(f"{r['arm'][:28]:<28} {r['model'][:24]:<24} {r['calls']:>6} {r['cached']:>7} "
              f"{r['input_tokens']:>9} {r['output_tokens']:>9} {cost:>9}")
    t = est["totals"]
    print(f"\ntotal: {t['calls']} calls ({t['cached']} cached), ~{t['input_tokens']} input and "
          f"<= {t['output_tokens']} output tokens, embeddings ~{t['embedding_tokens']} tokens; "
          f"estimated cost ${t['cost']:.4f}")
    if est["unknown_prices"]:
        print("no price known for: " + ", ".join(est["unknown_prices"]) +
              " (add them under 'prices:' in the spec, $ per 1M tokens)")
    print("Tokens are estimated at ~4 characters each; output is counted at max_tokens.")
    return 0


def cmd_attack(args) -> int:
    from .attacks.battery import estimate_battery, run_battery, summary_text
    from .attacks.spec import load_attack_spec
    from .attacks.wordnet import WordNetMissing
    from .sampling import RunCancelled

    spec = load_attack_spec(args.spec)
    if args.estimate:
        e = estimate_battery(spec, cache=_cache(args))
        cost = "unknown (add 'prices:')" if e["unknown_price"] else f"${e['cost']:.4f}"
        print(f"{e['answers']} answers + at most {e['rti_max']} for RTI + {e['curve']} curve "
              f"samples = at most {e['calls']} calls ({e['cached']} cached); ~{e['input_tokens']} "
              f"input and <= {e['output_tokens']} output tokens; estimated cost {cost}")
        return 0
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    try:
        result = run_battery(spec, cache=_cache(args), progress=bars)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except WordNetMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bars.close()
    paths = result.write(args.out)
    print(summary_text(result))
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, "
          f"{u['seconds']:.1f} s.")
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return 0


def cmd_cache(args) -> int:
    c = _cache(args)
    if args.action == "clear":
        n = c.clear()
        print(f"removed {n} cached items from {c.directory}")
    else:
        print(f"cache folder: {c.directory}\nitems: {c.count()}\nsize: {c.volume() / 1e6:.1f} MB")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dbpa", description="Audit LLM robustness with "
                                 "distribution-based perturbation analysis.")
    ap.add_argument("--version", action="version", version=f"dbpa {__version__}")
    ap.add_argument("--cache-dir", default=os.environ.get("DBPA_CACHE_DIR"),
                    help="cache folder (default: $DBPA_CACHE_DIR or the per-user cache)")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("audit", help="run an audit spec and write results")
    a.add_argument("spec")
    a.add_argument("--out", default="dbpa-results", help="output folder (default: dbpa-results)")
    a.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    a.add_argument("--fail-on-control", action="store_true",
                   help="exit 1 when a control perturbation is significant (for CI)")
    a.add_argument("--quiet", action="store_true", help="no progress bars")
    a.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    a.set_defaults(func=cmd_audit)
    e = sub.add_parser("estimate", help="calls, tokens and cost of a spec; calls nothing")
    e.add_argument("spec")
    e.set_defaults(func=cmd_estimate)
    k = sub.add_parser("attack", help="run a robustness battery spec (typos, word edits, "
                       "homoglyphs, instructions, option orders, RTI) and write results")
    k.add_argument("spec")
    k.add_argument("--out", default="dbpa-attack", help="output folder (default: dbpa-attack)")
    k.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    k.add_argument("--estimate", action="store_true", help="print the calls it needs; call nothing")
    k.add_argument("--quiet", action="store_true", help="no progress bars")
    k.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    k.set_defaults(func=cmd_attack)
    c = sub.add_parser("cache", help="show or clear the cache")
    c.add_argument("action", choices=["info", "clear"])
    c.set_defaults(func=cmd_cache)
    return ap


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    from .backends.base import BackendError
    from .spec import SpecError

    try:
        return args.func(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("stopped: every response received so far is cached; run again to resume.",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
