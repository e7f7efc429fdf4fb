"""Issue 11 with AppTest: the control gate comes first and in red, outdated results are
marked, the History page finds, reopens, compares and deletes runs, spec files go out and
come in, names are escaped, duplicates are not added, and (in demo mode) every page runs
its default example."""

import json
import re

import pandas as pd
import pytest
import yaml

from tests.fake_openai import FakeOpenAI

from .conftest import DEMO, errors, plain, successes, warnings

pytestmark = pytest.mark.slow

NICE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)


def _table(at, column):
    return next(d.value for d in at.dataframe if column in d.value.columns)


# --------------------------------------------------------------------------- verdicts
def test_significant_controls_fail_the_gate_first_and_in_red(make_app):
    base = "John has these features: Age: 70"
    table = pd.DataFrame(
        [
            {"name": "comedian", "prefix": "", "prompt": "Act as a comedian. " + base, "role": "control"},
            {"name": "peter", "prefix": "", "prompt": base.replace("John", "Peter"), "role": "control"},
            {
                "name": "comedian joke",
                "prefix": "",
                "prompt": "Act as a comedian, joke. " + base,
                "role": "target",
            },
        ]
    )
    with FakeOpenAI(models=("m1",)) as srv:
        at = make_app(
            models=[{"backend": "openai", "name": "m1", "base_url": srv.base_url}],
            page="pages/control_target.py",
            roc_table=table,
            w_base_prompt=base,
            w_embedder="rouge1",
        )
        at.button(key="roc_run").click().run()
    assert not at.exception, at.exception
    fail = errors(at)
    assert fail and fail[0].startswith("Control gate failed") and "comedian" in fail[0]
    assert "peter" not in fail[0]
    gate = _table(at, "control gate")
    assert list(gate["control gate"]) == ["FAIL"]
    assert gate["controls changed"][0].startswith("1 of 2: comedian")
    # the best-model line is no success while a gate fails, and says why
    assert not any("of the targets" in s for s in successes(at))
    assert any("of the targets" in w and "control gate failed on **m1**" in w for w in warnings(at))
    # the verdict agrees with the table beneath it
    res = at.session_state["results"]["roc"]["m1"]
    assert [p.name for p in res.perturbations if p.role == "control" and p.significant] == ["comedian"]
    assert any(e.proto.expanded for e in at.expander if "control gate FAIL" in e.label)


def test_landing_shows_the_gate_when_roles_are_given(make_app):
    table = pd.DataFrame(
        [{"name": "comedian", "prefix": "Act as a comedian.", "prompt": "", "role": "control"}]
    )
    with FakeOpenAI(models=("m",)) as srv:
        at = make_app(
            models=[{"backend": "openai", "name": "m", "base_url": srv.base_url}],
            perturbations=table,
            w_base_prompt="Say hi",
            w_embedder="rouge1",
        )
        at.button(key="landing_run").click().run()
    assert errors(at)[0].startswith("Control gate failed")


# --------------------------------------------------------------------------- outdated
def test_results_are_marked_outdated_when_inputs_change_or_a_run_fails(make_app, tmp_path):
    with FakeOpenAI(models=("m",)) as srv:
        at = make_app(
            models=[{"backend": "openai", "name": "m", "base_url": srv.base_url, "max_retries": 0}],
            w_embedder="rouge1",
            w_samples=5,
            w_base_prompt="Say hi",
            perturbations=pd.DataFrame(
                [{"name": "comedian", "prefix": "Act as a comedian.", "prompt": "", "role": ""}]
            ),
        )
        at.button(key="landing_run").click().run()
        assert not errors(at) and not any("Outdated" in w for w in warnings(at))
        at.number_input(key="w_samples").set_value(6).run()
        note = next(w for w in warnings(at) if "Outdated:" in w)
        assert "(k)" in note and "Press Run" in note
        assert at.session_state["results_meta"]["landing"]["_outdated"]
        at.number_input(key="w_samples").set_value(5).run()  # back: current again
        assert not any("Outdated" in w for w in warnings(at))
        at.text_area(key="w_base_prompt").set_value("  ").run()  # a form error
        assert any("Outdated:" in w for w in warnings(at))
        at.text_area(key="w_base_prompt").set_value("Say hi").run()
        assert not any("Outdated" in w for w in warnings(at))
    # the server is gone and the cache is new: the same inputs fail to run again
    at.session_state["cache_dir"] = str(tmp_path / "empty-cache")
    at.button(key="landing_run").click().run()
    assert not at.exception
    assert any("Cannot reach" in e for e in errors(at))
    assert any("The last run did not finish" in w for w in warnings(at))


