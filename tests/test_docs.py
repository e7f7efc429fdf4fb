"""The manual (docs/, mkdocs.yml): it builds with ``mkdocs build --strict`` (broken links,
pages left out of the navigation, missing images and docstrings the API pages cannot read
all fail it), its generated references say what the code says, the README stays a short
front door, and no document cites what a user does not have."""

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.slow
def test_the_manual_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert r.returncode == 0, r.stderr[-6000:]
    cli = (site / "reference" / "cli.html").read_text()
    assert "dbpa audit" in cli and "--fail-on-control" in cli
    assert "dbpa_test" in (site / "reference" / "api" / "index.html").read_text()
    # opened from disk (file://) the search still works: its index is a script, not a fetch
    assert (site / "search" / "search_index.js").is_file()
    index = (site / "index.html").read_text()
    assert 'src="js/iframe-worker-shim.js"' in index and "unpkg.com" not in index
    for page in (
        "getting-started",
        "dashboard",
        "methods/dbpa",
        "methods/battery",
        "methods/fidelity",
        "reliability",
        "benchmarks",
        "faq",
    ):
        assert (site / f"{page}.html").is_file(), page  # links work without a server


@pytest.mark.slow
@pytest.mark.browser
def test_the_manual_searches_opened_from_disk(tmp_path):
    """The built manual opened as files (file://, no server, nothing fetched): typing in the
    search box lists matching pages (the offline plugin and the vendored iframe-worker shim)."""
    pytest.importorskip("mkdocs")
    from tests.app.browser_support import launch, require_browser

    playwright = require_browser()
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    with playwright.sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            fetched: list[str] = []
            page.on("request", lambda r: fetched.append(r.url))
            page.goto((site / "getting-started.html").as_uri())
            box = page.locator("input.md-search__input")
            box.click()
            box.type("setup", delay=30)
            page.wait_for_selector(".md-search-result__item", timeout=30_000)
            assert "matching" in page.locator(".md-search-result__meta").inner_text()
        finally:
            browser.close()
    assert [u for u in fetched if not u.startswith("file:")] == []


def test_the_cli_reference_lists_every_command_and_option():
    from dbpa_core.cli import build_parser

    hooks = _hooks()
    text = hooks.cli_markdown(build_parser())
    parser = build_parser()
    commands = list(hooks._commands(parser))
    assert {" ".join(w) for w, _, _ in commands} >= {
        "audit",
        "estimate",
        "attack",
        "fidelity",
        "cache",
        "sensitivity",
        "import",
        "history",
        "history show",
        "history compare",
        "history delete",
        "report",
        "ui",
    }
    for words, _, child in commands:
        assert f"`dbpa {' '.join(words)}`" in text
        for action in child._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in text, (words, flag)


def test_the_cli_reference_follows_a_new_option():
    ap = argparse.ArgumentParser(prog="dbpa")
    sub = ap.add_subparsers(dest="command")
    a = sub.add_parser("audit", help="run an audit")
    a.add_argument("--brand-new", choices=["x", "y"], default="x", help="a | b <c>")
    text = _hooks().cli_markdown(ap)
    assert "## `dbpa audit`" in text and "Run an audit." in text
    row = next(line for line in text.splitlines() if "`--brand-new`" in line)
    assert "`x`" in row and "one of: x, y" in row and "a \\| b &lt;c&gt;" in row


def test_the_spec_reference_walks_a_schema():
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal

    class Model(pydantic.BaseModel):
        """Which model answers."""

        backend: Literal["local", "openai"] = pydantic.Field("local", description="where")
        concurrency: int = pydantic.Field(8, description="requests at once")

    class Check(pydantic.BaseModel):
        name: str = pydantic.Field(description="shown in tables")

    class Spec(pydantic.BaseModel):
        """An audit spec."""

        model: Model = pydantic.Field(default_factory=Model, description="the model")
        samples: int = pydantic.Field(20, description="k responses per prompt")
        checks: list[Check] | None = pydantic.Field(None, description="answer checks")
        base: str

    text = _hooks().spec_markdown(Spec.model_json_schema())
    lines = text.splitlines()

    def row(key, after=0):
        return next(line for line in lines[after:] if line.startswith(f"| `{key}` |"))

    assert "`20`" in row("samples") and "k responses per prompt" in row("samples")
    assert "required" in row("base")
    assert "list of [Check](#def-check)" in row("checks")
    assert "[Model](#def-model)" in row("model")
    model_at = lines.index("## Model {#def-model}")
    assert '`"local"` \\| `"openai"`' in row("backend", model_at)
    assert "`8`" in row("concurrency", model_at)
    assert "## Check {#def-check}" in lines


def test_the_spec_reference_reads_draft_07_refs():
    schema = {
        "title": "S",
        "type": "object",
        "required": ["model"],
        "properties": {"model": {"description": "the model", "allOf": [{"$ref": "#/definitions/Model"}]}},
        "definitions": {
            "Model": {
                "title": "Model",
                "type": "object",
                "properties": {"name": {"type": "string", "default": "m", "description": "its name"}},
            }
        },
    }
    text = _hooks().spec_markdown(schema)
    assert "| `model` | [Model](#def-model) | required | the model |" in text
    assert '| `name` | string | `"m"` | its name |' in text


def test_the_spec_reference_of_this_version():
    hooks = _hooks()
    if not hooks.spec_schema_available():
        pytest.skip("dbpa_core.spec_schema is not in this version")
    from dbpa_core.spec_schema import json_schema

    text = hooks.spec_markdown()
    for key in json_schema().get("properties", {}):
        assert f"| `{key}` |" in text, key


def test_no_document_cites_what_users_do_not_have():
    for path in _documents():
        text = path.read_text()
        for pattern in (r"\bSPEC\b", "§", r"(?i)\bissue\s*#?\d+"):
            found = re.search(pattern, text)
            assert not found, f"{path.relative_to(ROOT)}: {found.group(0)!r}"


def test_the_readme_is_a_short_front_door_into_the_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make run" in text and "make test" in text and "pip install" in text
    links = re.findall(r"\]\(((?!https?:|#)[^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link.split("#")[0]).exists(), link
