"""The Suite page: a recorded suite opens with its pooled table, heat map and one cell's
numbers (from the page and from History); a suite spec with its cases file is opened,
run in the background and recorded; an audit page refuses a suite spec in one line."""

import pandas as pd
import pytest
import yaml

from dbpa_core.cache import Cache
from dbpa_core.history import History
from dbpa_core.spec import parse_spec
from dbpa_core.suite import run_suite

from ..fake_openai import FakeOpenAI
from .conftest import errors, plain, successes

SUITE = "pages/suite.py"


def suite_doc(url: str, cases) -> dict:
    return {
        "name": "vignettes",
        "samples": 6,
        "permutations": 199,
        "seed": 3,
        "model": {"backend": "openai", "name": "fake-model", "base_url": url, "max_retries": 0},
        "embedder": {"backend": "openai", "name": "fake-embed", "base_url": url},
        "cases": cases,
        "base": {"prompt": "{name} is {age} years old. Advice?"},
        "perturbations": [
            {"name": "comedian", "prefix": "Act as a comedian.", "role": "target"},
            {"name": "renamed", "set": {"name": "Ahmed"}, "role": "control"},
        ],
    }


CASES = [{"id": f"p{i}", "name": f"John{i}", "age": 60 + i} for i in range(3)]


def pooled_table(at) -> pd.DataFrame:
    """The pooled table (a styled table carries no key in AppTest)."""
    [df] = [d.value for d in at.dataframe if "p (Fisher)" in d.value.columns]
    return df


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        yield srv


@pytest.fixture
def recorded(server, tmp_path):
    """A suite run with `dbpa audit`'s recording: (run id, its summary)."""
    spec = parse_spec(suite_doc(server.base_url, CASES))
    result = run_suite(spec, cache=Cache(tmp_path / "c"))
    return History().record_suite(result, source="cli"), result.to_dict()


def test_a_recorded_suite_opens_with_its_tables_and_cells(make_app, recorded):
    run_id, summary = recorded
    at = make_app(page=SUITE)
    assert at.selectbox(key="suite_recorded").value == run_id
    at.button(key="suite_open").click().run()
    assert not at.exception, at.exception
    pooled = pooled_table(at)
    assert list(pooled["perturbation"]) == ["comedian", "renamed"]
    assert list(pooled["p (Fisher)"]) == [d["p_value"] for d in summary["pooled"]]
    assert list(pooled["discoveries"]) == [f"{d['discoveries']}/3" for d in summary["pooled"]]
    assert len(at.get("plotly_chart")) == 1
    cell = at.selectbox(key="suite_cell")
    assert len(cell.options) == 6
    first = next(t for t in summary["tests"] if t["significant"])  # opened first
    assert cell.value == f"{first['case']} · {first['perturbation']}"
    # another cell: its own numbers
    t = summary["tests"][-1]
    cell.set_value(f"{t['case']} · {t['perturbation']}").run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["ω above chance"] == f"{t['effect_above_chance']:+.3f}"
    assert metrics["ω"] == f"{t['omega']:.3f}"
    assert any(c.value.startswith(":material/history: Run #") for c in at.caption)
    # the cell's case as a plain audit on the Perturbation test page
    at.button(key="suite_case_open").click().run()
    assert not at.exception, at.exception
    case = next(c for c in CASES if c["id"] == t["case"])
    # the page switched: its prompt box holds the case's filled prompt
    assert at.text_area(key="w_base_prompt").value == f"{case['name']} is {case['age']} years old. Advice?"
    table = at.session_state["perturbations"]
    assert list(table["name"]) == ["comedian", "renamed"]
    assert table["prefix"][0] == "Act as a comedian."
    assert table["prompt"][1] == f"Ahmed is {case['age']} years old. Advice?"


def test_history_lists_a_suite_and_opens_it_on_the_suite_page(make_app, recorded):
    run_id, _summary = recorded
    at = make_app(page="pages/history.py")
    table = next(d.value for d in at.dataframe if "kind" in d.value.columns)
    row = table[table["id"] == run_id].iloc[0]
    assert row["kind"] == "Suite of cases" and row["tests"] == "6"
    assert any("3 cases x 2 perturbations" in plain(m.value) for m in at.markdown)  # headline
    at.button(key="hist_reopen").click().run()
    assert not at.exception, at.exception
    pooled = pooled_table(at)
    assert list(pooled["perturbation"]) == ["comedian", "renamed"]


def test_a_suite_spec_is_opened_run_and_recorded(make_app, server):
    at = make_app(page=SUITE)
    csv = "id,name,age\n" + "".join(f"{c['id']},{c['name']},{c['age']}\n" for c in CASES)
    doc = yaml.safe_dump(suite_doc(server.base_url, {"file": "cases.csv"})).encode()
    # the spec alone cannot find its cases file: one line that says to upload it too
    at.file_uploader(key="suite_up").set_value(("s.yaml", doc, "application/yaml")).run()
    assert any("Upload the cases file together with the spec" in e for e in errors(at))
    # a cases file without a column the prompt needs: named as uploaded, with its line
    at.file_uploader(key="suite_up").set_value(
        [("s.yaml", doc, "application/yaml"), ("cases.csv", b"id,name\nx,Jo\n", "text/csv")]
    ).run()
    [err] = errors(at)
    assert "cases.csv, line 2" in err and "no column 'age'" in err and "/tmp" not in err
    at.file_uploader(key="suite_up").set_value(
        [("s.yaml", doc, "application/yaml"), ("cases.csv", csv.encode(), "text/csv")]
    ).run()
    assert not at.exception, at.exception
    assert any("Opened **vignettes**: 3 cases x 2 perturbations = 6 tests" in s for s in successes(at))
    # what it will call, before it runs: 3 cases x (base + 2 perturbations) x k = 6
    assert {m.label: m.value for m in at.metric}["Model calls to make"] == "54"
    at.button(key="suite_run").click().run()
    assert not at.exception, at.exception
    pooled = pooled_table(at)
    assert isinstance(pooled, pd.DataFrame) and len(pooled) == 2
    [run] = History().list()
    assert run.source == "dashboard" and run.page == "suite" and run.n_tests == 6
    assert History().suite(run.id)["pooled"][0]["perturbation"] == "comedian"
    # the same inputs again, every answer cached: the same run, not recorded twice
    at.button(key="suite_run").click().run()
    assert len(History().list()) == 1


def test_an_audit_page_refuses_a_suite_spec_in_one_line(make_app, server):
    at = make_app()
    doc = yaml.safe_dump(suite_doc(server.base_url, CASES)).encode()
    at.file_uploader(key="landing_spec_up").upload("suite.yaml", doc, "application/yaml").run()
    assert not at.exception, at.exception
    [err] = [e for e in errors(at) if "suite.yaml" in e]
    assert "suite of 3 cases" in err and "**Suite of cases** page" in err and "dbpa audit" in err
    assert "\n" not in err
    assert at.session_state["w_base_prompt"] != "{name} is {age} years old. Advice?"


def test_a_reload_shows_the_last_suite_run_here_again(make_app, server, tmp_path):
    spec = parse_spec(suite_doc(server.base_url, CASES))
    result = run_suite(spec, cache=Cache(tmp_path / "c"))
    History().record_suite(result, source="dashboard", page="suite")
    at = make_app(page=SUITE)  # a fresh session: what History says the page showed last
    assert list(pooled_table(at)["perturbation"]) == ["comedian", "renamed"]