# --------------------------------------------------------------------------- escaping
def test_names_are_shown_literally(make_app):
    name = "**bold** <b>x</b> :red[y] $z$"
    with FakeOpenAI(models=("m",)) as srv:
        at = make_app(
            models=[{"backend": "openai", "name": "m", "base_url": srv.base_url}],
            w_embedder="rouge1",
            w_base_prompt="Say hi",
            w_samples=5,
            perturbations=pd.DataFrame(
                [{"name": name, "prefix": "Act as a comedian.", "prompt": "", "role": ""}]
            ),
        )
        at.button(key="landing_run").click().run()
    sentence = next(m.value for m in at.markdown if "change" in m.value and "bold" in m.value)
    assert "\\*\\*bold\\*\\*" in sentence and "\\<b\\>" in sentence and "\\:red\\[" in sentence
    assert name in plain(sentence)


# --------------------------------------------------------------------------- small things
def test_adding_personas_twice_adds_no_duplicates(make_app):
    at = make_app()
    at.multiselect(key="landing_personas").set_value(["doctor", "child"])
    at.text_input(key="landing_custom").set_value("pirate, pirate")
    at.button(key="landing_add_personas").click().run()
    names = list(at.session_state["perturbations"]["name"])
    assert names.count("doctor") == 1 and names.count("pirate") == 1 and len(names) == 9
    assert any(
        "Already in the table" in plain(i.value) and "doctor, child" in plain(i.value) for i in at.info
    )
    assert not any("used twice" in e for e in errors(at))


def test_max_tokens_is_not_buried(make_app):
    at = make_app()
    assert at.sidebar.number_input(key="w_max_tokens").value == 120
    inside = [n.key for e in at.sidebar.expander for n in e.number_input]
    assert "w_max_tokens" not in inside


# --------------------------------------------------------------------------- history
def _run_landing(at, k):
    at.number_input(key="w_samples").set_value(k).run()
    at.button(key="landing_run").click().run()
    assert not at.exception and not errors(at), errors(at)


def test_history_page_finds_reopens_compares_and_deletes(make_app):
    at = make_app(w_embedder="rouge1", w_audit_name="nice check")
    _run_landing(at, 6)
    first = at.session_state["results_meta"]["landing"]["run"]
    assert first.run_id == 1
    _run_landing(at, 8)
    at.switch_page("pages/history.py").run()
    assert not at.exception, at.exception
    runs = _table(at, "control gate")
    assert list(runs["id"]) == [2, 1] and set(runs["title"]) == {"nice check"}
    assert list(runs["from"]) == ["Perturbation test"] * 2
    # reopened with its charts: the table, the tabs, the downloads
    assert at.selectbox(key="hist_open").value == 2
    assert "run 2" in at.markdown[2].value or any("run 2" in m.value for m in at.markdown)
    assert any("p (raw)" in d.value.columns for d in at.dataframe)
    assert any(len(c.proto.spec) > 100 for c in at.get("plotly_chart"))
    assert "hist_2_dl_html" in [b.key for b in at.get("download_button")]
    # filters
    at.text_input(key="hist_f_prompt").set_value("no such prompt").run()
    assert any("No recorded run matches" in i.value for i in at.info)
    at.text_input(key="hist_f_prompt").set_value("cholesterol").run()
    at.text_input(key="hist_f_model").set_value("DEMO").run()
    assert len(_table(at, "control gate")) == 2
    # compare: A = run 1, B = run 2
    at.session_state["hist_tabs"] = "Compare two runs"
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="hist_a").value == 1 and at.selectbox(key="hist_b").value == 2
    cmp = _table(at, "change")
    assert len(cmp) == 8 and set(cmp["change"]) <= {
        "same verdict",
        "now significant",
        "no longer significant",
    }
    assert any("Changed between the runs" in c.value and "samples" in c.value for c in at.caption)
    assert successes(at) or errors(at)  # the verdict-change summary
    assert not any("different scales" in w for w in warnings(at))  # k changed, ω's scale did not
    # delete run 1, after confirming
    at.session_state["hist_tabs"] = "Delete runs"
    at.run()
    at.multiselect(key="hist_delete_ids").set_value([1]).run()
    at.button(key="hist_delete").click().run()
    assert any("cannot be undone" in w for w in warnings(at))
    at.button(key="hist_delete_yes").click().run()
    assert any("Deleted 1 run" in s for s in successes(at))
    assert list(_table(at, "control gate")["id"]) == [2]


