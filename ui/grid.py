"""Every answer in one grid: one row per answer (model × arm × sample), the answer checks as
columns; search, filters, sorting, the chosen answer beside a base answer, CSV export.

Built for many answers: the table is one ``st.dataframe`` built once per result and session,
and search, filters and sorting are pandas operations on it (no widget per row).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult

from . import checks_view
from .widgets import DIFF_CSS, diff_html, md_escape

FIXED = ("model", "arm", "role", "sample", "answer")
HIDDEN = ("_job", "_arm", "_i")  # where a row comes from: job, arm position, sample index
ANY, PASSED, FAILED, NONE = "any", "passed", "failed", "no verdict"
PREVIEW = 300  # characters of an answer shown in the grid (the whole one below and in CSV)


def check_column(name: str, model_graded: bool = False) -> str:
    """A check's column: its name (``(model-graded)`` added for a judge's), unless that is
    one of the grid's own columns."""
    if model_graded:
        return f"{name} (model-graded)"
    return f"{name} (check)" if name in FIXED or name in HIDDEN else name


def answers_frame(results: Mapping[str, AuditResult], cache=None) -> pd.DataFrame:
    """One row per answer of every audit in ``results``: model, arm, role (base, control,
    target), sample (1-based), the answer, and one column per answer check (pass/fail as a
    nullable boolean — empty for a judge's reply that is unparsed or not in ``cache`` — or
    the number of words)."""
    parts = []
    for job, r in results.items():
        arms = (r.base, *r.arms)
        texts = [t for a in arms for t in a.texts]
        data: dict[str, object] = {
            "model": [a.arm.model_label for a in arms for _ in a.texts],
            "arm": [a.arm.name for a in arms for _ in a.texts],
            "role": [
                ("reference" if r.mode == "models" else "base") if i == 0 else (a.arm.role or "")
                for i, a in enumerate(arms)
                for _ in a.texts
            ],
            "sample": [j + 1 for a in arms for j in range(len(a.texts))],
            "answer": texts,
            "_job": [job] * len(texts),
            "_arm": [i for i, a in enumerate(arms) for _ in a.texts],
            "_i": [j for a in arms for j in range(len(a.texts))],
        }
        found = checks_view.outcome_columns(r.spec.checks, texts, cache, r.spec.seed)
        for c in r.spec.checks:
            values = found[c.name]
            data[check_column(c.name, c.model_graded)] = (
                pd.array(values, dtype="Int64") if c.numeric else pd.array(values, dtype="boolean")
            )
        parts.append(pd.DataFrame(data))
    if not parts:
        return pd.DataFrame(columns=[*FIXED, *HIDDEN])
    return pd.concat(parts, ignore_index=True)


def check_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in FIXED and c not in HIDDEN]


def pass_fail_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in check_columns(df) if str(df[c].dtype) == "boolean"]


def filter_frame(
    df: pd.DataFrame,
    *,
    query: str = "",
    arms=(),
    models=(),
    check: str | None = None,
    outcome: str = ANY,
    sort: str | None = None,
    descending: bool = False,
) -> pd.DataFrame:
    """The rows whose answer contains ``query`` (case ignored), of the chosen ``arms`` and
    ``models`` (all when empty), whose ``check`` has ``outcome`` (passed, failed, no
    verdict), sorted by ``sort`` (stable, empty values last)."""
    keep = np.ones(len(df), dtype=bool)
    q = query.strip()
    if q:
        keep &= df["answer"].str.contains(q, case=False, regex=False).to_numpy()
    if arms:
        keep &= df["arm"].isin(list(arms)).to_numpy()
    if models:
        keep &= df["model"].isin(list(models)).to_numpy()
    if check and check in df.columns and outcome != ANY:
        col = df[check]
        if outcome == NONE:
            keep &= col.isna().to_numpy()
        else:
            keep &= col.eq(outcome == PASSED).fillna(False).to_numpy(dtype=bool)
    out = df[keep]
    if sort and sort in out.columns:
        out = out.sort_values(sort, ascending=not descending, kind="stable", na_position="last")
    return out


