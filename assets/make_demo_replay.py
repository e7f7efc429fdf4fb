"""Record assets/demo_replay.jsonl: real SmolLM2-135M responses to every dashboard page's
default example, so that ``DBPA_REPLAY_FILE=assets/demo_replay.jsonl make run`` runs every
page out of the box, offline, in seconds.

    .venv/bin/python assets/make_demo_replay.py                 # record what is missing
    .venv/bin/python assets/make_demo_replay.py --only models   # one example
    .venv/bin/python assets/make_demo_replay.py --force         # re-record everything

The examples are built from the same presets the pages use (``ui/presets.py``, the sidebar
defaults in ``ui/state.py``), so a page's default prompts and the recording cannot drift
apart (``tests/app/test_audit_ready.py`` checks it). Records already in the file are kept unless
``--force``; each record names its model: ``SmolLM2-135M-Instruct`` at the default
temperature, ``SmolLM2-135M-Instruct T=1.2`` for a variant.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.audit import run_audit  # noqa: E402
from dbpa_core.backends.local import SMOLLM2_NAME  # noqa: E402
from dbpa_core.cache import Cache  # noqa: E402
from dbpa_core.spec import parse_spec  # noqa: E402
from ui import presets  # noqa: E402

DST = Path(__file__).with_name("demo_replay.jsonl")


def recorded_name(model: dict) -> str:
    """The ``model`` field of a record: the embedded model's name, plus T= for a variant."""
    t = model.get("temperature")
    return SMOLLM2_NAME + (f" T={t:g}" if t is not None else "")


def examples(settings: dict) -> dict[str, dict]:
    """Every page's default example as a spec (dict), on the embedded model."""
    common = {k: settings[k] for k in ("samples", "temperature", "max_tokens", "seed")}
    common.update(permutations=100, embedder={"backend": "rouge1"})  # only responses matter
    personas = [{"name": r["name"], "prefix": r["prefix"]} for r in
                presets.persona_rows(presets.PERSONAS)]
    control = [{"name": r["name"], "prompt": r["prompt"], "role": r["role"]}
               for r in presets.control_target_rows()]
    models = [{"backend": "local"}] + [{"backend": "local", "temperature": t}
                                       for t in presets.VARIANT_TEMPERATURES]
    return {
        "personas": {**common, "name": "demo-personas", "model": {"backend": "local"},
                     "base": {"prompt": presets.NICE_PROMPT}, "perturbations": personas},
        "control": {**common, "name": "demo-control", "model": {"backend": "local"},
                    "base": {"prompt": presets.NICE_PROMPT}, "perturbations": control},
        "models": {**common, "name": "demo-models", "models": models,
                   "base": {"prompt": presets.MODELS_PROMPT}},
    }


def main(argv=None) -> int:
    from ui.state import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="personas,control,models",
                    help="comma-separated examples to record (personas, control, models)")
    ap.add_argument("--force", action="store_true", help="re-record responses already there")
    ap.add_argument("--cache-dir", default=None, help="cache folder (default: the usual one)")
    args = ap.parse_args(argv)
    settings = {"samples": DEFAULTS["w_samples"], "temperature": DEFAULTS["w_temperature"],
                "max_tokens": DEFAULTS["w_max_tokens"], "seed": DEFAULTS["w_seed"]}

    kept = [json.loads(line) for line in DST.read_text(encoding="utf-8").splitlines()
            if line.strip()] if DST.exists() else []
    have = {(r["prompt"], r.get("model")) for r in kept}
    new: list[dict] = []
    cache = Cache(args.cache_dir)
    for name in args.only.split(","):
        spec = parse_spec(examples(settings)[name.strip()], source=f"demo-{name}")
        from dbpa_core.audit import build_arms

        arms = build_arms(spec)
        todo = [a for a in arms if args.force or (a.prompt, recorded_name(a.model)) not in have]
        if not todo:
            print(f"{name}: already recorded")
            continue
        print(f"{name}: recording {len(arms)} prompts x {spec.samples}", flush=True)
        result = run_audit(spec, cache=cache, progress=lambda p: print(
            f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True))
        for arm in (result.base, *result.arms):
            key = (arm.arm.prompt, recorded_name(arm.arm.model))
            if key in have and not args.force:
                continue
            have.add(key)
            new += [{"prompt": arm.arm.prompt, "response": t, "model": key[1]}
                    for t in arm.texts]
    if args.force:
        fresh = {(r["prompt"], r["model"]) for r in new}
        kept = [r for r in kept if (r["prompt"], r.get("model")) not in fresh]
    with DST.open("w", encoding="utf-8") as fout:
        for r in kept + new:
            fout.write(json.dumps({"prompt": r["prompt"], "response": r["response"],
                                   "model": r.get("model")}, ensure_ascii=False) + "\n")
    print(f"wrote {DST}: {len(kept) + len(new)} responses ({len(new)} new)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
