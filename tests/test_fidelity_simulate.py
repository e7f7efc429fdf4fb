"""The simulation runner end to end over HTTP against a rule-based survey respondent
(tests/survey_model.py, 127.0.0.1): counts and unparsed answers against the rules
computed by hand, every answer cached (a rerun makes no call, a stop resumes), persona
templates, spec errors with their line, and the embedded model offline (slow)."""

import numpy as np
import pytest

from dbpa_core.cache import Cache
from dbpa_core.fidelity.data import FidelityDataError, parse_csv
from dbpa_core.fidelity.simulate import (
    DEFAULT_TEMPLATE,
    TemplateError,
    check_template,
    estimate_simulation,
    parse_simulation_spec,
    plan_jobs,
    render_prompt,
    simulate,
)
from dbpa_core.sampling import RunCancelled
from dbpa_core.spec import SpecError

from .survey_model import SurveyModel, expected_choice
from .test_fidelity_data import opinionqa_folder

SURVEY = """scenario,option,real,question
pets,Yes,30,Do you have a pet?
pets,No,20,
news,Never,5,How often do you read the news?
news,Sometimes,15,
news,Often,30,
bikes,Yes,12,Do you own a bicycle?
bikes,No,18,
"""


@pytest.fixture(scope="module")
def server():
    with SurveyModel() as srv:
        yield srv


def model(srv, label="survey"):
    return {
        "backend": "openai",
        "name": "survey-model",
        "base_url": srv.base_url,
        "max_retries": 0,
        "label": label,
    }


def expected(data, models, **settings):
    """Counts and unparsed answers per (model, scenario), from the rules by hand."""
    counts, unparsed = {}, {}
    for label, s, job in plan_jobs(data, models, **settings):
        c = counts.setdefault(label, {}).setdefault(s.id, np.zeros(len(s.options)))
        k = expected_choice(job.request.prompt, job.request.seed % 2**31)
        if k is None:
            unparsed.setdefault(label, {}).setdefault(s.id, 0)
            unparsed[label][s.id] += 1
        else:
            c[k] += 1
    return counts, unparsed


def test_counts_unparsed_and_calls(server, tmp_path):
    data = parse_csv(SURVEY)
    models = [model(server, "plain"), model(server, "female")]
    settings = dict(samples=12, seed=3)
    before = server.requests
    res = simulate(data, models[:1], cache=Cache(tmp_path / "c"), **settings)
    res2 = simulate(data, models[1:], cache=Cache(tmp_path / "c"), persona=[("Sex", "Female")], **settings)
    assert server.requests - before == 2 * 3 * 12
    want, want_unparsed = expected(data, models[:1], **settings)
    for s in data.scenarios:
        np.testing.assert_array_equal(res.data.simulated["plain"][data.ids.index(s.id)], want["plain"][s.id])
        assert res.unparsed["plain"][s.id] == want_unparsed.get("plain", {}).get(s.id, 0)
    assert res.unparsed_total("plain") == sum(want_unparsed["plain"].values()) > 0
    # the persona changes the answers: the rules pick option A for "Sex: Female"
    assert res2.data.simulated["female"][0][0] > res.data.simulated["plain"][0][0]
    assert res.data.sim_kinds["plain"] == "counts" and res.usage["calls"] == 36
    assert any("named no option" in w for w in res.warnings)
    texts = [a for a in res.answers if a.how == "text"]
    assert texts and all(a.letter for a in texts)  # option texts are read, not guessed


def test_rerun_costs_nothing_and_a_stop_resumes(server, tmp_path):
    data = parse_csv(SURVEY)
    m = [model(server)]
    cache = tmp_path / "c"
    assert estimate_simulation(data, m, cache=Cache(cache), samples=10) == {
        "answers": 30,
        "cached": 0,
        "calls": 30,
    }
    events = []
    with pytest.raises(RunCancelled, match="run again to resume"):
        simulate(
            data,
            m,
            samples=10,
            cache=Cache(cache),
            progress=events.append,
            should_stop=lambda: any(e.done >= 5 for e in events),
        )
    before = server.requests
    res = simulate(data, m, samples=10, cache=Cache(cache))
    assert 0 < res.usage["calls"] < 30 and res.usage["calls"] + res.usage["cached_samples"] == 30
    assert server.requests - before == res.usage["calls"]
    before = server.requests
    again = simulate(data, m, samples=10, cache=Cache(cache))
    assert again.usage["calls"] == 0 and server.requests == before
    for a, b in zip(again.data.simulated["survey"], res.data.simulated["survey"], strict=True):
        np.testing.assert_array_equal(a, b)
    more = simulate(data, m, samples=14, cache=Cache(cache))  # 4 more per question
    assert more.usage["calls"] == 12 and server.requests - before == 12


def test_unreadable_questions_are_dropped_and_named(server, tmp_path):
    text = SURVEY.replace("Do you own a bicycle?", "UNREADABLE bicycle?")
    res = simulate(parse_csv(text), [model(server)], samples=5, cache=Cache(tmp_path / "c"))
    assert res.dropped == ("bikes",) and res.data.ids == ("pets", "news")
    assert any("dropped 'bikes'" in w for w in res.warnings)
    mute = text.replace("Do you have a pet?", "UNREADABLE pet?")
    res = simulate(parse_csv(mute), [model(server)], samples=5, cache=Cache(tmp_path / "c"))
    assert res.data is None and "fewer than 2 questions got a readable answer" in res.error
    assert len(res.answers) == 15 and res.unparsed["survey"]["pets"] == 5


