"""Widgets shared by several pages."""

from __future__ import annotations

import difflib
import html
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult
from dbpa_core.fmt import size_cell as size_cell  # shared with the command line
from dbpa_core.measures import DEFAULT_MEASURE, MEASURES, NULLS
from dbpa_core.multitest import METHODS

from . import access, export, state, verdicts
from .figures import fmt_effect, fmt_p, fmt_rate, resolution
from .nav import PAGES, ROOT

summary_sentence = verdicts.summary_sentence  # where pages and tests have always found it

# Everything Streamlit's markdown could read as syntax: CommonMark punctuation, and ':'
# for its :emoji:, :material/icon: and :color[...] directives.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:=&^\"'])")


def md_escape(text: object) -> str:
    """User- or model-given text made literal inside ``st.markdown`` (and labels): every
    markdown, HTML and directive character is backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def page_setup(settings: str = "audit") -> None:
    """First thing on every page: page config, style, session defaults, widget
    persistence, navigation and settings in the sidebar (``settings``: ``"audit"``, every
    test setting; ``"run"``, only the run's name and seed, for pages that run no
    permutation test; ``"none"``).

    Done by the page (not by app.py) so that a page is the same when Streamlit runs
    it on its own: when its URL is opened directly (a ``pages/`` folder makes
    Streamlit serve each file), and in AppTest after ``switch_page``. The access gate
    (:func:`ui.access.gate`) comes before everything: without the token no page renders.
    """
    access.gate()
    st.set_page_config(page_title="dbpa — LLM robustness audits", page_icon="📊", layout="wide")
    st.html(f"<style>{(ROOT / 'assets' / 'style.css').read_text()}</style>")
    st.logo(str(ROOT / "assets" / "logo.svg"), size="large")
    fresh = "results" not in st.session_state  # a new session: a reload, a new tab
    state.init()
    if fresh:
        from . import runner

        runner.restore_session()
    state.keep_widget_state()
    if banner := state.demo_banner():
        st.info(banner, icon=":material/slideshow:")
    navigation_links()
    if settings in ("audit", "run"):
        # the audit name is each page's own (a run loaded into one page names that page's)
        page = Path(str(sys._getframe(1).f_globals.get("__file__") or "main")).stem
        state.use_page_name(page)
        name = settings_sidebar() if settings == "audit" else run_sidebar()
        state.page_names()[page] = name


VERDICT_ICON = ":material/gavel:"  # the page's verdict in words, on its first screen


def page_intro(question: str, explain_html: str):
    """A page's first screen: the question it answers (the title), what it does (a short
    paragraph) and, right under them, a slot for its verdict in words, filled by
    :func:`say_verdict` once the page knows it (the results are drawn further down)."""
    st.title(question)
    st.markdown(f"<div class='dbpa-explain'>{explain_html}</div>", unsafe_allow_html=True)
    return st.empty()


def say_verdict(slot, verdict: str | None, *, waiting: str) -> None:
    """The verdict in words in the slot of :func:`page_intro`; ``waiting`` (what to press
    for one) when the page has no result yet."""
    slot.info(md_escape(verdict) if verdict else waiting, icon=VERDICT_ICON)


def navigation_links() -> None:
    with st.sidebar:
        section = None
        for sec, file, title, icon, _url in PAGES:
            if sec != section:
                st.caption(sec)
                section = sec
            st.page_link(str(ROOT / file), label=title, icon=icon)


def base_prompt_input() -> str:
    """The base prompt, shared by the audit pages (one widget definition, so its
    identity - and value - is the same on every page)."""
    return st.text_area("Base prompt", key="w_base_prompt", height=110)


def pick_models(
    label: str,
    key: str,
    options: list[str],
    *,
    default_count: int,
    help: str | None = None,
    default: list[str] | None = None,
) -> list[str]:
    """A multiselect of configured models whose remembered choice survives models
    being added or removed in Settings (unknown names are dropped). The first visit
    selects ``default`` (or the first ``default_count`` options)."""
    ss = st.session_state
    kept = [m for m in ss.get(key, []) if m in options]
    first = [m for m in (default or []) if m in options] or options[:default_count]
    ss[key] = kept if (kept or key in ss) else first
    return st.multiselect(label, options, key=key, help=help)


SEQUENTIAL_HELP = (
    "Draw the answers in rounds (k = 12, 18, 36, … up to the samples per prompt) and stop "
    "each test once its verdict is settled: fewer calls, the same error rates. With δ set, a "
    "test also stops when its effect above chance is shown below δ."
)


def sequential_toggle(key: str) -> bool:
    """The audit pages' switch for sequential sampling (``sequential_sampling: true``)."""
    return st.toggle("Sequential sampling", key=key, help=SEQUENTIAL_HELP)


