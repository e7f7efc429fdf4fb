"""History: every recorded audit (dashboard and CLI) — find, reopen with all its charts,
compare two runs side by side, delete."""

import json

import pandas as pd
import streamlit as st

from dbpa_core.history import GATE_WORDS, HistoryError, where_responses_live
from dbpa_core.render import short
from dbpa_core.runs import RunRefused, kind_named
from ui import demo_runs, history_figures, runner, specfile, state, views, widgets
from ui.export import RunMeta
from ui.nav import PAGES
from ui.widgets import md_escape

widgets.page_setup(settings="none")
ss = st.session_state
history = state.history()
verdict = widgets.page_intro(
    "History: what was audited, and did a verdict change?",
    "Every audit run here or with <code>dbpa audit</code> is "
    "recorded with its spec, settings, tool version, time, results and responses, and "
    "so is every suite of cases (here or with <code>dbpa audit</code>) and every "
    "robustness battery, fidelity simulation and sensitivity study run here. Find a "
    "run, reopen it with all its charts, compare two audits, suites or batteries (a model "
    "before and after an upgrade: which verdicts changed), or delete runs. From a "
    "terminal: <code>dbpa history</code>.",
)
# demo mode with no run of the user's: the recorded examples (a copy; never the user's history)
examples = None
if state.demo_file():
    try:
        mine = history.list(limit=1)
    except HistoryError:
        mine = [None]  # the error is shown below, on the user's own database
    examples = None if mine else demo_runs.history()
if examples is not None:
    history = examples
    st.info(demo_runs.HISTORY_NOTE, icon=":material/history:")
else:
    st.caption(f"Database: `{history.where}`")

NO_RUNS = "No runs recorded yet: run an audit on any page (or `dbpa audit SPEC`), and it appears here."


PAGE_TITLES = {
    "landing": "Perturbation test",
    "personas": "Persona explorer",
    "roc": "Control vs target",
    "models": "Model comparison",
    "robustness": "Robustness battery",
    "fidelity_sim": "Simulator fidelity",
    "sensitivity": "Sensitivity",
    "suite": "Suite of cases",
}
KIND_TITLES = {
    "battery": "Robustness battery",
    "fidelity": "Simulator fidelity",
    "sensitivity": "Sensitivity study",
    "suite": "Suite of cases",
}
# which page a recorded run can be loaded into, by the view that draws it
LOAD_INTO = {
    "perturbation": ("landing", "perturbation_test"),
    "control_target": ("roc", "control_target"),
    "models": ("models", "model_comparison"),
}


def load_into_page(spec, page_key: str, url: str) -> None:
    """A button callback (runs before the page draws, so the settings can still be set).
    The audit name is that page's only: the other pages keep theirs."""
    specfile.apply_spec(spec, page_key)
    state.name_page(url, spec.name)
    ss["_hist_goto"] = url


def reopen_on_page(kind: str, run_id: int, created_at, title: str, page: str | None) -> None:
    """A button callback: a battery, simulation or sensitivity study back on its page."""
    try:
        _kind, results = history.result(run_id)
    except HistoryError as exc:
        ss["_hist_error"] = str(exc)
        return
    form = history.form(run_id)
    if form:  # the inputs the results were made from: the page shows them with the results
        runner.apply_form(form)
    url = runner.reopen(kind, run_id, created_at, results, load(history.location, run_id).settings)
    state.name_page(url, title)
    ss["_hist_goto"] = url


goto = ss.pop("_hist_goto", None)
if goto:
    st.switch_page(next(f for _s, f, _t, _i, url in PAGES if url == goto))

