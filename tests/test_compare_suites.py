"""``dbpa history compare A B`` of two suites of cases (pooled and per-case verdicts;
``--fail-on-change`` on a pooled verdict) and of two robustness batteries (ER and ASR per
attack; a verdict only against ``--max-asr``), with the pure functions of
:mod:`dbpa_core.compare`."""

import json

import pytest

from dbpa_core.cli import main
from dbpa_core.compare import compare_suites
from dbpa_core.history import History

from .fake_openai import FakeOpenAI
from .rule_model import RuleModel
from .test_attacks_battery import VOCAB, data, spec_text  # noqa: F401 - `data` is a fixture
from .test_suite import suite_yaml, write_cases


def pooled(name, significant, role="target", p=0.01):
    return {
        "perturbation": name,
        "role": role,
        "significant": significant,
        "p_adjusted": p,
        "mean_effect_above_chance": 0.1,
        "stars": "*" if significant else "",
    }


def row(case, name, significant):
    return {
        "case": case,
        "perturbation": name,
        "role": "target",
        "significant": significant,
        "p_adjusted": 0.01,
        "effect_above_chance": 0.1,
    }


def test_compare_suites_by_hand():
    a = {
        "cases": 3,
        "spec": {"samples": 6},
        "pooled": [pooled("x", True), pooled("y", False)],
        "tests": [row("c1", "x", True), row("c2", "x", True), row("c1", "y", False), row("c3", "x", False)],
    }
    b = {
        "cases": 3,
        "spec": {"samples": 8},
        "pooled": [pooled("x", False), pooled("z", True)],
        "tests": [row("c1", "x", False), row("c2", "x", True), row("c1", "y", True), row("c4", "x", True)],
    }
    cmp = compare_suites(a, b)
    assert [(r.perturbation, r.status) for r in cmp.pooled] == [
        ("x", "no longer significant"),
        ("y", "only in A"),
        ("z", "only in B"),
    ]
    assert [r.perturbation for r in cmp.changed] == ["x"]  # only pooled verdicts count
    assert [(r.case, r.perturbation, r.status) for r in cmp.flipped] == [
        ("c1", "x", "no longer significant"),
        ("c1", "y", "now significant"),
    ]
    assert cmp.settings_changed == {"samples": (6, 8)}
    d = cmp.to_dict()
    assert d["verdicts_changed"] == 1 and d["tests_flipped"] == 2 and d["tests_in_both"] == 3
    assert compare_suites(a, a).changed == () and compare_suites(a, a).flipped == ()


def suite_run(tmp_path, srv, capsys, prefix="Act as a comedian."):
    (tmp_path / "s.yaml").write_text(suite_yaml(srv.base_url).replace("Act as a comedian.", prefix))
    assert (
        main(
            [
                "--cache-dir",
                str(tmp_path / "cache"),
                "audit",
                str(tmp_path / "s.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    return History().list()[0].id


def test_cli_compare_suites_and_fail_on_change(tmp_path, capsys):
    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        a = suite_run(tmp_path, srv, capsys)
        same = suite_run(tmp_path, srv, capsys)
        # the "comedian" perturbation no longer asks for jokes: its verdicts change
        b = suite_run(tmp_path, srv, capsys, prefix="Act as a doctor.")
    h = History()
    assert [d["significant"] for d in h.suite(a)["pooled"]] != [
        d["significant"] for d in h.suite(b)["pooled"]
    ]  # the data really differ

    assert main(["history", "compare", str(a), str(same), "--fail-on-change"]) == 0
    out = capsys.readouterr().out
    assert "0 of 2 pooled verdicts changed; 0 of 6 case x perturbation tests" in out

    assert main(["history", "compare", str(a), str(b)]) == 0  # no gate asked: exit 0
    out = capsys.readouterr().out
    assert "pooled over the cases" in out and "NO LONGER SIGNIFICANT" in out
    assert "1 of 2 pooled verdicts changed" in out
    flipped = sum(
        1
        for t in h.suite(a)["tests"]
        for u in h.suite(b)["tests"]
        if (t["case"], t["perturbation"]) == (u["case"], u["perturbation"])
        and t["significant"] != u["significant"]
    )
    assert flipped > 0 and f"{flipped} of 6 case x perturbation tests changed verdict:" in out

    assert main(["history", "compare", str(a), str(b), "--fail-on-change"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("FAIL: 1 pooled verdict(s) changed from run") and "comedian" in err

    assert main(["history", "compare", str(a), str(b), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "suite" and d["verdicts_changed"] == 1 and d["tests_flipped"] == flipped
    assert {r["perturbation"]: r["status"] for r in d["pooled"]}["comedian"] == "no longer significant"


def battery_run(tmp_path, data, capsys, vocabulary, name):  # noqa: F811
    with RuleModel(vocabulary) as srv:
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(
            spec_text(srv, data, "attacks: [{level: char, rho: [0.2, 1.0]}]", extra=f"name: {name}")
        )
        assert (
            main(
                [
                    "--cache-dir",
                    str(tmp_path / name),
                    "attack",
                    str(spec),
                    "--out",
                    str(tmp_path / f"o-{name}"),
                    "--quiet",
                ]
            )
            == 0
        )
    capsys.readouterr()
    return History().list()[0].id


def test_cli_compare_batteries(tmp_path, data, capsys):  # noqa: F811
    a = battery_run(tmp_path, data, capsys, VOCAB, "before")
    # the upgraded model knows fewer words: more attacked prompts change its answer
    b = battery_run(tmp_path, data, capsys, VOCAB - {"the", "to", "and"}, "after")
    _, ra = History().result(a)
    _, rb = History().result(b)
    asr = {
        (r.attack, r.rho): (r.asr.value, s.asr.value)
        for r, s in zip(ra["battery"].attacks(), rb["battery"].attacks(), strict=True)
    }
    assert any(x != y for x, y in asr.values())

    assert main(["history", "compare", str(a), str(b), "--fail-on-change"]) == 0  # no verdict
    out = capsys.readouterr().out
    assert "ASR change" in out and "give --max-asr X" in out
    assert main(["history", "compare", str(a), str(b), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    got = {(r["attack"], r["rho"]): (r["asr_a"], r["asr_b"]) for r in d["rows"]}
    assert got == {k: pytest.approx(v) for k, v in asr.items()}
    # a threshold between the two rates of some attack: that attack changed verdict
    key, (lo, hi) = next((k, sorted(v)) for k, v in asr.items() if v[0] != v[1])
    cut = (lo + hi) / 2
    assert main(["history", "compare", str(a), str(b), "--fail-on-change", "--max-asr", f"{cut}"]) == 1
    captured = capsys.readouterr()
    assert f"crossed the maximum ASR {cut:g}" in captured.err and key[0] in captured.err
    assert "NOW " in captured.out
    assert main(["history", "compare", str(a), str(a), "--fail-on-change", "--max-asr", f"{cut}"]) == 0


def test_compare_refuses_mixed_kinds_in_one_line(tmp_path, data, capsys):  # noqa: F811
    write_cases(tmp_path, 2)
    a = battery_run(tmp_path, data, capsys, VOCAB, "bat")
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        b = suite_run(tmp_path, srv, capsys)
    assert main(["history", "compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert (
        "robustness battery" in err and "suite of cases" in err and "\n" == err[-1] and err.count("\n") == 1
    )
    assert main(["history", "compare", str(a), str(a), "--max-asr", "3"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err
