"""Every HTML report dbpa writes — `dbpa report` and the per-page exports of an audit, a
robustness battery, a fidelity analysis and a sensitivity study — is rendered from the
Jinja2 templates in dbpa_core/templates: one layout (masthead, footer) and one stylesheet,
every text escaped. The results are those of tests/test_report.py's recorded runs; each
page is parsed back with html.parser and its key numbers looked for."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dbpa_core import render
from dbpa_core.fmt import fmt_p
from dbpa_core.history import History

from .test_report import HOSTILE, dbpa, report, runs  # noqa: F401 - the recorded runs

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("audit", "battery", "fidelity", "sensitivity")


class Page(HTMLParser):
    """A page read back: its styles, the text outside scripts and styles, the start tags,
    the text of each table's cells and of each script."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.styles: list[str] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._in: str | None = None
        self._cell: list[str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("style", "script"):
            self._in = tag
            (self.styles if tag == "style" else self.scripts).append("")
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._in = None
        elif tag in ("td", "th") and self._cell is not None:
            self.cells.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._in == "style":
            self.styles[-1] += data
        elif self._in == "script":
            self.scripts[-1] += data
        else:
            self.text.append(data)
            if self._cell is not None:
                self._cell.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def _recorded_audit(runs):  # noqa: F811
    history = History(runs["tmp"] / "home" / "history.sqlite3")
    return next(iter(history.get(runs["audit"]).audits.items()))


def _audit(runs, title: str = "Audit of the replay spec", hostile: bool = False):  # noqa: F811
    from ui import export

    job, result = _recorded_audit(runs)
    if hostile:
        base = dataclasses.replace(result.base, texts=(HOSTILE, *result.base.texts[1:]))
        result = dataclasses.replace(result, base=base)
    return result, export.html_report(title, {job: result}, {})


def export_of(runs, kind: str, title: str = "A report", hostile: bool = False) -> str:  # noqa: F811
    """The page's export of ``kind`` (what its download button gives)."""
    from dbpa_core.attacks.battery import report_html as battery_html
    from dbpa_core.fidelity.report import report_html as fidelity_html

    res = runs["results"]
    if kind == "audit":
        return _audit(runs, title, hostile)[1]
    if kind == "battery":
        return battery_html(res["battery"], title=title)
    if kind == "fidelity":
        return fidelity_html(res["fidelity"], title=title)
    return res["sensitivity"].to_html(title=title)


@pytest.mark.parametrize("kind", KINDS)
def test_each_export_is_a_page_of_the_shared_layout_and_stylesheet(runs, kind):  # noqa: F811
    page = Page(export_of(runs, kind, title=f"The {kind} report"))
    assert page.styles == [render.stylesheet()]  # one stylesheet, the shared one
    assert "header" in page.tags and "footer" in page.tags  # the layout's masthead, footer
    assert f"The {kind} report" in page.words
    assert "Every model answer, prompt and name in this document is shown as text" in page.words


def test_dbpa_report_uses_the_same_stylesheet(report):  # noqa: F811
    page = Page(report.read_text(encoding="utf-8"))
    assert page.styles == [render.stylesheet()]


@pytest.mark.parametrize("kind", KINDS)
def test_every_text_of_an_export_is_escaped(runs, kind):  # noqa: F811
    html = export_of(runs, kind, title=HOSTILE, hostile=True)
    page = Page(html)
    assert HOSTILE in page.words  # shown as the text it is
    assert "<b>bold</b>" not in html  # never a tag
    assert not any("alert(" in s for s in page.scripts)
    assert "<script>alert" not in html


def test_the_battery_export_has_its_numbers(runs):  # noqa: F811
    b = runs["results"]["battery"]
    page = Page(export_of(runs, "battery"))
    clean = b.clean().er
    assert f"Clean ER {clean.value:.3f}" in page.words and f"n = {clean.n}" in page.words
    for a in b.attacks():
        assert f"{a.er.value:.3f}" in page.cells and a.attack in page.cells
        if a.asr is not None:
            assert f"{a.asr.value:.3f}" in page.cells
    assert "mark" in page.tags  # an attacked example, its changes marked


def test_the_fidelity_export_has_its_numbers_and_its_chart(runs):  # noqa: F811
    f = runs["results"]["fidelity"]
    page = Page(export_of(runs, "fidelity"))
    for s in f.simulators:
        assert s.name in page.cells and f"{s.auc_cal:.4f}" in page.cells
        assert f"{s.guarantee_quantile:.4f}" in page.cells
    assert " ".join(f.guarantee_text("questions").split()) in page.words
    for c in f.comparisons:
        assert " ".join(c.sentence("questions").split()) in page.words
    assert "svg" in page.tags and "polyline" in page.tags  # the inline chart
    assert len([sc for sc in f.data.scenarios if sc.id in page.cells]) == len(f.data.scenarios)


def test_the_sensitivity_export_has_its_numbers(runs):  # noqa: F811
    s = runs["results"]["sensitivity"]
    page = Page(export_of(runs, "sensitivity"))
    for v in s.verdicts():
        assert v["perturbation"] in page.cells
    for row in s.study("measure"):
        if row.applicable:
            assert any(c.startswith(f"{row.effect_above_chance:.3f}") for c in page.cells)
    assert "svg" in page.tags  # the inline bars


def test_the_audit_export_has_its_numbers_and_charts(runs):  # noqa: F811
    from ui import export, figures

    job, result = _recorded_audit(runs)
    page = Page(
        export.html_report("Audit", {job: result}, {"Similarities": figures.similarity_histograms(result)})
    )
    for p in result.perturbations:
        assert p.name in page.cells and fmt_p(p.p_adjusted) in page.cells
        assert f"{p.effect_above_chance:+.3f}" in page.cells
    assert "Similarities" in page.words and "Verdict" in page.words
    assert page.scripts and any("Plotly" in s for s in page.scripts)  # the charts, embedded
    for t in result.base.texts[:3]:
        assert " ".join(t.split()) in page.words


@pytest.mark.parametrize("kind", ("battery", "fidelity", "sensitivity"))
def test_a_report_as_a_section_of_dbpa_report(runs, kind):  # noqa: F811
    """`dbpa report` puts each run's report into its own page: the section has no page
    (no <html>, no stylesheet) and the same content."""
    from dbpa_core.attacks.battery import report_html as battery_html
    from dbpa_core.fidelity.report import report_html as fidelity_html

    res = runs["results"][kind]
    make = {"battery": battery_html, "fidelity": fidelity_html}.get(kind)
    section = make(res, title="T", section=True) if make else res.to_html(title="T", section=True)
    page = Page(section)
    assert not page.styles and "html" not in page.tags and "header" not in page.tags
    assert page.tags[0] == "h1" and "T" in page.words
    whole = Page(export_of(runs, kind, title="T"))
    assert page.cells == whole.cells


def test_the_error_page_is_in_the_layout_too():
    from dbpa_core.report import error_page

    page = Page(error_page("There is no run 7 <b>."))
    assert page.styles == [render.stylesheet()] and "There is no run 7 <b>." in page.words


def test_no_html_page_is_built_from_strings_any_more():
    """The pages come from the templates: no module writes a page's <html> or a
    stylesheet of its own."""
    for path in [*ROOT.glob("dbpa_core/**/*.py"), *ROOT.glob("ui/*.py"), *ROOT.glob("pages/*.py")]:
        text = path.read_text(encoding="utf-8").lower()
        assert "<!doctype" not in text and "<html" not in text, path
        assert "<style>body" not in text and "body{font-family" not in text, path