c1, c2, c3, c4, c5 = st.columns([2, 2, 1.2, 1.2, 1.2])
f_model = c1.text_input("Model contains", key="hist_f_model")
f_prompt = c2.text_input("Prompt or perturbation contains", key="hist_f_prompt")
f_since = c3.date_input("From", value=None, key="hist_f_since", format="YYYY-MM-DD")
f_until = c4.date_input("To", value=None, key="hist_f_until", format="YYYY-MM-DD")
f_source = c5.selectbox("Run from", ["anywhere", "dashboard", "cli"], key="hist_f_source")
try:
    runs = history.list(
        model=f_model.strip() or None,
        prompt=f_prompt.strip() or None,
        since=f_since,
        until=f_until,
        source=None if f_source == "anywhere" else f_source,
    )
except HistoryError as exc:
    st.error(md_escape(str(exc)))
    st.stop()

filtered = any([f_model.strip(), f_prompt.strip(), f_since, f_until, f_source != "anywhere"])
widgets.say_verdict(
    verdict,
    ("Recorded examples: " if examples is not None and runs else "")
    + (history_figures.latest_sentence(runs, PAGE_TITLES) or ""),
    waiting="No recorded run matches these filters." if filtered else NO_RUNS,
)
note = ss.pop("_hist_note", None)
if note:
    st.success(note)
if not runs:  # the verdict above says so
    st.stop()


try:
    extras = history.extras([r.id for r in runs])
except HistoryError:
    extras = {}


def kind_of(run_id: int) -> str:
    return extras.get(run_id, {}).get("kind", "audit")


def models_of(r) -> tuple[str, ...]:
    return r.models or extras.get(r.id, {}).get("models", ())


def who(r) -> str:
    """Who ran a run and where (user@host; empty for runs recorded before dbpa kept it)."""
    return "@".join(p for p in (r.user, r.host) if p)


def describe(r) -> str:
    return f"#{r.id} · {r.created_at:%Y-%m-%d %H:%M} · {r.title} · {', '.join(models_of(r))}"


by_id = {r.id: r for r in runs}
table = pd.DataFrame(
    [
        {
            "id": r.id,
            "when (UTC)": r.created_at.strftime("%Y-%m-%d %H:%M"),
            "from": r.source if r.source == "cli" else PAGE_TITLES.get(r.page, r.page or "dashboard"),
            "by": who(r),
            "kind": KIND_TITLES.get(kind_of(r.id), "audit"),
            "title": r.title,
            "control gate": GATE_WORDS[r.control_gate],
            "tests": str(r.n_tests) if kind_of(r.id) in ("audit", "suite") else "–",
            "detectable": str(r.n_significant) if kind_of(r.id) in ("audit", "suite") else "–",
            "models": ", ".join(models_of(r)),
            "base prompt": " ".join(r.base_prompt.split())[:80] or extras.get(r.id, {}).get("headline", ""),
        }
        for r in runs
    ]
)
st.dataframe(
    table,
    hide_index=True,
    key="hist_table",
    height=widgets.table_height(min(len(runs), 12)),
    column_config={"id": st.column_config.NumberColumn(format="%d", width="small")},
)
st.caption(
    f"{len(runs)} run(s). Detectable: how many perturbations changed the answers "
    "detectably (told apart from the model's own randomness, adjusted p ≤ α). Control "
    "gate: FAIL when a perturbation marked control changed the answers detectably."
)


def unreadable_note(parts, run_id: int, shown: int = 3) -> str:
    """One line naming the parts of a run whose stored rows are garbled (the first few,
    then how many more): the rest of the run is shown as usual."""
    named = "; ".join(md_escape(u) for u in parts[:shown])
    more = f"; and {len(parts) - shown} more" if len(parts) > shown else ""
    return (
        f"Part of this run could not be read back from the history ({len(parts)} garbled "
        f"part(s); the rest is shown below): {named}{more}. `dbpa history show {run_id}` "
        "lists them all."
    )


def forget_deleted(doomed) -> None:
    """Results on the pages that came from (or were recorded as) a deleted run keep
    showing, but no longer name that run as theirs."""
    for meta in ss.get("results_meta", {}).values():
        run = meta.get("run")
        if run is not None and run.run_id in doomed:
            meta["run"] = RunMeta(created_at=run.created_at)
            meta["record"] = None
            meta["rerun_of"] = None


