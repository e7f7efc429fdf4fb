"""Cases of a suite: the rows whose columns fill the ``{field}`` placeholders of a prompt.

A spec's ``cases:`` is a CSV or JSON-lines file (``{file: vignettes.csv}``) or an inline
list of mappings. Each row is one case; its columns fill the placeholders of
``base.prompt`` (and of a perturbation's own ``prompt``) by Python's ``str.format``
rules: ``{name}`` is replaced by the column ``name``, ``{{`` and ``}}`` are literal
braces. An ``id`` column names the case (else its row number does).

A perturbation applies to every case: ``prefix`` / ``suffix`` are joined to the case's
filled base prompt with one space, a ``prompt`` is a template filled like the base, and
``set: {field: value}`` changes columns of the case before the prompt is filled (a
covariate change: another name, age or cholesterol level).

Every case is filled when the spec is read, so a missing column is an error naming the
file and row before any call is made.
"""

from __future__ import annotations

import csv
import io
import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .spec import Perturbation, SpecDoc

MAX_CASES = 100_000
MAX_CASES_BYTES = 200 * 1024**2
SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Case:
    """One row: ``id`` and the values of its columns; ``where`` says where it was read
    (``vignettes.csv, line 4``), for error messages."""

    id: str
    fields: tuple[tuple[str, Any], ...]
    where: str = ""

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **self.values}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Case:
        return cls(str(d["id"]), tuple((k, v) for k, v in d.items() if k != "id"))


class CaseError(ValueError):
    """A case that cannot fill a prompt (the message says which field and why)."""


