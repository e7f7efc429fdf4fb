"""Flow on the dashboard: a value out of range or an empty prompt is named in the user's
words and Run waits for a valid one; Stop's flag; History of every kind of run."""

import pytest

from .conftest import errors


@pytest.mark.parametrize("k", [1, 0, -5, 99999])
def test_k_out_of_range_disables_run_with_one_line(make_app, k):
    at = make_app(w_samples=k)
    run = next(b for b in at.button if b.label == "Run audit")
    assert run.disabled
    lines = [e for e in errors(at) if "between 2 and 500" in e]
    assert lines and f"it is {k:,}" in lines[0], errors(at)
    assert len(at.sidebar.error) == 1  # said once beside the field too


def test_an_empty_prompt_is_named_in_the_users_words(make_app):
    at = make_app(w_base_prompt="   ")
    run = next(b for b in at.button if b.label == "Run audit")
    assert run.disabled
    text = " ".join(errors(at))
    assert "the prompt is empty" in text and "base.prompt" not in text


def test_k_back_in_range_enables_run(make_app):
    at = make_app(w_samples=1)
    at.sidebar.number_input[0].set_value(12).run()
    run = next(b for b in at.button if b.label == "Run audit")
    assert not run.disabled and not any("between 2 and 500" in e for e in errors(at))


def test_the_progress_line_says_the_bars_own_share():
    """The bar went by tokens (26 %) while its line said 6/180: now the line leads with the
    bar's share and names the answers complete."""
    from dbpa_core.sampling import Progress
    from ui.runner import progress_text

    p = Progress(
        "sampling",
        6,
        180,
        "3,456 tokens, 250 tokens/s, estimating the time left",
        tokens=5_616,
        tokens_expected=21_600,
    )
    assert p.fraction == pytest.approx(0.26)
    assert progress_text(p).startswith("Sampling responses: 26 % (6 of 180 answers complete)")
    assert progress_text(Progress("embedding", 64, 180)) == "Embedding responses: 64/180"


# ---------------------------------------------------------------- History of every run
BATTERY = dict(
    w_bat_per_set=1,
    w_bat_sets=["true/false"],
    w_bat_word=False,
    w_bat_visual=False,
    w_bat_char_rho=[0.5],
    w_bat_instr=False,
    w_bat_orders=0,
    w_bat_rti=[],
)


@pytest.fixture(scope="module")
def rule_server():
    from dbpa_core.attacks.sample import sample_items
    from tests.rule_model import RuleModel, vocabulary_of

    items = sample_items(2, seed=0)
    with RuleModel(vocabulary_of([it.passage for it in items] + [it.question for it in items])) as srv:
        yield srv


def _history():
    from dbpa_core.history import History

    return History()


def test_a_battery_run_is_recorded_once_and_reopens_on_its_page(make_app, rule_server):
    model = [{"backend": "openai", "name": "rule-model", "base_url": rule_server.base_url, "max_retries": 0}]
    at = make_app(models=model, page="pages/robustness.py", **BATTERY)
    at.button(key="robustness_run").click().run()
    assert not at.exception and not errors(at), errors(at)
    runs = _history().list()
    assert len(runs) == 1
    extras = _history().extras([runs[0].id])
    assert extras[runs[0].id]["kind"] == "battery"
    assert extras[runs[0].id]["models"] == ("rule-model",)
    # the same inputs again, every answer cached: the same run, not a second one
    at.button(key="robustness_run").click().run()
    assert len(_history().list()) == 1
    assert any(f"same inputs as run #{runs[0].id}" in c.value for c in at.caption)

    # History lists it as a battery and reopens it on the battery page
    at.session_state["results"] = {}
    at.session_state["w_bat_orders"] = 2  # the form changed since the run
    at.switch_page("pages/history.py").run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["kind"]) == ["Robustness battery"]
    at.button(key="hist_reopen").click().run()
    assert not at.exception, at.exception
    assert at.title[0].value.startswith("Robustness battery")
    assert at.session_state["results"]["robustness"]["battery"].clean().er.n >= 1
    assert at.session_state["w_bat_orders"] == 0  # the inputs of that run, with its results
    assert any(t.label == "ER / ASR" for t in at.tabs)


