"""Speed of the embedded model on the robustness battery, where prompts are all different
and answers short, so processing the prompts (prefill) is most of the work.

The README's small battery on SmolLM2 (``examples/attack_sample.yaml`` with ``data:
{sample: 1}``, ``option_orders: 3``, ``rti: [replace]``: 71 answers) is run end to end with
``run_battery`` on an empty cache, the model loaded beforehand and the one-time loads
(WordNet, spaCy) paid by a small warm-up battery:

1. **Against a plain loop.** The same prompts (those the battery sent, every ``--every``-th)
   answered one at a time by a plain transformers loop (the model's own forward pass and KV
   cache, greedy as the battery, up to its ``max_tokens``), in float32 and in bfloat16, on
   torch's default thread count and on one thread, before and after the battery (each
   answers for at most ``--budget`` seconds; the faster of its two runs counts). Seconds per
   answer. Target: the battery at least 3× faster per answer than the plain loop **on the
   same weights**: in the precision the embedded model runs in on this machine (bfloat16
   where the CPU multiplies it natively, else float32; ``local_precision``), on its faster
   thread count. The ratio to the float32 loop (transformers' default precision, the
   baseline of ``bench_local.py``) is printed beside it; on a bfloat16 machine that one
   also differs in precision, not only in method.
2. **Steady on a busy machine.** The battery again (empty cache) while another process
   that this script starts keeps one core busy (a Python busy loop), then stops; then once
   more without it. Target: no slower than 1.5× the mean of the two runs without it. The
   battery's per-answer time (above) is the faster of those two.

The machine's load average and core count are printed with every phase: on a machine shared
with other work the absolute numbers move with it, the ratios measured in one run much less.

Run: ``.venv/bin/python benchmarks/bench_prefill.py`` (under 3 minutes on a quiet 2-core
machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

RATIO_TARGET = 3.0
BUSY_TARGET = 1.5
SPEC = """
name: attack-sample-small
model: {backend: local}
data: {sample: 1}
attacks:
  - {level: char, rho: [0.1, 0.5, 1.0]}
  - {level: word, rho: [0.1, 0.5, 1.0]}
  - {level: visual, rho: [0.5], letters: 0.5}
