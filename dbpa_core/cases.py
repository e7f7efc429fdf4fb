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

A perturbation can also be an operation on the case itself, with no second column in the
cases file: ``swap: [name1, name2]`` exchanges the values of two columns, ``swap_text:
[span1, span2]`` exchanges two spans of the filled prompt (every occurrence of either),
and ``reorder: reverse | rotate | shuffle`` changes the order of the case's answer
options (``shuffle``: a fixed order drawn per case from the spec's seed, never the
original one).

A spec's ``options:`` lists each case's answer options as templates over its columns
(``["{ans0}", "{ans1}", "{ans2}"]``); the placeholder ``{options}`` in a prompt is then
rendered as one line per option, ``A) ...``, ``B) ...``. ``expect:`` (a template) is each
case's expected answer.

Every case is filled when the spec is read, so a missing column is an error naming the
file and row before any call is made.
"""

from __future__ import annotations

import csv
import io
import json
import re
import string
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .spec import Perturbation, SpecDoc


MAX_CASES = 100_000
MAX_CASES_BYTES = 200 * 1024**2
SCALARS = (str, int, float, bool)
OPTIONS_FIELD = "options"  # the placeholder that shows a case's options, one per line
REORDERS = ("reverse", "rotate", "shuffle")
LETTERS = string.ascii_uppercase


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


def options_text(options: Sequence[str]) -> str:
    """Options as a prompt shows them: one line each, ``A) ...``, ``B) ...``."""
    return "\n".join(f"{LETTERS[i]}) {o}" for i, o in enumerate(options))


def reordered(options: Sequence[str], how: str, *, case_id: str = "", seed: int = 0) -> tuple[str, ...]:
    """``options`` in another order: ``reverse``, ``rotate`` (the first goes last) or
    ``shuffle`` (an order drawn from ``seed`` and the case's id, never the given one
    when another exists)."""
    opts = tuple(options)
    if how == "reverse":
        return opts[::-1]
    if how == "rotate":
        return opts[1:] + opts[:1]
    if how != "shuffle":
        raise ValueError(f"`how` must be one of {REORDERS}, got {how!r}.")
    if len(set(opts)) < 2:
        return opts
    rng = np.random.default_rng([seed, zlib.crc32(case_id.encode("utf-8"))])
    while True:
        order = rng.permutation(len(opts))
        out = tuple(opts[i] for i in order)
        if out != opts:
            return out


def swap_spans(text: str, a: str, b: str) -> str:
    """``text`` with every ``a`` made ``b`` and every ``b`` made ``a`` (at once; the longer
    span is matched first where one holds the other)."""
    if not a or not b or a == b:
        return text
    spans = sorted((a, b), key=len, reverse=True)
    other = {a: b, b: a}
    return re.sub("|".join(re.escape(x) for x in spans), lambda m: other[m.group(0)], text)


@dataclass(frozen=True)
class CaseArm:
    """One arm of one case: its filled prompt and its answer options in the order shown."""

    prompt: str
    options: tuple[str, ...] = ()


def arm_values(
    values: dict[str, Any], perturbation: Any | None, options: Sequence[str], *, case_id: str, seed: int
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The columns an arm's prompt is filled from (``set`` and ``swap`` applied, and
    ``{options}`` rendered) and the arm's options in the order its prompt shows them."""
    out = dict(values)
    if perturbation is not None:
        out.update(dict(perturbation.set_fields))
        swap = getattr(perturbation, "swap", None)
        if swap:
            out[swap[0]], out[swap[1]] = values[swap[1]], values[swap[0]]
    shown: tuple[str, ...] = ()
    if options:
        shown = tuple(str(fill(o, out)) for o in options)
        how = getattr(perturbation, "reorder", None) if perturbation is not None else None
        if how:
            shown = reordered(shown, how, case_id=case_id, seed=seed)
        out[OPTIONS_FIELD] = options_text(shown)
    return out, shown


