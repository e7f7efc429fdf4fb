"""The Suite page's builder: a suite made by pointing and clicking.

Cases are rows of an editable table (pasted from a spreadsheet, uploaded as CSV, JSONL or
XLSX, or typed); the base prompt is a template over their columns (``{name}``, ``{age}``),
previewed for one case; perturbations come from presets (the papers' eight persona
prefixes, a name swap over a list of first names, a field swap, an option reorder, the
robustness battery's typo, word and homoglyph attacks at a rate ρ) or are written by hand (a prefix, a
suffix, a whole template, or ``set`` of fields), each marked control or target; the
answer checks are the dashboard's one checks table. The sidebar's test settings (k, B,
correction, α, sampling) and the page's model make the rest of the spec.

:func:`spec_dict` is the suite as a spec document with its cases inline (what runs here);
:func:`spec_yaml` and :func:`cases_csv` are the same suite as the two files that
``dbpa audit`` runs unchanged (``cases: {file: cases.csv}``).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.cases import json_objects, named_placeholders
from dbpa_core.spec import AuditSpec, load_spec, parse_spec

from . import state

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_YAML = ROOT / "examples" / "suite_clinic.yaml"  # the page's example (and demo)
CASES, CASES_V = "_suite_cases", "_suite_cases_v"  # the cases table and its editor's version
PERTS, PERTS_V = "_suite_perts", "_suite_perts_v"  # the perturbations table, its version
BASE = "w_suite_base"  # the base prompt template
KINDS = ("prefix", "suffix", "prompt", "set", "swap", "swap_text", "reorder", "attack")
KIND_HELP = {
    "prefix": "text put before each case's filled base prompt",
    "suffix": "text put after it",
    "prompt": "a whole prompt template of its own, filled from the case's fields",
    "set": "change fields of the case before the base prompt is filled: `name=Ahmed; age=85`",
    "swap": "two fields whose values change places in each case: `name1, name2`",
    "swap_text": "two spans of the filled prompt that change places: `the grandfather | the grandson`",
    "reorder": "the answer options' order: `reverse`, `rotate` or `shuffle` (seeded per case)",
    "attack": "the battery's typos, word edits or homoglyphs at a rate ρ: `char, rho=0.1, seed=0` "
    "(level `char`, `word` or `visual`; optional `op=…`, `letters=…`)",
}
# the battery's attacks offered as presets: level -> what the page calls it
ATTACKS = {"char": "typos (char)", "word": "word edits (word)", "visual": "homoglyphs (visual)"}
REORDERS = ("reverse", "rotate", "shuffle")
OPTIONS, EXPECT = "w_suite_options", "w_suite_expect"  # answer options (a line each), expected answer
# the sequential-sampling switch, and an opened spec's own plan (looks, weights) it keeps
SEQUENTIAL, SEQUENTIAL_PLAN = "w_suite_sequential", "_suite_sequential_plan"
PERT_COLUMNS = ["name", "kind", "value", "role"]
CASES_FILE = "cases.csv"
# first names across groups, for a name swap (as in audits of names in hiring and medicine)
NAMES = ["Emily", "Greg", "Lakisha", "Jamal", "Mohammed", "Fatima", "Wei", "Mei", "José", "María"]
try:  # reading .xlsx needs openpyxl, which the lock does not pin
    import openpyxl  # noqa: F401

    XLSX = True
except ImportError:
    XLSX = False


# --------------------------------------------------------------------------- the tables
def empty_perturbations() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in PERT_COLUMNS})


def perturbation_rows(spec: AuditSpec) -> list[dict[str, str]]:
    """A spec's perturbations as rows of the perturbations table."""
    rows = []
    for p in spec.perturbations:
        if getattr(p, "swap", None):
            kind, value = "swap", ", ".join(p.swap)
        elif getattr(p, "swap_text", None):
            kind, value = "swap_text", " | ".join(p.swap_text)
        elif getattr(p, "reorder", None):
            kind, value = "reorder", p.reorder
        elif getattr(p, "attack", None):
            kind, value = "attack", attack_value(p.attack.to_dict())
        elif p.set_fields:
            kind, value = "set", "; ".join(f"{k}={v}" for k, v in p.set_fields)
        elif p.template:
            kind, value = "prompt", p.prompt
        elif p.suffix:
            kind, value = "suffix", p.suffix
        else:
            kind, value = "prefix", p.prefix or ""
        rows.append({"name": p.name, "kind": kind, "value": value, "role": p.role or ""})
    return rows


