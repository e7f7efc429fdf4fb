"""Fidelity data: real answers and simulators' answers per scenario, in and out of files.

Two layouts of a long CSV (UTF-8, one header row; column names are case-insensitive):

**Categorical** (multiple-choice questions) — ``scenario,option,real,<sim 1>,<sim 2>,...``::

    scenario,option,real,gpt-4o,llama
    q1,Agree,312,0.55,41
    q1,Disagree,188,0.45,9
    q2,Yes,90,0.7,30
    ...

One row per option of each scenario. ``real`` holds counts of real answers (whole or
weighted, >= 0, not all zero). Each simulator column holds, per scenario, either counts
or probabilities: a column is read as **probabilities when its values sum to 1 (±0.001)
in every scenario**, otherwise as counts; either way the simulated distribution is the
values divided by their sum, so the two readings agree where they overlap. An optional
``question`` column gives the question text (first non-empty cell per scenario), which
the simulation runner needs. Option labels that are all numbers give the options'
values (for ``w1``, ``squared``, ``absolute``); otherwise the options are spaced evenly
on [-1, 1] in their order.

**Values** (a real-valued answer per respondent) — ``scenario,real,<sim 1>,...`` with no
``option`` column: each row holds one observation per column, and a blank cell is none,
so columns may have different numbers of values per scenario.

Mistakes raise :class:`FidelityDataError` with the file, the line and what is wrong:
negative or non-numeric cells, a scenario whose real counts are all zero, a simulator
that gives a scenario no answer, fewer than two options or two scenarios, a repeated
option.

:func:`load_opinionqa` reads the OpinionQA layout (Santurkar et al., 2023): a survey
folder with ``info.csv`` (columns ``key``, ``question``, ``references`` — the options as a
Python list) and ``<ATTRIBUTE>_data.json`` (``{question key: {"MC_options": [...],
"question_text": ..., "<group>": {"<option>": count, ...}, ...}}``), one scenario per
question (and group).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validate import csv_header
from .dataset import (  # the data model, re-exported: data.X keeps working
    PROB_TOLERANCE,
    RESERVED,
    SHARE_TOLERANCE,
    UNIFORM,
    FidelityData,
    FidelityDataError,
    Scenario,
    shares_problem,
    validate,
)
from .sample import sample_data

MAX_FILE_BYTES = 200 * 1024**2


def from_arrays(
    real: Sequence[ArrayLike],
    simulated: Mapping[str, Sequence] | None = None,
    *,
    ids: Sequence[str] | None = None,
    options: Sequence[Sequence[str]] | None = None,
    kind: str = "categorical",
    questions: Sequence[str] | None = None,
    source: str = "<arrays>",
) -> FidelityData:
    """Fidelity data from arrays: ``real[j]`` the real counts (or values) of scenario j,
    ``simulated[name][j]`` a simulator's counts, probabilities (or values).

    Examples
    --------
    >>> data = from_arrays([[30, 10], [5, 15]], {"sim": [[0.7, 0.3], [0.2, 0.8]]})
    >>> data.m, data.simulators, data.sim_kinds["sim"]
    (2, ('sim',), 'probabilities')
    """
    real = list(real)
    ids = [str(i) for i in (ids if ids is not None else [f"s{j + 1}" for j in range(len(real))])]
    if len(ids) != len(real):
        raise FidelityDataError(f"`ids` has {len(ids)} entries for {len(real)} scenarios.")
    scen = []
    for j, r in enumerate(real):
        arr = np.asarray(r, dtype=float).ravel()
        if kind == "categorical":
            opts = (
                tuple(str(o) for o in options[j])
                if options is not None
                else tuple(chr(65 + i) if i < 26 else f"option {i + 1}" for i in range(arr.size))
            )
        else:
            opts = ()
        scen.append(Scenario(ids[j], opts, arr, questions[j] if questions else ""))
    sims = {
        str(k): tuple(np.asarray(a, dtype=float).ravel() for a in v) for k, v in (simulated or {}).items()
    }
    kinds = {k: _kind_of(v) if kind == "categorical" else "values" for k, v in sims.items()}
    return validate(FidelityData(kind, tuple(scen), sims, kinds, source))


def _kind_of(answers: Sequence[np.ndarray]) -> str:
    sums = [float(np.asarray(a).sum()) for a in answers]
    return "probabilities" if all(abs(s - 1.0) <= PROB_TOLERANCE for s in sums) else "counts"


# --------------------------------------------------------------------------- CSV


def _cell_number(cell: str, where: str, column: str, *, allow_negative: bool) -> float:
    text = cell.strip()
    try:
        x = float(text)
    except ValueError:
        raise FidelityDataError(f"{where}: column {column!r} must be a number, got {text!r}.") from None
    if not math.isfinite(x):
        raise FidelityDataError(f"{where}: column {column!r} must be a finite number, got {text!r}.")
    if x < 0 and not allow_negative:
        raise FidelityDataError(f"{where}: negative count {text} in column {column!r}.")
    return x


def parse_csv(text: str, *, source: str = "<data>") -> FidelityData:
    """Read the long CSV (see the module docstring); errors name ``source`` and the line."""
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = csv.reader(io.StringIO(text, newline=""))
    header = csv_header(
        reader,
        source,
        FidelityDataError,
        empty="the file is empty.",
        bad="{source}, line 1: not a CSV header ({exc}).",
    )
    names = [h.strip() for h in header]
    low = [h.lower() for h in names]
    for i, h in enumerate(names):
        if not h:
            raise FidelityDataError(f"{source}, line 1: column {i + 1} has no name.")
    for req in ("scenario", "real"):
        if req not in low:
            raise FidelityDataError(
                f"{source}, line 1: no {req!r} column; the header must be "
                "scenario,option,real,<simulators...> (or scenario,real,<simulators...> for "
                f"real-valued answers), got {','.join(names)!r}."
            )
    dup = next((h for h in low if low.count(h) > 1), None)
    if dup:
        raise FidelityDataError(f"{source}, line 1: column {dup!r} appears twice.")
    categorical = "option" in low
    col = {h: low.index(h) for h in RESERVED if h in low}
    sims = [names[i] for i, h in enumerate(low) if h not in RESERVED]
    if any(s.lower() == UNIFORM for s in sims):
        raise FidelityDataError(f"{source}, line 1: 'uniform' is the built-in baseline; rename that column.")
    order: list[str] = []
    rows: dict[str, dict] = {}
    i_sid, i_real = col["scenario"], col["real"]
    i_opt, i_q = col.get("option"), col.get("question")
    sim_cols = [(s, names.index(s)) for s in sims]
    width = len(names)

    def number(cell: str, line: int, column: str, allow_negative: bool) -> float:
        try:
            x = float(cell)  # the common case: a plain non-negative number
        except ValueError:
            x = -1.0
        if x >= 0.0 and x != math.inf:
            return x
        return _cell_number(cell, f"{source}, line {line}", column, allow_negative=allow_negative)

    try:
        for row in reader:
            if not "".join(row).strip():
                continue
            line = reader.line_num
            if len(row) != width:
                raise FidelityDataError(f"{source}, line {line}: {len(row)} cells for {width} columns.")
            sid = row[i_sid].strip()
            if not sid:
                raise FidelityDataError(f"{source}, line {line}: the scenario cell is empty.")
            entry = rows.get(sid)
            if entry is None:
                order.append(sid)
                entry = rows[sid] = {
                    "options": [],
                    "real": [],
                    "sims": {s: [] for s in sims},
                    "question": "",
                    "lines": [line, line],
                }
            entry["lines"][1] = line
            if i_q is not None and not entry["question"]:
                entry["question"] = row[i_q].strip()
            if i_opt is not None:
                opt = row[i_opt].strip()
                if not opt:
                    raise FidelityDataError(f"{source}, line {line}: the option cell is empty.")
                if opt in entry["options"]:
                    raise FidelityDataError(
                        f"{source}, line {line}: option {opt!r} of scenario {sid!r} appears twice."
                    )
                entry["options"].append(opt)
                entry["real"].append(number(row[i_real], line, "real", False))
                for s, i in sim_cols:
                    cell = row[i]
                    if not cell.strip():
                        raise FidelityDataError(
                            f"{source}, line {line}: simulator {s!r} has no "
                            f"value for option {opt!r} of scenario {sid!r}."
                        )
                    entry["sims"][s].append(number(cell, line, s, False))
            else:
                cell = row[i_real]
                if cell.strip():
                    entry["real"].append(number(cell, line, "real", True))
                for s, i in sim_cols:
                    cell = row[i]
                    if cell.strip():
                        entry["sims"][s].append(number(cell, line, s, True))
    except csv.Error as exc:
        raise FidelityDataError(f"{source}, line {reader.line_num}: not valid CSV ({exc}).") from None
    scenarios = []
    simulated: dict[str, list[np.ndarray]] = {s: [] for s in sims}
    for sid in order:
        e = rows[sid]
        lines = e["lines"]
        span = f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}-{lines[1]}"
        real = np.array(e["real"], dtype=float)
        if categorical:
            if len(e["options"]) < 2:
                raise FidelityDataError(
                    f"{source}, {span}: scenario {sid!r} has "
                    f"{len(e['options'])} option; a question needs at least 2."
                )
            total = sum(e["real"])  # plain floats: no numpy call per scenario
            if total <= 0:
                raise FidelityDataError(
                    f"{source}, {span}: the real counts of scenario {sid!r} are all zero."
                )
            if abs(total - 1.0) <= SHARE_TOLERANCE and (msg := shares_problem(sid, real)) is not None:
                raise FidelityDataError(f"{source}, {span}: {msg}")
        elif real.size == 0:
            raise FidelityDataError(f"{source}, {span}: scenario {sid!r} has no real values.")
        for s in sims:
            a = np.array(e["sims"][s], dtype=float)
            if categorical and sum(e["sims"][s]) <= 0:
                raise FidelityDataError(
                    f"{source}, {span}: simulator {s!r} gives scenario {sid!r} no answer (all zero)."
                )
            if not categorical and a.size == 0:
                raise FidelityDataError(
                    f"{source}, {span}: simulator {s!r} gives scenario {sid!r} no values."
                )
            simulated[s].append(a)
        scenarios.append(Scenario(sid, tuple(e["options"]), real, e["question"]))
    if len(scenarios) < 2:
        raise FidelityDataError(f"{source}: needs at least 2 scenarios (m >= 2), found {len(scenarios)}.")
    sim_t = {s: tuple(v) for s, v in simulated.items()}
    kinds = {s: (_kind_of(v) if categorical else "values") for s, v in sim_t.items()}
    notes = tuple(
        f"Simulator {s!r} looks like probabilities that do not sum to 1 in every "
        "question (values between 0 and 1, not whole numbers); it is read as counts, "
        "each question's values divided by their sum. Check for a typo."
        for s, v in sim_t.items()
        if kinds[s] == "counts" and _share_like(v)
    )
    return FidelityData(
        "categorical" if categorical else "values", tuple(scenarios), sim_t, kinds, source, notes
    )


def _share_like(answers: Sequence[np.ndarray]) -> bool:
    """Every value within [0, 1] and some not whole: meant as probabilities."""
    flat = np.concatenate([np.asarray(a, dtype=float) for a in answers])
    return bool(np.all(flat <= 1.0) and np.any(flat != np.round(flat)))


def read_text(path: str | os.PathLike) -> str:
    """A data file's text: it must exist, be at most 200 MB and be UTF-8 (else the line of
    the first bad byte)."""
    p = Path(path)
    if not p.is_file():
        raise FidelityDataError(f"{path}: no such file.")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise FidelityDataError(f"{path}: larger than {MAX_FILE_BYTES // 1024**2} MB.")
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FidelityDataError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8."
        ) from None


def load_csv(path: str | os.PathLike) -> FidelityData:
    """Read a long CSV file (see the module docstring)."""
    return parse_csv(read_text(path), source=str(path))


def load_data(path: str | os.PathLike, **opinionqa: Any) -> FidelityData:
    """A CSV file, or an OpinionQA survey folder (keyword arguments go to
    :func:`load_opinionqa`); ``"sample"`` is the built-in synthetic sample."""
    if str(path) == "sample":
        return sample_data()
    if Path(path).is_dir():
        return load_opinionqa(path, **opinionqa)
    return load_csv(path)


# --------------------------------------------------------------------------- OpinionQA


def _literal_list(text: str, where: str) -> list[str]:
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise FidelityDataError(
            f"{where}: 'references' must be a list of options such as ['Yes', 'No'], got {text[:60]!r}."
        ) from None
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise FidelityDataError(f"{where}: 'references' must be a list of option texts.")
    return list(v)


def _join_split_options(pieces: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """Options that a writer split at their commas, joined again where the joined text is
    one of the ``wanted`` labels (the answer counts' keys): ``["Yes", "I own a gun"]`` ->
    ``["Yes, I own a gun"]``. Quotes left around a piece by the split are dropped."""

    def clean(text: str) -> str:
        return text.strip().strip("\"'").strip()

    want = set(wanted)
    out, i = [], 0
    while i < len(pieces):
        for j in range(len(pieces), i, -1):
            joined = clean(", ".join(x.strip() for x in pieces[i:j]))
            if joined in want or j == i + 1:
                out.append(joined if joined in want else pieces[i])
                i = j
                break
    return out


def _options_for(
    key: str, info_opts: list[str] | None, json_opts: list[str] | None, counts_keys: Iterable[str]
) -> list[str] | None:
    """The question's options: info.csv's ``references`` or the json's ``MC_options``,
    whichever holds every answered option (after joining options split at commas); None
    when neither does."""
    keys = [k for k in counts_keys if k.strip().lower() != "refused"]
    for opts in (info_opts, json_opts):
        if not opts:
            continue
        for cand in (list(opts), _join_split_options(opts, keys)):
            if set(keys) <= set(cand):
                return cand
    return None


def load_opinionqa(
    folder: str | os.PathLike,
    *,
    attribute: str = "NONE",
    groups: Sequence[str] | None = None,
    keep_refused: bool = False,
    limit: int | None = None,
) -> FidelityData:
    """Real answer counts from an OpinionQA survey folder (e.g. ``American_Trends_Panel_W26``).

    Parameters
    ----------
    folder
        Holds ``info.csv`` and ``<attribute>_data.json``.
    attribute : str
        Which demographic split: ``SEX``, ``AGE``, ``POLPARTY``, ... (the json's prefix).
    groups : list of str, optional
        The groups to keep (``["Female"]``); default all. With one group the scenario id is
        the question key, else ``"<key> | <group>"``.
    keep_refused : bool
        Keep the "Refused" option (OpinionQA's own analyses drop it; so does this loader
        by default).
    limit : int, optional
        At most this many questions (in info.csv's order).

    Notes
    -----
    Each scenario's persona is ``((attribute, group),)``; its options and question come
    from info.csv (``references``, ``question``), falling back to the json's (options
    that the json splits at their commas are joined again).

    A question that cannot be read — listed twice in info.csv with different contents,
    options that cannot be parsed, answers on an option that is not among its options,
    counts that are not numbers, none of the chosen groups — is skipped; the skipped
    questions are named and counted in one note (``FidelityData.notes``). The folder is
    refused only when fewer than two usable questions are left.
    """
    folder = Path(folder)
    info_path = folder / "info.csv"
    json_path = folder / f"{attribute}_data.json"
    if not info_path.is_file():
        raise FidelityDataError(
            f"{folder}: no info.csv (the OpinionQA layout has info.csv and "
            "<ATTRIBUTE>_data.json in each survey folder)."
        )
    if not json_path.is_file():
        have = sorted(p.name.removesuffix("_data.json") for p in folder.glob("*_data.json"))
        raise FidelityDataError(
            f"{folder}: no {json_path.name}; attributes here: {', '.join(have) or 'none'}."
        )
    text = read_text(info_path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or "key" not in reader.fieldnames:
        raise FidelityDataError(f"{info_path}, line 1: no 'key' column.")
    info: dict[str, dict] = {}
    keys: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for row in reader:
            where = f"line {reader.line_num}"
            key = (row.get("key") or "").strip()
            if not key:
                continue  # a row without a question key names no question
            try:
                refs = _literal_list(row["references"], where) if row.get("references") else None
            except FidelityDataError:
                refs, skipped[key] = None, f"its options in info.csv ({where}) cannot be read"
            entry = {"question": (row.get("question") or "").strip(), "options": refs}
            if key in info:
                if info[key] != entry:
                    skipped[key] = "listed twice in info.csv with different contents"
                continue
            info[key] = entry
            keys.append(key)
    except csv.Error as exc:
        raise FidelityDataError(f"{info_path}, line {reader.line_num}: not valid CSV ({exc}).") from None
    try:
        blob = json.loads(read_text(json_path))
    except json.JSONDecodeError as exc:
        raise FidelityDataError(f"{json_path}, line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    except RecursionError:
        raise FidelityDataError(f"{json_path}: JSON nested too deeply to read.") from None
    if not isinstance(blob, dict):
        raise FidelityDataError(f"{json_path}: expected an object of questions.")
    scenarios = []
    chosen = [k for k in keys if k in blob] + [k for k in blob if k not in info]
    if limit is not None:
        chosen = chosen[:limit]
    all_groups: set[str] = set()
    for key in chosen:
        if key in skipped:
            continue
        q = blob[key]
        if not isinstance(q, dict):
            skipped[key] = "its entry in the json is not an object"
            continue
        names = [g for g in q if g not in ("MC_options", "question_text")]
        all_groups.update(names)
        if groups is not None:
            names = [g for g in names if g in groups]
            if not names:
                skipped[key] = f"it has none of the groups {', '.join(groups)}"
                continue
        json_opts = [o for o in q.get("MC_options", []) if isinstance(o, str)]
        question = (info.get(key) or {}).get("question") or str(q.get("question_text", ""))
        found = []
        for g in names:
            counts = q[g]
            if not isinstance(counts, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                for v in counts.values()
            ):
                skipped[key] = f"the counts of group {g!r} are not non-negative numbers"
                break
            opts = _options_for(key, (info.get(key) or {}).get("options"), json_opts, counts)
            if opts is None:
                known = set((info.get(key) or {}).get("options") or json_opts)
                stray = next(
                    (o for o in counts if o.strip().lower() != "refused" and o not in known),
                    next(iter(counts)),
                )
                skipped[key] = f"group {g!r} answered {stray!r}, which is not among its options"
                break
            if keep_refused:
                opts = opts + [o for o in counts if o.strip().lower() == "refused" and o not in opts]
            else:
                opts = [o for o in opts if o.strip().lower() != "refused"]
            real = np.array([float(counts.get(o, 0.0)) for o in opts])
            if len(opts) < 2 or real.sum() <= 0:
                continue  # a question with no usable answers in this group
            sid = key if groups is not None and len(groups) == 1 else f"{key} | {g}"
            found.append(Scenario(sid, tuple(opts), real, question, ((attribute, g),)))
        else:
            scenarios.extend(found)
    if groups is not None and not all_groups & set(groups):
        raise FidelityDataError(
            f"{json_path}: no question has group {groups[0]!r}; groups: "
            f"{', '.join(sorted(all_groups)) or 'none'}."
        )
    notes: tuple[str, ...] = ()
    if skipped:
        shown = "; ".join(f"{k} ({why})" for k, why in list(skipped.items())[:8])
        more = f"; and {len(skipped) - 8} more" if len(skipped) > 8 else ""
        notes = (f"Skipped {len(skipped)} question(s) of {folder.name} that cannot be read: {shown}{more}.",)
    if len(scenarios) < 2:
        why = f" ({notes[0]})" if notes else ""
        raise FidelityDataError(
            f"{folder}: {len(scenarios)} usable question(s) for {attribute}; at least 2 are needed{why}"
        )
    return validate(FidelityData("categorical", tuple(scenarios), {}, {}, str(folder), notes))


__all__ = [
    "PROB_TOLERANCE",
    "UNIFORM",
    "FidelityData",
    "FidelityDataError",
    "Scenario",
    "from_arrays",
    "load_csv",
    "load_data",
    "load_opinionqa",
    "parse_csv",
    "read_text",
    "validate",
]
