"""Record assets/demo_replay.jsonl: real SmolLM2-135M responses to every dashboard page's
default example, so that ``DBPA_REPLAY_FILE=assets/demo_replay.jsonl make run`` runs every
page out of the box, offline, in seconds — and assets/demo_landing.npz: the MiniLM
embeddings of the landing page's example and when and how it was recorded, from which
the landing page shows its recorded result at once on first start (``ui/demo.py``).

    .venv/bin/python assets/make_demo_replay.py                 # record what is missing
    .venv/bin/python assets/make_demo_replay.py --only models   # one example (or battery)
    .venv/bin/python assets/make_demo_replay.py --force         # re-record everything
    .venv/bin/python assets/make_demo_replay.py --only landing  # re-embed the landing example

The examples are built from the same presets the pages use (``ui/presets.py``, the sidebar
defaults in ``ui/state.py``), so a page's default prompts and the recording cannot drift
apart (``tests/app/test_audit_ready.py`` checks it). Records already in the file are kept unless
``--force``; each record names its model: ``SmolLM2-135M-Instruct`` at the default
temperature, ``SmolLM2-135M-Instruct T=1.2`` for a variant. The personas are recorded on
both (``personas`` and ``personas_hot``: the Persona explorer's heat map of the demo is
personas x models); the battery's recording covers its default, RTI for every word
operation and its robustness curve (a curve prompt that is also answered once keeps that
greedy answer first, which a replayed curve reads as its first sample). ``dbpa scan``'s
audit and battery (``dbpa_core/cli/scan.py``) are recorded too, so that a scan of the recorded
model runs offline (``tests/test_scan.py``), and so is the survey simulation of
``examples/fidelity_simulate.yaml`` (``fidelity``, replayed by ``examples/fidelity_replay.yaml``).
After re-recording, ``assets/make_demo_runs.py`` rebuilds demo mode's recorded battery,
sensitivity study and History examples from these answers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.backends.local import SMOLLM2_NAME  # noqa: E402
from dbpa_core.cache import Cache  # noqa: E402
from dbpa_core.cli import scan  # noqa: E402
from dbpa_core.spec import parse_spec  # noqa: E402
from ui import presets  # noqa: E402

DST = Path(__file__).with_name("demo_replay.jsonl")
LANDING = Path(__file__).with_name("demo_landing.npz")
SUITE = Path(__file__).with_name("demo_suite.json")  # the Suite page's recorded result


def recorded_name(model: dict) -> str:
    """The ``model`` field of a record: the embedded model's name, plus T= for a variant."""
    t = model.get("temperature")
    return SMOLLM2_NAME + (f" T={t:g}" if t is not None else "")


def examples(settings: dict) -> dict[str, dict]:
    """Every page's default example as a spec (dict), on the embedded model."""
    common = {k: settings[k] for k in ("samples", "temperature", "max_tokens", "seed")}
    common.update(permutations=100, embedder={"backend": "rouge1"})  # only responses matter
    personas = [{"name": r["name"], "prefix": r["prefix"]} for r in presets.persona_rows(presets.PERSONAS)]
    control = [
        {"name": r["name"], "prompt": r["prompt"], "role": r["role"]} for r in presets.control_target_rows()
    ]
    models = [{"backend": "local"}] + [
        {"backend": "local", "temperature": t} for t in presets.VARIANT_TEMPERATURES
    ]
    hot = {"backend": "local", "temperature": presets.VARIANT_TEMPERATURES[0]}
    return {
        "personas": {
            **common,
            "name": "demo-personas",
            "model": {"backend": "local"},
            "base": {"prompt": presets.NICE_PROMPT},
            "perturbations": personas,
        },
        # a second model for the Persona explorer's heat map (personas x models)
        "personas_hot": {
            **common,
            "name": "demo-personas-hot",
            "model": hot,
            "base": {"prompt": presets.NICE_PROMPT},
            "perturbations": personas,
        },
        "control": {
            **common,
            "name": "demo-control",
            "model": {"backend": "local"},
            "base": {"prompt": presets.NICE_PROMPT},
            "perturbations": control,
        },
        "models": {
            **common,
            "name": "demo-models",
            "models": models,
            "base": {"prompt": presets.MODELS_PROMPT},
        },
        # `dbpa scan`'s audit (its own settings: the scan's defaults, not the sidebar's)
        "scan": scan.audit_data({"backend": "local"}, embedder={"backend": "rouge1"}),
    }