def test_opinionqa_groups_are_the_personas(server, tmp_path):
    from dbpa_core.fidelity.data import load_opinionqa

    data = load_opinionqa(opinionqa_folder(tmp_path), attribute="SEX")
    prompt = render_prompt(data.scenarios[0], DEFAULT_TEMPLATE, [("Age", "30-49")])
    assert "- Age: 30-49\n- SEX: Female" in prompt and "(B) No, I don't own any guns" in prompt
    res = simulate(data, [model(server)], samples=6, cache=Cache(tmp_path / "c"))
    assert res.data.m == 4 and res.data.simulators == ("survey",)


def test_templates():
    data = parse_csv(SURVEY)
    p = render_prompt(data.scenarios[1], "Q: {question}\n{options}\nAs a {Job}: ", [("Job", "nurse")])
    assert p == "Q: How often do you read the news?\n(A) Never\n(B) Sometimes\n(C) Often\nAs a nurse: "
    assert "(no characteristics given)" in render_prompt(data.scenarios[0])
    with pytest.raises(TemplateError, match=r"must contain \{options\}"):
        check_template("{question}")
    with pytest.raises(TemplateError, match=r"unknown placeholder \{age\}"):
        check_template("{question} {options} {age}", ["Age"])
    with pytest.raises(TemplateError, match="unbalanced braces"):
        check_template("{question} {options} {")


def test_questions_are_needed():
    with pytest.raises(FidelityDataError, match="scenario 'a' has no question text"):
        plan_jobs(
            parse_csv("scenario,option,real\na,x,1\na,y,1\nb,x,1\nb,y,2\n"), [{"backend": "local"}], samples=2
        )


def test_samples_and_models_must_be_given():
    with pytest.raises(ValueError, match="`samples` must be a whole number >= 1"):
        simulate(parse_csv(SURVEY), [{"backend": "local"}], samples=0)
    with pytest.raises(ValueError, match="`models` must list at least one model"):
        simulate(parse_csv(SURVEY), [], samples=2)


# --------------------------------------------------------------------------- spec


def test_spec(tmp_path, server):
    (tmp_path / "survey.csv").write_text(SURVEY)
    spec = parse_simulation_spec(
        f"""
name: pets
data: survey.csv
models:
  - {{backend: openai, name: survey-model, base_url: "{server.base_url}", label: one}}
  - {{backend: local}}
samples: 7
persona: {{Age: 30-49, Sex: Female}}
loss: w1
gamma: 0.8
""",
        base_dir=tmp_path,
        source="pets.yaml",
    )
    assert spec.samples == 7 and len(spec.models) == 2 and spec.persona[0] == ("Age", "30-49")
    assert spec.analysis == {"loss": "w1", "gamma": 0.8} and spec.data.m == 3
    assert parse_simulation_spec("data: sample\nlimit: 5\n").data.m == 5


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "data: sample\nsampels: 3\n",
            r"line 2: unknown key 'sampels' in the spec \(did you mean 'samples'\?\)",
        ),
        ("data: sample\nsamples: 0\n", "line 2: samples must be >= 1"),
        ("data: sample\npersona: [Age]\n", "line 2: 'persona' maps a field to its value"),
        ("data: sample\ntemplate: 'Q: {question}'\n", r"line 2: the template must contain \{options\}"),
        ("data: sample\nloss: hamming\n", "line 2: loss must be one of tv, kl, w1, squared, absolute"),
        ("data: nowhere.csv\n", "line 1: data file 'nowhere.csv' does not exist"),
        ("data: sample\nmodel: {backend: local}\nmodels: [{backend: local}]\n", "give 'model' or 'models'"),
        ("data: sample\nkeep_simulators: maybe\n", "line 2: 'keep_simulators' is true or false"),
    ],
)
def test_spec_errors_name_the_line(text, message):
    with pytest.raises(SpecError, match=message):
        parse_simulation_spec(text, source="s.yaml")


def test_spec_with_data_without_questions(tmp_path):
    (tmp_path / "d.csv").write_text("scenario,option,real\na,x,1\na,y,1\nb,x,1\nb,y,2\n")
    with pytest.raises(SpecError, match=r"s\.yaml, line 1: scenario 'a' has no question text"):
        parse_simulation_spec("data: d.csv\n", source="s.yaml", base_dir=tmp_path)


# --------------------------------------------------------------------------- offline model


@pytest.mark.slow
def test_the_embedded_model_answers_offline(tmp_path):
    """SmolLM2-135M on two questions, three answers each: whatever it says is cached,
    parsed or counted as unparsed, and a rerun is free."""
    data = parse_csv(SURVEY).select(["pets", "bikes"])
    res = simulate(data, [{"backend": "local"}], samples=3, max_tokens=8, cache=Cache(tmp_path / "c"))
    name = res.models[0]
    assert res.parsed_total(name) + res.unparsed_total(name) == 6
    assert len(res.answers) == 6 and res.usage["calls"] == 6
    again = simulate(data, [{"backend": "local"}], samples=3, max_tokens=8, cache=Cache(tmp_path / "c"))
    assert again.usage["calls"] == 0
