"""Replay backend, text-similarity audits and the dbpa command line."""

import json

import pytest

from dbpa_core.audit import run_audit
from dbpa_core.backends import BackendError
from dbpa_core.backends.replay import ReplayBackend
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.runs import estimate
from dbpa_core.spec import load_spec

from .fake_openai import fake_text

BASE = "John has these features: age 70"
PROMPTS = {
    BASE: BASE,
    "ahmed": "Ahmed has these features: age 70",
    "comedian": "Act as a comedian. John has these features: age 70",
}


def write_recording(path, n=12, extra=None):
    with open(path, "w") as fh:
        for p in PROMPTS.values():
            for i in range(n):
                fh.write(json.dumps({"prompt": p, "response": fake_text(p, i), "model": "m"}) + "\n")
        for line in extra or []:
            fh.write(line + "\n")


def write_spec(tmp_path, samples=8, embedder="rouge1", extra=""):
    rec = tmp_path / "rec.jsonl"
    if not rec.exists():
        write_recording(rec)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
model: {{backend: replay, file: rec.jsonl}}
embedder: {{backend: {embedder}}}
samples: {samples}
permutations: 999
seed: 1
{extra}
base: {{prompt: "{BASE}"}}
perturbations:
  - {{name: name-change, prompt: "{PROMPTS["ahmed"]}", role: control}}
  - {{name: comedian, prompt: "{PROMPTS["comedian"]}", role: target}}
""")
    return spec


def test_replay_draws_distinct_records(tmp_path):
    write_recording(tmp_path / "r.jsonl", n=10)
    res = run_audit(load_spec(write_spec(tmp_path, samples=10)), cache=Cache(tmp_path / "c"))
    assert len(set(res.base.texts)) == len(res.base.texts) == 10
    assert set(res.base.texts) == {fake_text(BASE, i) for i in range(12)} & set(res.base.texts)


def test_replay_refuses_to_reuse(tmp_path):
    spec = load_spec(write_spec(tmp_path, samples=13))
    with pytest.raises(BackendError, match=r"has 12 recorded responses .* but 13 samples"):
        run_audit(spec, cache=Cache(tmp_path / "c"))


def test_replay_file_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\nnot json\n')
    with pytest.raises(BackendError, match=r"line 2: not valid JSON"):
        ReplayBackend(bad)
    bad.write_text('{"prompt": "a"}\n')
    with pytest.raises(BackendError, match=r"line 1: each line needs string fields"):
        ReplayBackend(bad)


def test_text_similarity_audit_finds_the_comedian(tmp_path):
    res = run_audit(load_spec(write_spec(tmp_path)), cache=Cache(tmp_path / "c"))
    by = {p.name: p for p in res.perturbations}
    assert by["comedian"].p_value < 0.01 and by["comedian"].stars
    assert by["name-change"].p_value > 0.01
    assert res.roc is not None and res.roc.auc == 1.0


def test_cli_audit_writes_results(tmp_path, capsys):
    spec = write_spec(tmp_path)
    out = tmp_path / "out"
    rc = main(["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "comedian" in printed and "wrote" in printed
    data = json.loads((out / "results.json").read_text())
    assert [p["name"] for p in data["perturbations"]] == ["name-change", "comedian"]
    for p in data["perturbations"]:
        assert {"name", "role", "effect_size", "p_value", "p_adjusted", "significant"} <= set(p)
    assert "roc" in data and data["roc"]["auc"] == 1.0
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith(
        "name,role,model,effect_size,chance_effect_size,effect_above_chance,p_value,p_adjusted"
    )
    assert len(csv_lines) == 3
    rows = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 8 and {r["arm"] for r in rows} == {"base", "name-change", "comedian"}


def test_cli_fail_on_control(tmp_path, capsys):
    # make the control perturbation a real change: it then fails the CI gate
    rec = tmp_path / "rec.jsonl"
    write_recording(rec)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
model: {{backend: replay, file: rec.jsonl}}
embedder: {{backend: rouge1}}
samples: 8
permutations: 999
base: {{prompt: "{BASE}"}}
perturbations:
  - {{name: sneaky, prompt: "{PROMPTS["comedian"]}", role: control}}
""")
    rc = main(
        [
            "--cache-dir",
            str(tmp_path / "c"),
            "audit",
            str(spec),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--fail-on-control",
        ]
    )
    assert rc == 1
    assert "FAIL: control perturbation(s) changed the answers detectably: sneaky" in capsys.readouterr().err


def test_cli_spec_error_exit_code(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("samples: 1\nbase: {prompt: hi}\nperturbations: [{name: a, prompt: b}]\n")
    assert main(["audit", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "line 1: samples must be >= 2" in err and "Traceback" not in err


def test_cli_estimate_calls_nothing(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("""
model: {backend: openai, name: gpt-4o-mini, base_url: "http://127.0.0.1:9/v1", api_key_env: DBPA_NOPE_KEY}
samples: 20
max_tokens: 300
base: {prompt: "0123456789012345678901234567890123456789"}
perturbations: [{name: a, prompt: b}]
prices: {gpt-4o-mini: {input: 1.0, output: 2.0}}
""")
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "total: 40 calls" in out and "<= 12000 output tokens" in out
    est = estimate(load_spec(spec))
    assert est["totals"]["calls"] == 40
    # base: 20 calls x (10 + 0 + 8) tokens; 'a': 20 x (1 + 8); output 40 x 300 at $2 / 1M
    assert est["totals"]["input_tokens"] == 20 * 18 + 20 * 9
    assert est["totals"]["cost"] == pytest.approx((540 * 1.0 + 12000 * 2.0) / 1e6)


def test_estimate_counts_cached_samples(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    cache = Cache(tmp_path / "c")
    assert estimate(spec, cache=cache)["totals"]["calls"] == 24
    run_audit(spec, cache=cache)
    t = estimate(spec, cache=cache)["totals"]
    assert t["calls"] == 0 and t["cached"] == 24


def test_cli_cache_info_and_clear(tmp_path, capsys):
    spec = write_spec(tmp_path)
    main(["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"])
    capsys.readouterr()
    main(["--cache-dir", str(tmp_path / "c"), "cache", "info"])
    assert "items: 24" in capsys.readouterr().out
    main(["--cache-dir", str(tmp_path / "c"), "cache", "clear"])
    assert "removed 24" in capsys.readouterr().out
