"""Spec files in the dashboard: download the audit on screen as YAML (for the CLI and CI),
and open a spec file into a page's form."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.measures import MEASURES
from dbpa_core.multitest import METHODS
from dbpa_core.spec import AuditSpec, SpecError, model_label, parse_spec

from . import export, presets, state
from .checks_view import apply_checks
from .widgets import md_escape

SIMILARITIES = ("local", "bleu", "rouge1", "rouge2", "rougeL")
# the pages whose form can hold any spec of their kind
OPENS = {"landing": "perturbation", "roc": "perturbation", "models": "models"}
PAGE_OF = {"perturbation": "Perturbation test (or Control vs target)", "models": "Model comparison"}
# (widget key, spec field, lowest, highest) of the sidebar's numeric settings
NUMBERS = (
    ("w_samples", "samples", 2, 500),
    ("w_permutations", "permutations", 100, 100_000),
    ("w_alpha", "alpha", 0.001, 0.2),
    ("w_temperature", "temperature", 0.0, 2.0),
    ("w_max_tokens", "max_tokens", 8, 4000),
    ("w_seed", "seed", 0, 2**31 - 1),
)


def spec_section(specs: dict[str, AuditSpec] | None, *, key: str) -> None:
    """An expander with "Download spec (YAML)" for the form on screen and, on pages that can
    hold any spec, "Open a spec"."""
    with st.expander("Spec file: download this audit for the CLI, or open one", icon=":material/code:"):
        if specs:
            names = list(specs)
            pick = names[0]
            if len(names) > 1:
                pick = st.selectbox("One spec per model; download the one for", names, key=f"{key}_spec_pick")
            spec = specs[pick]
            st.download_button(
                "Download spec (YAML)",
                lambda: export.spec_yaml(spec),
                f"{export.slug(spec.name)}_{export.slug(pick)}-spec.yaml",
                "application/yaml",
                key=f"{key}_spec_dl",
                icon=":material/download:",
                on_click="ignore",
                help="`dbpa audit FILE --out DIR` runs the same audit from the command line or in CI.",
            )
        else:
            st.caption("Fix the form above to download it as a spec.")
        if key in OPENS:
            st.file_uploader(
                "Open a spec (YAML): fills this page's form and the settings",
                type=["yaml", "yml"],
                key=f"{key}_spec_up",
                on_change=_opened,
                args=(key,),
            )
        note = st.session_state.pop(f"_{key}_spec_note", None)
        if note:
            kind, text = note
            getattr(st, kind)(text)


def _opened(key: str) -> None:
    """The uploader's callback (runs before the page, so widget values can still be set)."""
    up = st.session_state.get(f"{key}_spec_up")
    if up is None:
        return
    try:
        text = up.getvalue().decode("utf-8")
        spec = parse_spec(text, source=up.name)
    except UnicodeDecodeError:
        st.session_state[f"_{key}_spec_note"] = ("error", f"{md_escape(up.name)} is not UTF-8 text.")
        return
    except SpecError as exc:
        st.session_state[f"_{key}_spec_note"] = ("error", md_escape(str(exc)))
        return
    if spec.cases:  # this page's form holds one base prompt, not a table of cases
        st.session_state[f"_{key}_spec_note"] = (
            "error",
            f"{md_escape(up.name)} is a suite of {len(spec.cases)} cases: suites run "
            f"on the **Suite of cases** page or with `dbpa audit {md_escape(up.name)} --out DIR`.",
        )
        return
    if spec.mode != OPENS[key]:
        st.session_state[f"_{key}_spec_note"] = (
            "error",
            f"{md_escape(up.name)} is a {spec.mode} audit: open it on the **{PAGE_OF[spec.mode]}** page.",
        )
        return
    notes = apply_spec(spec, key)
    text = f"Opened **{md_escape(spec.name)}**: the form and the settings now hold it."
    if notes:
        text += " " + " ".join(md_escape(n) for n in notes)
    st.session_state[f"_{key}_spec_note"] = ("warning" if notes else "success", text)


