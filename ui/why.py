"""The "Why" view: how did the answers change, and does the verdict hold?

``why_view(result, key=...)`` draws, for one perturbation (or model) of an
:class:`~dbpa_core.audit.AuditResult`: the words and phrases that moved (weighted
log-odds, a diverging bar chart), duplicates with their counts, the typical and
the most atypical answer of each group side by side with the differing words
highlighted (escaped text), an optional model-written summary (clearly labelled),
and a one-click check of the verdict under every measure and other embedders
(zero model calls). It uses no expander, so it can sit inside one.
"""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult
from dbpa_core.explain import Explanation, explain_result, find_duplicates, highlight
from dbpa_core.sensitivity import (
    SensitivityConfig,
    SensitivityResult,
    parse_embedders,
    parse_measures,
    run_sensitivity,
)

from . import runner, state, verdicts, why_figures
from .figures import p_text
from .widgets import md_escape, styled

MARK_CSS = (
    "<style>.dbpa-why{white-space:pre-wrap;background:#f5f7fa;border-radius:6px;"
    "padding:.6rem .8rem;font-size:.86rem;max-height:420px;overflow-y:auto;"
    "line-height:1.45}.dbpa-why mark{background:#fde8d7;padding:0 .1rem;border-radius:3px}"
    ".dbpa-why mark.term{background:#f9c89b;font-weight:600}</style>"
)
ROBUST_EMBEDDERS = {
    "spec": "the audit's embedder",
    "local": "MiniLM (local)",
    "bleu": "BLEU (slow)",
    "rouge1": "ROUGE-1 (slow)",
    "rouge2": "ROUGE-2 (slow)",
    "rougeL": "ROUGE-L (slow)",
}


def marked_html(text: str, other, terms: list[str]) -> str:
    """``text`` as escaped HTML with the words ``other`` (a text or a list of them)
    never uses marked, and the distinguishing ``terms`` marked more strongly."""
    out = []
    for seg, kind in highlight(text, other, terms=terms):
        esc = html.escape(seg)
        out.append(f"<mark class='{kind}'>{esc}</mark>" if kind else esc)
    return f"<div class='dbpa-why'>{''.join(out)}</div>"


def _short(text: str, n: int = 160) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _duplicates(result: AuditResult, name: str, ex: Explanation, key: str, labels) -> None:
    near = None
    c1, c2 = st.columns([2, 3])
    if c1.toggle("Also group near-identical answers", key=f"{key}_near_on"):
        near = c2.slider("Near-identical from (word-pair overlap)", 0.5, 0.99, 0.9, 0.01, key=f"{key}_near")
    texts = {"base": result.base.texts, "perturbed": result.responses(name)}
    any_dup = False
    for side in ("base", "perturbed"):
        d = ex.duplicates[side] if near is None else find_duplicates(texts[side], near=near)
        if not d.groups:
            continue
        any_dup = True
        st.markdown(f"**{md_escape(labels[side])}**: {d.n_answers} answers, {d.n_distinct} distinct")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "times": g.count,
                        "answer": _short(g.text),
                        "identical": "yes" if g.exact else "near",
                        "answer #": ", ".join(str(i + 1) for i in g.indices),
                    }
                    for g in d.groups
                ]
            ),
            hide_index=True,
            key=f"{key}_dups_{side}",
        )
    if any_dup:
        st.caption(
            "Each repeated answer is a separate draw (its own seed and cache entry) that "
            "came out the same: a model that repeats itself is information. The test "
            "counts every draw; copies of one cached draw are never reused as samples."
        )
    else:
        st.caption(
            f"Every answer is distinct ({ex.n_base} base, {ex.n_perturbed} perturbed)"
            + (" at this threshold." if near else ".")
        )


def _summary(result: AuditResult, name: str, key: str) -> None:
    st.markdown(
        "**Summarize the difference** — asks a model to describe how the two groups "
        "differ, from samples of each. Cached like every call."
    )
    models = runner.model_options()
    audited = result.base.arm.model_label
    options = list(models)
    if audited not in options:
        models[audited] = result.base.arm.model
        options.insert(0, audited)
    c1, c2 = st.columns([3, 1])
    chosen = c1.selectbox(
        "Model that writes the summary", options, index=options.index(audited), key=f"{key}_sum_model"
    )
    cfg = models[chosen]
    replay = cfg.get("backend") == "replay"
    store = st.session_state.setdefault(f"_{key}_summaries", {})
    skey = (id(result), name, chosen)
    if c2.button("Summarize", key=f"{key}_sum_go", disabled=replay, icon=":material/edit_note:"):
        from dbpa_core.explain import summarize_difference
        from dbpa_core.sampling import Sampler

        try:
            with st.spinner(f"Asking {chosen}…"):
                store[skey] = summarize_difference(
                    Sampler(state.cache(), api_keys=st.session_state["api_keys"]),
                    cfg,
                    result.base.texts,
                    result.responses(name),
                    name=name,
                )
        except Exception as exc:  # noqa: BLE001 - a short message, never a traceback
            st.error(runner.friendly(exc))
    if replay:
        st.caption(
            "A replay model only repeats recorded answers and cannot write a summary: "
            "choose another model (add one in Settings)."
        )
    s = store.get(skey)
    if s is not None:
        with st.container(border=True):
            st.markdown(
                f":material/smart_toy: **Model-written summary by "
                f"{md_escape(s.model)}** — may be wrong; check it against the answers"
                f"{' (from the cache)' if s.cached else ''}."
            )
            st.text(s.text or "(the model returned an empty answer)")


