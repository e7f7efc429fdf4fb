"""Every answer in one grid: 10,000 synthetic answers under AppTest — search, filters by arm
and by check, sorting, a selected answer beside the closest base answer, the CSV of the
rows shown — each checked against counts made here from the synthetic answers."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dbpa_core.audit import Arm, ArmResponses, AuditResult
from dbpa_core.checks import word_count
from dbpa_core.spec import parse_spec
from ui import grid

ARMS = ("base", "doctor", "comedian", "child", "pirate")
K = 2000  # 5 arms x 2000 = 10,000 answers
CHECKS = [
    {"name": "mentions a statin", "contains": ["statin"]},
    {"name": "refuses", "refusal": True},
    {"name": "length", "words": True},
]


def answer(arm: int, i: int) -> str:
    """A synthetic answer: a statin in every third (fewer for the comedian), a refusal in
    every 50th of the child's, lengths that vary."""
    words = " ".join(["risk"] * ((i * 7 + arm) % 40))
    statin = "Offer a statin (atorvastatin 20 mg). " if i % (3 + 3 * (arm == 2)) == 0 else ""
    refuse = "I'm sorry, but I can't help with that. " if arm == 3 and i % 50 == 0 else ""
    return f"{refuse}{statin}Answer {i} of arm {ARMS[arm]}: {words}".strip()


def synthetic(k: int = K) -> dict[str, AuditResult]:
    spec = parse_spec(
        {
            "name": "grid",
            "model": {"backend": "local"},
            "samples": 20,
            "base": {"prompt": "Q"},
            "checks": CHECKS,
            "perturbations": [{"name": n, "prefix": n} for n in ARMS[1:]],
        }
    )
    arms = []
    for a, name in enumerate(ARMS):
        # embeddings: answer i of every arm points where base answer (i * 3) % k points,
        # so the closest base answer is known
        emb = np.zeros((k, 8))
        idx = np.arange(k) if a == 0 else (np.arange(k) * 3) % k
        emb[np.arange(k), idx % 8] = 1.0 + idx / k
        emb[np.arange(k), (idx + 1) % 8] += idx % 97 / 97  # ties broken by a second axis
        arms.append(
            ArmResponses(
                Arm(name, f"{name} Q", None, {"backend": "local"}, "target" if a else None),
                tuple(answer(a, i) for i in range(k)),
                emb,
                0,
                0,
                0,
            )
        )
    return {"": AuditResult(spec, arms[0], tuple(arms[1:]), (), None)}


SCRIPT = """
import streamlit as st
from tests.app.test_grid import synthetic
from ui import grid

if "res" not in st.session_state:
    st.session_state["res"] = synthetic()
grid.answers_grid(st.session_state["res"], key="g")
"""


@pytest.fixture(scope="module")
def app():
    at = AppTest.from_string(SCRIPT, default_timeout=240)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def truth():
    return pd.DataFrame(
        [{"arm": n, "sample": i + 1, "answer": answer(a, i)} for a, n in enumerate(ARMS) for i in range(K)]
    )


def shown(at) -> str:
    return next(c.value for c in at.caption if "answers" in c.value)


def reset(at) -> None:
    at.text_input(key="g_grid_q").set_value("")
    at.multiselect(key="g_grid_arms").set_value([])
    at.selectbox(key="g_grid_check").set_value("(none)")
    at.selectbox(key="g_grid_sort").set_value("(as sampled)")
    at.toggle(key="g_grid_desc").set_value(False)
    at.run()


def test_all_10000_answers_in_one_table_with_the_checks_as_columns(app, truth):
    assert shown(app).startswith("10,000 of 10,000 answers")
    df = app.dataframe(key="g_grid_table").value
    assert {"arm", "role", "sample", "answer", "mentions a statin", "refuses", "length"} <= set(df)
    assert "_job" not in df and "model" not in df  # one model: no model column
    full = grid.answers_frame(synthetic())
    assert len(full) == 10_000
    assert full["mentions a statin"].sum() == truth["answer"].str.contains("statin").sum()
    assert list(full["length"]) == [word_count(t) for t in truth["answer"]]
    assert full.loc[full["arm"] == "child", "refuses"].sum() == K // 50