def battery_spec():
    """The Robustness battery page's default battery on the embedded model (the page's
    form defaults and the sidebar's)."""
    from ui import battery

    return battery.build_spec(dict(battery.DEFAULTS), _battery_settings(), {"backend": "local"})


def battery_specs():
    """The battery page's default, and the same with what its form offers beyond it: RTI
    for every word operation and the robustness curve at its default levels and items."""
    from dbpa_core.attacks.spec import parse_attack_spec
    from ui import battery

    full = dict(battery.DEFAULTS, w_bat_rti=["insert", "delete", "replace"], w_bat_curve=True)
    base = battery_spec()
    return [
        base,
        battery.build_spec(full, _battery_settings(), {"backend": "local"}),
        parse_attack_spec(scan.battery_data({"backend": "local"}), source="dbpa scan"),
    ]


def _battery_settings() -> dict:
    from ui.state import DEFAULTS

    return {
        "samples": DEFAULTS["w_samples"],
        "permutations": DEFAULTS["w_permutations"],
        "measure": DEFAULTS["w_measure"],
        "correction": DEFAULTS["w_correction"],
        "alpha": DEFAULTS["w_alpha"],
        "temperature": DEFAULTS["w_temperature"],
        "max_tokens": DEFAULTS["w_max_tokens"],
        "seed": DEFAULTS["w_seed"],
        "embedder": {"backend": DEFAULTS["w_embedder"]},
        "null": DEFAULTS["w_null"],
        "min_effect": None,
    }


def sample_records(cache, jobs: list, what: str) -> list[dict]:
    """The embedded model's answer to each job (one each), as records of the replay file."""
    from dbpa_core.sampling import Sampler

    if not jobs:
        print(f"{what}: already recorded")
        return []
    print(f"{what}: recording {len(jobs)} answers", flush=True)
    sampler = Sampler(
        cache, progress=lambda p: print(f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True)
    )
    recs = sampler.sample(jobs)
    return [
        {"prompt": j.request.prompt, "response": r.text, "model": SMOLLM2_NAME}
        for j, r in zip(jobs, recs, strict=True)
    ]


def record_battery(cache, counts: dict, force: bool) -> list[dict]:
    """SmolLM2's answers to every prompt the battery page may send with its defaults, with
    RTI for every word operation and with the robustness curve (RTI's every round included,
    so the page's check before Run finds them all): one answer per prompt at the battery's
    temperature (0: the most likely answer), and a curve prompt's k samples (a prompt that
    is also answered keeps that answer first, and only the curve's samples 1 … k-1 are
    added: a replayed curve reads the answer as its first sample).
    ``counts``: responses already recorded by (prompt, model)."""
    from dbpa_core.attacks.battery import answer_request, curve_requests
    from dbpa_core.runs import replay_need, requests
    from dbpa_core.sampling import Job

    jobs: list = []
    planned: dict[str, int] = {}
    for spec in battery_specs():
        for p, n in replay_need(requests(spec)).items():
            have = 0 if force else counts.get((p, SMOLLM2_NAME), 0)
            have = max(have, planned.get(p, 0))
            if have >= n:
                continue
            reqs = [answer_request(spec, p)] if n == 1 else curve_requests(spec, p)[have:n]
            jobs += [Job(spec.model, r) for r in reqs]
            planned[p] = n
    return sample_records(cache, jobs, "battery")


def record_fidelity(cache, counts: dict, force: bool) -> list[dict]:
    """The embedded model's answers to examples/fidelity_simulate.yaml (the sample's survey
    questions, k answers each), so that examples/fidelity_replay.yaml replays that simulation
    offline (the manual's fidelity guide shows its output). ``counts``: responses already
    recorded by (prompt, model)."""
    from dbpa_core.fidelity.simulate import load_simulation_spec, plan_jobs

    spec = load_simulation_spec(ROOT / "examples" / "fidelity_simulate.yaml")
    jobs = [j for _, _, j in plan_jobs(spec.data, spec.models, **spec.settings())]
    jobs = [j for j in jobs if force or counts.get((j.request.prompt, SMOLLM2_NAME), 0) < spec.samples]
    return sample_records(cache, jobs, "fidelity")