def case_arm(
    base_prompt: str,
    perturbation: Any | None,
    case: Case,
    *,
    options: Sequence[str] = (),
    seed: int = 0,
) -> CaseArm:
    """The filled prompt and the options of ``case`` in the base arm (``perturbation``
    None) or under ``perturbation``; a :class:`CaseError` when a column is missing."""
    values, shown = arm_values(case.values, perturbation, options, case_id=case.id, seed=seed)
    if perturbation is None:
        return CaseArm(fill(base_prompt, values), shown)
    if perturbation.template:
        text = fill(perturbation.prompt, values)
    else:
        middle = fill(base_prompt, values)
        text = " ".join(s for s in (perturbation.prefix, middle, perturbation.suffix) if s)
    spans = getattr(perturbation, "swap_text", None)
    if spans:  # the options shown in the prompt change with it
        a, b = fill_text(spans[0], case.values), fill_text(spans[1], case.values)
        text = swap_spans(text, a, b)
        shown = tuple(swap_spans(o, a, b) for o in shown)
    attack = getattr(perturbation, "attack", None)
    if attack is not None:  # the whole prompt, seeded per case (the options keep their text)
        text = attack.apply(text, case.id)
    return CaseArm(text, shown)


def perturbed_prompt(
    base_prompt: str, perturbation: Any, case: Case, *, options: Sequence[str] = (), seed: int = 0
) -> tuple[str, str]:
    """The (base prompt, perturbed prompt) of ``case`` under ``perturbation``."""
    base = case_arm(base_prompt, None, case, options=options, seed=seed).prompt
    return base, case_arm(base_prompt, perturbation, case, options=options, seed=seed).prompt


# --------------------------------------------------------------------------- check texts
_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def text_placeholders(template: str) -> list[str]:
    """The ``{column}`` placeholders of a check's text (``{{`` and ``}}`` are literal
    braces; braces around anything but a name, as a regex's ``{2,3}``, are kept)."""
    return [m.group(1) for m in _BRACES.finditer(template) if m.group(1) and m.group(1).isidentifier()]


def fill_text(template: str, values: dict[str, Any], *, escape: bool = False) -> str:
    """A check's text with its ``{column}`` placeholders filled from ``values`` (each
    value passed through :func:`re.escape` when ``escape``: a regex then matches it
    literally); a :class:`CaseError` for a placeholder that names no column."""

    def one(m: re.Match) -> str:
        whole, name = m.group(0), m.group(1)
        if whole in ("{{", "}}"):
            return whole[0]
        if name is None or not name.isidentifier():
            return whole
        if name not in values:
            raise CaseError(f"no column {name!r} for the placeholder {{{name}}}")
        value = str(values[name])
        return re.escape(value) if escape else value

    return _BRACES.sub(one, template)


