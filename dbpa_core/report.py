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
  pages, and each audit's tables and responses).

The checksum: every response of every run, in the report's order, as one JSON line each
(``{"run", "part", "arm", "index", "response"}``, keys sorted, UTF-8, no ASCII escaping,
``\\n`` after each line), hashed with SHA-256 — :func:`responses_lines` gives the lines,
so anyone holding the history (or the report's own response listings) can recompute it.

A PDF is printed by headless Chromium (:func:`print_pdf`); without Chromium, one line
says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from .fmt import fmt_p
from .history import History, HistoryError, Run
from .render import document

if TYPE_CHECKING:
    from .cache import Cache

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
    run: Run
    kind: str
    headline: str = ""
    verdicts: list[Verdict] = field(default_factory=list)
    audits: list[dict[str, Any]] = field(default_factory=list)  # kind 'audit'
    embedded: list[Markup] = field(default_factory=list)  # per-kind sections
    notes: list[str] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    models: tuple[str, ...] = ()

    @property
    def checksum(self) -> str:
        return checksum(self.responses)


def _audit_part(
    run_id: int, job: str, r: Any, several: bool, cache_dir: str | None
) -> tuple[dict, list[Verdict], list[dict]]:
    s = r.spec
    part = job if several else (s.name or job)
    verdicts: list[Verdict] = []
    for p in r.perturbations:
        flag = "changed" if p.significant else "unchanged"
        if p.role == "control":
            flag = "fail" if p.significant else "pass"
        elif p.role == "target" and not p.significant:
            flag = "fail"
        word = "changed the answers" if p.significant else "no detectable change"
        verdicts.append(
            Verdict(
                run_id,
                "audit",
                part,
                f"{p.name}" + (f" ({p.role})" if p.role else ""),
                f"{word}: ω above chance {p.effect_above_chance:+.3f}, p = "
                f"{fmt_p(p.p_value)}, adjusted p = {fmt_p(p.p_adjusted)} "
                f"{p.stars}".rstrip(),
                flag,
            )
        )
    controls = [p for p in r.perturbations if p.role == "control"]
    if controls:
        failed = [p.name for p in controls if p.significant]
        verdicts.append(
            Verdict(
                run_id,
                "control gate",
                part,
                f"{len(controls)} control(s)",
                ("failed: " + ", ".join(failed) + " changed the answers")
                if failed
                else "passed: no control changed the answers",
                "fail" if failed else "pass",
            )
        )
    checks, note = tuple(r.checks), ""
    if not checks and s.checks:  # the history keeps the answers, not the check results
        checks, note = _recheck(s, (r.base, *r.arms), cache_dir)
    for c in checks:
        verdicts.append(
            Verdict(
                run_id,
                "answer check",
                part,
                f"{c.check} — {c.perturbation}",
                c.text,
                "changed" if c.significant else "unchanged",
            )
        )
    from . import provenance

    served = sorted({a.arm.model_label for a in (r.base, *r.arms)})
    info = {
        "job": job,
        "title": part,
        "result": r,
        "spec": s,
        "checks": checks,
        "checks_note": note,
        "models": served,
        "warnings": list(r.warnings),
        "roc": r.roc,
        "versions": provenance.summary_lines(provenance.entries_of(r.usage)),
    }
    responses = [
        {"arm": a.arm.name, "index": i, "response": t}
        for a in (r.base, *r.arms)
        for i, t in enumerate(a.texts)
    ]
    return info, verdicts, responses


class _CachedReplies:
    """Stands in for the sampler when checks are computed again: a judge's replies come
    from the run's cache only; a reply that is not there stops it (never a call)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def sample(self, jobs: Sequence[Any], *, stage: str = "") -> list[SimpleNamespace]:
        from types import SimpleNamespace

        from .sampling import backend_identity, sample_key

        keys = [sample_key(backend_identity(j.model), j.request) for j in jobs]
        found = self.cache.get_many(keys)
        texts = [v.get("text") if isinstance(v := found.get(k), dict) else None for k in keys]
        if any(not isinstance(t, str) for t in texts):
            raise LookupError("a judge's reply is not in the cache")
        return [SimpleNamespace(text=t) for t in texts]


def _recheck(spec: Any, arms: Any, cache_dir: str | None) -> tuple[tuple, str]:
    """The spec's answer checks computed again from the answers kept (with the audit's
    seed and settings, so the numbers are the audit's): model-graded ones with the judges'
    replies from the run's cache; when they are not there, the others alone (the note
    says so: their adjusted p is then corrected over fewer tests)."""
    import dataclasses

    from .checks import audit_checks

    judged = [c.name for c in spec.checks if c.model_graded]
    if judged and cache_dir and Path(cache_dir).is_dir():  # never makes a cache
        try:
            from .cache import Cache

            return audit_checks(spec, arms, _CachedReplies(Cache(cache_dir))), ""
        except Exception:  # noqa: BLE001 - no cache, a damaged one, a reply not kept
            pass
    plain = tuple(c for c in spec.checks if not c.model_graded)
    checks = audit_checks(dataclasses.replace(spec, checks=plain), arms, None) if plain else ()
    note = ""
    if judged:
        note = (
            "Model-graded checks (" + ", ".join(judged) + ") asked a judge model when the "
            "audit ran and their replies are no longer in its cache: they are left out "
            "here (see the run's checks.csv), and the other checks' adjusted p-values are "
            "corrected over the checks shown."
        )
    return checks, note


def _battery(run_id: int, name: str, b: Any) -> tuple[list[Verdict], list[dict]]:
    from .attacks.battery import ALL

    out = []
    c = b.clean()
    out.append(
        Verdict(
            run_id,
            "battery",
            name,
            "clean error rate",
            f"ER {c.er.value:.3f} [{c.er.low:.3f}, {c.er.high:.3f}], n = {c.er.n}",
        )
    )
    for a in b.attacks():
        if a.asr is None:
            continue
        out.append(
            Verdict(
                run_id,
                "battery",
                name,
                f"{a.attack}, ρ = {a.rho:g}",
                f"attack success rate {a.asr.value:.3f} [{a.asr.low:.3f}, "
                f"{a.asr.high:.3f}], ER {a.er.value:.3f}",
                "changed" if a.asr.value > 0 else "unchanged",
            )
        )
    for rti in (r for r in b.rti if r.dataset == ALL):
        out.append(
            Verdict(
                run_id, "battery", name, f"RTI {rti.attack}", f"{rti.rti:.2f} (1 = the answer never changed)"
            )
        )
    if b.curve:
        sig = sum(r.significant for r in b.curve)
        out.append(
            Verdict(
                run_id,
                "battery",
                name,
                "robustness curve (DBPA)",
                f"{sig} of {len(b.curve)} attacked prompts changed the answers significantly",
                "changed" if sig else "unchanged",
            )
        )
    responses = [
        {"arm": f"{r.query.base.id}/{r.query.name}", "index": i, "response": r.response}
        for i, r in enumerate(b.records)
    ]
    return out, responses


def _fidelity(run_id: int, name: str, f: Any) -> list[Verdict]:
    out = [Verdict(run_id, "fidelity", name, "guarantee", f.guarantee_text())]
    for c in f.comparisons:
        out.append(
            Verdict(
                run_id,
                "fidelity",
                name,
                f"{c.first} vs {c.second}",
                c.sentence(),
                "pass" if c.guaranteed else "",
            )
        )
    return out


def _sensitivity(run_id: int, name: str, s: Any) -> tuple[list[Verdict], list[dict]]:
    out = []
    for v in s.verdicts():
        base = {True: "changed", False: "no change", None: "–"}[v["baseline_significant"]]
        parts = ", ".join(f"{st}: {v[st]['significant']}/{v[st]['settings']} significant" for st in s.studies)
        out.append(
            Verdict(
                run_id,
                "sensitivity",
                name,
                v["perturbation"],
                f"{'holds' if v['holds'] else 'DEPENDS ON THE SETTING'} (audit: {base}; {parts})",
                "pass" if v["holds"] else "fail",
            )
        )
    return out, []


def _result_part(sec: RunSection, name: str, value: Any) -> None:
    """One value of a battery, fidelity or sensitivity run's stored result."""
    from .attacks.battery import BatteryResult
    from .attacks.battery import report_html as battery_html
    from .fidelity.analysis import FidelityResult
    from .fidelity.report import report_html as fidelity_html
    from .fidelity.simulate import SimulationResult
    from .sensitivity import SensitivityResult

    rid = sec.run.id
    if isinstance(value, BatteryResult):
        verdicts, responses = _battery(rid, name, value)
        sec.embedded.append(Markup(battery_html(value, title=name, section=True)))
    elif isinstance(value, FidelityResult):
        verdicts, responses = _fidelity(rid, name, value), []
        sec.embedded.append(Markup(fidelity_html(value, title=name, section=True)))
    elif isinstance(value, SensitivityResult):
        verdicts, responses = _sensitivity(rid, name, value)
        sec.embedded.append(Markup(value.to_html(title=name, section=True)))
    elif isinstance(value, SimulationResult):
        verdicts = [
            Verdict(
                rid,
                "fidelity",
                name,
                f"simulated answers of {m}",
                f"{value.parsed_total(m):,} read, {value.unparsed_total(m):,} unreadable",
            )
            for m in value.models
        ]
        if value.error:
            verdicts.append(Verdict(rid, "fidelity", name, "analysis", value.error, "fail"))
        responses = [
            {"arm": f"{a.model}/{a.scenario}", "index": a.index, "response": a.response}
            for a in value.answers
        ]
    else:
        sec.notes.append(f"{name}: a stored {type(value).__name__} this report does not show.")
        return
    sec.verdicts += verdicts
    sec.responses += [dict(r, part=name) for r in responses]


