"""The run history (dbpa_core.history) and `dbpa history`: record, list with filters, reopen
with everything the charts need, compare two runs, delete, migrations, the CLI. The tests
that take `history_store` run twice: on the SQLite file and on a PostgreSQL database."""

import getpass
import json
import shutil
import socket
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from dbpa_core import cli, db
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.history import History, HistoryError
from dbpa_core.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "assets" / "demo_replay.jsonl")
NICE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)


def _spec(*, samples=8, name="audit-a", model_label=None, perts=("comedian", "doctor"), embedder="rouge1"):
    model = {"backend": "replay", "file": DEMO}
    if model_label:
        model["label"] = model_label
    roles = {"comedian": "target", "doctor": "control", "child": "target"}
    return parse_spec(
        {
            "name": name,
            "model": model,
            "embedder": {"backend": embedder},
            "samples": samples,
            "permutations": 200,
            "base": {"prompt": NICE},
            "perturbations": [{"name": p, "prefix": f"Act as a {p}.", "role": roles[p]} for p in perts],
        }
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    return {
        "a": run_audit(_spec(), cache=cache),
        "b": run_audit(
            _spec(samples=12, name="audit-b", model_label="model v2", perts=("comedian", "doctor", "child")),
            cache=cache,
        ),
    }


@pytest.fixture
def history(tmp_path, history_store):
    return History(history_store or tmp_path / "h.sqlite3")


def sql(history, statement, **params):
    """Run one SQL statement on the history's database (to look behind the API)."""
    with db.engine(history.url).begin() as con:
        result = con.execute(sa.text(statement), params)
        return result.scalar() if result.returns_rows else None


def test_record_and_reopen_with_everything_the_charts_need(history, results):
    a = results["a"]
    run_id = history.record({"replay": a}, source="dashboard", page="landing", cache_dir="/tmp/c")
    run = history.get(run_id)
    assert run.summary.source == "dashboard" and run.summary.page == "landing"
    assert run.summary.tool_version and run.settings["samples"] == 8
    assert run.settings["permutations"] == 200 and run.settings["measure"] == a.spec.measure
    back = run.audits["replay"]
    assert back.spec.base_prompt == a.spec.base_prompt
    assert [p.name for p in back.perturbations] == ["comedian", "doctor"]
    for p, q in zip(a.perturbations, back.perturbations, strict=True):
        assert (p.effect_size, p.p_value, p.p_adjusted, p.significant, p.stars) == (
            q.effect_size,
            q.p_value,
            q.p_adjusted,
            q.significant,
            q.stars,
        )
        np.testing.assert_array_equal(p.test.permutation_statistics, q.test.permutation_statistics)
        np.testing.assert_array_equal(p.test.null_similarities, q.test.null_similarities)
        assert q.chance_effect_size == pytest.approx(p.chance_effect_size)
    assert back.base.texts == a.base.texts and back.arms[0].texts == a.arms[0].texts
    assert back.roc is not None and back.roc.auc == a.roc.auc
    assert back.to_csv() == a.to_csv()
    assert "history database" in json.dumps(run.to_dict()) and "/tmp/c" in run.to_dict()["responses"]


def test_embeddings_survive_as_float32(history, results):
    import dataclasses

    a = results["a"]
    emb = np.random.default_rng(0).normal(size=(len(a.base.texts), 5)).astype(np.float32)
    with_emb = dataclasses.replace(a, base=dataclasses.replace(a.base, embeddings=emb))
    back = history.get(history.record([with_emb], source="cli")).audits
    got = next(iter(back.values())).base.embeddings
    np.testing.assert_array_equal(got, emb)
    assert next(iter(back.values())).arms[0].embeddings is None  # ROUGE: none


def test_list_filters_by_model_prompt_date_and_source(history, results):
    old = datetime.now(UTC) - timedelta(days=8)
    i1 = history.record({"replay": results["a"]}, source="cli", created_at=old)
    i2 = history.record({"model v2": results["b"]}, source="dashboard", page="landing")
    assert [r.id for r in history.list()] == [i2, i1]  # newest first
    assert [r.id for r in history.list(model="V2")] == [i2]  # case-insensitive
    assert [r.id for r in history.list(prompt="act as a child")] == [i2]
    assert [r.id for r in history.list(prompt="cholesterol")] == [i2, i1]
    assert [r.id for r in history.list(since=(datetime.now(UTC) - timedelta(days=1)).date())] == [i2]
    assert [r.id for r in history.list(until=old.date().isoformat())] == [i1]
    assert [r.id for r in history.list(source="cli")] == [i1]
    assert history.list(model="100%_") == []  # LIKE wildcards are literal
    with pytest.raises(HistoryError, match="not a date"):
        history.list(since="last tuesday")


def test_summary_names_significant_controls(history, results):
    import dataclasses

    a = results["a"]
    doctor = next(p for p in a.perturbations if p.name == "doctor")
    bad = dataclasses.replace(
        a,
        perturbations=tuple(
            dataclasses.replace(p, significant=True) if p is doctor else p for p in a.perturbations
        ),
    )
    s = history.get(history.record({"m": bad}, source="cli")).summary
    assert s.control_gate == "fail" and s.failed_controls == ("doctor",)
    ok = dataclasses.replace(
        a,
        perturbations=tuple(
            dataclasses.replace(p, significant=False) if p is doctor else p for p in a.perturbations
        ),
    )
    assert history.get(history.record({"m": ok}, source="cli")).summary.control_gate == "pass"


def test_compare_two_runs_names_changed_verdicts(history, results):
    import dataclasses

    a, b = results["a"], results["b"]
    # make B's comedian verdict differ from A's whatever the data say
    flip = tuple(
        dataclasses.replace(
            p, significant=not next(q for q in a.perturbations if q.name == "comedian").significant
        )
        if p.name == "comedian"
        else p
        for p in b.perturbations
    )
    b = dataclasses.replace(b, perturbations=flip)
    ia = history.record({"replay": a}, source="cli")
    ib = history.record({"model v2": b}, source="cli")
    cmp = history.compare(ia, ib)
    assert cmp.pairs == (("replay", "model v2"),)  # one audit each: paired
    rows = {r.name: r for r in cmp.rows}
    assert rows["comedian"].verdict_changed
    assert rows["child"].status == "only in B" and rows["child"].a is None
    assert [r.name for r in cmp.changed] == ["comedian"] + (
        ["doctor"] if rows["doctor"].verdict_changed else []
    )
    assert cmp.settings_changed["samples"] == (8, 12)
    assert "models" in cmp.settings_changed
    assert json.loads(json.dumps(cmp.to_dict()))["verdicts_changed"] == len(cmp.changed)


def test_compare_multi_audit_runs_pairs_by_job(history, results):
    a = results["a"]
    i1 = history.record({"m1": a, "m2": a}, source="dashboard", page="personas")
    i2 = history.record({"m2": a, "m3": a}, source="dashboard", page="personas")
    cmp = history.compare(i1, i2)
    assert cmp.pairs == (("m2", "m2"),)
    status = {(r.job, r.name): r.status for r in cmp.rows}
    assert status[("m2", "comedian")] == "same verdict"
    assert status[("m1", "comedian")] == "only in A" and status[("m3", "doctor")] == "only in B"


def test_delete_removes_everything(history, results):
    i1 = history.record({"m": results["a"]}, source="cli")
    i2 = history.record({"m": results["b"]}, source="cli")
    assert history.delete(i1) == 1
    assert [r.id for r in history.list()] == [i2]
    with pytest.raises(HistoryError, match=f"no run {i1}"):
        history.get(i1)
    # cascades: no orphans
    assert (
        sql(
            history,
            "SELECT COUNT(*) FROM arms a JOIN audits u ON u.id = a.audit_id WHERE u.run_id = :i",
            i=i1,
        )
        == 0
    )
    assert sql(history, "SELECT COUNT(*) FROM tests") == 3
    assert sql(history, "SELECT COUNT(*) FROM arms") == 4


def test_a_run_says_who_ran_it_and_where(history, results):
    run = history.get(history.record({"m": results["a"]}, source="cli"))
    assert (run.summary.user, run.summary.host) == (getpass.getuser(), socket.gethostname())
    assert run.to_dict()["user"] == getpass.getuser()
    assert history.list()[0].host == socket.gethostname()


def test_a_history_made_before_the_migrations_is_upgraded_in_place(tmp_path, results):
    # made by dbpa before Alembic (sqlite3 and PRAGMA user_version = 2): an audit run and a
    # sensitivity study
    path = tmp_path / "old.sqlite3"
    shutil.copy(ROOT / "tests" / "data" / "history_v2.sqlite3", path)
    h = History(path)
    runs = h.list()
    assert [r.title for r in runs] == ["old sensitivity", "made-before-alembic"]
    assert runs[1].user == "" and runs[1].n_tests == 2 and runs[1].control_gate
    old = h.get(runs[1].id)
    assert old.unreadable == () and len(old.audits["replay"].base.texts) == 4
    assert [p.name for p in old.audits["replay"].perturbations] == ["comedian", "doctor"]
    assert h.result(runs[0].id) == ("sensitivity", {"rows": [1, 2, 3]})
    assert h.first_run("fp-old") == runs[0].id
    assert h.schema_version() == db.head()
    with sqlite3.connect(path) as con:  # an older dbpa opening it says it is newer
        assert con.execute("PRAGMA user_version").fetchone()[0] == 1 + int(db.head())
    new = h.record({"m": results["a"]}, source="cli")
    assert h.get(new).summary.user == getpass.getuser()
    assert len(History(path).list()) == 3  # reopening migrates nothing


def test_a_history_one_step_behind_is_brought_up_with_its_own_step(tmp_path):
    from dbpa_core.migrations.legacy import STEPS

    path = tmp_path / "v1.sqlite3"
    with sqlite3.connect(path) as con:
        con.executescript(STEPS[0] + "; PRAGMA user_version = 1;")
    h = History(path)
    assert h.list() == []
    run = h.record_result("battery", {}, title="b", models=[], fingerprint="f")
    assert h.first_run("f") == run and h.extras([run])[run]["kind"] == "battery"


def test_a_history_written_by_a_newer_dbpa_is_refused(tmp_path, history_store):
    h = History(history_store or tmp_path / "new.sqlite3")
    assert h.upgrade() == db.head()
    sql(h, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(HistoryError, match="newer dbpa"):
        History(h.location).list()
    if history_store is None:  # SQLite: also by its user_version
        sql(h, f"UPDATE alembic_version SET version_num = '{db.head()}'")
        with sqlite3.connect(h.path) as con:
            con.execute("PRAGMA user_version = 99")
        with pytest.raises(HistoryError, match="newer dbpa"):
            History(h.path).list()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    bad = tmp_path / "h.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryError, match="cannot be read"):
        History(bad).list()


def test_record_checks_its_arguments(history, results):
    with pytest.raises(ValueError, match="`source` must be"):
        history.record({"m": results["a"]}, source="web")
    with pytest.raises(ValueError, match="empty"):
        history.record({}, source="cli")


def test_keys_are_never_recorded(tmp_path, results, monkeypatch):
    import dataclasses

    history = History(tmp_path / "h.sqlite3")
    a = results["a"]
    spec = dataclasses.replace(
        a.spec, models=({"backend": "openai", "name": "m", "api_key_env": "DBPA_MY_KEY"},)
    )
    history.record({"m": dataclasses.replace(a, spec=spec)}, source="cli")
    blob = Path(history.path).read_bytes()
    assert b"DBPA_MY_KEY" in blob and b"sk-" not in blob


# --------------------------------------------------------------------------- the CLI
def _write_spec(tmp_path, name="cli-audit", label=None):
    model = f"  file: {DEMO}\n" + (f"  label: {label}\n" if label else "")
    text = (
        f"name: {name}\nmodel:\n  backend: replay\n{model}embedder: {{backend: rouge1}}\n"
        f"samples: 6\npermutations: 100\nbase: {{prompt: {json.dumps(NICE)}}}\n"
        "perturbations:\n  - {name: comedian, prefix: Act as a comedian., role: target}\n"
        "  - {name: doctor, prefix: Act as a doctor., role: control}\n"
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_cli_audit_is_recorded_and_listed(tmp_path, capsys, history_store):
    spec = _write_spec(tmp_path)
    rc = cli.main(
        ["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(tmp_path / "out"), "--quiet"]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "recorded as run 1" in out and "dbpa history show 1" in out
    assert cli.main(["history"]) == 0
    listing = capsys.readouterr().out
    assert "cli-audit" in listing and "1 run(s)" in listing
    assert cli.main(["history", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs[0]["id"] == 1 and runs[0]["source"] == "cli" and runs[0]["tests"] == 2
    assert cli.main(["history", "show", "1"]) == 0
    shown = capsys.readouterr().out
    assert "k = 6, B = 100" in shown and "responses.jsonl" in shown and "comedian" in shown
    assert "p (adjusted)" in shown
    assert cli.main(["history", "show", "1", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["out_dir"] == str(tmp_path / "out") and full["settings"]["samples"] == 6
    assert [p["name"] for p in next(iter(full["audits"].values()))["perturbations"]] == ["comedian", "doctor"]


def test_cli_lists_the_models_of_a_dashboard_run(results, capsys, history_store):
    """A dashboard audit keeps its inputs in an extras row without models: the listing
    still names the audit's own models (they were overwritten by the empty row)."""
    h = History()
    run_id = h.record({"job": results["a"]}, source="dashboard", page="audit")
    h.mark(run_id, fingerprint="f", form={"samples": 8})
    assert cli.main(["history", "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)
    assert run["source"] == "dashboard" and run["kind"] == "audit"
    assert run["models"] == list(h.get(run_id).summary.models) and run["models"]
    assert cli.main(["history"]) == 0
    assert run["models"][0] in capsys.readouterr().out


def test_cli_no_history_and_filters(tmp_path, capsys, history_store):
    spec = _write_spec(tmp_path)
    assert cli.main(["audit", str(spec), "--out", str(tmp_path / "o"), "--quiet", "--no-history"]) == 0
    assert "recorded as run" not in capsys.readouterr().out
    assert cli.main(["history"]) == 0
    assert "No recorded runs" in capsys.readouterr().out
    assert cli.main(["history", "--since", "someday"]) == 2
    assert "not a date" in capsys.readouterr().err


def test_cli_compare_and_delete(tmp_path, capsys, history_store):
    for name, label in (("before", "model v1"), ("after", "model v2")):
        assert (
            cli.main(
                ["audit", str(_write_spec(tmp_path, name, label)), "--out", str(tmp_path / name), "--quiet"]
            )
            == 0
        )
    capsys.readouterr()
    assert cli.main(["history", "--model", "v2", "--json"]) == 0
    assert [r["title"] for r in json.loads(capsys.readouterr().out)] == ["after"]
    assert cli.main(["history", "compare", "1", "2"]) == 0
    text = capsys.readouterr().out
    assert "A = run 1: before" in text and "changed: models: model v1 -> model v2" in text
    assert "perturbations tested in both runs changed verdict" in text
    assert cli.main(["history", "compare", "1", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == [["model v1", "model v2"]]
    assert cli.main(["history", "delete", "1"]) == 2
    assert "add --yes" in capsys.readouterr().err
    assert cli.main(["history", "delete", "1", "--yes"]) == 0
    assert "deleted 1 run" in capsys.readouterr().out
    assert cli.main(["history", "show", "1"]) == 2
    assert "no run 1" in capsys.readouterr().err


def test_cli_unwritable_history_is_a_warning_not_a_failure(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    home.write_text("a file where the folder should be")
    monkeypatch.setenv("DBPA_HOME", str(home))
    rc = cli.main(["audit", str(_write_spec(tmp_path)), "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 0
    assert "not recorded in the history" in capsys.readouterr().err


def test_cli_upgrade_says_where_and_which_revision(capsys, history_store):
    assert cli.main(["history", "upgrade"]) == 0
    out = capsys.readouterr().out
    assert f"is at schema revision {db.head()}" in out
    assert (history_store is None and "history.sqlite3" in out) or "postgresql://" in out


def test_a_nul_character_in_a_prompt_or_title_is_recorded(history, results):
    import dataclasses

    a = results["a"]
    odd = dataclasses.replace(a, spec=dataclasses.replace(a.spec, base_prompt="A\x00B"))
    run = history.get(history.record({"m": odd}, source="cli", title="t\x00itle"))
    # PostgreSQL cannot store NUL: it reads back as U+FFFD there; SQLite keeps it
    assert run.summary.title in ("t\x00itle", "t\ufffditle")
    assert run.summary.base_prompt in ("A\x00B", "A\ufffdB")


def test_without_postgresql_the_postgres_tests_say_why(monkeypatch):
    from . import postgres_server

    monkeypatch.setattr(postgres_server, "binaries", lambda: None)
    assert "PostgreSQL is not installed" in postgres_server.PostgresServer().why_not()


def test_the_migrations_build_the_declared_schema(tmp_path, history_store):
    # a column or table declared in dbpa_core/db.py without a migration would differ here
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    h = History(history_store or tmp_path / "h.sqlite3")
    h.upgrade()
    with db.engine(h.url).connect() as con:
        assert compare_metadata(MigrationContext.configure(con), db.metadata) == []
    old = tmp_path / "old.sqlite3"  # a history from before the migrations, upgraded
    shutil.copy(ROOT / "tests" / "data" / "history_v2.sqlite3", old)
    legacy = History(old)
    legacy.upgrade()
    with db.engine(legacy.url).connect() as con:  # its tables, columns and indexes
        ctx = MigrationContext.configure(con, opts={"compare_type": False})
        assert [
            d
            for d in compare_metadata(ctx, db.metadata)
            if isinstance(d, tuple) and d[0].split("_")[1] in ("table", "column", "index")
        ] == []
    legacy.delete(*[r.id for r in legacy.list()])  # and its cascades still hold
    assert sql(legacy, "SELECT COUNT(*) FROM arms") == sql(legacy, "SELECT COUNT(*) FROM run_extras") == 0


def test_postgresql_without_its_driver_names_the_extra(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # not installed
    monkeypatch.setenv("DBPA_DATABASE_URL", "postgresql://me:s3cret@db.example.org/nodriver")
    assert cli.main(["history"]) == 4  # a missing optional part
    err = capsys.readouterr().err
    assert "needs the `postgres` extra: run `dbpa setup postgres`" in err
    assert len(err.strip().splitlines()) == 1 and "s3cret" not in err


def test_the_list_says_not_testable_when_no_control_could_have_failed(history, results):
    """The history list's gate is the run's own: at k = 3 (20 splits, so p >= 0.05 before the
    correction) a control that did not change the answers has not passed, it was not tested."""
    import dataclasses

    a = results["a"]
    calm = tuple(dataclasses.replace(p, significant=False) for p in a.perturbations)
    tiny = dataclasses.replace(a, spec=dataclasses.replace(a.spec, samples=3), perturbations=calm)
    s = history.get(history.record({"m": tiny}, source="cli")).summary
    assert s.control_gate == "not testable" and s.failed_controls == ()
    assert s.to_dict()["control_gate"] == "not testable"
    # the same run at k = 8 could have failed its control: it passed
    fine = dataclasses.replace(a, perturbations=calm)
    assert history.get(history.record({"m": fine}, source="cli")).summary.control_gate == "pass"


def test_a_changed_setting_is_written_as_a_spec_writes_it():
    from dbpa_core.render import setting_text

    assert setting_text({"backend": "rouge1"}) == "backend: rouge1"
    assert setting_text({"backend": "openai", "names": ["a", "b"]}) == "backend: openai, names: a, b"
    assert setting_text(20) == "20"


def test_compare_names_the_sampling_plan_and_the_smallest_effect(history, results):
    """Two runs whose only difference is sequential sampling and ``min_effect`` are not said
    to have the same settings: both in the stored runs' comparison and the interface's."""
    import dataclasses

    from dbpa_core.runs import AuditRun

    a = results["a"]
    spec = dataclasses.replace(a.spec, sequential_sampling=True, min_effect=0.1)
    b = dataclasses.replace(a, spec=spec)
    cmp = history.compare(history.record({"m": a}, source="cli"), history.record({"m": b}, source="cli"))
    assert cmp.settings_changed["min_effect"] == (None, 0.1)
    before, after = cmp.settings_changed["sequential_sampling"]
    assert before is None and after == spec.sequential_sampling.to_dict()
    live = AuditRun(audits={"m": a}).compare(AuditRun(audits={"m": b}))
    assert {"min_effect", "sequential_sampling"} <= set(live.settings_changed)
