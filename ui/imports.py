"""Upload recorded responses (promptfoo, OpenAI Batch API, CSV / JSONL) as replay models.

``import_block()`` is a self-contained section for the Settings page: the file is
converted by :mod:`dbpa_core.importers`, saved under ``$DBPA_HOME/imports`` and added to
the saved models (``models.yaml``, like a model added on the page, so it comes back after
a reload) and selected on the pages; rows that could not be read are listed with their
line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from dbpa_core.importers import (
    ImportFormatError,
    import_file,
    imports_dir,
    stored_name,
    write_atomic,
)
from dbpa_core.spec import model_label

from . import state
from .widgets import md_escape

FORMATS = {
    "auto": "Detect",
    "promptfoo": "promptfoo output (JSON / JSONL)",
    "openai-batch": "OpenAI Batch API output",
    "csv": "CSV / TSV table",
    "jsonl": "JSONL table",
}
FLASH = "_settings_import_flash"


def _save(folder: Path, upload) -> Path:
    raw = upload.getvalue()
    name = Path(upload.name)
    path = (
        folder
        / "uploads"
        / (stored_name(name.stem, hashlib.sha256(raw).hexdigest())[:-6] + (name.suffix or ".txt"))
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


def _models_for(records, out: Path, label: str, upload_name: str) -> list[dict]:
    models = list(dict.fromkeys(r.model for r in records))
    base = label.strip() or f"{Path(upload_name).stem} (imported)"
    if len(models) <= 1:
        cfg = {"backend": "replay", "file": str(out), "label": base}
        if models and models[0]:
            cfg["name"] = models[0]
        return [cfg]
    return [
        {"backend": "replay", "file": str(out), "name": m, "label": f"{m} ({base})"} for m in models if m
    ] + ([{"backend": "replay", "file": str(out), "label": f"unnamed ({base})"}] if None in models else [])


def import_block() -> None:
    """The "Import recorded responses" section."""
    st.subheader("Import recorded responses")
    st.caption(
        "Audit answers you already paid for: the output of `promptfoo eval --repeat N "
        "-o results.json`, an OpenAI Batch API output file (with the requests file you "
        "uploaded for the batch), or any CSV / JSONL with prompt and response columns. "
        "The file becomes a replay model: audit it on any page."
    )
    flash = st.session_state.pop(FLASH, None)
    if flash:
        (st.warning if flash.get("saved") else st.success)(flash["success"])
        if flash.get("saved"):
            st.warning(md_escape(flash["saved"]))
        if flash["problems"]:
            st.warning(flash["problems"])
        for note in flash["notes"]:
            st.info(md_escape(note))
    c1, c2 = st.columns(2)
    fmt = c1.selectbox("Format", list(FORMATS), format_func=FORMATS.get, key="settings_import_fmt")
    label = c2.text_input("Name in the model list (optional)", key="settings_import_label")
    upload = st.file_uploader(
        "File", type=["json", "jsonl", "ndjson", "csv", "tsv", "txt"], key="settings_import_file"
    )
    requests = None
    if fmt == "openai-batch":
        requests = st.file_uploader(
            "Requests file (the JSONL uploaded for the batch)",
            type=["jsonl", "json", "txt"],
            key="settings_import_requests",
        )
    cols = {}
    if fmt in ("auto", "csv", "jsonl"):
        a, b, c = st.columns(3)
        cols["prompt_column"] = a.text_input("Prompt column (tables)", key="settings_import_pcol")
        cols["response_column"] = b.text_input("Response column", key="settings_import_rcol")
        cols["model_column"] = c.text_input("Model column (optional)", key="settings_import_mcol")
        if fmt == "auto":
            st.caption(
                "Column names are needed for CSV / JSONL tables only; promptfoo and "
                "Batch API files are recognised by their content."
            )
    if not st.button(
        "Import as a replay model",
        key="settings_import_go",
        type="primary",
        disabled=upload is None,
        icon=":material/upload_file:",
    ):
        return
    folder = imports_dir()
    src = _save(folder, upload)
    req_path = _save(folder, requests) if requests is not None else None
    options = {k: (v.strip() or None) for k, v in cols.items()}
    try:
        res = import_file(src, fmt, requests=str(req_path) if req_path else None, **options)
    except ImportFormatError as exc:
        msg = str(exc).replace(str(src), upload.name)
        if req_path is not None:
            msg = msg.replace(str(req_path), requests.name)
        st.error(
            md_escape(
                msg.replace("--requests FILE", "the requests file").replace(
                    "--prompt-column and --response-column", "the prompt and response columns"
                )
            )
        )
        return
    problems = ""
    if res.problems:
        shown = "\n".join(f"- {md_escape(p)}" for p in res.problems[:20])
        more = f"\n- … and {len(res.problems) - 20} more" if len(res.problems) > 20 else ""
        problems = (
            f"{len(res.problems)} row(s) of {md_escape(upload.name)} could not be "
            "imported and "
            f"were left out:\n{shown}{more}"
        )
    if not res.records:
        st.error(
            f"No usable responses in {md_escape(upload.name)}." + (f"\n\n{problems}" if problems else "")
        )
        return
    content = res.to_jsonl()
    out = folder / stored_name(Path(upload.name).stem, content)
    try:
        write_atomic({out: content})  # never a partial replay file that reads as valid
    except OSError as exc:
        st.error(md_escape(f"Cannot write {out} ({exc.strerror or exc}); nothing was imported."))
        return
    added = _models_for(res.records, out, label, upload.name)
    labels = [model_label(m) for m in added]
    # an import under a name already in the list replaces that model (and says so)
    replaced = sorted(model_label(m) for m in st.session_state["models"] if model_label(m) in labels)
    st.session_state["models"] = [
        m for m in st.session_state["models"] if model_label(m) not in labels
    ] + added
    saved = state.save_models()
    state.select_everywhere(labels)
    groups = res.groups()
    st.session_state[FLASH] = {
        "success": f"Imported {len(res.records)} responses to {len(groups)} prompt/model "
        f"pair(s) from {md_escape(upload.name)} as "
        f"{', '.join(md_escape(x) for x in sorted(labels))}, saved with the models "
        "and selected on the audit pages. The smallest group has "
        f"{min(g['responses'] for g in groups)} responses: keep k at or below it."
        + (
            f" It replaced the model(s) of the same name: {', '.join(md_escape(x) for x in replaced)}."
            if replaced
            else ""
        ),
        "saved": saved,
        "problems": problems,
        "notes": list(res.notes),
    }
    st.session_state.pop("settings_import_label", None)  # the next import names itself anew
    st.rerun()