def cases_frame(spec: AuditSpec) -> pd.DataFrame:
    """A spec's cases as the cases table (``id`` first, every value as text)."""
    rows = [{k: "" if v is None else str(v) for k, v in c.to_dict().items()} for c in spec.cases]
    return pd.DataFrame(rows).astype("object")


def put_spec(spec: AuditSpec, *, checks: bool = True) -> None:
    """Put a suite spec into the builder (cases, base prompt, perturbations and, with
    ``checks``, its checks into the dashboard's one checks table)."""
    from . import checks_view

    ss = st.session_state
    ss[CASES] = cases_frame(spec)
    ss[CASES_V] = ss.get(CASES_V, 0) + 1
    ss[BASE] = spec.base_prompt
    ss[OPTIONS] = "\n".join(spec.options)
    ss[EXPECT] = spec.expect or ""
    ss[PERTS] = pd.DataFrame(perturbation_rows(spec), columns=PERT_COLUMNS)
    ss[PERTS_V] = ss.get(PERTS_V, 0) + 1
    seq = spec.sequential_sampling
    ss[SEQUENTIAL] = seq is not None
    # a plan of its own (looks, weights, confidence) is kept as written; the defaults as `true`
    ss[SEQUENTIAL_PLAN] = None if seq is None or seq == type(seq)() else seq.to_dict()
    if checks and spec.checks:
        checks_view.apply_checks(spec)


def example_spec() -> AuditSpec:
    """The page's example: twelve clinical vignettes (examples/suite_clinic.yaml)."""
    return load_spec(EXAMPLE_YAML)


def init() -> None:
    """The builder's tables on first visit: the example suite."""
    ss = st.session_state
    if CASES not in ss:
        from . import checks_view

        draft = read_draft()  # the suite last on screen here, before a reload or a restart
        if draft and put_doc(draft["doc"]):
            return
        # the example's checks only where the checks table (every page's) is empty
        empty = not checks_view.entries(ss.get(checks_view.TABLE, checks_view.empty_table()))
        put_spec(example_spec(), checks=empty)


def reset() -> None:
    """A button callback: the builder back to the example suite (its checks included)."""
    put_spec(example_spec())


# --------------------------------------------------------------------------- reading cases
class CasesError(ValueError):
    """Cases that cannot be read (the message says why, in one line)."""