@st.cache_data(show_spinner=False, max_entries=16)
def load(path: str, run_id: int):
    from dbpa_core.history import History

    return History(path).get(run_id)


tab_open, tab_compare, tab_delete = st.tabs(
    ["Open a run", "Compare two runs", "Delete runs"], key="hist_tabs", on_change="rerun"
)
ids = list(by_id)
audit_ids = [i for i in ids if kind_of(i) == "audit"]


def comparable(run_id: int) -> bool:
    """Whether runs of this one's kind can be compared (the run interface says so)."""
    kind = kind_named(kind_of(run_id))
    return kind is not None and kind.compare_refusal() is None


compare_ids = [i for i in ids if comparable(i)]


def a_kind(run_id: int) -> str:
    """The kind of a run with its article: 'an audit', 'a suite of cases'."""
    title = KIND_TITLES.get(kind_of(run_id), "audit").lower()
    return ("an " if title[0] in "aeiou" else "a ") + title


for k in ("hist_open", "hist_a", "hist_b"):  # a deleted run is selected nowhere
    if k in ss and ss[k] not in ids:
        del ss[k]
if err := ss.pop("_hist_error", None):
    st.error(md_escape(err), icon=":material/error:")
with tab_open:
    if tab_open.open is not False:
        if ss.get("hist_open") not in ids:
            ss["hist_open"] = ids[0]
        run_id = st.selectbox("Run", ids, format_func=lambda i: describe(by_id[i]), key="hist_open")
        run = load(history.location, run_id)
        s = run.summary
        src = "`dbpa audit`" if s.source == "cli" else f"the {PAGE_TITLES.get(s.page, s.page)} page"
        st.markdown(
            f"**{md_escape(s.title)}** — run {s.id}, {s.created_at:%Y-%m-%d %H:%M} UTC, "
            f"from {src}, dbpa {md_escape(s.tool_version)}"
            + (
                f", run by {md_escape(s.user or 'someone')} on {md_escape(s.host or 'an unnamed machine')}"
                if s.user or s.host
                else ""
            )
            + (f", {run.seconds:.1f} s" if run.seconds else "")
        )
        if run.unreadable:
            st.warning(unreadable_note(run.unreadable, s.id), icon=":material/broken_image:")
        cfg = run.settings
        st.caption(
            f"k = {cfg.get('samples')}, B = {cfg.get('permutations')}, ω = "
            f"{cfg.get('measure')}, correction = {cfg.get('correction')}, α = "
            f"{cfg.get('alpha')}, seed = {cfg.get('seed')}, temperature = "
            f"{cfg.get('temperature')}, max tokens = {cfg.get('max_tokens')}. Responses: "
            f"{md_escape(where_responses_live(run))}."
        )
        kind = kind_of(s.id)
        load_into = LOAD_INTO.get(views.view_for(s.page, run.audits)) if run.audits else None
        if kind != "audit":
            st.markdown(
                f"{KIND_TITLES[kind]} of {md_escape(', '.join(models_of(s)))}: "
                f"{md_escape(extras.get(s.id, {}).get('headline', ''))}."
            )
            try:  # a run that cannot reopen on its page says why, in one line
                why = history.load_run(s.id).refusals.get("dashboard")
            except HistoryError as exc:
                why = str(exc)
            if why:
                st.info(f"It does not reopen on a page: {md_escape(why)}.", icon=":material/info:")
            else:
                home = PAGE_TITLES[runner.RESULT_HOME[kind][0]]
                st.button(
                    f"Open on the {home} page (with all its charts)",
                    key="hist_reopen",
                    icon=":material/open_in_new:",
                    on_click=reopen_on_page,
                    args=(kind, s.id, s.created_at, s.title, s.page),
                    type="primary",
                )
        elif load_into and len(run.audits) == 1:
            st.button(
                f"Load into the {PAGE_TITLES[load_into[0]]} page (to run it again)",
                key="hist_load",
                icon=":material/open_in_new:",
                on_click=load_into_page,
                args=(demo_runs.localize(next(iter(run.audits.values())).spec), *load_into),
            )
        if run.audits:
            st.divider()
            views.show_recorded(
                run.audits,
                page=s.page,
                key=f"hist_{s.id}",
                meta=RunMeta(s.created_at, s.id, s.source, s.tool_version),
                title=s.title,
            )

