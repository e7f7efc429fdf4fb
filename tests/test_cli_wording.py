"""The command line reads like the dashboard: one p formatter from the library (never
'0.0009995'), 'detectably' with the size in words, and `dbpa history` naming each kind of
run with a one-line summary instead of empty models and zero tests."""

import dataclasses
import json

import numpy as np

from dbpa_core import cli, fmt
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import audit as audit_cli
from dbpa_core.cli import history as history_cli
from dbpa_core.history import History
from dbpa_core.spec import load_spec

from .test_replay_cli import write_spec


def test_one_p_formatter_for_the_library_the_cli_and_the_dashboard():
    from ui import figures

    assert figures.fmt_p is fmt.fmt_p and history_cli.fmt_p is fmt.fmt_p
    assert audit_cli.fmt_p is fmt.fmt_p and not hasattr(audit_cli, "_fmt_p")
    assert fmt.fmt_p(0.0009995) == "< 0.001" and fmt.fmt_p(0.04996) == "< 0.05"
    assert fmt.fmt_p(5e-5) == "< 0.0001" and fmt.fmt_p(float("nan")) == "–"
    assert fmt.fmt_p(0.0123) == "0.0123" and fmt.fmt_p(0.001) == "0.0010"


def test_the_size_words_live_in_the_library():
    from ui import verdicts, widgets

    assert verdicts.size_d is fmt.size_d and verdicts.size_word is fmt.size_word
    assert widgets.size_cell is fmt.size_cell
    assert [fmt.size_word(d) for d in (0.1, 0.2, 0.5, 0.8, None)] == [
        "very small",
        "small",
        "moderate",
        "large",
        "",
    ]


def _audit(tmp_path):
    return run_audit(load_spec(write_spec(tmp_path)), cache=Cache(tmp_path / "c"))


def _near_threshold(result):
    """The result with one p just below 0.001 (the old fallback printed '0.0009995')."""
    p = dataclasses.replace(result.perturbations[0], p_value=0.0009995, p_adjusted=0.0009995)
    return dataclasses.replace(result, perturbations=(p, *result.perturbations[1:]))


def test_audit_table_says_detectable_with_a_size_and_p_once(tmp_path, capsys):
    rc = cli.main(
        [
            "--cache-dir",
            str(tmp_path / "c"),
            "audit",
            str(write_spec(tmp_path)),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--no-history",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0 and "significan" not in out + err
    header = out.splitlines()[0].split()
    assert header[-2:] == ["verdict", "size"]
    rows = {line.split()[0]: line for line in out.splitlines()[2:4]}
    # the recorded comedian answers are far from the base ones; the name change is noise
    assert "detectable" in rows["comedian"] and "large (" in rows["comedian"]
    assert "not shown" in rows["name-change"] and "(" in rows["name-change"]
    assert "small" not in rows["name-change"]  # no word for a size that is not established
    assert "Cohen's d of the similarities" in out and "small from 0.2" in out

    table = audit_cli.results_table(_near_threshold(_audit(tmp_path)))
    assert "0.0009995" not in table and "< 0.001" in table


def test_history_show_uses_the_same_p_and_words(tmp_path, capsys):
    h = History(tmp_path / "h.sqlite3")
    result = _audit(tmp_path)
    run_id = h.record({"m": result}, source="cli")
    text = history_cli.show_run(h, type("A", (), {"id": run_id, "json": False})())
    assert "significantly" not in text and "significant " not in text
    assert "size (d)" in text and "Cohen's d" in text
    assert "detectable" in text or "not shown" in text
    near = history_cli._result_table(_near_threshold(result))
    assert "0.0009995" not in near and "< 0.001" in near


def _args(**kw):
    base = {
        "model": None,
        "prompt": None,
        "since": None,
        "until": None,
        "source": None,
        "limit": None,
        "json": False,
    }
    return type("A", (), {**base, **kw})()


def test_history_lists_every_kind_with_a_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "home"))
    h = History()
    audit_id = h.record({"m": _audit(tmp_path)}, source="cli", title="an audit")
    battery = h.record_result(
        "battery",
        {"x": np.arange(3)},
        title="tf battery",
        models=["SmolLM2 (embedded)"],
        page="robustness",
        headline="30 items, clean error rate 0.20, 6 attack settings",
        settings={"signature": "s", "samples": 5, "name": "tf"},
    )
    sens = h.record_result(
        "sensitivity",
        {},
        title="a study",
        models=["m1", "m2"],
        headline="6 comparisons in 2 studies",
        page="sensitivity",
    )

    assert cli.main(["history"]) == 0
    listing = capsys.readouterr().out
    header = listing.splitlines()[0].split()
    assert "kind" in header and "result" in header
    line = {int(x.split()[0]): x for x in listing.splitlines()[2:] if x[:1].isdigit() and "run(s)" not in x}
    assert " battery " in line[battery] and "SmolLM2 (embedded)" in line[battery]
    assert "30 items, clean error rate 0.20" in line[battery]
    assert " sensitivity " in line[sens] and "m1, m2" in line[sens]
    assert " audit " in line[audit_id] and "of 2 detectable" in line[audit_id]

    assert cli.main(["history", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[battery]["kind"] == "battery" and rows[battery]["models"] == ["SmolLM2 (embedded)"]
    assert rows[battery]["tests"] is None and rows[audit_id]["tests"] == 2
    assert rows[sens]["headline"] == "6 comparisons in 2 studies"

    assert cli.main(["history", "show", str(battery)]) == 0
    shown = capsys.readouterr().out
    assert "robustness battery of SmolLM2 (embedded): 30 items, clean error rate 0.20" in shown
    assert "samples = 5" in shown and "signature" not in shown
    assert "Robustness battery page" in shown and "k = None" not in shown

    assert cli.main(["history", "compare", str(audit_id), str(battery)]) == 2
    err = capsys.readouterr().err
    assert "is an audit and run" in err and "a robustness battery: compare two runs of one kind" in err
    assert "Traceback" not in err
    assert cli.main(["history", "compare", str(sens), str(sens)]) == 2
    err = capsys.readouterr().err
    assert "a sensitivity study cannot be compared with another run: only audit, robustness battery" in err
    assert "Traceback" not in err


def test_spec_arguments_are_named_as_files_in_the_help():
    """The help names a spec argument SPEC_FILE (SPEC_FILE_OUT for the one written), never a
    bare 'spec' or 'SPEC', which read like a reference to a document."""
    import re

    subs = next(a for a in cli.build_parser()._actions if a.choices and "audit" in a.choices).choices
    for name in ("audit", "estimate", "attack", "sensitivity"):
        usage = subs[name].format_usage()
        assert re.search(r"\bSPEC_FILE\b", usage), usage
        assert not re.search(r"\bspec\b|\bSPEC\b", usage), usage
    assert "--simulate SPEC_FILE" in subs["fidelity"].format_help()
    imp = subs["import"].format_help()
    assert "--spec-out SPEC_FILE_OUT" in imp and "SPEC_OUT" not in imp.replace("SPEC_FILE_OUT", "")
