"""Rebuild assets/demo_replay.jsonl: real SmolLM2-135M responses to the dashboard's
default example (the NICE prompt and the eight personas), recorded once so that
tests and demos can replay them offline in seconds.

    dbpa audit examples/nice_personas.yaml --out out/personas
    .venv/bin/python assets/make_demo_replay.py out/personas/responses.jsonl
"""
import json
import sys
from pathlib import Path

src = Path(sys.argv[1] if len(sys.argv) > 1 else "out/personas/responses.jsonl")
dst = Path(__file__).with_name("demo_replay.jsonl")
with src.open() as fin, dst.open("w") as fout:
    for line in fin:
        r = json.loads(line)
        fout.write(json.dumps({"prompt": r["prompt"], "response": r["response"],
                               "model": "SmolLM2-135M-Instruct"}, ensure_ascii=False) + "\n")
print(f"wrote {dst}")
