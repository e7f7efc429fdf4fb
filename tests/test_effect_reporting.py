"""Issue 8 in the results and before a run: effect above chance, the minimum effect
of interest, the null variant, and warnings about what a plan cannot show."""

import json
import textwrap

import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.spec import load_spec, parse_spec, spec_notes, spec_warnings

from .test_replay_cli import BASE, PROMPTS, write_spec

SPEC = textwrap.dedent("""\
    model: {backend: local}
    samples: 20
    permutations: 2000
    base: {prompt: "John is 70."}
    perturbations:
      - {name: comedian, prefix: "Act as a comedian."}
      - {name: same, prompt: "John  is 70."}
""")


def test_spec_keys_for_null_and_min_effect():
    s = parse_spec(SPEC + "null: pooled\nmin_effect: 0.02\n")
    assert s.null == "pooled" and s.min_effect == 0.02
    d = s.to_dict()
    assert d["null"] == "pooled" and d["min_effect"] == 0.02


def test_spec_check_warns_about_a_copy_of_the_base():
    w = spec_warnings(parse_spec(SPEC))
    assert any("'same' has the same prompt as the base" in x for x in w)
    # a different system prompt makes it a real perturbation
    other = SPEC.replace('prompt: "John  is 70."}', 'prompt: "John is 70.", system_prompt: "Be brief."}')
    assert not any("same prompt" in x for x in spec_warnings(parse_spec(other)))


def test_spec_check_warns_when_nothing_can_be_significant():
    w = spec_warnings(parse_spec(SPEC.replace("samples: 20", "samples: 2")))
    assert any("no result can be significant" in x and "k = 2" in x for x in w)
    w = spec_warnings(parse_spec(SPEC.replace("permutations: 2000", "permutations: 30")))
    assert any("no result can be significant" in x and "permutations" in x for x in w)
    # 2000 permutations and Holm over 3 tests: *** needs p < .001 / 3
    three = SPEC + '  - {name: child, prefix: "Act as a child."}\n'
    notes = spec_notes(parse_spec(three))
    assert any("at most '**'" in x and "3000 permutations" in x for x in notes)
    assert not any("**" in w for w in spec_warnings(parse_spec(three)))  # a note, not a warning
    ok = three.replace("permutations: 2000", "permutations: 3000").replace(
        'prompt: "John  is 70."', 'prompt: "Ahmed is 70."'
    )
    assert spec_warnings(parse_spec(ok)) == [] and spec_notes(parse_spec(ok)) == []


def test_audit_results_carry_effect_above_chance_and_min_effect(tmp_path):
    spec = load_spec(write_spec(tmp_path, extra="min_effect: 0.01\nnull: pooled"))
    res = run_audit(spec, cache=Cache(tmp_path / "c"))
    by = {p.name: p for p in res.perturbations}
    com = by["comedian"]
    assert com.detectable == com.significant
    assert com.exceeds_min_effect == (com.effect_above_chance > 0.01)
    assert com.test.null == "pooled"
    d = json.loads(res.to_json())
    row = d["perturbations"][1]
    assert row["min_effect"] == 0.01 and row["exceeds_min_effect"] == com.exceeds_min_effect
    assert row["effect_above_chance"] == pytest.approx(com.effect_above_chance)
    assert row["measure"] == "energy-l2" and row["null"] == "pooled"
    assert d["attainable"]["reachable"] is True
    assert "exceeds_min_effect" in res.to_csv().splitlines()[0]
    # without a minimum effect, nothing claims to exceed it
    res = run_audit(
        load_spec(write_spec(tmp_path / "b" if (tmp_path / "b").mkdir() is None else tmp_path)),
        cache=Cache(tmp_path / "c2"),
    )
    assert all(p.exceeds_min_effect is None for p in res.perturbations)


def test_cli_table_shows_chance_and_above(tmp_path, capsys):
    spec = write_spec(tmp_path, extra="min_effect: 0.01")
    rc = main(
        ["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"]
    )
    assert rc == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    header = out.splitlines()[0].split()
    assert header[:7] == ["name", "role", "omega", "chance", "above", "p", "p_adj"]
    assert header[-1] == "0.01" and "above = omega - chance" in out
    comedian = next(line for line in out.splitlines() if line.startswith("comedian"))
    assert comedian.rstrip().endswith(("yes", "no"))
    # 999 permutations and Holm over 2 tests: '***' is out of reach, said as a note
    assert "note: With k = 8 responses per prompt, B = 999 permutations and holm over 2 tests" in err
    assert "warning:" not in err


def test_cli_warns_before_any_call(tmp_path, capsys):
    rec = tmp_path / "rec.jsonl"
    spec = write_spec(tmp_path, samples=2)
    rec_text = rec.read_text()
    rc = main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: With k = 2 responses per prompt" in err and "no result can be significant" in err
    rc = main(
        ["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"]
    )
    err = capsys.readouterr().err
    assert rc == 0 and err.count("no result can be significant") == 1  # said once
    assert err.count("warning: ") == 1
    assert rec.read_text() == rec_text
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert any("no result can be significant" in w for w in data["warnings"])
    assert data["attainable"]["reachable"] is False


def test_cli_warns_about_a_copy_of_the_base(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    write_spec(tmp_path)
    spec.write_text(f"""
model: {{backend: replay, file: rec.jsonl}}
embedder: {{backend: rouge1}}
samples: 8
permutations: 4999
base: {{prompt: "{BASE}"}}
perturbations:
  - {{name: again, prompt: "{PROMPTS[BASE]}"}}
""")
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec)]) == 0
    assert "Perturbation 'again' has the same prompt as the base" in capsys.readouterr().err


def test_html_report_has_above_chance_and_min_effect(tmp_path):
    from ui.export import html_report

    res = run_audit(load_spec(write_spec(tmp_path, extra="min_effect: 0.01")), cache=Cache(tmp_path / "c"))
    page = html_report("r", [res], {})
    assert "<th>ω above chance</th>" in page and "<th>chance ω</th>" in page
    assert "<th>&gt; δ = 0.01</th>" in page
    p = res.perturbations[1]
    assert f"<td>{p.effect_above_chance:+.3f}</td>" in page  # as on every chart and table


def test_memory_estimate_and_warning():
    from dbpa_core.permutation import MAX_BATCH_BYTES, memory_estimate

    small = memory_estimate(20, 20, n_permutations=2000)
    assert 8 * 40 * 40 * 2 + 8 * 2000 <= small < 2**20
    big = memory_estimate(10_000, 10_000, n_permutations=10_000_000)
    assert big >= 8 * 20_000**2 * 2 + 8 * 10_000_000 and big < 8 * 20_000**2 * 2 + 9e7 + MAX_BATCH_BYTES
    # a spec this large is refused by the spec check itself (tests/test_spec_holes.py)
    assert not any("GiB" in w for w in spec_warnings(parse_spec(SPEC)))