def record_suite(cache, counts: dict, force: bool) -> list[dict]:
    """The Suite page's example (examples/suite_clinic.yaml, its own k and max_tokens) on
    the embedded model: every case's base and perturbed prompts, k answers each; then the
    suite run on those answers (all from the cache) with its answers, written to SUITE
    with when and how it was recorded (``ui/suite_demo.py`` shows it at once)."""
    from datetime import UTC, datetime

    from dbpa_core.audit import arm_requests, build_arms
    from dbpa_core.backends.decoding import cpu_kernels
    from dbpa_core.sampling import Job, Sampler
    from dbpa_core.suite import case_spec
    from ui import suite_builder, suite_view

    spec = suite_builder.example_spec()
    jobs: list = []
    planned: set = set()
    for case in spec.cases:
        one = case_spec(spec, case)
        for arm in build_arms(one):
            key = (arm.prompt, SMOLLM2_NAME)
            if key in planned or (not force and counts.get(key, 0) >= spec.samples):
                continue
            planned.add(key)
            jobs += [Job(arm.model, r, arm.name) for r in arm_requests(one, arm)]
    out: list[dict] = []
    sampler = Sampler(
        cache, progress=lambda p: print(f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True)
    )
    if jobs:
        print(f"suite: recording {len(jobs)} answers", flush=True)
        recs = sampler.sample(jobs)
        out = [
            {"prompt": j.request.prompt, "response": r.text, "model": SMOLLM2_NAME}
            for j, r in zip(jobs, recs, strict=True)
        ]
    else:
        print("suite: already recorded")
    summary = suite_view.run_with_answers(
        spec, cache=cache, progress=lambda p: print(f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True)
    )
    summary["recorded"] = {
        "model": SMOLLM2_NAME,
        "precision": summary.get("usage", {}).get("precision") or sampler.usage.get("precision"),
        "kernels": cpu_kernels(),
        "recorded": datetime.now(UTC).date().isoformat(),
        "embedder": "all-MiniLM-L6-v2",
    }
    SUITE.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {SUITE}: {summary['n_tests']} tests, {len(summary['answers'])} answers")
    return out


def landing_responses(settings: dict, records: list[dict]) -> dict[str, list[str]]:
    """The recorded responses of the landing example (the "personas" example on the
    embedded model), by prompt, in sample order."""
    from dbpa_core.audit import build_arms

    spec = parse_spec(examples(settings)["personas"], source="demo-personas")
    by_prompt: dict[str, list[str]] = {}
    for r in records:
        if r.get("model") == SMOLLM2_NAME:
            by_prompt.setdefault(r["prompt"], []).append(r["response"])
    out = {}
    for arm in build_arms(spec):
        got = by_prompt.get(arm.prompt, [])
        if len(got) < spec.samples:
            raise SystemExit(
                f"landing: {arm.name} has {len(got)} of {spec.samples} responses; "
                "record the personas example first"
            )
        out[arm.prompt] = got[: spec.samples]
    return out


def write_landing(settings: dict, records: list[dict], cache, meta: dict) -> None:
    """Embed the landing example's responses with the page's default embedder (MiniLM)
    and write them, with ``meta`` (model, precision, date, generation settings), to
    LANDING. Plain arrays and a JSON string: loaded without pickle."""
    import numpy as np

    from dbpa_core.sampling import Sampler

    texts = [t for group in landing_responses(settings, records).values() for t in group]
    unique = list(dict.fromkeys(texts))
    vectors = Sampler(cache).embed(unique, {"backend": "local"})
    np.savez_compressed(
        LANDING,
        texts=np.array(unique),
        vectors=vectors.astype(np.float32),
        meta=np.array(json.dumps(meta, sort_keys=True)),
    )
    print(f"wrote {LANDING}: {len(unique)} embeddings, {meta}")


