"""Every HTML document dbpa writes comes from the Jinja2 templates in ``dbpa_core/templates``:
``dbpa report``'s audit report and each page's report (an audit, a robustness battery, a
fidelity analysis, a sensitivity study). They share one layout (``base.html.j2``: the
masthead with the date and the dbpa version, the footer) and one stylesheet
(``report.css``, inlined, so a report is one self-contained file).

Every value is autoescaped: a model's answer, a prompt or a run name is shown as text,
never read as markup. Only HTML that dbpa made itself — a chart (Plotly's or an SVG
drawn by dbpa, with its own texts escaped) or a section rendered from another template —
is passed through, wrapped in :func:`markup`.

* :func:`document` — a whole page: the layout around a template's ``content`` block;
* :func:`section` — only that ``content`` block (``dbpa report`` puts each run's report
  inside its own page);
* :func:`partial` — a template that is a piece of a page (a table shared by two reports).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from . import __version__
from .fmt import fmt_p, fmt_pct

if TYPE_CHECKING:
    from jinja2 import Environment

TEMPLATES = Path(__file__).parent / "templates"
STYLESHEET = "report.css"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def num(v: Any, digits: int = 3) -> str:
    """A number to ``digits`` decimals; '–' for none."""
    return "–" if _missing(v) else f"{v:.{digits}f}"


def signed(v: Any, digits: int = 3) -> str:
    """A number with its sign (``+0.120``); '–' for none."""
    return "–" if _missing(v) else f"{v:+.{digits}f}"


def setting_text(value: Any) -> str:
    """A setting's value as a reader writes it, never as Python's repr: a mapping as
    ``backend: local, name: x`` (in parentheses when nested; entries left empty, which
    mean the default, are left out), a list as ``a, b``, nothing as ``none``."""
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        parts = []
        for k, v in value.items():
            if v is None or (isinstance(v, (Mapping, list, tuple, set, frozenset)) and not v):
                continue
            text = setting_text(v)
            parts.append(f"{k}: ({text})" if isinstance(v, Mapping) else f"{k}: {text}")
        return ", ".join(parts)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(setting_text(v) for v in value)
    return str(value)


def short(value: Any, n: int = 160) -> str:
    """A setting's value (:func:`setting_text`) cut to ``n`` characters (an ellipsis marks
    the cut)."""
    text = setting_text(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def cell(v: Any, digits: int = 3) -> str:
    """A table cell: floats to ``digits`` decimals, '–' for none, anything else as text."""
    if isinstance(v, float) or v is None:
        return num(v, digits)
    return str(v)


def markup(html: str | None) -> Markup:
    """HTML that dbpa made (a chart, a rendered section), passed through unescaped."""
    return Markup(html or "")


@functools.cache
def environment() -> Environment:
    """The one Jinja2 environment (autoescaping every template; an undefined name is an
    error, not an empty string)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(p=fmt_p, num=num, signed=signed, short=short, cell=cell, pct=fmt_pct)
    return env


@functools.cache
def stylesheet() -> str:
    """The stylesheet every report inlines."""
    return (TEMPLATES / STYLESHEET).read_text(encoding="utf-8")


def _context(context: dict[str, Any]) -> dict[str, Any]:
    return {"tool_version": __version__, "made": datetime.now(UTC), "css": Markup(stylesheet()), **context}


def document(template: str, **context: Any) -> str:
    """A whole self-contained page: ``template`` (which extends ``base.html.j2``; its
    context needs a ``title``) inside the shared layout and stylesheet."""
    return environment().get_template(template).render(_context(context))


def section(template: str, **context: Any) -> Markup:
    """Only the ``content`` block of ``template``: its report without the page around it."""
    t = environment().get_template(template)
    return Markup("".join(t.blocks["content"](t.new_context(_context(context)))))


def partial(template: str, **context: Any) -> Markup:
    """A template that is a piece of a page (no layout), as HTML to put into another."""
    return Markup(environment().get_template(template).render(_context(context)))


__all__ = [
    "STYLESHEET",
    "TEMPLATES",
    "cell",
    "document",
    "environment",
    "markup",
    "num",
    "partial",
    "section",
    "setting_text",
    "short",
    "signed",
    "stylesheet",
]