with tab_compare:
    if tab_compare.open is not False:
        if len(compare_ids) < 2:
            st.info(
                "Record at least two audits, suites or batteries to compare them (simulations "
                "and sensitivity studies reopen on their pages)."
            )
        else:
            c1, c2 = st.columns(2)
            if ss.get("hist_a") not in compare_ids:
                ss["hist_a"] = compare_ids[1]
            if ss.get("hist_b") not in compare_ids:
                ss["hist_b"] = compare_ids[0]
            a = c1.selectbox(
                "Run A (before)", compare_ids, format_func=lambda i: describe(by_id[i]), key="hist_a"
            )
            b = c2.selectbox(
                "Run B (after)", compare_ids, format_func=lambda i: describe(by_id[i]), key="hist_b"
            )
            if a == b:
                st.info("Choose two different runs.")
            elif kind_of(a) != kind_of(b):
                st.info(f"Run {a} is {a_kind(a)} and run {b} {a_kind(b)}: compare two runs of one kind.")
            elif kind_of(a) != "audit":  # suites and batteries: the run interface's comparison
                try:
                    gen = history.load_run(a).compare(history.load_run(b))
                except (HistoryError, RunRefused) as exc:
                    st.error(md_escape(str(exc)), icon=":material/error:")
                else:
                    if gen.changed:
                        st.error(
                            f"**{len(gen.changed)}** {md_escape(gen.what)}: "
                            + "; ".join(md_escape(c) for c in gen.changed)
                            + ".",
                            icon=":material/compare_arrows:",
                        )
                    else:
                        st.success("No verdict changed between the two runs.")
                    for k, (va, vb) in gen.settings_changed.items():
                        st.caption(
                            f"Changed between the runs — {md_escape(k)}: "
                            f"{md_escape(short(va, 120))} → {md_escape(short(vb, 120))}"
                        )
                    for note in gen.notes:
                        st.caption(md_escape(note))
                    st.code("\n".join(gen.lines), language=None)
                    st.download_button(
                        "Comparison (JSON)",
                        lambda: json.dumps(gen.data, indent=2, ensure_ascii=False, default=str),
                        f"dbpa-compare_run{a}-run{b}.json",
                        "application/json",
                        key="hist_cmp_dl",
                        on_click="ignore",
                        icon=":material/data_object:",
                    )
            else:
                cmp = history.compare(a, b)
                both = [r for r in cmp.rows if r.a is not None and r.b is not None]
                if not both:
                    st.warning("These runs share no perturbation (matched by name): nothing to compare.")
                elif cmp.changed:
                    st.error(
                        f"**{len(cmp.changed)} of {len(both)}** perturbations tested in "
                        "both runs changed verdict: "
                        + "; ".join(f"{md_escape(r.name)} ({r.status})" for r in cmp.changed)
                        + ".",
                        icon=":material/compare_arrows:",
                    )
                else:
                    st.success(
                        f"No verdict changed: all {len(both)} perturbations tested in "
                        "both runs got the same verdict."
                    )
                for k, (va, vb) in cmp.settings_changed.items():
                    st.caption(
                        f"Changed between the runs — {md_escape(k)}: "
                        f"{md_escape(short(va, 120))} → {md_escape(short(vb, 120))}"
                    )
                if both:
                    if {"measure", "embedder"} & set(cmp.settings_changed):
                        st.warning(
                            "The runs differ in their measure or embedder, so their ω "
                            "above chance are on different scales: compare the verdicts "
                            "(and p), not the heights of the bars.",
                            icon=":material/straighten:",
                        )
                    st.plotly_chart(history_figures.comparison_figure(cmp), key="hist_cmp_fig")
                rows = [
                    {
                        "audit": r.job,
                        "perturbation": r.name,
                        "role": r.role or "",
                        "ω above chance A": r.a.effect_above_chance if r.a else None,
                        "ω above chance B": r.b.effect_above_chance if r.b else None,
                        "p (adjusted) A": r.a.p_adjusted if r.a else None,
                        "p (adjusted) B": r.b.p_adjusted if r.b else None,
                        "detectable A": r.a.significant if r.a else None,
                        "detectable B": r.b.significant if r.b else None,
                        "change": r.status,
                    }
                    for r in cmp.rows
                ]
                df = pd.DataFrame(rows)
                st.dataframe(
                    widgets.styled(df),
                    hide_index=True,
                    key="hist_cmp_table",
                    height=widgets.table_height(len(df)),
                )
                st.download_button(
                    "Comparison (JSON)",
                    lambda: json.dumps(cmp.to_dict(), indent=2, ensure_ascii=False),
                    f"dbpa-compare_run{a}-run{b}.json",
                    "application/json",
                    key="hist_cmp_dl",
                    on_click="ignore",
                    icon=":material/data_object:",
                )