def test_loading_a_run_names_only_that_page(make_app):
    at = make_app(w_samples=6, w_embedder="rouge1", w_permutations=200)
    at.sidebar.text_input[0].set_value("landing audit").run()
    at.button(key="landing_run").click().run()
    assert not at.exception and len(_history().list()) == 1
    at.switch_page("pages/persona_explorer.py").run()
    at.sidebar.text_input[0].set_value("my personas").run()
    at.switch_page("pages/history.py").run()
    at.button(key="hist_load").click().run()  # into the Perturbation test page
    assert at.title[0].value.startswith("Does a perturbation")
    assert at.sidebar.text_input[0].value == "landing audit"
    at.switch_page("pages/persona_explorer.py").run()
    assert at.sidebar.text_input[0].value == "my personas"  # not renamed


def test_a_deleted_run_is_selected_nowhere(make_app):
    at = make_app(w_samples=6, w_embedder="rouge1", w_permutations=200)
    at.button(key="landing_run").click().run()
    at.sidebar.number_input[0].set_value(7).run()
    at.button(key="landing_run").click().run()
    runs = _history().list()
    assert len(runs) == 2
    newest = runs[0].id
    at.switch_page("pages/history.py").run()
    assert at.selectbox(key="hist_open").value == newest
    at.session_state["hist_tabs"] = "Delete runs"
    at.run()
    at.multiselect(key="hist_delete_ids").select(newest).run()
    at.button(key="hist_delete").click().run()
    at.button(key="hist_delete_yes").click().run()
    assert not at.exception
    assert [r.id for r in _history().list()] == [runs[1].id]
    at.session_state["hist_tabs"] = "Open a run"
    at.run()
    assert at.selectbox(key="hist_open").value == runs[1].id
    assert at.session_state["results_meta"]["landing"]["run"].run_id is None


# ---------------------------------------------------------------- a reload keeps everything
def test_a_new_session_shows_the_last_form_and_results_again(make_app):
    at = make_app(w_samples=6, w_embedder="rouge1", w_permutations=200)
    table = at.session_state["perturbations"].iloc[:3].copy()
    at.session_state["perturbations"] = table
    at.session_state["perturbations_version"] = 1
    at.sidebar.text_input[0].set_value("before reload").run()
    at.button(key="landing_run").click().run()
    assert not at.exception and not errors(at)
    first = at.session_state["results"]["landing"]
    [run] = _history().list()

    again = make_app(models=at.session_state["models"])  # a reload: a new session
    assert again.session_state["w_samples"] == 6
    assert again.session_state["w_embedder"] == "rouge1"
    assert list(again.session_state["perturbations"]["name"]) == list(table["name"])
    assert again.sidebar.text_input[0].value == "before reload"
    results = again.session_state["results"]["landing"]
    ((job, result),) = results.items()
    assert job in first and [p.name for p in result.perturbations] == list(table["name"])
    assert again.session_state["results_meta"]["landing"]["run"].run_id == run.id
    text = " ".join(w.value for w in again.warning) + " ".join(i.value for i in again.info)
    assert "Outdated" not in text and "Recorded result" not in text


@pytest.mark.parametrize(
    ("page", "run"),
    [("pages/robustness.py", "robustness_run"), ("pages/persona_explorer.py", "personas_run")],
)
def test_k_out_of_range_is_named_on_other_pages_too(make_app, page, run):
    at = make_app(page=page, w_samples=99999)
    assert at.button(key=run).disabled
    assert any("between 2 and 500 (it is 99,999)" in e for e in errors(at)), errors(at)