def _robust_config(result: AuditResult, picks: list[str]) -> SensitivityConfig:
    return SensitivityConfig(
        measures=parse_measures("all"), embedders=parse_embedders(",".join(picks), result.spec)
    )


class _ResultAnswers:
    """A backend that serves each of an audit's requests with the answer the result holds
    (the check runs on the very answers the verdict came from, recorded or cached or not:
    no model is called)."""

    name = "result"
    deterministic = True

    def __init__(self, result: AuditResult, model_cfg: dict):
        self.model = result.base.arm.model_label
        self.answers = {
            (a.arm.system_prompt, a.arm.prompt, a.arm.first_sample + i): t
            for a in (result.base, *result.arms)
            if a.arm.model == model_cfg
            for i, t in enumerate(a.texts)
        }

    def generate(self, requests, on_sample, *, should_stop=None) -> None:
        from dbpa_core.backends import Sample

        for r in requests:
            on_sample(r, Sample(self.answers[(r.system_prompt, r.prompt, r.index)], model=self.model))


class _ResultVectors:
    """The audit's embedder, served from the vectors the result holds."""

    name = "result"

    def __init__(self, result: AuditResult):
        self.vectors = {
            t: v
            for a in (result.base, *result.arms)
            if a.embeddings is not None
            for t, v in zip(a.texts, a.embeddings, strict=True)
        }

    def embed(self, texts):
        import numpy as np

        return np.stack([self.vectors[t] for t in texts])


def check_on_answers(
    result: AuditResult, cfg: SensitivityConfig, progress=None, should_stop=None
) -> SensitivityResult:
    """The sensitivity study of ``cfg`` on ``result``'s own answers (and the audit
    embedder's vectors it holds): no model call, nothing read from or written to the
    cache, so a recorded result is checked on the recording."""
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import model_key

    arms = (result.base, *result.arms)
    backends = {model_key(a.arm.model): _ResultAnswers(result, a.arm.model) for a in arms}
    embedders = (
        {model_key(result.spec.embedder): _ResultVectors(result)}
        if all(a.embeddings is not None for a in arms)
        else None
    )
    res = run_sensitivity(
        result.spec,
        cfg,
        cache=Cache(enabled=False),
        progress=progress,
        should_stop=should_stop,
        backends=backends,
        embedders=embedders,
        api_keys=st.session_state.get("api_keys"),
    )
    res.usage.update(answers_reused=res.usage.get("calls", 0), calls=0)
    return res


def _robustness(result: AuditResult, name: str, key: str) -> None:
    spec = result.spec
    st.markdown(
        "**Does the verdict hold?** The same test under every distance measure and "
        "other embedders, on the same answers: no new model calls."
    )
    default = ["spec"] + (["local"] if spec.embedder.get("backend") != "local" else [])
    picks = st.multiselect(
        "Embedders",
        list(ROBUST_EMBEDDERS),
        default=default,
        format_func=ROBUST_EMBEDDERS.get,
        key=f"{key}_rob_emb",
        help="The check reuses the answers of this result: no model is "
        "called. MiniLM (local) embeds them on this machine (seconds); BLEU "
        "and ROUGE compare texts word by word in Python: about a minute for "
        "eight perturbations at k = 20.",
    )
    store = st.session_state.setdefault(f"_{key}_robust", {})
    rkey = (id(result), tuple(picks))
    if st.button("Check the verdict", key=f"{key}_rob_go", icon=":material/rule:", disabled=not picks):
        cfg = _robust_config(result, picks)
        out = runner.run_tasks(
            [("robustness", lambda progress: check_on_answers(result, cfg, progress))], key=f"{key}_rob"
        )
        if out:
            store[rkey] = out["robustness"]
    res: SensitivityResult | None = store.get(rkey)
    if res is None:
        return
    v = next(x for x in res.verdicts() if x["perturbation"] == name)
    said = "changes the answers" if v["baseline_significant"] else "shows no change"
    parts = [f"{v[s]['significant']} of {v[s]['settings']} {s}s" for s in res.studies]
    msg = (
        f"The audit says **{md_escape(name)}** {said}; the change is detectable under {' and '.join(parts)}."
    )
    (st.success if v["holds"] else st.warning)(
        msg
        + (" The verdict holds." if v["holds"] else " The verdict depends on the setting: read it with care.")
    )
    from .sensitivity_figures import rows_table

    st.dataframe(
        styled(rows_table([r for r in res.rows if r.perturbation == name])),
        hide_index=True,
        key=f"{key}_rob_table",
    )
    st.caption(
        f"No model calls: the test reused the audit's "
        f"{res.usage.get('answers_reused', 0)} answers; "
        f"{res.usage.get('embeddings_computed', 0)} embeddings computed on this machine. "
        "The full study (prompt length, cost) is on the Sensitivity page."
    )