def test_history_reopens_a_cli_run_and_loads_it_into_its_page(make_app, tmp_path):
    from dbpa_core import cli

    spec = tmp_path / "cli-spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "from-cli",
                "model": {"backend": "replay", "file": DEMO},
                "embedder": {"backend": "rouge1"},
                "samples": 5,
                "permutations": 100,
                "base": {"prompt": NICE},
                "perturbations": [
                    {"name": "comedian", "prefix": "Act as a comedian.", "role": "target"},
                    {"name": "doctor", "prefix": "Act as a doctor.", "role": "control"},
                ],
            }
        )
    )
    assert (
        cli.main(
            [
                "--cache-dir",
                str(tmp_path / "c"),
                "audit",
                str(spec),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 0
    )
    at = make_app(page="pages/history.py")
    runs = _table(at, "control gate")
    assert list(runs["from"]) == ["cli"] and list(runs["title"]) == ["from-cli"]
    # a CLI audit with roles opens with the control-vs-target view: the gate comes first
    assert any("Control gate" in s for s in successes(at) + errors(at))
    at.button(key="hist_load").click().run()
    assert not at.exception, at.exception
    assert at.session_state["w_samples"] == 5 and at.session_state["w_audit_name"] == "from-cli"
    assert list(at.session_state["roc_table"]["name"]) == ["comedian", "doctor"]
    assert at.title[0].value == "Control vs target"


# --------------------------------------------------------------------------- spec files
def _spec_yaml(**over):
    d = {
        "name": "opened",
        "model": {"backend": "replay", "file": DEMO, "label": "demo"},
        "samples": 7,
        "permutations": 300,
        "measure": "jsd",
        "alpha": 0.01,
        "seed": 4,
        "temperature": 0.5,
        "max_tokens": 64,
        "embedder": {"backend": "rougeL"},
        "base": {"prompt": NICE},
        "perturbations": [
            {"name": "comedian", "prefix": "Act as a comedian."},
            {"name": "child", "prompt": "Act as a child. " + NICE, "role": "control"},
        ],
    }
    d.update(over)
    return yaml.safe_dump(d).encode()


def test_spec_download_and_open(make_app):
    at = make_app(w_embedder="rouge1")
    labels = [b.label for b in at.get("download_button")]
    assert "Download spec (YAML)" in labels
    up = at.file_uploader(key="landing_spec_up")
    up.upload("audit.yaml", _spec_yaml(), "application/yaml").run()
    assert not at.exception, at.exception
    assert any(s.startswith("Opened **opened**") for s in successes(at))
    ss = at.session_state
    assert (ss["w_samples"], ss["w_permutations"], ss["w_alpha"], ss["w_seed"]) == (7, 300, 0.01, 4)
    assert (ss["w_temperature"], ss["w_max_tokens"], ss["w_embedder"]) == (0.5, 64, "rougeL")
    table = ss["perturbations"]
    assert list(table["name"]) == ["comedian", "child"]
    assert table["prefix"][0] == "Act as a comedian." and table["prompt"][0] == ""
    assert table["role"][1] == "control" and table["prefix"][1] == "Act as a child."
    assert at.sidebar.number_input(key="w_samples").value == 7  # the widgets show it
    assert at.text_area(key="w_base_prompt").value == NICE
    assert ss["w_landing_model"] == "demo"
    # the form is runnable as opened, and downloads back as the same spec
    assert not at.button(key="landing_run").disabled


def test_opening_a_bad_spec_says_what_is_wrong(make_app):
    at = make_app()
    at.file_uploader(key="landing_spec_up").upload("bad.yaml", b"samples: [\n", "x").run()
    assert any("bad.yaml" in e and "not valid YAML" in e for e in errors(at))
    at.file_uploader(key="landing_spec_up").upload("typo.yaml", _spec_yaml(sampels=3), "x").run()
    assert any("unknown key 'sampels'" in e and "did you mean 'samples'" in e for e in errors(at))
    models = {
        "name": "cmp",
        "models": [
            {"backend": "replay", "file": DEMO, "label": "a"},
            {"backend": "replay", "file": DEMO, "label": "b"},
        ],
        "base": {"prompt": "Hi"},
    }
    at.file_uploader(key="landing_spec_up").upload("m.yaml", yaml.safe_dump(models).encode(), "x").run()
    assert any("models audit: open it on the **Model comparison** page" in e for e in errors(at))
    at.switch_page("pages/model_comparison.py").run()
    at.file_uploader(key="models_spec_up").upload("m.yaml", yaml.safe_dump(models).encode(), "x").run()
    assert not at.exception
    assert at.session_state["w_models_reference"] == "a"
    assert at.session_state["w_models_others"] == ["b"]
    assert at.session_state["w_models_prompt"] == "Hi"


# --------------------------------------------------------------------------- demo mode
@pytest.fixture
def demo_mode(monkeypatch):
    monkeypatch.setenv("DBPA_REPLAY_FILE", DEMO)


@pytest.mark.parametrize(
    "page,key",
    [
        ("pages/perturbation_test.py", "landing"),
        ("pages/persona_explorer.py", "personas"),
        ("pages/control_target.py", "roc"),
        ("pages/model_comparison.py", "models"),
    ],
)
def test_demo_mode_runs_every_pages_default_example(make_app, demo_mode, page, key):
    at = make_app(models=None, page=page, w_samples=20, w_embedder="rouge1")
    assert not errors(at), errors(at)
    assert not at.button(key=f"{key}_run").disabled
    at.button(key=f"{key}_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at) or errors(at)[0].startswith("Control gate failed"), errors(at)
    results = at.session_state["results"][key]
    assert results and all(r.spec.samples == 20 for r in results.values())
    # the estimate above Run is redrawn after the run: everything is cached now
    assert next(m for m in at.metric if m.label == "Recorded answers to read").value == "0"
    assert at.session_state["results_meta"][key]["run"].run_id == 1
    if key == "models":
        r = results["model comparison"]
        assert len(r.perturbations) == 2 and "T=1.2" in r.perturbations[0].name


def test_demo_mode_runs_the_batterys_default_example(make_app, demo_mode):
    """The Robustness battery's default battery (RTI included) is recorded too: in demo mode
    the replay check before Run passes and the battery runs without a call."""
    at = make_app(models=None, page="pages/robustness.py", w_embedder="rouge1")
    assert not errors(at), errors(at)
    assert not at.button(key="robustness_run").disabled
    at.button(key="robustness_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    assert at.session_state["results"]["robustness"]["battery"].records


def test_demo_models_are_the_recorded_ones(make_app, demo_mode):
    at = make_app(models=None)
    labels = [m["label"] for m in at.session_state["models"]]
    assert labels[0] == "SmolLM2-135M-Instruct (recorded)"
    assert {"SmolLM2-135M-Instruct T=1.2 (recorded)", "SmolLM2-135M-Instruct T=0.4 (recorded)"} <= set(labels)


def test_every_default_example_is_recorded():
    """The demo file holds k = 20 responses for every prompt of every page's default."""
    import sys

    from dbpa_core.spec import parse_spec

    sys.path.insert(0, str(__import__("pathlib").Path(DEMO).parent))
    import make_demo_replay

    counts: dict = {}
    for line in open(DEMO, encoding="utf-8"):
        r = json.loads(line)
        counts[(r["prompt"], r["model"])] = counts.get((r["prompt"], r["model"]), 0) + 1
    settings = {"samples": 20, "temperature": 0.8, "max_tokens": 120, "seed": 0}
    from dbpa_core.audit import build_arms

    for name, example in make_demo_replay.examples(settings).items():
        for arm in build_arms(parse_spec(example)):
            key = (arm.prompt, make_demo_replay.recorded_name(arm.model))
            assert counts.get(key, 0) >= 20, f"{name}: {arm.name} is not recorded"
    from dbpa_core.runs import replay_need, requests

    # the battery's default, and with RTI for every word operation and the robustness curve
    for spec in make_demo_replay.battery_specs():
        for prompt, n in replay_need(requests(spec)).items():
            assert counts.get((prompt, "SmolLM2-135M-Instruct"), 0) >= n, (
                f"battery: {prompt[:60]!r} is recorded fewer than {n} times"
            )
    assert not any(re.search(r"<\|im_(start|end)\|>", k[0]) for k in counts)


def test_history_reopens_every_kind_of_run(make_app):
    """Persona (two models), control-vs-target and model-comparison runs reopen with their
    own views: heat map, gate and ROC, distance bars."""
    base = "John has these features: Age: 70"
    table = pd.DataFrame(
        [
            {"name": "peter", "prefix": "", "prompt": base.replace("John", "Peter"), "role": "control"},
            {"name": "comedian", "prefix": "", "prompt": "Act as a comedian. " + base, "role": "target"},
        ]
    )
    with FakeOpenAI(models=("m1", "m2")) as srv:
        models = [
            {"backend": "openai", "name": "m1", "base_url": srv.base_url},
            {"backend": "openai", "name": "m2", "base_url": srv.base_url},
        ]
        at = make_app(
            models=models,
            page="pages/persona_explorer.py",
            w_embedder="rouge1",
            w_samples=5,
            w_base_prompt=base,
            w_persona_list=["comedian", "doctor"],
            w_persona_models=["m1", "m2"],
            roc_table=table,
        )
        at.button(key="personas_run").click().run()
        at.switch_page("pages/control_target.py").run()
        at.button(key="roc_run").click().run()
        at.switch_page("pages/model_comparison.py").run()
        at.button(key="models_run").click().run()
    assert not at.exception and not errors(at), errors(at)
    at.switch_page("pages/history.py").run()
    runs = _table(at, "control gate")
    assert list(runs["from"]) == ["Model comparison", "Control vs target", "Persona explorer"]
    for run_id, check in (
        (3, "Distance from the reference"),
        (2, "ROC over the significance"),
        (1, "by persona and model"),
    ):
        at.selectbox(key="hist_open").set_value(run_id).run()
        assert not at.exception, at.exception
        specs = " ".join(c.proto.spec for c in at.get("plotly_chart"))
        assert check in specs, (run_id, check)
    # the control-vs-target run shows its gate first
    at.selectbox(key="hist_open").set_value(2).run()
    assert any("Control gate passed" in s for s in successes(at))


def test_history_compare_warns_when_the_scales_differ(make_app):
    """Two runs with different measures: their ω above chance are not comparable bars."""
    at = make_app(w_embedder="rouge1")
    _run_landing(at, 6)
    at.selectbox(key="w_measure").set_value("jsd").run()
    _run_landing(at, 6)
    at.switch_page("pages/history.py").run()
    at.session_state["hist_tabs"] = "Compare two runs"
    at.run()
    assert not at.exception, at.exception
    assert any("different scales" in w for w in warnings(at)), warnings(at)
