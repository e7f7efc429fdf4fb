"""The Robustness battery page under AppTest, against the rule-based model over HTTP:
defaults run, results and downloads appear, a rerun costs nothing, uploads work, and bad
input shows a short error (never a traceback)."""

import json

import pytest

from dbpa_core.attacks.sample import sample_items
from tests.rule_model import RuleModel, vocabulary_of
from ui import attack_figures, battery

from .conftest import errors

pytestmark = pytest.mark.slow  # whole-page runs, like tests/app/test_pages.py
PAGE = "pages/robustness.py"
ITEMS = sample_items(3, seed=0)
VOCAB = vocabulary_of([it.passage for it in ITEMS] + [it.question for it in ITEMS])


@pytest.fixture(scope="module")
def server():
    with RuleModel(VOCAB) as srv:
        yield srv


@pytest.fixture
def page(make_app, server):
    def make(**state):
        model = [{"backend": "openai", "name": "rule-model", "base_url": server.base_url, "max_retries": 0}]
        return make_app(models=model, page=PAGE, **state)

    return make


def test_defaults_run_and_show_every_result(page, server):
    at = page(
        w_bat_rti=["replace", "delete"],
        w_bat_curve=True,
        w_samples=4,
        w_embedder="rouge1",
        w_permutations=200,
    )
    assert at.title[0].value.startswith("Robustness battery")
    assert not errors(at)
    labels = [m.label for m in at.metric]
    assert labels == ["Answers to ask", "RTI (at most)", "Curve samples", "Estimated cost"]
    to_ask = int(at.metric[0].value)  # 8 items: clean, 7 attacks, 5 instructions, 3 orders, at most
    assert 100 <= to_ask <= 8 * (1 + 7 + 5 + 2)
    at.button(key="robustness_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    result = at.session_state["results"]["robustness"]["battery"]
    assert len(result.spec.items) == 8 and [a.name for a in result.spec.attacks] == [
        "char",
        "word",
        "visual r=0.5",
    ]
    table = next(d.value for d in at.dataframe if "ASR 95% CI" in d.value.columns)
    assert list(table["attack"])[:2] == ["clean", "char"] and len(table) == 1 + 7
    assert table["ER"][0] == pytest.approx(result.clean().er.value)
    assert {r.attack for r in result.rti} == {"replace", "delete"} and result.curve
    asked = {r.query.prompt for r in result.records if r.query.kind != "rti"}
    assert len(asked) == to_ask  # the estimate counted every distinct prompt
    assert any("Clean:" in m.value and "ER" in m.value for m in at.markdown)
    # examples are escaped text with the changes marked
    ex = [m.value for m in at.markdown if "<mark>" in m.value]
    assert ex and all("<script" not in e for e in ex)
    # which words: the phrase table and the forest's importances as charts
    specs = " ".join(c.proto.spec for c in at.get("plotly_chart"))
    assert "Which phrases break it" in specs
    assert result.phrases.forest.fitted and "What predicts a changed answer" in specs
    assert any("ASR when hit" in d.value.columns for d in at.dataframe)
    assert any("held-out accuracy" in m.value for m in at.markdown)
    # downloads: CSV, JSON, JSONL, HTML report
    assert len([b for b in at.get("download_button")]) == 4
    html = attack_figures.html_report(result, attack_figures.battery_figures(result))
    assert "ER and ASR per attack" in html and "plotly" in html
    # a rerun comes from the cache
    before = server.requests
    at.button(key="robustness_run").click().run()
    again = at.session_state["results"]["robustness"]["battery"]
    assert again.usage["calls"] == 0 and server.requests == before
    at.selectbox(key="robustness_ex_pick").set_value(at.selectbox(key="robustness_ex_pick").options[-1])
    at.checkbox(key="robustness_only_unparsed").check().run()
    assert not at.exception


def test_upload_items(page):
    lines = "".join(
        json.dumps(
            {
                "id": f"u{i}",
                "passage": it.passage,
                "question": it.question,
                "options": list(it.options),
                "answer": it.answer_letter,
                "dataset": "uploaded",
            }
        )
        + "\n"
        for i, it in enumerate(ITEMS[:4])
    )
    at = page(
        w_bat_data="Upload a file",
        w_bat_rti=[],
        w_bat_orders=0,
        w_bat_instr=False,
        w_bat_word=False,
        w_bat_visual=False,
    )
    assert any("Upload a file of items" in e for e in errors(at))
    assert at.button(key="robustness_run").disabled
    at.file_uploader(key="bat_upload").set_value(("mine.jsonl", lines.encode(), "application/jsonl")).run()
    assert not errors(at), errors(at)
    assert any("4 items read from mine.jsonl" in c.value for c in at.caption)
    at.button(key="robustness_run").click().run()
    assert not at.exception and not errors(at)
    res = at.session_state["results"]["robustness"]["battery"]
    assert [it.id for it in res.spec.items] == ["u0", "u1", "u2", "u3"]


@pytest.mark.parametrize(
    "state, message",
    [
        (dict(w_bat_sets=[]), "Choose at least one sample data set"),
        (dict(w_bat_char_rho=[]), "attacks[0].rho must list at least one ρ"),
        (
            dict(
                w_bat_char=False,
                w_bat_word=False,
                w_bat_visual=False,
                w_bat_instr=False,
                w_bat_orders=0,
                w_bat_rti=[],
            ),
            "nothing to run",
        ),
        (dict(w_bat_curve=True, w_temperature=0.0), "curve.temperature must be >= 0.01"),
    ],
)
def test_bad_input_shows_a_short_error(page, state, message):
    at = page(**state)
    assert not at.exception
    assert any(message in e for e in errors(at)), errors(at)
    assert at.button(key="robustness_run").disabled


def test_bad_upload(page):
    at = page(w_bat_data="Upload a file")
    at.file_uploader(key="bat_upload").set_value(("bad.jsonl", b'{"question": "q"}\n', "text/plain")).run()
    assert any("line 1: missing 'answer'" in e for e in errors(at))
    at.file_uploader(key="bat_upload").set_value(("bin.jsonl", b"\xff\xfe\x00", "text/plain")).run()
    assert any("not UTF-8" in e for e in errors(at))
    assert not at.exception


def test_unreachable_server_is_a_short_error(make_app):
    with RuleModel() as srv:
        url = srv.base_url
    at = make_app(
        models=[{"backend": "openai", "name": "rule-model", "base_url": url, "max_retries": 0}],
        page=PAGE,
        w_bat_rti=[],
        w_bat_word=False,
    )
    at.button(key="robustness_run").click().run()
    assert not at.exception
    assert any("Cannot reach" in e for e in errors(at))


def test_form_to_spec_matches_the_cli_spec():
    """The page's defaults describe the same kind of spec the CLI reads."""
    settings = {
        "seed": 0,
        "samples": 10,
        "permutations": 500,
        "measure": "jsd",
        "correction": "holm",
        "alpha": 0.05,
        "embedder": {"backend": "rouge1"},
        "temperature": 0.8,
        "max_tokens": 60,
    }
    spec = battery.build_spec(dict(battery.DEFAULTS), settings, {"backend": "local"})
    assert len(spec.items) == 8 and spec.rti == ("replace",) and spec.option_orders == 3
    assert len(spec.instructions) == 5 and spec.curve is None and spec.temperature == 0.0
    own = dict(battery.DEFAULTS, w_bat_own="Pick one.\n\n", w_bat_curve=True)
    spec = battery.build_spec(own, settings, {"backend": "local"})
    assert spec.instructions[-1] == "Pick one." and spec.curve.max_tokens == 60


def test_missing_wordnet_is_a_short_error(page, monkeypatch):
    import dbpa_core.attacks.wordnet as W

    monkeypatch.setattr(W, "available", lambda: False)
    at = page()
    assert any("make wordnet" in e and "untick word edits" in e for e in errors(at)), errors(at)
    assert at.button(key="robustness_run").disabled
    at = page(w_bat_word_op="delete", w_bat_rti=[])  # deletions need no WordNet
    assert not errors(at)


def test_a_replay_file_without_the_battery_prompts_is_said_before_run(make_app, tmp_path):
    """Like the audit pages: a replay model is checked for every prompt the battery may send
    (RTI's every round) before Run, which stays disabled; with every prompt recorded, it runs."""
    from dbpa_core.runs import replay_need, requests

    settings = {
        "seed": 0,
        "samples": 10,
        "permutations": 500,
        "measure": "energy-l2",
        "correction": "holm",
        "alpha": 0.05,
        "embedder": {"backend": "rouge1"},
        "temperature": 0.8,
        "max_tokens": 60,
    }
    values = dict(battery.DEFAULTS, w_bat_per_set=1, w_bat_sets=["true/false"])
    rec = tmp_path / "rec.jsonl"
    rec.write_text("")
    spec = battery.build_spec(values, settings, {"backend": "replay", "file": str(rec)})
    need = replay_need(requests(spec))
    lines = [json.dumps({"prompt": p, "response": "A"}) for p in need]
    rec.write_text("\n".join(lines[:-1]) + "\n")  # the last prompt is missing
    model = [{"backend": "replay", "file": str(rec), "label": "recorded"}]
    at = make_app(
        models=model, page=PAGE, **{k: v for k, v in values.items()}, w_embedder="rouge1", w_samples=10
    )
    assert any(f"no recorded answer for 1 of the {len(need)} prompts" in e for e in errors(at)), errors(at)
    assert at.button(key="robustness_run").disabled
    rec.write_text("\n".join(lines) + "\n")
    at = make_app(
        models=model, page=PAGE, **{k: v for k, v in values.items()}, w_embedder="rouge1", w_samples=10
    )
    assert not errors(at), errors(at)
    at.button(key="robustness_run").click().run()
    assert not at.exception and not errors(at), errors(at)


def test_replay_checks_share_one_reading_of_the_file(tmp_path):
    """The battery, fidelity and audit pages ask runner.replay_lacking: prompts held fewer
    times than wanted, in order, or one escaped line when the file cannot be read."""
    from ui.runner import replay_lacking

    rec = tmp_path / "rec.jsonl"
    rec.write_text(
        "\n".join(json.dumps({"prompt": p, "response": r}) for p, r in [("a", "1"), ("a", "2"), ("b", "1")])
        + "\n"
    )
    model = {"backend": "replay", "file": str(rec), "label": "my_rec"}
    assert replay_lacking(model, {"a": 2, "b": 2, "c": 1}) == (["b", "c"], None)
    assert replay_lacking(model, {"a": 2, "b": 1}) == ([], None)
    gone = dict(model, file=str(tmp_path / "gone.jsonl"))
    lacking, message = replay_lacking(gone, {"a": 1})
    assert lacking == [] and message.startswith(r"The replay file of my\_rec cannot be read: ")