with tab_delete:
    if examples is not None:
        st.caption("The recorded examples cannot be deleted: they are not your runs.")
    elif tab_delete.open is not False:
        doomed = st.multiselect(
            "Runs to delete", ids, format_func=lambda i: describe(by_id[i]), key="hist_delete_ids"
        )
        if ss.get("_hist_confirm") and doomed:
            st.warning(
                f"Delete {len(doomed)} run(s) with their results and responses? This cannot be undone."
            )
            y, n, _ = st.columns([1, 1, 4])
            if y.button("Yes, delete", key="hist_delete_yes", type="primary"):
                removed = history.delete(*doomed)
                ss["_hist_confirm"] = False
                ss.pop("hist_delete_ids", None)
                for k in ("hist_open", "hist_a", "hist_b"):
                    if ss.get(k) in doomed:
                        ss.pop(k, None)
                forget_deleted(doomed)
                load.clear()
                ss["_hist_note"] = f"Deleted {removed} run(s)."
                st.rerun()
            if n.button("Cancel", key="hist_delete_no"):
                ss["_hist_confirm"] = False
                st.rerun()
        elif st.button("Delete…", key="hist_delete", disabled=not doomed, icon=":material/delete:"):
            ss["_hist_confirm"] = True
            st.rerun()

st.divider()
st.subheader("Report for the audit file")
st.caption(
    "One HTML document with every verdict of the runs you choose (audits, control gates, "
    "answer checks, batteries, fidelity, sensitivity), their settings, versions, dates "
    "and a SHA-256 checksum of the responses; then one section per run. From a "
    "terminal, also as PDF: `dbpa report ID… --out FILE.pdf`."
)
report_ids = st.multiselect(
    "Runs in the report",
    ids,
    default=ids[:1],
    format_func=lambda i: describe(by_id[i]),
    key="hist_report_ids",
)


def report_html() -> str:
    """The report of the chosen runs (built when the button is pressed)."""
    from dbpa_core.history import History
    from dbpa_core.report import ReportError, build_report, error_page

    try:
        return build_report(report_ids, history=History(history.location))
    except ReportError as exc:  # a run deleted meanwhile, a result that cannot be read
        return error_page(str(exc))


st.download_button(
    "Report",
    report_html,
    "dbpa-report_runs-" + "-".join(map(str, report_ids)) + ".html",
    "text/html",
    key="hist_report_dl",
    on_click="ignore",
    disabled=not report_ids,
    icon=":material/description:",
    type="primary",
)