def read_cases(name: str, data: bytes) -> pd.DataFrame:
    """Cases from an uploaded file: CSV, JSON lines or XLSX (first sheet), one case a row."""
    low = name.lower()
    if low.endswith(".xlsx"):
        if not XLSX:
            raise CasesError(
                "reading .xlsx needs the openpyxl package (not installed): save the sheet as CSV"
            )
        try:
            df = pd.read_excel(io.BytesIO(data), dtype=str)
        except Exception as exc:  # noqa: BLE001 - one line
            raise CasesError(f"{name}: not a readable spreadsheet ({exc})") from None
        return _tidy(df, name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CasesError(f"{name} is not UTF-8 text") from None
    if low.endswith((".jsonl", ".ndjson")):
        rows = json_objects(text, lambda line, why: CasesError(f"{name}, line {line}: {why}"))
        return _tidy(pd.DataFrame([row for _, row in rows]), name)
    return parse_pasted(text, name=name)


def parse_pasted(text: str, *, name: str = "the pasted text") -> pd.DataFrame:
    """Rows pasted from a spreadsheet (tab-separated) or CSV text, the header first."""
    text = text.strip("\n")
    if not text.strip():
        raise CasesError(f"{name} is empty")
    first = text.splitlines()[0]
    sep = "\t" if "\t" in first else (";" if first.count(";") > first.count(",") else ",")
    rows = list(csv.reader(io.StringIO(text), delimiter=sep))
    header, body = rows[0], [r for r in rows[1:] if any(c.strip() for c in r)]
    if len(header) < 1 or not body:
        raise CasesError(f"{name}: write a header row of field names, then one case a row")
    bad = [i + 2 for i, r in enumerate(body) if len(r) > len(header)]
    if bad:
        raise CasesError(f"{name}, row {bad[0]}: more cells than the header has names")
    df = pd.DataFrame([r + [""] * (len(header) - len(r)) for r in body], columns=[h.strip() for h in header])
    return _tidy(df, name)


def _tidy(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Text cells, named columns, an ``id`` column first (row numbers when absent)."""
    if df.empty:
        raise CasesError(f"{name} holds no cases")
    cols = [str(c).strip() for c in df.columns]
    if any(not c or c.startswith("Unnamed") for c in cols):
        raise CasesError(f"{name}: every column needs a name in the header row")
    if len(set(cols)) < len(cols):
        dup = next(c for c in cols if cols.count(c) > 1)
        raise CasesError(f"{name}: the column {dup!r} appears twice")
    df = df.copy()
    df.columns = cols
    df = df.fillna("").astype(str)
    if "id" not in df.columns:
        df.insert(0, "id", [str(i + 1) for i in range(len(df))])
    else:
        df = df[["id", *[c for c in df.columns if c != "id"]]]
    return df.astype("object").reset_index(drop=True)


def set_cases(df: pd.DataFrame) -> None:
    ss = st.session_state
    ss[CASES] = df
    ss[CASES_V] = ss.get(CASES_V, 0) + 1


# --------------------------------------------------------------------------- presets
def add_perturbations(rows: list[dict[str, str]]) -> str:
    """Append rows to the perturbations table (a name already there is not added again);
    returns a note on what was skipped."""
    ss = st.session_state
    df = ss[PERTS]
    have = {str(n).strip() for n in df["name"].fillna("")}
    new = [r for r in rows if r["name"] not in have]
    if new:
        ss[PERTS] = pd.concat([df, pd.DataFrame(new, columns=PERT_COLUMNS)], ignore_index=True)
        ss[PERTS_V] = ss.get(PERTS_V, 0) + 1
    skipped = [r["name"] for r in rows if r["name"] in have]
    return f"Already in the table, not added again: {', '.join(skipped)}." if skipped else ""


def clear_perturbations() -> None:
    """A button callback: an empty perturbations table."""
    ss = st.session_state
    ss[PERTS] = empty_perturbations()
    ss[PERTS_V] = ss.get(PERTS_V, 0) + 1


def persona_rows(personas: list[str], role: str = "target") -> list[dict[str, str]]:
    from .presets import persona_prefix

    return [{"name": p, "kind": "prefix", "value": persona_prefix(p), "role": role} for p in personas]


def name_swap_rows(field: str, names: list[str], role: str = "control") -> list[dict[str, str]]:
    """One perturbation per first name: the case's ``field`` set to it (a control)."""
    return [{"name": f"{field}: {n}", "kind": "set", "value": f"{field}={n}", "role": role} for n in names]


def attack_value(attack: dict[str, Any]) -> str:
    """A spec's ``attack:`` as the perturbations table's value: ``char, rho=0.1, seed=0``."""
    rest = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in attack.items() if k != "level"]
    return ", ".join([str(attack.get("level", "")), *rest])


def attack_entry(value: str) -> dict[str, Any]:
    """The table's ``char, rho=0.1, seed=0`` as a spec's ``attack:`` (numbers as numbers;
    what cannot be read is passed on for the spec's check to name)."""
    out: dict[str, Any] = {}
    for part in [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]:
        key, eq, val = part.partition("=")
        if not eq:
            out["level"] = part.lower()
            continue
        key, val = key.strip().lower(), val.strip()
        try:
            out[key] = int(val) if key == "seed" else float(val) if key in ("rho", "letters") else val
        except ValueError:
            out[key] = val
    return out


def attack_rows(level: str, rho: float, *, seed: int = 0, role: str = "control") -> list[dict[str, str]]:
    """One perturbation: the battery's ``level`` attack at ``rho`` (a control by default: a
    typo should not change a recommendation)."""
    value = attack_value({"level": level, "rho": float(rho), "seed": int(seed)})
    name = {"char": "typos", "word": "word edits", "visual": "homoglyphs"}.get(level, level)
    return [{"name": f"{name} ρ={rho:g}", "kind": "attack", "value": value, "role": role}]


# --------------------------------------------------------------------------- the spec
def perturbation_entries(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of the perturbations table -> spec entries (empty rows skipped)."""
    out: list[dict[str, Any]] = []
    for _, row in df.fillna("").iterrows():
        name, kind = str(row["name"]).strip(), str(row["kind"]).strip() or "prefix"
        value, role = str(row["value"]).strip(), str(row["role"]).strip().lower()
        if not (name or value):
            continue
        entry: dict[str, Any] = {"name": name or value[:40]}
        if kind == "set":
            pairs = [p for p in value.replace("\n", ";").split(";") if p.strip()]
            fields: dict[str, str] = {}
            for pair in pairs:
                key, eq, val = pair.partition("=")
                if not eq:
                    key, eq, val = pair.partition(":")
                fields[key.strip()] = val.strip()
            entry["set"] = fields
        elif kind == "swap":
            entry["swap"] = [v.strip() for v in value.split(",")]
        elif kind == "swap_text":
            entry["swap_text"] = [v.strip() for v in value.split("|")]
        elif kind == "reorder":
            entry["reorder"] = value.lower()
        elif kind == "attack":
            entry["attack"] = attack_entry(value)
        else:
            entry[kind if kind in KINDS else "prefix"] = value
        if role:
            entry["role"] = role
        out.append(entry)
    return out


def cases_rows(df: pd.DataFrame) -> list[dict[str, str]]:
    """The cases table's rows (empty rows skipped), every value as text."""
    rows = []
    for _, r in df.fillna("").astype(str).iterrows():
        row = {str(k): str(v) for k, v in r.items()}
        if any(v.strip() for v in row.values()):
            rows.append(row)
    return rows


def spec_dict(
    *, model: dict[str, Any], checks: list[dict[str, Any]] | None = None, name: str = "suite"
) -> dict[str, Any]:
    """The suite on screen as a spec document, its cases inline (the sidebar's settings,
    the page's model and checks)."""
    ss = st.session_state
    doc: dict[str, Any] = {"name": str(ss.get("w_audit_name") or "").strip() or name}
    doc.update(state.settings())
    if doc.get("min_effect") is None:
        doc.pop("min_effect", None)
    doc["model"] = dict(model)
    doc["cases"] = cases_rows(ss[CASES])
    doc["base"] = {"prompt": str(ss.get(BASE) or "")}
    options = [o.strip() for o in str(ss.get(OPTIONS) or "").splitlines() if o.strip()]
    if options:
        doc["options"] = options
    if str(ss.get(EXPECT) or "").strip():
        doc["expect"] = str(ss[EXPECT]).strip()
    doc["perturbations"] = perturbation_entries(ss[PERTS])
    if ss.get(SEQUENTIAL):
        doc["sequential_sampling"] = ss.get(SEQUENTIAL_PLAN) or True
    if checks:
        doc["checks"] = checks
    return doc


def build(doc: dict[str, Any]) -> AuditSpec:
    """The validated suite (raises SpecError with a readable message)."""
    from dbpa_core.spec import SpecError

    problem = state.number_problem()
    if problem:
        raise SpecError(problem.removesuffix("."))
    if not doc["cases"]:
        raise SpecError("the cases table is empty: paste, upload or type at least one case")
    if not doc["base"]["prompt"].strip():
        raise SpecError("the base prompt is empty: write the question, with {field} placeholders")
    if not doc["perturbations"]:
        raise SpecError("no perturbations: add a preset or write one in the table")
    return parse_spec(doc, source="The suite")


def unused_fields(doc: dict[str, Any]) -> list[str]:
    """Columns of the cases that no template names (the base prompt, a perturbation's
    prompt, prefix or suffix, a ``set``, a check): probably a typo or a forgotten field."""
    cols = [c for c in (doc["cases"][0] if doc["cases"] else {}) if c != "id"]
    used: set[str] = set(named_placeholders(doc["base"]["prompt"]))
    for o in [*doc.get("options", ()), doc.get("expect") or ""]:
        used.update(named_placeholders(o))
    for p in doc["perturbations"]:
        for k in ("prompt", "prefix", "suffix"):
            used.update(named_placeholders(str(p.get(k) or "")))
        used.update((p.get("set") or {}).keys())
        used.update(p.get("swap") or ())
        for span in p.get("swap_text") or ():
            used.update(named_placeholders(span))
    for c in doc.get("checks") or ():
        used.update(named_placeholders(json.dumps(c)))
    return [c for c in cols if c not in used]


def unknown_fields(doc: dict[str, Any]) -> list[str]:
    """Placeholders of the base prompt that name no column of the cases."""
    cols = set(doc["cases"][0]) if doc["cases"] else set()
    return [f for f in dict.fromkeys(named_placeholders(doc["base"]["prompt"])) if f not in cols]


def preview(spec: AuditSpec, case_id: str) -> list[tuple[str, str, str]]:
    """One case's prompts: (arm, role, prompt) for the base and every perturbation."""
    from dbpa_core.suite import case_spec

    case = next((c for c in spec.cases if c.id == case_id), spec.cases[0])
    one = case_spec(spec, case)
    return [("base", "", one.base_prompt)] + [(p.name, p.role or "", p.prompt) for p in one.perturbations]


# --------------------------------------------------------------------------- the two files
def spec_yaml(doc: dict[str, Any], cases_file: str = CASES_FILE) -> str:
    """The suite as a YAML spec whose cases are read from ``cases_file`` (beside it)."""
    import yaml

    out = {k: v for k, v in doc.items() if k != "cases"}
    out = {"name": out.pop("name"), **out, "cases": {"file": cases_file}}
    # the base, perturbations and checks last, as a person writes a spec
    for k in ("base", "perturbations", "checks"):
        if k in out:
            out[k] = out.pop(k)
    head = (
        "# yaml-language-server: $schema=https://dbpa.dev/spec.schema.json\n"
        f"# A suite built on the dashboard's Suite page. Run it with its cases file beside it:\n"
        f"#   dbpa audit suite.yaml --out out/suite      (reads {cases_file})\n"
    )
    return head + yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100)


def cases_csv(doc: dict[str, Any]) -> str:
    """The cases as CSV, ``id`` first."""
    rows = doc["cases"]
    cols = list(rows[0]) if rows else ["id"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


# --------------------------------------------------------------------------- drawing
def cases_section(key: str) -> None:
    """1. The cases: upload, paste, or edit the table."""
    ss = st.session_state
    st.subheader("1 · Cases")
    c1, c2 = st.columns(2)
    with c1:
        kinds = ["csv", "jsonl", "tsv", "txt"] + (["xlsx"] if XLSX else [])
        st.file_uploader(
            "Upload cases (CSV, JSONL"
            + (", XLSX" if XLSX else "")
            + "): one case a row, a header of field names",
            type=kinds,
            key=f"{key}_cases_up",
            on_change=_uploaded,
            args=(key,),
        )
        if not XLSX:
            st.caption("XLSX needs the openpyxl package, which is not installed here: save the sheet as CSV.")
    with c2:
        st.text_area(
            "Or paste rows from a spreadsheet (the header row first)",
            key=f"{key}_paste",
            height=98,
            placeholder="id\tname\tage\nv01\tJohn\t70",
        )
        st.button("Use the pasted rows", key=f"{key}_paste_use", on_click=_pasted, args=(key,))
    if said := ss.pop(f"_{key}_cases_note", None):
        getattr(st, said[0])(said[1])
    table = ss[CASES]
    edited = st.data_editor(
        table,
        key=f"{key}_cases_editor_{ss.get(CASES_V, 0)}",
        num_rows="dynamic",
        hide_index=True,
        height=min(36 + 35 * (len(table) + 1), 400),
        column_config={c: st.column_config.TextColumn(c) for c in table.columns},
    )
    if not edited.equals(table):
        ss[CASES] = edited.reset_index(drop=True)
        ss[CASES_V] = ss.get(CASES_V, 0) + 1
    st.caption(
        f"{len(cases_rows(ss[CASES]))} cases. Columns are the cases' fields; type a new row at the "
        "bottom. To add a field, paste or upload a table with it."
    )


def _uploaded(key: str) -> None:
    ss = st.session_state
    up = ss.get(f"{key}_cases_up")
    if up is None:
        return
    try:
        df = read_cases(up.name, up.getvalue())
    except CasesError as exc:
        ss[f"_{key}_cases_note"] = ("error", str(exc) + ".")
        return
    set_cases(df)
    ss[f"_{key}_cases_note"] = (
        "success",
        f"Read {len(df)} cases from {up.name}: fields {', '.join(df.columns)}.",
    )


def _pasted(key: str) -> None:
    ss = st.session_state
    try:
        df = parse_pasted(str(ss.get(f"{key}_paste") or ""))
    except CasesError as exc:
        ss[f"_{key}_cases_note"] = ("error", str(exc) + ".")
        return
    set_cases(df)
    ss[f"_{key}_cases_note"] = ("success", f"Read {len(df)} pasted cases: fields {', '.join(df.columns)}.")


def prompt_section() -> None:
    """2. The base prompt template."""
    st.subheader("2 · Base prompt")
    fields = [c for c in st.session_state[CASES].columns if c != "id"]
    st.text_area(
        "A template over the cases' fields: {field} is replaced by the case's value",
        key=BASE,
        height=110,
        help="Fields: " + ", ".join("{" + f + "}" for f in fields) + ". Write {{ and }} for literal braces.",
    )
    st.caption(
        "Fields: "
        + " ".join(f"`{{{f}}}`" for f in fields)
        + ", and `{options}` for the answer options below (as lines 'A) ...', 'B) ...')."
    )
    c1, c2 = st.columns(2)
    c1.text_area(
        "Answer options (optional): one template a line, e.g. {ans0}",
        key=OPTIONS,
        height=98,
        help="Each case's options, filled from its fields. A 'reorder' perturbation changes "
        "their order; a 'choice' check reads which one an answer chose.",
    )
    c2.text_input(
        "Expected answer (optional): a template, e.g. {unknown}",
        key=EXPECT,
        help="Adds the check 'expected answer' (which option an answer chose, when there are "
        "options; else whether the answer contains it): each arm's accuracy.",
    )


def perturbations_section(key: str) -> None:
    """3. Perturbations: presets and the table."""
    ss = st.session_state
    st.subheader("3 · Perturbations")
    st.caption(
        "Each perturbation changes every case the same way. Kinds: "
        + "; ".join(f"**{k}**: {h}" for k, h in KIND_HELP.items())
        + ". Role: *control* should not change the answer, *target* should."
    )
    with st.expander(
        "Presets: personas, a name swap, a field swap, an option reorder, typos and homoglyphs",
        icon=":material/library_add:",
    ):
        from .presets import PERSONAS

        c1, c2 = st.columns(2)
        with c1:
            picked = st.multiselect("Persona prefixes (the papers' eight)", PERSONAS, key=f"{key}_personas")
            prole = st.selectbox("Role", ["target", "control", ""], key=f"{key}_personas_role")
            if st.button("Add personas", key=f"{key}_add_personas", disabled=not picked):
                ss[f"_{key}_pert_note"] = add_perturbations(persona_rows(picked, prole))
                st.rerun()
        with c2:
            fields = [c for c in ss[CASES].columns if c != "id"]
            default = next((f for f in fields if "name" in f.lower()), fields[0] if fields else None)
            if fields:
                field = st.selectbox(
                    "Field to swap",
                    fields,
                    index=fields.index(default) if default else 0,
                    key=f"{key}_swap_field",
                )
                names = st.multiselect(
                    "First names across groups (each one a perturbation: the field set to it)",
                    NAMES,
                    key=f"{key}_swap_names",
                    accept_new_options=True,
                )
                nrole = st.selectbox("Role", ["control", "target", ""], key=f"{key}_swap_role")
                if st.button("Add name swap", key=f"{key}_add_swap", disabled=not names):
                    ss[f"_{key}_pert_note"] = add_perturbations(name_swap_rows(field, names, nrole))
                    st.rerun()
        c3, c4 = st.columns(2)
        with c3:
            if len(fields) >= 2:
                pair = st.multiselect(
                    "Swap two fields' values", fields, key=f"{key}_swap_pair", max_selections=2
                )
                if st.button("Add field swap", key=f"{key}_add_pair", disabled=len(pair) != 2):
                    row = {"name": f"{pair[0]} <-> {pair[1]}", "kind": "swap", "value": ", ".join(pair)}
                    ss[f"_{key}_pert_note"] = add_perturbations([{**row, "role": "control"}])
                    st.rerun()
        with c4:
            how = st.selectbox("Reorder the answer options", REORDERS, key=f"{key}_reorder")
            no_options = not str(ss.get(OPTIONS) or "").strip()
            if st.button(
                "Add option reorder",
                key=f"{key}_add_reorder",
                disabled=no_options,
                help="Write the answer options first (step 2)." if no_options else None,
            ):
                row = {"name": f"options {how}", "kind": "reorder", "value": how, "role": "control"}
                ss[f"_{key}_pert_note"] = add_perturbations([row])
                st.rerun()
        c5, c6 = st.columns(2)
        with c5:
            level = st.selectbox(
                "The battery's attack on each prompt",
                list(ATTACKS),
                format_func=ATTACKS.get,
                key=f"{key}_attack_level",
                help="Typos (a character repeated, deleted or inserted), word edits (WordNet) or "
                "look-alike characters, each word attacked with probability ρ, seeded per case.",
            )
            rho = st.slider("ρ: share of words attacked", 0.05, 1.0, 0.1, 0.05, key=f"{key}_attack_rho")
        with c6:
            arole = st.selectbox("Role", ["control", "target", ""], key=f"{key}_attack_role")
            aseed = st.number_input("Attack seed", 0, 10**6, 0, key=f"{key}_attack_seed")
            if st.button("Add attack", key=f"{key}_add_attack"):
                rows = attack_rows(level, rho, seed=int(aseed), role=arole)
                ss[f"_{key}_pert_note"] = add_perturbations(rows)
                st.rerun()
    if note := ss.pop(f"_{key}_pert_note", None):
        st.info(note)
    st.button(
        "Remove every perturbation",
        key=f"{key}_pert_clear",
        on_click=clear_perturbations,
        icon=":material/delete_sweep:",
        disabled=not len(ss[PERTS]),
    )
    table = ss[PERTS]
    edited = st.data_editor(
        table,
        key=f"{key}_pert_editor_{ss.get(PERTS_V, 0)}",
        num_rows="dynamic",
        hide_index=True,
        height=min(36 + 35 * (len(table) + 1), 400),
        column_config={
            "name": st.column_config.TextColumn("name", required=True),
            "kind": st.column_config.SelectboxColumn(
                "kind", options=list(KINDS), default="prefix", required=True
            ),
            "value": st.column_config.TextColumn("value", width="large", help=" · ".join(KIND_HELP.values())),
            "role": st.column_config.SelectboxColumn("role", options=["", "control", "target"]),
        },
    )
    if not edited.equals(table):
        ss[PERTS] = edited.reset_index(drop=True)
        ss[PERTS_V] = ss.get(PERTS_V, 0) + 1


def preview_section(spec: AuditSpec | None, doc: dict[str, Any], key: str) -> None:
    """The prompts of one case, and the fields no template uses."""
    if unused := unused_fields(doc):
        st.warning(
            "Used in no template (the base prompt, a perturbation or a check): "
            + ", ".join(f"`{f}`" for f in unused)
            + ". A typo in a placeholder, or a field you meant to ask about?",
            icon=":material/help:",
        )
    if spec is None:
        return
    ids = [c.id for c in spec.cases]
    with st.expander("Preview: one case's prompts", icon=":material/visibility:", expanded=False):
        case_id = st.selectbox("Case", ids, key=f"{key}_preview_case")
        for arm, role, prompt in preview(spec, case_id or ids[0]):
            st.markdown(f"**{arm}**" + (f" · {role}" if role else ""))
            st.code(prompt, language=None, wrap_lines=True)


def files_section(doc: dict[str, Any], spec: AuditSpec | None, key: str) -> None:
    """The suite as two files that ``dbpa audit`` runs unchanged."""
    c1, c2, c3 = st.columns([1, 1, 2])
    ok = spec is not None
    c1.download_button(
        "Suite (YAML)",
        spec_yaml(doc) if ok else "",
        "suite.yaml",
        "application/yaml",
        key=f"{key}_dl_yaml",
        on_click="ignore",
        disabled=not ok,
        icon=":material/description:",
    )
    c2.download_button(
        f"Cases ({CASES_FILE})",
        cases_csv(doc) if ok else "",
        CASES_FILE,
        "text/csv",
        key=f"{key}_dl_cases",
        on_click="ignore",
        disabled=not ok,
        icon=":material/table:",
    )
    c3.caption(
        "Save both in one folder and run `dbpa audit suite.yaml --out out/suite`: "
        "the same suite from a terminal."
    )


# --------------------------------------------------------------------------- the draft
DRAFT = "suite_draft.json"  # in the dbpa home folder: the suite on screen and its last run
RUNNING, DONE = "running", "done"


def draft_path() -> Path:
    from dbpa_core.home import dbpa_home

    return dbpa_home() / DRAFT


def read_draft() -> dict[str, Any] | None:
    """The suite last on screen here and whether its last run finished (None if none)."""
    try:
        got = json.loads(draft_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) and isinstance(got.get("doc"), dict) else None


def save_draft(doc: dict[str, Any], *, status: str | None = None) -> None:
    """Keep the suite on screen (and, with ``status``, its run's state: ``running`` when a
    run starts, ``done`` when it finishes) across reloads: a reload, a new tab or a restart
    opens it again and says when its run did not finish. Written only when something
    changed; a home folder that cannot be written is ignored."""
    from datetime import UTC, datetime

    old = read_draft() or {}
    same = old.get("doc") == doc
    if status is None:  # the same suite keeps its run's state; another one has none
        status, started = (old.get("status"), old.get("started")) if same else (None, None)
    elif status == RUNNING:
        started = datetime.now(UTC).isoformat(timespec="minutes")
    else:
        started = old.get("started")
    new = {"doc": doc, "status": status, "started": started}
    if new == old:
        return
    try:
        path = draft_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(new, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def put_doc(doc: dict[str, Any]) -> bool:
    """Put a suite document (a draft) into the builder; False when it cannot be read."""
    from dbpa_core.spec import SpecError

    try:
        spec = parse_spec(doc, source="The last suite")
    except (SpecError, ValueError, OSError):
        return False
    put_spec(spec, checks=False)
    from . import checks_view

    checks_view.apply_checks(spec)
    return True


def unfinished(doc: dict[str, Any]) -> str | None:
    """When the suite on screen is the one whose last run did not finish: when it began."""
    draft = read_draft()
    if not draft or draft.get("status") != RUNNING or draft.get("doc") != doc:
        return None
    return str(draft.get("started") or "")