def _frame(results: Mapping[str, AuditResult], key: str) -> pd.DataFrame:
    """:func:`answers_frame`, built once per result and session (the grid's filters rerun
    the page; the table is not rebuilt for them)."""
    from . import state

    memo = st.session_state.setdefault("_grid_memo", {})
    fp = tuple((job, checks_view.result_fingerprint(r)) for job, r in results.items())
    if memo.get(key, (None,))[0] != fp:
        try:
            cache = state.cache()
        except Exception:  # noqa: BLE001 - without a cache, judges' columns stay empty
            cache = None
        memo[key] = (fp, answers_frame(results, cache))
        checks_view.remember(memo, key)
    return memo[key][1]


def answers_grid(results: Mapping[str, AuditResult] | AuditResult, *, key: str) -> None:
    """The "Answers" tab: every answer in one searchable, filterable, sortable table; the
    selected answer beside a base answer; the rows shown as CSV."""
    if isinstance(results, AuditResult):
        results = {"": results}
    df = _frame(results, key)
    k = f"{key}_grid"
    c1, c2, c3 = st.columns([3, 2, 2])
    query = c1.text_input(
        "Search the answers", key=f"{k}_q", placeholder="text an answer contains (case ignored)"
    )
    arm_names = list(dict.fromkeys(df["arm"]))
    arms = c2.multiselect("Arms", arm_names, key=f"{k}_arms", placeholder="every arm")
    model_names = list(dict.fromkeys(df["model"]))
    # a model column when several models answer, unless each arm is a model (a comparison)
    by_model = len(model_names) > 1 and not df["arm"].equals(df["model"])
    models = (
        c3.multiselect("Models", model_names, key=f"{k}_models", placeholder="every model")
        if by_model
        else []
    )
    d1, d2, d3, d4 = st.columns([2, 2, 2, 1])
    judged = pass_fail_columns(df)
    check = d1.selectbox("Filter by check", ["(none)", *judged], key=f"{k}_check", disabled=not judged)
    outcome = d2.selectbox(
        "… whose answer", [ANY, PASSED, FAILED, NONE], key=f"{k}_outcome", disabled=check == "(none)"
    )
    sort = d3.selectbox(
        "Sort by", ["(as sampled)", *FIXED[:4], *check_columns(df), "answer length"], key=f"{k}_sort"
    )
    d4.write("")
    descending = d4.toggle("Descending", key=f"{k}_desc")
    source = df
    if sort == "answer length":
        source = df.assign(**{"answer length": df["answer"].str.len()})
    view = filter_frame(
        source,
        query=query,
        arms=arms,
        models=models,
        check=None if check == "(none)" else check,
        outcome=outcome,
        sort=None if sort == "(as sampled)" else sort,
        descending=descending,
    )
    shown = [
        c for c in view.columns if c not in HIDDEN and c != "answer length" and (c != "model" or by_model)
    ]
    display = view[shown].copy()
    display["answer"] = display["answer"].str.slice(0, PREVIEW)
    st.caption(
        f"{len(view):,} of {len(df):,} answers"
        + (" match" if len(view) != len(df) else "")
        + ". Select a row to read it whole beside a "
        "base answer; a column header sorts the rows shown. Check columns: ticked = passes; "
        "a number is the answer's length in words; empty = no verdict (a judge's reply that "
        "said neither yes nor no, or one not in the cache)."
    )
    event = st.dataframe(
        display,
        hide_index=True,
        key=f"{k}_table",
        on_select="rerun",
        selection_mode="single-row",
        height=420,
        column_config={
            "answer": st.column_config.TextColumn("answer", width="large"),
            "sample": st.column_config.NumberColumn("sample", format="%d", width="small"),
        },
    )
    st.download_button(
        f"These {len(view):,} answers (CSV)",
        lambda: view[[c for c in view.columns if c not in HIDDEN]].to_csv(index=False),
        "answers.csv",
        "text/csv",
        key=f"{k}_csv",
        icon=":material/table:",
        on_click="ignore",
        help="The rows shown (search, filters and sort applied), with whole answers.",
    )
    rows = list(getattr(getattr(event, "selection", None), "rows", None) or [])
    if rows and rows[0] < len(view):
        side_by_side(results, df, view.iloc[rows[0]], key=k)