def why_view(result: AuditResult, *, key: str, only: str | None = None) -> None:
    """Draw the "Why" view for one perturbation (``only``, or picked here)."""
    names = [a.arm.name for a in result.arms]
    if not names:
        return
    st.html(MARK_CSS)
    if only is None:
        name = (
            st.selectbox("Why did the answers change? Perturbation", names, key=f"{key}_pick")
            if len(names) > 1
            else names[0]
        )
    else:
        name = only if only in names else names[0]
    pert = next(p for p in result.perturbations if p.name == name)
    base_label = result.base.arm.name
    labels = {"base": base_label, "perturbed": name}
    memo = st.session_state.setdefault("_why_memo", {})
    if (id(result), name) not in memo:  # tokenizing 2k answers on every rerun is wasted work
        if len(memo) > 32:
            memo.clear()
        memo[(id(result), name)] = (result, explain_result(result, name))
    ex = memo[(id(result), name)][1]
    size = f" ({verdicts.size_text(pert)})" if verdicts.size_text(pert) else ""
    verdict = (
        f"changes the answers detectably{size}"
        if pert.significant
        else "does not change the answers detectably"
    )
    if result.mode == "models":
        verdict = (
            f"differs detectably from the reference{size}"
            if pert.significant
            else "does not differ detectably from the reference"
        )
    st.markdown(f"#### Why: {md_escape(name)}")
    st.caption(
        f"The test says {md_escape(name)} {verdict} (ω = {pert.effect_size:.3f}, "
        f"{pert.effect_above_chance:+.3f} above chance, "
        f"{md_escape(p_text(pert.p_adjusted))}{' ' + md_escape(pert.stars) if pert.stars else ''}). "
        "Below: what changed in the words."
    )

    if ex.terms:
        fig = memo[(id(result), name)][2] if len(memo[(id(result), name)]) > 2 else None
        if fig is None:  # built once per result and perturbation, like the explanation
            fig = why_figures.terms_figure(ex, base_label=base_label, perturbed_label=name)
            memo[(id(result), name)] = (*memo[(id(result), name)][:2], fig)
        st.plotly_chart(fig, key=f"{key}_terms")
        st.caption(
            "Words and two-word phrases each group uses more, by the weighted log-odds "
            "ratio with an informative Dirichlet prior (Monroe, Colaresi & Quinn 2008), "
            "z-scored: rare words are shrunk towards 0, stop words left out. Beyond the "
            "dotted lines (|z| > 1.96) a term clearly leans one way. Hover for counts."
        )
    else:
        st.info("The answers share too few words to compare (every term appears fewer than twice).")

    st.markdown("##### Typical and atypical answers")
    which = st.radio(
        "Show",
        ["typical", "atypical"],
        horizontal=True,
        key=f"{key}_rep",
        format_func={
            "typical": "Typical (nearest each group's centre)",
            "atypical": "Most atypical (farthest from it)",
        }.get,
    )
    reps = ex.typical if which == "typical" else ex.atypical
    terms = {
        "base": [t.term for t in ex.terms_for("base", 12)],
        "perturbed": [t.term for t in ex.terms_for("perturbed", 12)],
    }
    texts = {"base": result.base.texts, "perturbed": result.responses(name)}
    cols = st.columns(2)
    for col, side, other in zip(cols, ("base", "perturbed"), ("perturbed", "base"), strict=True):
        r = reps[side]
        with col:
            st.markdown(
                f"**{md_escape(labels[side])}** — answer #{r.index + 1} "
                f"(similarity to its group's centre {r.similarity:.2f})"
            )
            st.html(marked_html(r.text, texts[other], terms[side]))
    st.caption(
        "Highlighted: words that no answer of the other group uses; darker: the "
        "distinguishing terms of the chart. Model output is shown as plain text."
    )

    st.markdown("##### Repeated answers")
    _duplicates(result, name, ex, key, labels)

    with st.container(border=True):
        _summary(result, name, key)
    with st.container(border=True):
        _robustness(result, name, key)
