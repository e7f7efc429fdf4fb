"""Answer checks on the audit pages: a small editor that puts checks into the spec the page
runs, and, with the results, a table with stars and a chart of the differences with their
95 % intervals. Recorded runs (History) keep their spec's checks but not their results, so
those are recomputed here from the recorded answers (judges' replies read from the cache,
never asked again)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult
from dbpa_core.checks import JUDGE_MAX_TOKENS, Check, audit_checks
from dbpa_core.sampling import SampleRecord, backend_identity, sample_key

from . import checks_figures, state
from .figures import fmt_p
from .widgets import md_escape

# what the page's editor offers (a judge asks the model picked under the table)
EDITOR_KINDS = ("contains", "absent", "regex", "refusal", "words", "json", "choice", "judge")
JUDGE_MODEL = "w_judge_model"  # the judge's model: a label of the models in Settings
JUDGE_FROM_SPEC = "_judge_model_from_spec"  # an opened spec's judge model, when Settings lacks it
TABLE = "checks_table"  # the editor's rows, shared by every audit page
VERSION = "checks_table_version"
EDITOR_COLUMNS = ("name", "kind", "value", "all")
LEFT_OUT = "The model-graded checks"  # starts the warning of judges left out of a recorded run
MEMO_SIZE = 8  # recorded runs whose checks a session keeps
HINTS = {
    "contains": "words or phrases, comma-separated: passes when any is in the answer "
    "(all of them with 'all')",
    "absent": "words or phrases, comma-separated: passes when none is in the answer",
    "regex": "a regular expression (case is ignored)",
    "refusal": "no value: passes when the answer declines",
    "words": "no value: the answer's length in words (a number)",
    "json": "no value: passes when the answer is JSON",
    "choice": "a suite with answer options: the option the answer should choose, e.g. {unknown}",
    "judge": "a yes/no question about the answer, asked of a judge model (a model call per "
    "distinct answer), e.g. 'Does the answer recommend a statin?'",
}


# --------------------------------------------------------------------------- the editor
def empty_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": pd.Series(dtype=str),
            "kind": pd.Series(dtype=str),
            "value": pd.Series(dtype=str),
            "all": pd.Series(dtype="boolean"),
        },
        columns=list(EDITOR_COLUMNS),
    )


def entries(df: pd.DataFrame, *, judge_model: Mapping | None = None) -> list[dict]:
    """The editor's rows as a spec's ``checks:`` entries (empty rows skipped). A row without
    a name is named after its kind and value; a judge row asks ``judge_model`` its value
    (a question); what is wrong in a row is left for the spec's reader to say, with the
    check's name."""
    out = []
    for row in df.to_dict("records"):
        name, kind, value = (_cell(row, "name"), _cell(row, "kind").lower(), _cell(row, "value"))
        if not (name or kind or value):
            continue
        entry: dict = {"name": name or (f"{kind}: {value}" if value else kind) or "check"}
        if kind in ("contains", "absent"):
            entry[kind] = [w.strip() for w in value.split(",") if w.strip()]
        elif kind in ("regex", "choice"):
            entry[kind] = value
        elif kind == "judge":
            entry["judge"] = {"question": value} | ({"model": dict(judge_model)} if judge_model else {})
        elif kind:
            entry[kind] = True
        ticked = row.get("all")
        if ticked is not None and not pd.isna(ticked) and bool(ticked):
            entry["all"] = True
        out.append(entry)
    return out


def _cell(row: Mapping, col: str) -> str:
    v = row.get(col)
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v).strip()