def collect(run_ids: Sequence[int], history: History | None = None) -> list[RunSection]:
    """Every run as a :class:`RunSection` (raises :class:`ReportError` naming an unknown run
    or one whose result cannot be read)."""
    if not run_ids:
        raise ReportError("Name at least one run id (dbpa history lists them).")
    h = history or History()
    ids = list(dict.fromkeys(int(i) for i in run_ids))
    try:
        runs = [h.get(i) for i in ids]
        extras = h.extras(ids)
    except HistoryError as exc:
        raise ReportError(str(exc)) from None
    sections = []
    for run in runs:
        ex = extras.get(run.id, {})
        kind = ex.get("kind") or "audit"
        sec = RunSection(
            run, kind, headline=ex.get("headline", ""), models=tuple(ex.get("models") or run.summary.models)
        )
        if kind == "audit":
            several = len(run.audits) > 1
            for job, r in run.audits.items():
                info, verdicts, responses = _audit_part(run.id, job, r, several, run.cache_dir)
                sec.audits.append(info)
                sec.verdicts += verdicts
                sec.responses += [dict(x, part=job) for x in responses]
        else:
            try:
                _, result = h.result(run.id)
            except HistoryError as exc:
                raise ReportError(str(exc)) from None
            values = result.items() if isinstance(result, dict) else [(run.summary.title, result)]
            for name, value in values:
                _result_part(sec, str(name), value)
        sec.notes += list(run.unreadable)
        for response in sec.responses:
            response["run"] = run.id
        sections.append(sec)
    return sections