def placeholders(template: str) -> list[str]:
    """The named fields of a ``str.format`` template (``[]`` when it is not one)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:
        return []
    return [n.split(".")[0].split("[")[0] for n in names]


def named_placeholders(template: str) -> list[str]:
    """The placeholders that name a column (``{age}``), not JSON or other braces."""
    return [n for n in placeholders(template) if n.isidentifier()]


def fill(template: str, values: dict[str, Any]) -> str:
    """``template`` with its placeholders filled from ``values``, or :class:`CaseError`."""
    try:
        return template.format(**values)
    except KeyError as exc:
        raise CaseError(f"no column {exc.args[0]!r} for the placeholder {{{exc.args[0]}}}") from None
    except IndexError:
        raise CaseError("a placeholder without a name ({} or {0}): name the column, e.g. {age}") from None
    except ValueError as exc:
        raise CaseError(f"{exc} (write {{{{ or }}}} for a literal brace)") from None
    except (AttributeError, TypeError) as exc:
        raise CaseError(
            f"a placeholder cannot be filled ({exc}); column values are text when read from CSV"
        ) from None


def perturbed_prompt(base_prompt: str, perturbation: Perturbation, case: Case) -> tuple[str, str]:
    """The (base prompt, perturbed prompt) of ``case`` under ``perturbation``."""
    values = case.values
    base = fill(base_prompt, values)
    changed = dict(values, **dict(perturbation.set_fields)) if perturbation.set_fields else values
    if perturbation.template:
        return base, fill(perturbation.prompt, changed)
    middle = fill(base_prompt, changed) if perturbation.set_fields else base
    return base, " ".join(s for s in (perturbation.prefix, middle, perturbation.suffix) if s)


# --------------------------------------------------------------------------- reading
def parse_cases(doc: SpecDoc, raw: Any, base_dir: Path) -> tuple[Case, ...]:
    """The ``cases:`` section (a file or an inline list) as cases, or a SpecError."""
    from .spec import _existing, decode_utf8
    from .spec_schema import CasesFile, validate_section

    path = ("cases",)
    if isinstance(raw, dict):
        validate_section(doc, CasesFile, raw, path)
        file = _existing(doc, raw, path, "file", base_dir, "cases file")
        name = raw["file"]
        if Path(file).stat().st_size > MAX_CASES_BYTES:
            raise doc.err(
                path + ("file",), f"cases file {name!r} is larger than {MAX_CASES_BYTES // 1024**2} MB"
            )
        text = decode_utf8(Path(file).read_bytes(), name)
        suffix = Path(file).suffix.lower()
        if suffix == ".csv":
            rows = _csv_rows(doc, text, name)
        elif suffix in (".jsonl", ".ndjson"):
            rows = _jsonl_rows(doc, text, name)
        else:
            raise doc.err(path + ("file",), f"cases file {name!r}: give a .csv or .jsonl file")
        rows = [(f"{name}, {where}", row) for where, row in rows]
    elif isinstance(raw, list):
        rows = []
        for i, row in enumerate(raw):
            if not isinstance(row, dict):
                raise doc.err(path + (i,), f"case {i + 1} must be a mapping of columns to values")
            rows.append((f"cases[{i}] (line {doc.lines.get(path + (i,), '?')})", row))
    else:
        raise doc.err(path, "'cases' is {file: cases.csv} (or .jsonl) or a list of mappings")
    if not rows:
        raise doc.err(path, "'cases' holds no case")
    if len(rows) > MAX_CASES:
        raise doc.err(path, f"more than {MAX_CASES} cases")
    cases, seen = [], set()
    for n, (where, row) in enumerate(rows, 1):
        for key, value in row.items():
            if not isinstance(key, str) or not key:
                raise doc.err(path, f"{where}: a column without a name")
            if value is None or not isinstance(value, SCALARS):
                raise doc.err(path, f"{where}: column {key!r} must be text or a number, got {value!r}")
        cid = str(row.get("id", n)).strip()
        if not cid:
            raise doc.err(path, f"{where}: the id is empty")
        if cid in seen:
            raise doc.err(path, f"{where}: the id {cid!r} is used twice")
        seen.add(cid)
        cases.append(Case(cid, tuple((k, v) for k, v in row.items() if k != "id"), where))
    return tuple(cases)


def _csv_rows(doc: SpecDoc, text: str, name: str) -> list[tuple[str, dict]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise doc.err(("cases", "file"), f"cases file {name!r} has no header row")
        header = [h.strip() for h in header]
        if len(set(header)) != len(header) or not all(header):
            raise doc.err(
                ("cases", "file"), f"cases file {name!r}: every column of the header needs a distinct name"
            )
        rows = []
        for values in reader:
            if not values or not any(v.strip() for v in values):
                continue  # a blank line
            if len(values) != len(header):
                raise doc.err(
                    ("cases", "file"),
                    f"cases file {name!r}, line {reader.line_num}: "
                    f"{len(values)} values for {len(header)} columns",
                )
            rows.append((f"line {reader.line_num}", dict(zip(header, values, strict=True))))
    except csv.Error as exc:
        raise doc.err(
            ("cases", "file"), f"cases file {name!r}, line {reader.line_num}: not valid CSV ({exc})"
        ) from None
    return rows


def _jsonl_rows(doc: SpecDoc, text: str, name: str) -> list[tuple[str, dict]]:
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise doc.err(
                ("cases", "file"), f"cases file {name!r}, line {i}: not valid JSON ({exc.msg})"
            ) from None
        if not isinstance(row, dict):
            raise doc.err(
                ("cases", "file"),
                f"cases file {name!r}, line {i}: each line must be a JSON object of columns to values",
            )
        rows.append((f"line {i}", row))
    return rows


# --------------------------------------------------------------------------- checking
def check_cases(
    doc: SpecDoc, cases: tuple[Case, ...], base_prompt: str, perturbations: Sequence[Perturbation]
) -> None:
    """Fill every prompt of every case now: a missing column is an error naming the row."""
    for p in perturbations:
        if not p.set_fields:
            continue
        used = set(named_placeholders(p.prompt if p.template else base_prompt))
        for key, _ in p.set_fields:
            if key not in used:
                raise doc.err(
                    ("perturbations",),
                    f"perturbation {p.name!r}: set: {key!r} is not "
                    "a placeholder of its prompt, so it would change nothing",
                )
    for case in cases:
        for p in perturbations or (None,):
            what = "base.prompt"
            try:
                base = fill(base_prompt, case.values)
                if p is not None:
                    what = f"perturbation {p.name!r}"
                    pert = perturbed_prompt(base_prompt, p, case)[1]
                    if not pert.strip():
                        raise CaseError("the filled prompt is empty")
            except CaseError as exc:
                raise doc.err(("cases",), f"case {case.id!r} ({case.where}): {exc} in {what}") from None
            if not base.strip():
                raise doc.err(
                    ("cases",), f"case {case.id!r} ({case.where}): base.prompt is empty once filled"
                )


def no_case_placeholders(doc: SpecDoc, base_prompt: str, perturbations: Sequence[Perturbation]) -> None:
    """A spec without cases whose prompts hold ``{field}`` placeholders is a mistake."""
    for path, what, text in [(("base", "prompt"), "base.prompt", base_prompt)] + [
        (("perturbations", i), f"perturbation {p.name!r}", p.prompt)
        for i, p in enumerate(perturbations)
        if p.template
    ]:
        names = named_placeholders(text)
        if names:
            raise doc.err(
                path,
                f"{what} has the placeholder {{{names[0]}}} but the spec gives "
                "no cases: add 'cases:' (a file or a list) whose columns fill it",
            )


def shared_prompt_warnings(
    base_prompt: str, perturbations: Sequence[Perturbation], cases: Sequence[Case]
) -> list[str]:
    """Cases whose filled prompts are the same share their samples (the samples of a
    prompt are drawn once), so their tests are not independent: say which."""
    out = []
    arms = [("the base", None)] + [(f"perturbation {p.name!r}", p) for p in perturbations]
    for what, p in arms:
        first: dict[str, str] = {}
        same = []
        for case in cases:
            try:
                prompt = (
                    fill(base_prompt, case.values) if p is None else perturbed_prompt(base_prompt, p, case)[1]
                )
            except CaseError:
                continue
            if prompt in first:
                same.append((first[prompt], case.id))
            else:
                first[prompt] = case.id
        if same:
            pairs = ", ".join(f"{a} and {b}" for a, b in same[:3])
            out.append(
                f"{len(same)} case(s) have the same prompt for {what} as an earlier "
                f"case ({pairs}{', ...' if len(same) > 3 else ''}): they share its "
                "samples, so their tests are not independent (the pooled test assumes "
                "they are); make the rows differ in a column the prompt uses."
            )
    return out