def nearest_base(result: AuditResult, arm: int, i: int) -> tuple[int, bool]:
    """The base answer closest in meaning to answer ``i`` of arm ``arm`` (cosine of the
    embeddings) and True; the same sample number and False when there are no embeddings
    (BLEU/ROUGE)."""
    arms = (result.base, *result.arms)
    base, other = result.base.embeddings, arms[arm].embeddings
    k = len(result.base.texts)
    if base is None or other is None or len(base) != k or i >= len(other):
        return min(i, k - 1), False
    b = np.asarray(base, float)
    v = np.asarray(other[i], float)
    sims = b @ v / (np.linalg.norm(b, axis=1) * np.linalg.norm(v) + 1e-12)
    return int(np.argmax(sims)), True


def _checks_line(df: pd.DataFrame, job, arm: int, i: int) -> str:
    row = df[(df["_job"] == job) & (df["_arm"] == arm) & (df["_i"] == i)]
    if row.empty:
        return ""
    parts = []
    for c in check_columns(df):
        v = row.iloc[0][c]
        if pd.isna(v):
            parts.append(f"{c}: –")
        elif str(df[c].dtype) == "boolean":
            parts.append(f"{c}: {'✓' if v else '✗'}")
        else:
            parts.append(f"{c}: {int(v)}")
    return " · ".join(parts)


def side_by_side(results: Mapping[str, AuditResult], df: pd.DataFrame, row: pd.Series, *, key: str) -> None:
    """The selected answer whole, beside a base answer of the same audit (the closest in
    meaning, or any other by number), with the words that differ marked."""
    job, arm, i = row["_job"], int(row["_arm"]), int(row["_i"])
    result = results[job]
    base_name = result.base.arm.name
    left, right = st.columns(2)
    text = (result.base, *result.arms)[arm].texts[i]
    if arm == 0:
        left.markdown(f"**{md_escape(base_name)}, answer {i + 1}** (a base answer)")
        left.text(text)
        left.caption(md_escape(_checks_line(df, job, 0, i)))
        right.info("This is a base answer: select an answer of another arm to read it beside the base.")
        return
    k = len(result.base.texts)
    near, by_meaning = nearest_base(result, arm, i)
    why = "is the closest in meaning" if by_meaning else "has the same number"
    j = (
        left.number_input(
            f"Base answer # (1–{k}; {near + 1} {why})",
            1,
            k,
            near + 1,
            key=f"{key}_base_{job}_{arm}_{i}",
            help="Samples are independent: answer 3 of the base is no 'pair' of answer 3 of an "
            "arm. The closest in meaning (cosine of the embeddings) is offered first; with "
            "BLEU/ROUGE similarity, the same number.",
        )
        - 1
    )
    a, b = diff_html(result.base.texts[j], text)
    left.markdown(f"**{md_escape(base_name)}, answer {j + 1}**")
    right.markdown(
        f"**{md_escape(row['arm'])}, answer {i + 1}**"
        + (f" — {md_escape(row['model'])}" if len(results) > 1 else "")
    )
    left.html(f"{DIFF_CSS}<div class='dbpa-diff'>{a}</div>")
    right.html(f"{DIFF_CSS}<div class='dbpa-diff'>{b}</div>")
    left.caption(md_escape(_checks_line(df, job, 0, j)))
    right.caption(md_escape(_checks_line(df, job, arm, i)))


def answers_tab(results: Mapping[str, AuditResult], *, key: str) -> None:
    """The "Answers" tab of a view that has no tab bar of its own."""
    (tab,) = st.tabs(["Answers"], key=f"{key}_answers_tab", on_change="rerun")
    with tab:
        if tab.open is not False:
            answers_grid(results, key=key)