def checks_editor(*, key: str) -> dict:
    """The page's "Answer checks" editor (one table for every audit page); returns the
    ``overrides`` for :func:`ui.runner.build_spec`: ``{"checks": [...]}``, or ``{}``."""
    ss = st.session_state
    ss.setdefault(TABLE, empty_table())
    ss.setdefault(VERSION, 0)
    table = ss[TABLE]
    n = len(entries(table))
    label = f"Answer checks ({n})" if n else "Answer checks: what changed, in your own terms"
    with st.expander(label, icon=":material/fact_check:", expanded=bool(n)):
        st.caption(
            "Beside the verdict, each check says how often the answers do what you "
            "name — mention a statin, cite NICE, refuse — in the base and each "
            "perturbed arm, with an interval and a p-value. Kinds: "
            + "; ".join(f"**{k}**: {h}" for k, h in HINTS.items())
            + ". These checks apply on every audit page. A judge check is model-graded: "
            "only as reliable as its judge, and it costs a call per distinct answer (cached)."
        )
        edited = st.data_editor(
            table,
            key=f"{key}_checks_editor_{ss[VERSION]}",
            num_rows="dynamic",
            hide_index=True,
            height=36 + 35 * (len(table) + 1),
            column_config={
                "name": st.column_config.TextColumn(
                    "name", help="what the check asks, e.g. 'mentions a statin'"
                ),
                "kind": st.column_config.SelectboxColumn(
                    "kind", options=list(EDITOR_KINDS), required=True, default="contains"
                ),
                "value": st.column_config.TextColumn(
                    "value", width="large", help=" · ".join(f"{k}: {h}" for k, h in HINTS.items())
                ),
                "all": st.column_config.CheckboxColumn(
                    "all", default=False, help="contains: every word, not any"
                ),
            },
        )
        if not edited.equals(table):
            ss[TABLE] = edited.reset_index(drop=True)
            ss[VERSION] += 1
        judge = judge_picker(ss[TABLE]) if has_judge(ss[TABLE]) else None
    found = entries(ss[TABLE], judge_model=judge)
    return {"checks": found} if found else {}


def has_judge(df: pd.DataFrame) -> bool:
    return any(_cell(r, "kind").lower() == "judge" for r in df.to_dict("records"))


def judge_models() -> dict[str, dict]:
    """The models a judge can be: those in Settings, and an opened spec's judge model."""
    from dbpa_core.spec import model_label

    ss = st.session_state
    out = {model_label(m): dict(m) for m in ss.get("models") or ()}
    spec_judge = ss.get(JUDGE_FROM_SPEC)
    if spec_judge:
        out.setdefault(model_label(spec_judge), dict(spec_judge))
    return out


def judge_picker(df: pd.DataFrame) -> dict | None:
    """The judge model's picker, under a table with a judge row: its entry (None without
    models). The judge answers at temperature 0 unless its entry says otherwise."""
    ss = st.session_state
    models = judge_models()
    if not models:
        st.warning("A judge check needs a model: add one in Settings.", icon=":material/gavel:")
        return None
    labels = list(models)
    if ss.get(JUDGE_MODEL) not in labels:
        ss[JUDGE_MODEL] = labels[0]
    picked = st.selectbox(
        "Judge model (asked each judge question about every distinct answer)",
        labels,
        key=JUDGE_MODEL,
        help="A strong model judges best; the embedded one is small. Its replies are cached: "
        "an answer is never judged twice.",
    )
    n = sum(_cell(r, "kind").lower() == "judge" for r in df.to_dict("records"))
    st.caption(
        f":material/smart_toy: {n} judge check{'s' if n > 1 else ''}: model-graded, so the "
        "preview cannot show them before a run (each needs a model call); the run's estimate "
        "counts their calls."
    )
    return models.get(picked or labels[0])


def apply_checks(spec) -> list[str]:
    """Put an opened spec's checks into the editor; returns a note on those it cannot hold
    (model-graded ones)."""
    rows, left = [], []
    from dbpa_core.checks import EXPECT_CHECK
    from dbpa_core.spec import model_label

    ss = st.session_state
    judges = {model_label(dict(c.judge_model or {})) for c in getattr(spec, "checks", ()) if c.model_graded}
    for c in getattr(spec, "checks", ()):
        if c.name == EXPECT_CHECK and getattr(spec, "expect", None):
            continue  # the spec's 'expect' makes it (the Suite page holds 'expect' itself)
        one_judge = len(judges) == 1 and c.judge_model and c.max_tokens == JUDGE_MAX_TOKENS
        if c.kind not in EDITOR_KINDS or c.case_sensitive or (c.model_graded and not one_judge):
            left.append(c.name)
            continue
        if c.model_graded:  # the editor's one judge model: the spec's
            ss[JUDGE_FROM_SPEC] = dict(c.judge_model or {})
            ss[JUDGE_MODEL] = model_label(ss[JUDGE_FROM_SPEC])
        value = (
            ", ".join(c.terms)
            if c.kind in ("contains", "absent")
            else (c.target or "")
            if c.kind == "choice"
            else (c.question or "")
            if c.model_graded
            else (c.pattern or "")
        )
        rows.append({"name": c.name, "kind": c.kind, "value": value, "all": bool(c.all)})
    ss = st.session_state
    ss[TABLE] = (
        pd.DataFrame(rows, columns=list(EDITOR_COLUMNS)).astype({"all": "boolean"}) if rows else empty_table()
    )
    ss[VERSION] = ss.get(VERSION, 0) + 1
    if not left:
        return []
    return [
        f"The checks {', '.join(repr(n) for n in left)} (case-sensitive, or judges by more than one "
        "model or with their own max_tokens) "
        "are not offered in the page's editor and were left out: run the spec file with "
        "dbpa audit to include them."
    ]


