"""One audit report: every recorded run an auditor files, in one HTML (or PDF) document.

``dbpa report 3 4 7 --out audit.html`` (or ``--out audit.pdf``) reads runs from the run
history (:mod:`dbpa_core.history`) and renders, from the Jinja2 templates in
``dbpa_core/templates`` (autoescaped: every model answer, run name and prompt is text,
never markup):

* a summary page: every verdict of every run — each audit's perturbations (ω above chance,
  p, adjusted p, significant or not), its control gate, its answer checks, a robustness
  battery's error and attack success rates, a fidelity analysis's guarantees and
  comparisons, a sensitivity study's "holds / depends on the setting" — with the
  settings, the tool and model versions, the dates, and a SHA-256 checksum of the
  responses;
* then one section per run (the per-kind reports of the battery, fidelity and sensitivity
  pages, an audit's and a suite's tables, and every answer under its prompt, marked with
  its checks).

Every run is read through its :class:`~dbpa_core.runs.RunResult` (its verdicts, own
sections, answers and refusals): the report never asks which kind a run is.

The checksum: every response shown, in the report's order, as one JSON line each
(``{"run", "part", "arm", "index", "response"}``: the run's id, its part (an audit's job,
``case ID`` in a suite, ...), the arm, the answer's index in it and its text; keys sorted,
UTF-8, no ASCII escaping, ``\\n`` after each line), hashed with SHA-256 —
:func:`responses_lines` gives the lines, so anyone holding the history (or the report's
own response listings) can recompute it.

A PDF is printed by headless Chromium (:func:`print_pdf`); without Chromium, one line
says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from .history import History, HistoryError, Run
from .render import document

if TYPE_CHECKING:
    pass


CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pdf-header-footer",
)
PDF_TIMEOUT_S = 120


class ReportError(ValueError):
    """A report that cannot be made: an unknown run, a bad output name, no Chromium."""


# --------------------------------------------------------------------------- the content
@dataclass(frozen=True)
class Verdict:
    """One line of the summary page: ``run`` id, its ``kind``, the ``part`` of the run
    (an audit's job, an attack, a study), ``what`` was tested and the ``outcome`` in words;
    ``flag`` is 'changed', 'unchanged', 'fail', 'pass' or '' (for the colour)."""

    run: int
    kind: str
    part: str
    what: str
    outcome: str
    flag: str = ""


@dataclass
class RunSection:
    """One recorded run in the report: the history's record (``run``), and what its
    :class:`~dbpa_core.runs.RunResult` (``result``) says: verdicts, its own sections,
    notes, answers (``responses``: the checksum's fields plus the prompt and checks)."""

    run: Run
    kind: str
    headline: str = ""
    verdicts: list[Verdict] = field(default_factory=list)
    embedded: list[Markup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    models: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    label: str = ""

    @property
    def checksum(self) -> str:
        return checksum(self.responses)

    @property
    def groups(self) -> list[dict[str, Any]]:
        """The answers by part and arm, each group with its prompt (shown once)."""
        out: list[dict[str, Any]] = []
        for r in self.responses:
            key = (r["part"], r["arm"], r.get("prompt", ""))
            if not out or (out[-1]["part"], out[-1]["arm"], out[-1]["prompt"]) != key:
                out.append(
                    {
                        "part": r["part"],
                        "arm": r["arm"],
                        "prompt": r.get("prompt", ""),
                        "role": r.get("role"),
                        "answers": [],
                    }
                )
            out[-1]["answers"].append(r)
        return out


def _report_kind(run_kind: str, v: Any) -> str:
    """The summary's kind column: an answer check is one whatever the run."""
    return "answer check" if v.kind == "check" else run_kind


def section_of(run: Run, result: Any) -> RunSection:
    """The report's section of one run from its :class:`~dbpa_core.runs.RunResult`."""
    from .runs import gate_of

    rid = run.id
    sec = RunSection(
        run,
        result.kind,
        headline=result.headline(),
        models=tuple(result.models()) or run.summary.models,
        served=tuple(result.provenance()),
        label=result.label,
    )
    verdicts = list(result.verdicts())
    for v in verdicts:
        sec.verdicts.append(Verdict(rid, _report_kind(result.kind, v), v.part, v.what, v.outcome, v.flag))
    for part in dict.fromkeys(v.part for v in verdicts):
        g = gate_of([v for v in verdicts if v.part == part and v.kind in ("perturbation", "pooled")])
        if g.controls:
            sec.verdicts.append(
                Verdict(
                    rid,
                    "control gate",
                    part,
                    f"{len(g.controls)} control(s)",
                    ("failed: " + ", ".join(g.failed) + " changed the answers")
                    if g.failed
                    else (g.why_untestable if g.untestable else "passed: no control changed the answers"),
                    "fail" if g.failed else ("untestable" if g.untestable else "pass"),
                )
            )
    sec.embedded = [Markup(h) for h in result.report_parts()]
    sec.notes += list(result.report_notes())
    if "answers" in result.refusals:
        sec.notes.append(f"No answers shown: {result.refusals['answers']}.")
    for a in result.answers():
        sec.responses.append(
            {
                **a.line(rid),
                "prompt": a.prompt,
                "role": a.role,
                "checks": [{"name": n, "value": m, "text": _mark(n, m)} for n, m in a.checks],
            }
        )
    sec.notes += list(run.unreadable)
    return sec


def _mark(name: str, value: Any) -> str:
    if value is None:
        return f"{name} ?"
    if isinstance(value, bool):
        return f"{'✓' if value else '✗'} {name}"
    return f"{name} = {value}"


def collect(run_ids: Sequence[int], history: History | None = None) -> list[RunSection]:
    """Every run as a :class:`RunSection` (raises :class:`ReportError` naming an unknown run
    or one whose result cannot be read)."""
    if not run_ids:
        raise ReportError("Name at least one run id (dbpa history lists them).")
    h = history or History()
    ids = list(dict.fromkeys(int(i) for i in run_ids))
    try:
        loaded = [(h.get(i), h.load_run(i)) for i in ids]
    except HistoryError as exc:
        raise ReportError(str(exc)) from None
    return [section_of(run, result) for run, result in loaded]


def responses_lines(sections: Iterable[RunSection]) -> list[str]:
    """Every response as one canonical JSON line (what :func:`checksum` hashes)."""
    from .runs import checksum_line

    return [checksum_line(r) for s in sections for r in s.responses]


def checksum(responses: Iterable[dict[str, Any]] | Iterable[RunSection]) -> str:
    """SHA-256 (hex) of the responses' JSON lines, one ``\\n`` after each: of sections,
    or of one section's response records."""
    from .runs import checksum as runs_checksum

    items: list[Any] = list(responses)
    if items and isinstance(items[0], RunSection):
        items = [r for s in items for r in s.responses]
    return runs_checksum(items)


# --------------------------------------------------------------------------- rendering
def render(sections: Sequence[RunSection], *, title: str | None = None, expand: bool = False) -> str:
    """The report as one self-contained HTML document (``expand``: the responses shown,
    not folded, as a printed page needs)."""
    title = title or ("Audit report: " + ", ".join(s.run.summary.title for s in sections))[:200]
    dates = [s.run.summary.created_at for s in sections]
    versions = sorted({s.run.summary.tool_version for s in sections})
    models = list(dict.fromkeys(m for s in sections for m in s.models))
    served = list(dict.fromkeys(v for s in sections for v in s.served))
    return document(
        "report.html.j2",
        title=title,
        sections=sections,
        verdicts=[v for s in sections for v in s.verdicts],
        checksum=checksum(sections),
        n_responses=sum(len(s.responses) for s in sections),
        first=min(dates),
        last=max(dates),
        versions=versions,
        models=models,
        served=served,
        expand=expand,
    )


def error_page(message: str, *, title: str = "No report") -> str:
    """A page in the reports' layout that says, in one line, why there is no report (the
    dashboard's download gives it when a run was deleted meanwhile)."""
    return document("error.html.j2", title=title, message=message)


def build_report(
    run_ids: Sequence[int], *, history: History | None = None, title: str | None = None, expand: bool = False
) -> str:
    """The HTML of the report on ``run_ids`` (see the module docstring)."""
    return render(collect(run_ids, history), title=title, expand=expand)


def find_chromium() -> str | None:
    env = os.environ.get("DBPA_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _no_chromium() -> ReportError:
    return ReportError(
        "Chromium is not installed (looked for chromium, chromium-browser, "
        "google-chrome; or set DBPA_CHROMIUM): write --out FILE.html instead "
        "and print it from a browser."
    )


def print_pdf(
    html_path: str | os.PathLike, pdf_path: str | os.PathLike, *, chromium: str | None = None
) -> Path:
    """Print ``html_path`` to ``pdf_path`` with headless Chromium."""
    exe = chromium or find_chromium()
    if exe is None:
        raise _no_chromium()
    pdf = Path(pdf_path).resolve()
    with tempfile.TemporaryDirectory(prefix="dbpa-chromium-") as profile:
        cmd = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--print-to-pdf={pdf}",
            Path(html_path).resolve().as_uri(),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=PDF_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ReportError(f"Chromium did not print the PDF within {PDF_TIMEOUT_S} s.") from None
        except OSError as exc:
            raise ReportError(f"Chromium ({exe}) could not be started: {exc}") from None
    if done.returncode != 0 or not pdf.exists() or pdf.stat().st_size == 0:
        tail = " ".join((done.stderr or "").split())[-200:]
        raise ReportError(f"Chromium could not print the PDF (exit {done.returncode}): {tail}")
    return pdf


def write_report(
    run_ids: Sequence[int],
    out: str | os.PathLike,
    *,
    history: History | None = None,
    title: str | None = None,
) -> Path:
    """Write the report to ``out``: ``.html``, or ``.pdf`` (printed by Chromium)."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".pdf"):
        raise ReportError(f"--out {out}: name an .html or a .pdf file.")
    if suffix == ".pdf" and find_chromium() is None:  # before any work
        raise _no_chromium()
    html = build_report(run_ids, history=history, title=title, expand=suffix == ".pdf")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".pdf":
            with tempfile.TemporaryDirectory(prefix="dbpa-report-") as tmp:
                page = Path(tmp) / "report.html"
                page.write_text(html, encoding="utf-8")
                print_pdf(page, out)
            return out
        tmp_out = out.with_name(f".{out.name}.tmp")
        tmp_out.write_text(html, encoding="utf-8")
        tmp_out.replace(out)
    except OSError as exc:
        raise ReportError(f"cannot write {out} ({exc.strerror or exc}).") from None
    return out


__all__ = [
    "ReportError",
    "RunSection",
    "Verdict",
    "build_report",
    "checksum",
    "collect",
    "error_page",
    "find_chromium",
    "print_pdf",
    "render",
    "responses_lines",
    "write_report",
]