def main(argv=None) -> int:
    from ui.state import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only",
        default="personas,personas_hot,control,models,scan,battery,suite,fidelity",
        help="comma-separated examples to record (personas, personas_hot: the "
        "personas on the T=1.2 variant, control, models, scan: dbpa scan's audit, "
        "battery: the Robustness battery page's default, every RTI operation and "
        "its curve, and dbpa scan's battery; suite: the Suite page's example "
        "and its recorded result; fidelity: examples/fidelity_simulate.yaml's survey answers); "
        "landing: only re-embed the landing example",
    )
    ap.add_argument("--force", action="store_true", help="re-record responses already there")
    ap.add_argument("--cache-dir", default=None, help="cache folder (default: the usual one)")
    args = ap.parse_args(argv)
    settings = {
        "samples": DEFAULTS["w_samples"],
        "temperature": DEFAULTS["w_temperature"],
        "max_tokens": DEFAULTS["w_max_tokens"],
        "seed": DEFAULTS["w_seed"],
    }

    kept = (
        [json.loads(line) for line in DST.read_text(encoding="utf-8").splitlines() if line.strip()]
        if DST.exists()
        else []
    )
    have = {(r["prompt"], r.get("model")) for r in kept}
    # answers recorded per (prompt, model): an arm that asks a prompt another arm asks too
    # (a same-prompt control) needs answers of its own, after theirs (Arm.first_sample)
    from collections import Counter

    count = Counter() if args.force else Counter((r["prompt"], r.get("model")) for r in kept)
    new: list[dict] = []
    cache = Cache(args.cache_dir)
    names = [n.strip() for n in args.only.split(",")]
    landing_meta = None
    for name in names:
        if name == "landing":
            continue
        if name in ("battery", "suite", "fidelity"):
            recorder = {"battery": record_battery, "suite": record_suite, "fidelity": record_fidelity}[name]
            got = recorder(cache, count, args.force)
            have.update((r["prompt"], r["model"]) for r in got)
            new += got
            continue
        spec = parse_spec(examples(settings)[name], source=f"demo-{name}")
        from dbpa_core.audit import arm_requests, build_arms
        from dbpa_core.sampling import Job, Sampler

        k = spec.samples

        def lacking(arm, k=k) -> bool:
            return count[(arm.prompt, recorded_name(arm.model))] < arm.first_sample + k

        todo = [a for a in build_arms(spec) if lacking(a)]
        if not todo:
            print(f"{name}: already recorded")
            continue
        print(f"{name}: recording {len(todo)} prompts x {k}", flush=True)
        sampler = Sampler(
            cache, progress=lambda p: print(f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True)
        )
        recs = sampler.sample([Job(a.model, r, a.name) for a in todo for r in arm_requests(spec, a)])
        if name == "personas":
            from datetime import UTC, datetime

            from dbpa_core.backends.decoding import cpu_kernels

            landing_meta = {
                "model": SMOLLM2_NAME,
                "precision": sampler.usage.get("precision"),
                "kernels": cpu_kernels(),
                "recorded": datetime.now(UTC).date().isoformat(),
                "embedder": "all-MiniLM-L6-v2",
                **settings,
                "top_p": spec.top_p,
            }
        for i, arm in enumerate(todo):
            key = (arm.prompt, recorded_name(arm.model))
            if not lacking(arm):
                continue  # an arm shared by two examples (the NICE base) is recorded once
            have.add(key)
            count[key] += k
            new += [
                {"prompt": arm.prompt, "response": r.text, "model": key[1]} for r in recs[i * k : (i + 1) * k]
            ]
    if args.force:
        fresh = {(r["prompt"], r["model"]) for r in new}
        kept = [r for r in kept if (r["prompt"], r.get("model")) not in fresh]
    with DST.open("w", encoding="utf-8") as fout:
        for r in kept + new:
            fout.write(
                json.dumps(
                    {"prompt": r["prompt"], "response": r["response"], "model": r.get("model")},
                    ensure_ascii=False,
                )
                + "\n"
            )
    print(f"wrote {DST}: {len(kept) + len(new)} responses ({len(new)} new)")
    if landing_meta is None and "landing" in names and LANDING.exists():
        import numpy as np

        with np.load(LANDING, allow_pickle=False) as old:
            landing_meta = json.loads(str(old["meta"]))
    if landing_meta is not None:
        write_landing(settings, kept + new, cache, landing_meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
