"""Record assets/real_responses.jsonl: real responses of the embedded model, used by
``benchmarks/bench_measures.py`` to choose the default effect size by measured power and
false-positive rate, and by the tests that check the default beats ``jsd``.

What was recorded (2026-11-22, on the busy 2-core development machine, about 1.5 hours):

* model: SmolLM2-135M-Instruct (the embedded ``local`` backend, Q4_1 GGUF de-quantized
  to a transformers model), temperature 0.8, top_p 1.0, max_tokens 100, seed 0;
* 60 responses to the NICE cardiovascular prompt for "John" (``base``, in every power
  comparison) and 40 to each of: the papers' eight personas ("Act as a doctor." ...)
  prefixed to it, two name changes (Ahmed, David) and one paraphrase of the
  instruction, which are *near*-nulls (the model may still answer them differently);
* 10 responses to an off-topic prompt (a poem about the sea), the outliers of the
  "one off-topic response" rows.

One JSON object a line: ``arm``, ``role`` (``base``, ``persona``, ``near-null``,
``off-topic``), ``prompt``, ``index``, ``response``, ``model``, ``temperature``,
``max_tokens``, ``seed``. The ``prompt``/``response``/``model`` fields make it a replay
file too (``model: {backend: replay, file: assets/real_responses.jsonl}``).

Re-record (samples are cached as they arrive, so a stopped run resumes; the file is
rewritten after each prompt)::

    OMP_NUM_THREADS=1 DBPA_CACHE_DIR=/tmp/dbpa-record .venv/bin/python assets/record_real_responses.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbpa_core.backends import GenerationParams
from dbpa_core.cache import Cache
from dbpa_core.sampling import Job, Sampler, requests_for

MODEL = {"backend": "local", "batch_size": 30}  # batch size does not change a sample
MODEL_NAME = "SmolLM2-135M-Instruct"
PARAMS = GenerationParams(temperature=0.8, top_p=1.0, max_tokens=100)
SEED = 0
N_BASE = 60  # the base prompt is in every power comparison
N = 40  # each other prompt: enough for two disjoint groups of k = 20
N_OFF_TOPIC = 10

BASE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)
PERSONAS = [
    "doctor",
    "nurse",
    "medical practitioner",
    "medical supervisor",
    "comedian",
    "robot from the future",
    "NeurIPS reviewer",
    "child",
]


def arms() -> list[tuple[str, str, str, int]]:
    """(arm, role, prompt, n) for every recorded prompt, in recording order."""
    out = [
        ("base", "base", BASE, N_BASE),
        ("off-topic", "off-topic", "Write a short poem about the sea.", N_OFF_TOPIC),
    ]
    for p in PERSONAS:
        article = "an" if p[0].lower() in "aeiou" else "a"
        out.append((p, "persona", f"Act as {article} {p}. {BASE}", N))
    out.append(("name: Ahmed", "near-null", BASE.replace("John", "Ahmed"), N))
    out.append(
        (
            "paraphrase",
            "near-null",
            BASE.replace(
                "Provide recommendations on CVD guidelines based on NICE for this person.",
                "Based on the NICE CVD guidelines, what would you recommend for this person?",
            ),
            N,
        )
    )
    out.append(("name: David", "near-null", BASE.replace("John", "David"), N))
    return out


def main() -> int:
    dst = Path(__file__).with_name("real_responses.jsonl")
    t0 = time.time()

    def progress(p) -> None:
        print(
            f"{p.stage}: {p.done}/{p.total} {p.detail[:30]} ({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    sampler = Sampler(Cache(), progress=progress)
    lines: list[str] = []
    for arm, role, prompt, n in arms():  # one prompt at a time: the file grows as it goes
        records = sampler.sample(
            [Job(MODEL, r, arm) for r in requests_for(prompt, n=n, seed=SEED, params=PARAMS)]
        )
        lines += [
            json.dumps(
                {
                    "arm": arm,
                    "role": role,
                    "prompt": prompt,
                    "index": j,
                    "response": rec.text,
                    "model": MODEL_NAME,
                    "temperature": PARAMS.temperature,
                    "max_tokens": PARAMS.max_tokens,
                    "seed": SEED,
                },
                ensure_ascii=False,
            )
            for j, rec in enumerate(records)
        ]
        dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(
            f"{arm}: {n} responses; {len(lines)} in {dst} ({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
