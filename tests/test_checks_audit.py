"""Answer checks in audits: `dbpa audit` on a replay model with checks (and a judge over
HTTP), a model comparison, and a run recorded in the history."""

import csv
import json

import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.history import History
from dbpa_core.runs import estimate
from dbpa_core.spec import load_spec

from .judge_model import KEY, KEY_ENV, JudgeServer, judge_check_yaml
from .test_replay_cli import BASE, PROMPTS, write_recording, write_spec

CHECKS = """checks:
  - {name: mentions statins, contains: [statin]}
  - {name: jokes, regex: "\\\\b(joke|pun|clown)s?\\\\b"}
  - {name: refuses, refusal: true}
  - {name: length, words: true}
"""


@pytest.fixture
def judge(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with JudgeServer() as srv:
        yield srv


def test_cli_audit_with_checks(tmp_path, capsys, judge):
    spec = write_spec(tmp_path, extra=CHECKS + judge_check_yaml(judge, "  "))
    out = tmp_path / "out"
    rc = main(["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Answer checks" in printed and "recommends a statin (model-graded)" in printed
    assert "only as good as the judge" in printed
    data = json.loads((out / "results.json").read_text())
    rows = data["checks"]
    assert len(rows) == 5 * 2
    assert {(r["check"], r["perturbation"]) for r in rows} == {
        (c, p)
        for c in ("mentions statins", "jokes", "refuses", "length", "recommends a statin")
        for p in ("name-change", "comedian")
    }
    for r in rows:
        assert {
            "check",
            "perturbation",
            "model",
            "base",
            "value",
            "difference",
            "ci",
            "p_value",
            "p_adjusted",
            "significant",
            "model_graded",
            "text",
        } <= set(r)
        assert r["significant"] == (r["p_adjusted"] <= data["spec"]["alpha"])
        assert r["model_graded"] == (r["check"] == "recommends a statin")

    # the rates, counted again from responses.jsonl
    answers = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    by_arm: dict[str, list[str]] = {}
    for a in answers:
        by_arm.setdefault(a["arm"], []).append(a["response"])
    by = {(r["check"], r["perturbation"]): r for r in rows}
    for arm in ("name-change", "comedian"):
        r = by[("mentions statins", arm)]
        assert r["base_count"] == sum("statin" in t for t in by_arm["base"])
        assert r["count"] == sum("statin" in t for t in by_arm[arm])
        assert r["n"] == r["base_n"] == 8
        j = by[("recommends a statin", arm)]  # the judge says yes to "statin" answers
        assert (j["base_count"], j["count"]) == (r["base_count"], r["count"])
        length = by[("length", arm)]
        assert length["value"] == pytest.approx(sum(len(t.split()) for t in by_arm[arm]) / 8)
    jokes = by[("jokes", "comedian")]
    assert jokes["base_count"] == 0 and jokes["count"] >= 5 and jokes["significant"]
    assert not any(r["significant"] for r in rows if r["perturbation"] == "name-change")
    asked = judge.requests
    assert asked == len(set(by_arm["base"] + by_arm["name-change"] + by_arm["comedian"]))

    with open(out / "checks.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 10 and table[0]["check"] == "mentions statins"
    assert {"ci_low", "ci_high", "p_adjusted", "model_graded", "text"} <= set(table[0])

    # run again: every answer and every judge reply comes from the cache
    assert (
        main(
            [
                "--cache-dir",
                str(tmp_path / "c"),
                "audit",
                str(spec),
                "--out",
                str(tmp_path / "again"),
                "--quiet",
            ]
        )
        == 0
    )
    assert judge.requests == asked
    again = json.loads((tmp_path / "again" / "results.json").read_text())["checks"]
    assert again == rows

    # the recorded run keeps the checks of its spec
    run = History().get(1)
    (audit,) = run.audits.values()
    assert [c.name for c in audit.spec.checks] == [r["check"] for r in rows[::2]]


def test_audit_without_checks_writes_no_checks_csv(tmp_path):
    spec = write_spec(tmp_path)
    res = run_audit(load_spec(spec), cache=Cache(tmp_path / "c"))
    assert res.checks == () and res.to_dict()["checks"] == []
    paths = res.write(tmp_path / "o")
    assert not any(p.endswith("checks.csv") for p in paths)


def test_models_against_the_reference(tmp_path):
    write_recording(tmp_path / "a.jsonl")
    with open(tmp_path / "b.jsonl", "w") as fh:  # model b answers like the comedian
        for i in range(12):
            fh.write(
                json.dumps(
                    {"prompt": BASE, "response": json.dumps({"said": f"{PROMPTS['comedian']} joke {i}"})}
                )
                + "\n"
            )
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""
models:
  - {{backend: replay, file: a.jsonl, label: ref}}
  - {{backend: replay, file: b.jsonl, label: funny}}
embedder: {{backend: rouge1}}
samples: 8
permutations: 999
base: {{prompt: "{BASE}"}}
checks:
  - {{name: valid JSON, json: true}}
  - {{name: jokes, contains: [joke]}}
""")
    res = run_audit(load_spec(spec), cache=Cache(tmp_path / "c"))
    by = {r.check: r for r in res.checks}
    assert {r.perturbation for r in res.checks} == {"funny"}
    assert {r.model for r in res.checks} == {"funny"}
    assert (by["valid JSON"].base_count, by["valid JSON"].count) == (0, 8)
    assert (by["jokes"].base_count, by["jokes"].count) == (0, 8)
    assert by["valid JSON"].significant and by["valid JSON"].difference == 1.0


def test_estimate_counts_the_judges_calls(tmp_path, judge):
    spec = load_spec(
        write_spec(
            tmp_path,
            extra=CHECKS + judge_check_yaml(judge, "  ") + "prices: {judge: {input: 1.0, output: 2.0}}\n",
        )
    )
    cache = Cache(tmp_path / "c")
    est = estimate(spec, cache=cache)
    (row,) = [r for r in est["arms"] if r["arm"] == "judge: recommends a statin"]
    # nothing sampled yet: one call per answer (3 arms x 8), each answer at most max_tokens
    assert (row["calls"], row["cached"], row["output_tokens"]) == (24, 0, 24 * 16)
    assert row["model"] == "judge" and row["cost"] > 0
    assert est["totals"]["calls"] == 24 + 24
    run_audit(spec, cache=cache)
    distinct = judge.requests
    est = estimate(spec, cache=cache)
    (row,) = [r for r in est["arms"] if r["arm"] == "judge: recommends a statin"]
    assert (row["calls"], row["cached"], row["cost"]) == (0, distinct, 0.0)
    assert est["totals"]["calls"] == 0


def test_example_spec_on_recorded_answers():
    """examples/replay_checks.yaml: the checks on the recorded SmolLM2 answers, recounted."""
    import re
    from pathlib import Path

    from dbpa_core.audit import build_arms
    from dbpa_core.checks import Group, check_audit

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "examples" / "replay_checks.yaml")
    assert [c.kind for c in spec.checks] == ["contains", "regex", "contains", "refusal", "words"]
    rows = [json.loads(x) for x in (root / "assets" / "demo_replay.jsonl").read_text().splitlines()]
    arms = build_arms(spec)
    # a replay model serves an arm the recorded answers from its first sample on (the base
    # prompt has more recorded, for a same-prompt control)
    answers = {
        a.name: [r["response"] for r in rows if r["prompt"] == a.prompt][
            a.first_sample : a.first_sample + spec.samples
        ]
        for a in arms
    }
    assert all(len(v) == spec.samples for v in answers.values())
    res = check_audit(
        spec.checks,
        [Group(a.name, answers[a.name]) for a in arms],
        correction=spec.correction,
        alpha=spec.alpha,
    )
    nice = {r.perturbation: r for r in res if r.check == "cites NICE"}
    for arm in ("doctor", "comedian", "child"):
        assert nice[arm].count == sum(bool(re.search(r"\bNICE\b", t)) for t in answers[arm])
        assert nice[arm].base_count == sum(bool(re.search(r"\bNICE\b", t)) for t in answers["base"])
    assert nice["child"].significant and nice["child"].difference < -0.3
    assert not any(r.significant for r in res if r.check == "refuses")