def _set(key: str, value: Any) -> None:
    """Set a remembered widget value (also in the page-switch store, see state.py)."""
    st.session_state[key] = value
    st.session_state.setdefault("_persist", {})[key] = value


def rows_of(spec: AuditSpec) -> list[dict[str, str]]:
    """A spec's perturbations as rows of the pages' tables (a prefix stays a prefix)."""
    rows = []
    base = spec.base_prompt
    for p in spec.perturbations:
        prefix, prompt = "", p.prompt
        if p.prompt.endswith(" " + base) and p.prompt != base:
            prefix, prompt = p.prompt[: -len(base) - 1].strip(), ""
        rows.append({"name": p.name, "prefix": prefix, "prompt": prompt, "role": p.role or ""})
    return rows


def apply_spec(spec: AuditSpec, page: str) -> list[str]:
    """Put a spec into the settings and ``page``'s form; returns notes on what the dashboard
    could not hold (and what it changed to fit its widgets)."""
    ss = st.session_state
    notes: list[str] = []
    for wkey, field, lo, hi in NUMBERS:
        value = getattr(spec, field)
        fitted = min(max(value, lo), hi)
        if fitted != value:
            notes.append(f"{field} {value} is outside the dashboard's range: {fitted} is used.")
        _set(wkey, type(ss.get(wkey, value))(fitted))
    if spec.measure in MEASURES:
        _set("w_measure", spec.measure)
    if spec.correction in METHODS:
        _set("w_correction", spec.correction)
    emb = spec.embedder.get("backend", "local")
    if emb in SIMILARITIES:
        _set("w_embedder", emb)
    else:
        notes.append(f"The embedder {emb!r} is not offered here: local MiniLM is used.")
        _set("w_embedder", "local")
    if spec.top_p != 1.0:
        notes.append(f"top_p = {spec.top_p} is not offered here: 1.0 is used.")
    if spec.system_prompt or any(p.system_prompt for p in spec.perturbations):
        notes.append("System prompts are not offered here and were left out.")
    if spec.sequential:
        notes.append("Sequential stopping is not offered here: every permutation is run.")
    _set("w_audit_name", spec.name)
    notes += apply_checks(spec)  # the answer checks' editor holds the spec's checks

    # a model already in the list (same backend, name, server, file or folder; and the same
    # label if the spec gives one) is reused; any other is added to the saved models, and
    # the note says so
    labels, added = [], []
    for m in spec.models:
        same = next(
            (x for x in ss["models"] if state.same_model(x, m) and m.get("label") in (None, model_label(x))),
            None,
        )
        if same is None:
            same = dict(m)
            if model_label(same) in {model_label(x) for x in ss["models"]}:
                same["label"] = state.free_label(model_label(same))  # another model's name
            ss["models"].append(same)
            added.append(model_label(same))
        labels.append(model_label(same))
    if added:
        error = state.save_models()
        notes.append(
            error
            or f"Added {', '.join(repr(x) for x in added)} to the saved models: "
            "the spec's model was not in the list (Settings can remove it)."
        )
    if page == "landing":
        _set("w_base_prompt", spec.base_prompt)
        ss["perturbations"] = pd.DataFrame(rows_of(spec), columns=presets.COLUMNS)
        ss["perturbations_version"] = ss.get("perturbations_version", 0) + 1
        _set("w_landing_model", labels[0])
    elif page == "roc":
        _set("w_base_prompt", spec.base_prompt)
        ss["roc_table"] = pd.DataFrame(rows_of(spec), columns=presets.COLUMNS)
        ss["roc_table_version"] = ss.get("roc_table_version", 0) + 1
        _set("w_roc_models", [labels[0]])
    elif page == "suite":
        from . import suite_builder

        suite_builder.put_spec(spec, checks=False)
        _set("w_suite_model", labels[0])
    elif page == "models":
        _set("w_models_prompt", spec.base_prompt)
        _set("w_models_reference", labels[0])
        _set("w_models_others", labels[1:])
    return notes