def pick_model(label: str, key: str, options: list[str], *, help: str | None = None) -> str:
    """A selectbox of configured models that tolerates the remembered one being removed."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = options[0]
    return st.selectbox(label, options, key=key, help=help)


def run_sidebar() -> str:
    """The run's name and seed: what a page that runs no permutation test uses. Returns
    the name typed."""
    with st.sidebar:
        st.markdown("### Run settings")
        name = st.text_input(
            "Run name",
            key="w_audit_name",
            placeholder="named after the page",
            help="Names the run in the History and its downloaded files.",
        )
        st.number_input(
            "Seed",
            0,
            2**31 - 1,
            key="w_seed",
            help="Seeds every sampled answer: the same seed gives the same answers.",
        )
    return name


def settings_sidebar() -> str:
    """Audit settings (k, B, measure, correction, α, sampling) in the sidebar. Returns the
    audit name typed."""
    with st.sidebar:
        st.markdown("### Test settings")
        name = st.text_input(
            "Audit name",
            key="w_audit_name",
            placeholder="named after the page",
            help="Names the run in the History and every downloaded file.",
        )
        # no bounds on the fields: a value out of range is named, and Run waits for a
        # valid one (see state.number_problem), instead of the last valid one being used
        st.number_input(
            "Samples per prompt (k)",
            step=5,
            key="w_samples",
            help="2 to 500. More samples: more power, more calls.",
        )
        st.number_input(
            "Permutations (B)",
            step=1000,
            key="w_permutations",
            help="100 to 100,000. The p-value's resolution is 1/(B+1).",
        )
        problem = state.number_problem()
        if problem:
            st.error(problem, icon=":material/edit_note:")
        st.selectbox(
            "Effect size ω",
            list(MEASURES),
            key="w_measure",
            help=f"{DEFAULT_MEASURE} (default): energy distance between the response "
            "embeddings, the most powerful calibrated measure on recorded responses. "
            "jsd: the papers' Jensen–Shannon distance of the similarity histograms.",
        )
        st.selectbox(
            "Null: P0 from",
            list(NULLS),
            key="w_null",
            format_func=lambda v: {"base": "base answers (papers')", "pooled": "both groups (symmetric)"}[v],
            help="For jsd, wasserstein and ks, P0 (the model's own noise) comes from "
            "the base answers only, so swapping base and perturbed changes the result. "
            "'both groups' uses the within-group similarities of both: use it when "
            "neither side is the reference (e.g. two models). Energy measures are "
            "symmetric either way.",
        )
        st.number_input(
            "Minimum effect of interest δ",
            min_value=0.0,
            max_value=10.0,
            step=0.01,
            format="%.3f",
            key="w_min_effect",
            help="Optional (0 = none). Results then say separately whether a change "
            "is detectable (p) and whether its effect above chance exceeds δ, in "
            "units of the chosen ω. With many samples nearly every change is "
            "detectable; δ says which ones matter.",
        )
        st.selectbox(
            "Multiple-testing correction",
            list(METHODS),
            key="w_correction",
            help="holm controls the family-wise error; bh the false discovery rate.",
        )
        st.slider("Significance level α", 0.001, 0.2, key="w_alpha", step=0.001, format="%.3f")
        st.number_input(
            "Max tokens per response",
            8,
            4000,
            key="w_max_tokens",
            step=20,
            help="Longer answers cost more calls' time (and money) and take the embedded model longer.",
        )
        with st.expander("Sampling"):
            st.slider("Temperature", 0.0, 2.0, key="w_temperature", step=0.05)
            st.number_input("Seed", 0, 2**31 - 1, key="w_seed")
            st.selectbox(
                "Similarity",
                ["local", "bleu", "rouge1", "rouge2", "rougeL"],
                key="w_embedder",
                help="local: MiniLM embeddings (cosine); BLEU/ROUGE compare texts.",
            )
    return name


def results_table(result: AuditResult) -> pd.DataFrame:
    rows = []
    delta = result.spec.min_effect
    for p in result.perturbations:
        row = {
            "perturbation": p.name,
            "role": p.role or "",
            "model": p.model,
            "ω above chance": p.effect_above_chance,  # rounded once, when shown
            "size (d)": size_cell(p),
            "ω": p.effect_size,
            "chance ω": p.chance_effect_size,
            "p (raw)": p.p_value,
            "p (adjusted)": p.p_adjusted,
            "": p.stars,
            "detectable": p.significant,
        }
        if delta is not None:
            row[f"> δ = {delta:g}"] = bool(p.exceeds_min_effect)
        if p.sequential is not None:  # sequential sampling: the answers it used, and why
            row["answers per arm"] = p.samples_used
            row["stopped"] = p.sequential.reason
        rows.append(row)
    return pd.DataFrame(rows)


def styled(df: pd.DataFrame):
    """p columns shown as 0.0123 or < 0.0001 (never 0.0000) while staying numbers, so
    the table still sorts by them; ω columns with three decimals."""
    formats = {}
    for c in df.columns:
        name = str(c)
        if name.startswith("p ("):
            formats[c] = fmt_p
        elif name.startswith("ω above chance"):
            formats[c] = lambda x: fmt_effect(x, signed=True)
        elif "ω" in name:  # ω, chance ω
            formats[c] = fmt_effect
        elif name in ("AUC", "AUC_cal") or name.startswith(("TPR", "FPR")):
            formats[c] = fmt_rate
    return df.style.format(formats, na_rep="–")


def delta_setter(key: str) -> None:
    """A small button beside a verdict: set the minimum effect of interest δ (the sidebar's
    δ, the same value) without leaving the results. δ changes no sample, ω or p: the
    results on screen are read against the new δ at once (no run)."""
    ss = st.session_state
    now = float(ss.get("w_min_effect") or 0.0)
    with st.popover(
        f"δ = {now:g}" if now else "Set δ",
        icon=":material/straighten:",
        help="The minimum effect of interest: which changes are large enough to matter, in ω above chance.",
    ):
        field = f"_{key}_delta"
        ss[field] = now

        def apply() -> None:
            ss["w_min_effect"] = float(ss[field] or 0.0)

        st.number_input(
            "Minimum effect of interest δ (0 = none)",
            min_value=0.0,
            max_value=10.0,
            step=0.01,
            format="%.3f",
            key=field,
            on_change=apply,
        )
        st.caption(
            "In units of ω above chance. Detectable (p) and larger than δ are separate "
            "questions: with many samples nearly every change is detectable, δ says "
            "which ones matter. Changing δ reruns nothing."
        )


def verdict_line(text: str, *, key: str) -> None:
    """The verdict sentence in bold with the δ button on its right — on an audit page,
    whose results are re-read against δ; a recorded run (History) keeps the δ it had."""
    if key.split("_")[0] not in st.session_state.get("results", {}):
        st.markdown(f"**{md_escape(text)}**")
        return
    left, right = st.columns([6, 1], vertical_alignment="center")
    left.markdown(f"**{md_escape(text)}**")
    with right:
        delta_setter(key)


def show_results_table(result: AuditResult, *, key: str, sentence: bool = True) -> None:
    """The verdict sentence (unless the caller shows it already) and the results table."""
    if sentence:
        verdict_line(summary_sentence(result), key=key)
    df = results_table(result)
    st.dataframe(
        styled(df),
        hide_index=True,
        key=f"{key}_table",
        height=table_height(len(df)),
        column_config={
            "ω": st.column_config.NumberColumn(help="effect size, raw"),
            "chance ω": st.column_config.NumberColumn(
                help="the ω chance alone gives at this k (mean over permutations)"
            ),
            "ω above chance": st.column_config.NumberColumn(
                help="how much more the answers moved than chance alone moves them "
                "at this k: about 0 when nothing changed"
            ),
            "p (raw)": st.column_config.NumberColumn(
                help="the permutation test's p for this perturbation alone"
            ),
            "p (adjusted)": st.column_config.NumberColumn(
                help="p corrected for the number of perturbations tested; significant means adjusted p <= α"
            ),
            "detectable": st.column_config.CheckboxColumn(
                help="significant after the correction (adjusted p <= α)"
            ),
            "size (d)": st.column_config.TextColumn(
                help="how large the change is, in words: Cohen's d of the "
                "similarities (base-base minus base-perturbed, over their SD); "
                "small from 0.2, moderate from 0.5, large from 0.8. A word only "
                "where the change is detectable"
            ),
        },
    )
    spec = result.spec
    notes = (
        ""
        if spec.min_effect is None
        else f" '> δ': the effect above chance exceeds δ = {spec.min_effect:g}, a question "
        "separate from whether it is detectable."
    )
    if result.mode == "models" and spec.null == "base" and not MEASURES[spec.measure].symmetric:
        notes += (
            " With this ω, P0 comes from the reference model's answers only, so the "
            "comparison is asymmetric (swapping the two models changes ω and p); choose "
            "'Null: P0 from both groups' in the sidebar for a symmetric one."
        )
    st.caption(
        f"k = {spec.samples} responses per prompt, B = {spec.permutations} permutations "
        f"(no p can be below 1/(B+1) = {fmt_p(resolution(spec.permutations))}), ω = "
        f"{spec.measure}, correction = {spec.correction}, α = {spec.alpha}, seed = "
        f"{spec.seed}. Detectable = significant = adjusted p ≤ α (the change is told "
        "apart from the model's own randomness, however small it is); size: Cohen's d "
        "of the similarities, small ≥ 0.2, moderate ≥ 0.5, large ≥ 0.8. Stars on the adjusted "
        "p: * < .05, ** < .01, *** < .001. A small p means the perturbed answers differ "
        "from the base answers by more than the model's own randomness explains; a large "
        "p means this sample could not show a change. ω has no fixed zero: read 'ω above "
        "chance', about 0 when nothing changed." + notes
    )
    stopped = [f"{p.name}: {p.sequential.statement}." for p in result.perturbations if p.sequential]
    if stopped:
        st.caption(
            md_escape(
                "Sequential sampling: the answers were drawn in rounds and each test stopped once "
                "its verdict was settled; p (raw) is the sequential p-value, valid however many "
                "looks were taken. " + " ".join(stopped)
            )
        )


def table_height(rows: int) -> int | str:
    """Tall enough for every row (no hidden duplicates), up to a screenful."""
    return min(36 + 35 * max(rows, 1), 720)


_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")
_WORD = re.compile(r"\w+")


def diff_html(a: str, b: str) -> tuple[str, str]:
    """Two texts as escaped HTML with the words that differ marked: in ``a`` what ``b``
    lacks (<del>), in ``b`` what ``a`` lacks (<ins>). Model output is escaped before any
    mark is added, so nothing in it can act as HTML."""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    sm = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    out_a, out_b = [], []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        pa, pb = html.escape("".join(ta[i1:i2])), html.escape("".join(tb[j1:j2]))
        if op == "equal":
            out_a.append(pa)
            out_b.append(pb)
            continue
        if pa:
            out_a.append(f"<del>{pa}</del>")
        if pb:
            out_b.append(f"<ins>{pb}</ins>")
    return "".join(out_a), "".join(out_b)


DIFF_CSS = (
    "<style>.dbpa-diff{white-space:pre-wrap;background:#f5f7fa;border-radius:6px;"
    "padding:.6rem .8rem;font-size:.86rem;max-height:420px;overflow-y:auto;"
    "font-family:ui-monospace,SFMono-Regular,Menlo,monospace}.dbpa-diff del{"
    "background:#fde2e1;color:#8a1c12;text-decoration:none}.dbpa-diff ins{"
    "background:#dcf5e3;color:#0b5c2c;text-decoration:none}</style>"
)


def nearest_pairs(base, other) -> list[tuple[int, float]]:
    """For each answer of ``other`` (an arm's responses), the base answer most like it and
    their similarity: cosine of the embeddings when both arms have them, else the overlap
    of their word sets (Jaccard). Two unrelated random draws differ in almost every word;
    the nearest base answer shows what the perturbation changed beyond that noise."""
    if base.embeddings is not None and other.embeddings is not None:
        a = np.asarray(other.embeddings, float)
        b = np.asarray(base.embeddings, float)
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        sims = a @ b.T
    else:
        words = [{w.lower() for w in _WORD.findall(t)} for t in (*other.texts, *base.texts)]
        n = len(other.texts)
        sims = np.array([[len(x & y) / max(1, len(x | y)) for y in words[n:]] for x in words[:n]])
    best = sims.argmax(axis=1)
    return [(int(j), float(sims[i, j])) for i, j in enumerate(best)]


def response_viewer(result: AuditResult, *, key: str, only: list[str] | None = None) -> None:
    """Each perturbed answer beside the base answer nearest to it, as plain text, with
    what differs marked."""
    names = [a.arm.name for a in result.arms if only is None or a.arm.name in only]
    if not names:
        return
    c1, c2, c3 = st.columns([3, 1, 1])
    chosen = c1.selectbox("Compare the base answers with", names, key=f"{key}_viewer_arm")
    arm = next(a for a in result.arms if a.arm.name == chosen)
    k = len(arm.texts)
    idx = c2.number_input("Perturbed answer #", 1, k, 1, key=f"{key}_viewer_idx") - 1
    c3.write("")
    marked = c3.toggle(
        "Mark differences",
        value=True,
        key=f"{key}_viewer_diff",
        help="Red: words of the base answer that the other lacks; green: words the other answer adds.",
    )
    memo = st.session_state.setdefault("_viewer_pairs", {})
    if (id(result), chosen) not in memo:
        if len(memo) > 32:
            memo.clear()
        memo[(id(result), chosen)] = (result, nearest_pairs(result.base, arm))
    j, sim = memo[(id(result), chosen)][1][idx]
    how = "cosine similarity of the embeddings" if arm.embeddings is not None else "share of words in common"
    st.caption(
        f"Answer #{idx + 1} of {md_escape(chosen)} beside base answer #{j + 1}, the "
        f"base answer nearest to it ({how} {sim:.2f}). Random pairs of answers differ "
        "in most words even without a perturbation; the nearest pair shows what "
        "changed beyond that. The words that set the groups apart are in the Why view."
    )
    left, right = st.columns(2)
    base_text, other = result.base.texts[j], arm.texts[idx]
    with left:
        st.markdown(f"**{md_escape(result.base.arm.name)}** — answer #{j + 1}")
    with right:
        st.markdown(f"**{md_escape(chosen)}** — answer #{idx + 1}")
    if marked:
        a, b = diff_html(base_text, other)
        left.html(f"{DIFF_CSS}<div class='dbpa-diff'>{a}</div>")
        right.html(f"{DIFF_CSS}<div class='dbpa-diff'>{b}</div>")
    else:
        left.text(base_text)
        right.text(other)


def downloads(
    result: AuditResult,
    figures,
    *,
    key: str,
    title: str,
    meta: export.RunMeta | None = None,
    job: str | None = None,
) -> None:
    """CSV (settings on every row), JSON (tool version, time), JSONL responses, the spec
    as YAML and a self-contained HTML report, named ``<audit>_<model>_<date>``.

    ``figures`` (a dict of name -> figure, or a function returning one) go into the report.
    Files are made when a button is pressed, and pressing one does not rerun the page.
    """
    meta = meta or export.RunMeta()
    stem = export.file_stem(result, meta, job)

    name = result.spec.name or ""
    head = f"{name} ({title})" if name and name.lower() != title.lower() else title

    def report() -> str:
        figs = figures() if callable(figures) else figures
        return export.html_report(head, {job or result.base.arm.model_label: result}, figs, meta)

    files = [
        (
            "Results (CSV)",
            lambda: export.results_csv(result, meta),
            "results.csv",
            "text/csv",
            ":material/table:",
            "csv",
            None,
        ),
        (
            "Results (JSON)",
            lambda: export.results_json(result, meta),
            "results.json",
            "application/json",
            ":material/data_object:",
            "json",
            None,
        ),
        (
            "Responses (JSONL)",
            result.responses_jsonl,
            "responses.jsonl",
            "application/jsonl",
            ":material/chat:",
            "jsonl",
            None,
        ),
        (
            "Spec (YAML)",
            lambda: export.spec_yaml(result, meta),
            "spec.yaml",
            "application/yaml",
            ":material/code:",
            "spec",
            "This audit as a spec file: `dbpa audit FILE` reruns it from the command line or in CI.",
        ),
        (
            "Report (HTML)",
            report,
            "report.html",
            "text/html",
            ":material/description:",
            "html",
            "Verdict, settings, table, charts and every response in one file.",
        ),
    ]
    cols = st.columns(len(files))
    for col, (label, data, suffix, mime, icon, short, hint) in zip(cols, files, strict=True):
        col.download_button(
            label,
            data,
            f"{stem}-{suffix}",
            mime,
            key=f"{key}_dl_{short}",
            icon=icon,
            help=hint,
            on_click="ignore",
        )
    st.caption("Each chart also downloads as PNG from the camera icon in its toolbar.")