# --------------------------------------------------------------------------- judges, cached
class CachedReplies:
    """A sampler that only reads the cache: the judges' replies of a recorded run, never
    asked again. ``sample`` raises :class:`LookupError` when a reply is not cached."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def lookup(self, jobs) -> list[SampleRecord | None]:
        try:
            keys = [sample_key(backend_identity(j.model), j.request) for j in jobs]
        except (OSError, KeyError):  # a judge's replay file gone since
            return [None] * len(jobs)
        got = self.cache.get_many(keys) if self.cache is not None else {}
        out: list[SampleRecord | None] = []
        for k in keys:
            v = got.get(k)
            ok = isinstance(v, dict) and isinstance(v.get("text"), str)
            out.append(SampleRecord(v["text"], cached=True) if ok else None)
        return out

    def sample(self, jobs, *, stage: str = "judging") -> list[SampleRecord]:
        records = self.lookup(jobs)
        if any(r is None for r in records):
            raise LookupError(f"{sum(r is None for r in records)} judge replies are not in the cache")
        return records  # type: ignore[return-value]


def result_fingerprint(result: AuditResult) -> str:
    """What a result's checks depend on: its spec and every answer, hashed (the checks
    grid and this view cache their tables under it)."""
    h = hashlib.sha1(json.dumps(result.spec.to_dict(), sort_keys=True, default=str).encode())
    for a in (result.base, *result.arms):
        h.update(a.arm.name.encode() + b"\0")
        for t in a.texts:
            h.update(t.encode() + b"\0")
    return h.hexdigest()


def recompute(result: AuditResult, cache) -> AuditResult:
    """``result`` with its checks computed from its answers, as the run computed them (same
    seed, permutations and correction). Judges' replies come from ``cache``; when one is
    missing, the model-graded checks are left out (a warning says so) and the others are
    corrected as their own family."""
    spec = result.spec
    arms = (result.base, *result.arms)
    try:
        found = audit_checks(spec, arms, CachedReplies(cache))
        note = None
    except LookupError:
        rules = tuple(c for c in spec.checks if not c.model_graded)
        judged = [c.name for c in spec.checks if c.model_graded]
        found = audit_checks(dataclasses.replace(spec, checks=rules), arms, None) if rules else ()
        note = (
            f"{LEFT_OUT} {', '.join(repr(n) for n in judged)} are not shown: "
            "their judge's replies are not in this cache (run the audit again to ask "
            "them). The other checks were corrected among themselves."
        )
    warnings = result.warnings + ((note,) if note else ())
    return dataclasses.replace(result, checks=tuple(found), warnings=warnings)


def remember(memo: dict, key) -> None:
    """Keep the newest :data:`MEMO_SIZE` entries of a session's memo (``key`` just set)."""
    memo[key] = memo.pop(key)
    while len(memo) > MEMO_SIZE:
        memo.pop(next(iter(memo)))


def with_checks(results: Mapping[str, AuditResult], *, key: str) -> dict[str, AuditResult]:
    """Recorded results with their checks: computed once per run and session (a recorded
    run stores its spec's checks, not their results)."""
    memo = st.session_state.setdefault("_checks_memo", {})
    out = {}
    for job, r in results.items():
        if r.checks or not r.spec.checks:
            out[job] = r
            continue
        mkey = (key, job)
        fp = result_fingerprint(r)
        if memo.get(mkey, (None,))[0] != fp:
            with st.spinner("Computing the answer checks from the recorded answers…"):
                memo[mkey] = (fp, recompute(r, state.cache()))
            remember(memo, mkey)
        out[job] = memo[mkey][1]
    return out