def test_search_arm_and_check_filters(app, truth):
    reset(app)
    app.text_input(key="g_grid_q").set_value("ATORVASTATIN").run()
    hits = truth["answer"].str.lower().str.contains("atorvastatin").sum()
    assert shown(app).startswith(f"{hits:,} of 10,000 answers match")
    assert f"These {hits:,} answers (CSV)" in [b.label for b in app.get("download_button")]

    app.text_input(key="g_grid_q").set_value("").run()
    app.multiselect(key="g_grid_arms").set_value(["comedian", "base"]).run()
    app.selectbox(key="g_grid_check").set_value("mentions a statin").run()
    app.selectbox(key="g_grid_outcome").set_value("failed").run()
    sub = truth[truth["arm"].isin(["comedian", "base"])]
    expected = (~sub["answer"].str.contains("statin")).sum()
    assert shown(app).startswith(f"{expected:,} of 10,000 answers match")
    df = app.dataframe(key="g_grid_table").value
    assert set(df["arm"]) <= {"comedian", "base"} and not df["mentions a statin"].any()
    app.selectbox(key="g_grid_outcome").set_value("passed").run()
    assert shown(app).startswith(f"{len(sub) - expected:,} of")
    reset(app)


def test_sorting(app):
    reset(app)
    app.selectbox(key="g_grid_sort").set_value("length").run()
    app.toggle(key="g_grid_desc").set_value(True).run()
    df = app.dataframe(key="g_grid_table").value
    lengths = list(df["length"])
    assert lengths[0] == max(word_count(answer(a, i)) for a in range(5) for i in range(K))
    assert lengths == sorted(lengths, reverse=True)
    reset(app)


def texts(at) -> str:
    """The side-by-side answers as read on screen (the diff's marks removed)."""
    return " ".join(re.sub(r"<[^>]+>", "", h.proto.body) for h in at.get("html"))


def test_a_selected_answer_sits_beside_the_closest_base_answer(app):
    reset(app)
    app.multiselect(key="g_grid_arms").set_value(["pirate"]).run()
    app.session_state["g_grid_table"] = {"selection": {"rows": [5], "columns": [], "cells": []}}
    app.run()
    assert not app.exception, app.exception
    near = [n for n in app.number_input if n.key.startswith("g_grid_base_")]
    assert len(near) == 1
    # pirate answer 6 (index 5) points where base answer 15 does
    assert near[0].value == 16 and "16 is the closest in meaning" in near[0].label
    assert "Answer 15 of arm base" in texts(app) and "Answer 5 of arm pirate" in texts(app)
    near[0].set_value(1).run()
    assert "Answer 0 of arm base" in texts(app)
    app.session_state["g_grid_table"] = {"selection": {"rows": [], "columns": [], "cells": []}}
    reset(app)


def test_filter_frame_and_the_csv_of_the_rows_shown():
    df = grid.answers_frame(synthetic(k=40))
    view = grid.filter_frame(
        df, query="statin", arms=["doctor"], check="refuses", outcome="failed", sort="sample", descending=True
    )
    expected = [i + 1 for i in range(40) if "statin" in answer(1, i)][::-1]
    assert list(view["sample"]) == expected
    csv = pd.read_csv(io.StringIO(view[[c for c in view if not c.startswith("_")]].to_csv(index=False)))
    assert list(csv["sample"]) == expected and csv["answer"].iloc[0] == answer(1, expected[0] - 1)
    nothing = grid.filter_frame(df, check="mentions a statin", outcome=grid.NONE)
    assert nothing.empty  # rules always give a verdict
    assert grid.check_column("answer") == "answer (check)"