def same_answer(a: str, b: str) -> bool:
    """Two option texts are the same answer: equal once case and white space are ignored."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


# --------------------------------------------------------------------------- reading
def parse_cases(doc: SpecDoc, raw: Any, base_dir: Path) -> tuple[Case, ...]:
    """The ``cases:`` section (a file or an inline list) as cases, or a SpecError."""
    from .spec_doc import decode_utf8, existing_path
    from .spec_schema import CasesFile, validate_section

    path = ("cases",)
    if isinstance(raw, dict):
        validate_section(doc, CasesFile, raw, path)
        file = existing_path(doc, raw, path, "file", base_dir, "cases file")
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


def json_objects(text: str, error: Callable[[int, str], Exception]) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of JSON-lines ``text``, each with its line number (blank lines are
    skipped). A line that is not JSON, or not an object, raises ``error(line, why)``, where
    *why* ends the caller's one-line message. The spec's cases file and the dashboard's
    uploaded cases read their rows with it."""
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(i, f"not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise error(i, "each line must be a JSON object of columns to values")
        rows.append((i, row))
    return rows


def _jsonl_rows(doc: SpecDoc, text: str, name: str) -> list[tuple[str, dict]]:
    def error(line: int, why: str) -> Exception:
        return doc.err(("cases", "file"), f"cases file {name!r}, line {line}: {why}")

    return [(f"line {i}", row) for i, row in json_objects(text, error)]


# --------------------------------------------------------------------------- checking
def check_cases(
    doc: Any,
    cases: tuple[Case, ...],
    base_prompt: str,
    perturbations: Sequence[Any],
    *,
    options: Sequence[str] = (),
    expect: str | None = None,
    seed: int = 0,
) -> None:
    """Fill every prompt of every case now: a missing column is an error naming the row."""
    if options and OPTIONS_FIELD not in named_placeholders(base_prompt):
        raise doc.err(
            ("options",),
            "'options' are given but no prompt shows them: put the placeholder {options} "
            "in base.prompt (it becomes the lines A) ..., B) ...)",
        )
    from_options = {n for o in options for n in named_placeholders(o)}

    def used_by(text: str) -> set[str]:
        names = set(named_placeholders(text))
        return names | from_options if OPTIONS_FIELD in names else names

    for p in perturbations:
        mine = used_by(p.prompt if p.template else base_prompt)
        for key in [k for k, _ in p.set_fields] + list(getattr(p, "swap", None) or ()):
            if key not in mine:
                what = "set" if key in dict(p.set_fields) else "swap"
                raise doc.err(
                    ("perturbations",),
                    f"perturbation {p.name!r}: {what}: {key!r} is not "
                    "a placeholder of its prompt, so it would change nothing",
                )
    for p in perturbations:
        if getattr(p, "reorder", None) and not options:
            raise doc.err(
                ("perturbations",),
                f"perturbation {p.name!r}: 'reorder' changes the order of the options, and the "
                "spec gives no 'options'",
            )
    for case in cases:
        if options and OPTIONS_FIELD in case.values:
            raise doc.err(
                ("options",),
                f"case {case.id!r} ({case.where}) has a column 'options', and the spec's "
                "'options' fill the placeholder {options}: rename the column",
            )
        what = "base.prompt"
        path: tuple[Any, ...] = ("cases",)
        try:
            for i, o in enumerate(options):
                what, path = f"options[{i}]", ("options", i)
                if not str(fill(o, case.values)).strip():
                    raise CaseError("the option is empty once filled")
            what, path = "base.prompt", ("cases",)
            base = case_arm(base_prompt, None, case, options=options, seed=seed)
            for p in perturbations:
                what = f"perturbation {p.name!r}"
                for field_name in getattr(p, "swap", None) or ():
                    if field_name not in case.values:
                        raise CaseError(f"no column {field_name!r} to swap")
                pert = case_arm(base_prompt, p, case, options=options, seed=seed).prompt
                if not pert.strip():
                    raise CaseError("the filled prompt is empty")
            if expect is not None:
                what, path = "expect", ("expect",)
                want = fill_text(expect, case.values)
                if options and not any(same_answer(want, o) for o in base.options):
                    raise CaseError(f"the expected answer {want!r} is none of the case's options")
        except CaseError as exc:
            raise doc.err(path, f"case {case.id!r} ({case.where}): {exc} in {what}") from None
        if not base.prompt.strip():
            raise doc.err(("cases",), f"case {case.id!r} ({case.where}): base.prompt is empty once filled")


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


def case_warnings(
    base_prompt: str,
    perturbations: Sequence[Any],
    cases: Sequence[Case],
    *,
    options: Sequence[str] = (),
    seed: int = 0,
) -> list[str]:
    """What a suite's cases may get wrong without being an error, one line each: cases
    whose filled prompts are the same share their samples (the samples of a prompt are
    drawn once), so their tests are not independent; a perturbation that leaves some cases'
    prompts as they were (a ``swap`` of two equal values, a ``swap_text`` whose spans are
    not in the prompt) asks the base prompt again there."""

    def filled(p: Any, case: Case) -> str | None:
        try:
            return case_arm(base_prompt, p, case, options=options, seed=seed).prompt
        except CaseError:
            return None

    out = []
    base = [filled(None, case) for case in cases]
    arms: list[tuple[str, Any, list[str | None]]] = [("the base", None, base)] + [
        (f"perturbation {p.name!r}", p, [filled(p, case) for case in cases]) for p in perturbations
    ]
    for what, _, prompts in arms:
        first: dict[str, str] = {}
        same = []
        for case, prompt in zip(cases, prompts, strict=True):
            if prompt is None:
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
    for _, p, prompts in arms[1:]:
        if p.template or p.prefix or p.suffix:
            continue
        unchanged = [
            case.id for case, a, b in zip(cases, base, prompts, strict=True) if a is not None and a == b
        ]
        if unchanged:
            out.append(
                f"Perturbation {p.name!r} leaves the prompt of {len(unchanged)} case(s) as it is "
                f"({', '.join(unchanged[:3])}{', ...' if len(unchanged) > 3 else ''}): there it asks the "
                "base prompt again (a same-prompt control), not a change."
            )
    return out