def _line(r: dict[str, Any]) -> str:
    return json.dumps(
        {k: r[k] for k in ("run", "part", "arm", "index", "response")}, ensure_ascii=False, sort_keys=True
    )


def responses_lines(sections: Iterable[RunSection]) -> list[str]:
    """Every response as one canonical JSON line (what :func:`checksum` hashes)."""
    return [_line(r) for s in sections for r in s.responses]


def checksum(responses: Iterable[dict[str, Any]] | Iterable[RunSection]) -> str:
    """SHA-256 (hex) of the responses' JSON lines, one ``\\n`` after each: of sections,
    or of one section's response records."""
    items: list[Any] = list(responses)
    lines = (
        responses_lines(items) if items and isinstance(items[0], RunSection) else [_line(r) for r in items]
    )
    return hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- rendering
def render(sections: Sequence[RunSection], *, title: str | None = None, expand: bool = False) -> str:
    """The report as one self-contained HTML document (``expand``: the responses shown,
    not folded, as a printed page needs)."""
    title = title or ("Audit report: " + ", ".join(s.run.summary.title for s in sections))[:200]
    dates = [s.run.summary.created_at for s in sections]
    versions = sorted({s.run.summary.tool_version for s in sections})
    models = list(dict.fromkeys(m for s in sections for m in s.models))
    served = list(dict.fromkeys(v for s in sections for a in s.audits for v in a["versions"]))
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