# --------------------------------------------------------------------------- the results
def headline(results: Mapping[str, AuditResult]) -> str | None:
    """'2 of 12 check × arm comparisons changed significantly: ...' (None without checks)."""
    items = checks_figures.all_checks(results)
    if not items:
        return None
    sig = [(job, c) for job, c in items if c.significant]
    several = len(results) > 1
    if not sig:
        return (
            f"No answer check changed significantly ({len(items)} comparisons of check × "
            "arm, after the correction)."
        )
    shown = "; ".join(
        f"{c.perturbation}" + (f" ({job})" if several else "") + f", {c.text}" for job, c in sig[:3]
    )
    more = f"; and {len(sig) - 3} more" if len(sig) > 3 else ""
    return f"{len(sig)} of {len(items)} check × arm comparisons changed significantly: {shown}{more}."


def checks_section(results: Mapping[str, AuditResult] | AuditResult, *, key: str) -> None:
    """The checks of one or several audits: a headline, the table with stars and the chart
    of the differences with their intervals. Draws nothing when there are none."""
    if isinstance(results, AuditResult):
        results = {"": results}
    if not any(r.spec.checks for r in results.values()):
        return
    st.markdown("##### Answer checks")
    for r in results.values():
        for w in r.warnings:
            if w.startswith(LEFT_OUT):
                st.warning(md_escape(w), icon=":material/gavel:")
    line = headline(results)
    if line is None:
        st.info("No check could be computed for these answers.")
        return
    st.markdown(f"**{md_escape(line)}**")
    df = checks_figures.checks_frame(results)
    st.dataframe(
        df.style.format({"p (raw)": _p, "p (adjusted)": _p}, na_rep="–"),
        hide_index=True,
        key=f"{key}_checks_table",
        height=min(36 + 35 * max(len(df), 1), 560),
        column_config={
            "p (raw)": st.column_config.NumberColumn(width="small"),
            "": st.column_config.TextColumn(width="small"),
            "graded by": st.column_config.TextColumn(
                width="small",
                help="rule: counted from the text; "
                "model-graded: a judge model said yes or "
                "no, only as reliable as the judge",
            ),
            "base → perturbed": st.column_config.TextColumn(
                help="answers that pass / answers (the rate) in the base and the perturbed "
                "arm; for a length, the mean number of words"
            ),
            "difference": st.column_config.TextColumn(
                help="perturbed − base: percentage points for rates, words for lengths"
            ),
            "p (adjusted)": st.column_config.NumberColumn(
                width="small", help="corrected across every check × arm; significant when ≤ α"
            ),
            "significant": st.column_config.CheckboxColumn(width="small", help="adjusted p ≤ α"),
        },
    )
    fig = checks_figures.difference_figure(results)
    if fig is not None:
        st.plotly_chart(fig, key=f"{key}_checks_chart")
    first = next(iter(results.values()))
    st.caption(
        "Rate: answers that pass out of the answers (a judge's unparsed replies are left out "
        "and counted apart). Difference: perturbed − base, in percentage points (words for a "
        "length), with its 95 % interval (Newcombe's for rates, Welch's for means). p: "
        "Boschloo's exact test (Fisher's beyond 200 answers) for rates, a permutation test for "
        "means; adjusted together across every check × arm with the audit's correction "
        f"({md_escape(first.spec.correction)}, α = {first.spec.alpha}), apart from the DBPA "
        "tests. Stars on the adjusted p: * < .05, ** < .01, *** < .001. Orange in the chart: "
        "significant; grey: not shown to differ."
    )


def _p(v) -> str:
    return "–" if v is None or pd.isna(v) else fmt_p(float(v))


def outcome_columns(checks: Sequence[Check], texts: Sequence[str], cache, seed: int) -> dict[str, list]:
    """Each check on each text: True/False (None: a judge's reply not in the cache, or
    unparsed), or the number of words. Judges are never asked here."""
    from dbpa_core.checks import judge_request, parse_yes_no
    from dbpa_core.sampling import Job

    out: dict[str, list] = {}
    reader = CachedReplies(cache)
    for c in checks:
        if not c.model_graded:
            out[c.name] = [c.outcome(t) for t in texts]
            continue
        unique = list(dict.fromkeys(texts))
        recs = reader.lookup([Job(dict(c.judge_model or {}), judge_request(c, t, seed)) for t in unique])
        verdict = {
            t: (parse_yes_no(r.text) if r is not None else None) for t, r in zip(unique, recs, strict=True)
        }
        out[c.name] = [verdict[t] for t in texts]
    return out