consistency: {instructions: true, option_orders: 3}
rti: [replace]
seed: 0
"""


def load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"


def recording_backend():
    """The local backend, recording the requests it is asked and the seconds it spends."""
    from dbpa_core.backends.local import LocalBackend

    class Recording(LocalBackend):
        def __init__(self):
            super().__init__()
            self.asked, self.seconds, self.stats = [], 0.0, []

        def generate(self, requests, on_sample, **kw):
            self.asked.extend(requests)
            t = time.perf_counter()
            super().generate(requests, on_sample, **kw)
            self.seconds += time.perf_counter() - t
            self.stats.append(self.last_stats)

    b = Recording()
    b.prepare()
    return b


def run_ours(spec, backend, tmp: str, name: str) -> tuple[float, int, float]:
    """(seconds, answers, seconds in the backend) of the battery on an empty cache. The
    answers are those the battery reports: its model calls less the RTI answers it asked
    ahead and did not need (``usage.rti_ahead_unused``), so that asking ahead is no
    cheaper per answer than the time it saves."""
    from dbpa_core.attacks.battery import run_battery
    from dbpa_core.backends.decoding import clear_buffers, clear_prefix_stores
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler, model_key

    backend.asked, backend.seconds, backend.stats = [], 0.0, []
    clear_prefix_stores()  # no prompt kept from an earlier run: each battery starts afresh
    clear_buffers()  # nor a key/value cache (as in a new process)
    sampler = Sampler(Cache(Path(tmp) / name), backends={model_key(spec.model): backend})
    t = time.perf_counter()
    res = run_battery(spec, sampler=sampler)
    answers = res.usage["calls"] - res.usage.get("rti_ahead_unused", 0)
    return time.perf_counter() - t, answers, backend.seconds


def plain_loop(folder: str, requests, *, dtype: str, threads: int, budget: float = 60.0) -> tuple[float, int]:
    """(seconds per answer, answers) of a plain transformers loop, one prompt at a time;
    it stops after ``budget`` seconds (a stalled configuration is not waited for)."""
    import torch
    from transformers import AutoModelForCausalLM

    from dbpa_core.backends.local import chat_prompt_ids, load_tokenizer

    tok, _ = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    eos = {tok.eos_token_id}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            t = time.perf_counter()
            done = 0
            for r in requests:
                if done >= 2 and time.perf_counter() - t > budget:
                    break
                done += 1
                ids = torch.tensor([chat_prompt_ids(tok, r.prompt, r.system_prompt)])
                out = model(input_ids=ids, use_cache=True)
                for n in range(r.params.max_tokens):
                    nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)  # greedy, as asked
                    if int(nxt) in eos or n + 1 == r.params.max_tokens:
                        break
                    out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
            return (time.perf_counter() - t) / done, done
    finally:
        torch.set_num_threads(before)


class BusyCore:
    """Another process keeping one core busy (a Python busy loop) while the block runs."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--every",
        type=int,
        default=6,
        help="the plain loop answers every N-th prompt of the battery (default 6)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=8.0,
        help="seconds each plain configuration answers for, at most (default 8)",
    )
    args = ap.parse_args()
    import torch

    from dbpa_core.attacks.spec import parse_attack_spec

    print(load())
    spec = parse_attack_spec(SPEC)
    warm = parse_attack_spec(
        SPEC.replace("{sample: 1}", "{sample: 1}\nmax_tokens: 2").replace("rti: [replace]", "rti: false")
    )
    backend = recording_backend()
    plain: dict[tuple[str, int], float] = {}

    def plain_runs(subset, when: str) -> None:
        for dtype in ("float32", "bfloat16"):
            for threads in sorted({torch.get_num_threads(), 1}, reverse=True):
                s, n = plain_loop(backend.path, subset, dtype=dtype, threads=threads, budget=args.budget)
                plain[(dtype, threads)] = min(s, plain.get((dtype, threads), s))
                print(
                    f"plain transformers loop {when}, {dtype}, {threads} "
                    f"thread{'s' if threads > 1 else ''}: {s:.3f} s per answer ({n} of the "
                    f"battery's prompts); {load()}",
                    flush=True,
                )

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run_ours(warm, backend, tmp, "warm")
        print(f"warm-up battery (WordNet, spaCy, first calls): {time.perf_counter() - t:.1f} s")
        runs = []
        for i in range(2):
            quiet, calls, in_backend = run_ours(spec, backend, tmp, f"quiet{i}")
            runs.append(quiet)
            if i == 0:
                asked, stats = list(backend.asked), backend.stats
                subset = asked[:: args.every]
                plain_runs(subset, "before")
                packs = sum(s.packs for s in stats)
                on_workers = sum(s.packs_on_workers for s in stats)
                tokens = sum(s.prompt_tokens for s in stats)
                reused = sum(s.prompt_tokens_reused for s in stats)
            print(
                f"battery, {calls} answers ({len(asked)} calls; {tokens:,} prompt tokens, "
                f"{reused:,} of them from "
                f"shared prefixes, in {packs} packs, {on_workers} on worker threads): "
                f"{quiet:.1f} s, {quiet / calls:.3f} s per answer ({in_backend:.1f} s in the "
                f"backend); {load()}",
                flush=True,
            )
            if i == 0:
                with BusyCore():
                    busy, calls_busy, _ = run_ours(spec, backend, tmp, "busy")
                    busy_load = load()
                print(f"battery with a busy core: {busy:.1f} s; {busy_load}", flush=True)
                assert calls_busy == calls
        plain_runs(subset, "after")
    quiet = min(runs)
    per = quiet / calls

    def name(key):
        return f"{key[0]}, {key[1]} thread{'s' if key[1] > 1 else ''}"

    same = min((k for k in plain if k[0] == backend.precision), key=plain.get)
    fp32 = min((k for k in plain if k[0] == "float32"), key=plain.get)
    best = min(plain, key=plain.get)
    ratio = plain[same] / per
    ok_ratio = ratio >= RATIO_TARGET
    print(f"per answer: battery {per:.3f} s (the embedded model runs in {backend.precision} here)")
    print(
        f"  vs the plain loop on the same weights ({name(same)}): {plain[same]:.3f} s -> "
        f"{ratio:.1f}x faster (target >= {RATIO_TARGET:.0f}x: "
        f"{'met' if ok_ratio else 'MISSED'})"
    )
    if fp32 != same:
        print(
            f"  vs the plain loop in transformers' default precision ({name(fp32)}): "
            f"{plain[fp32]:.3f} s -> {plain[fp32] / per:.1f}x (a different precision: "
            "for reference, not the target)"
        )
    print(f"  the fastest plain loop: {name(best)}, {plain[best]:.3f} s -> {plain[best] / per:.1f}x")
    slow = busy / (sum(runs) / len(runs))
    ok_busy = slow <= BUSY_TARGET
    print(
        f"with another process keeping one core busy: {busy:.1f} s, {slow:.2f}x the mean of "
        f"the runs without it before and after ({' and '.join(f'{r:.1f}' for r in runs)} s; "
        f"target <= {BUSY_TARGET}x: {'met' if ok_busy else 'MISSED'})"
    )
    print(load())
    print("all targets met" if ok_ratio and ok_busy else "SOME TARGETS MISSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
