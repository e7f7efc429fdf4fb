"""Exports an auditor can file: file names, CSV with the settings, JSON with version and time,
the spec as YAML that the CLI reads back, and an HTML report with a verdict and the
permutation charts (all escaped)."""

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime

import pytest

from dbpa_core import __version__
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.spec import parse_spec
from ui import export, figures

from .conftest import DEMO

NICE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)
META = export.RunMeta(created_at=datetime(2026, 11, 22, 14, 5, tzinfo=UTC), run_id=7)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    spec = parse_spec(
        {
            "name": "The form",
            "model": {"backend": "replay", "file": DEMO, "label": "SmolLM2 demo"},
            "embedder": {"backend": "rouge1"},
            "samples": 8,
            "permutations": 300,
            "seed": 3,
            "base": {"prompt": NICE},
            "perturbations": [
                {"name": "comedian", "prefix": "Act as a comedian.", "role": "target"},
                {"name": "doctor", "prefix": "Act as a doctor.", "role": "control"},
            ],
        }
    )
    return run_audit(spec, cache=Cache(tmp_path_factory.mktemp("c")))


def test_files_are_named_after_audit_model_and_date(result):
    assert export.file_stem(result, META) == "the-form_smollm2-demo_2026-11-22_1405"
    assert export.slug("  <b>é/x y  ") == "b-x-y"


def test_csv_carries_the_settings_on_every_row(result):
    rows = list(csv.DictReader(io.StringIO(export.results_csv(result, META))))
    assert [r["name"] for r in rows] == ["comedian", "doctor"]
    for r in rows:
        assert (r["samples_k"], r["permutations_B"], r["seed"], r["alpha"]) == ("8", "300", "3", "0.05")
        assert r["measure"] == result.spec.measure and r["correction"] == "holm"
        assert float(r["p_resolution"]) == pytest.approx(1 / 301)
        assert r["run_id"] == "7" and r["tool_version"] == __version__
        assert r["created_at"].startswith("2026-11-22T14:05")
        assert r["similarity"] == "rouge1"
        assert (r["null"], r["min_effect"], r["reference_model"]) == ("base", "", "")
    assert float(rows[0]["p_value"]) == result.perturbations[0].p_value


def test_a_model_comparison_names_its_models_and_its_reference(tmp_path):
    """The file names say which models were compared, and every CSV row names the reference
    (and the null and δ, which change the result)."""
    spec = parse_spec(
        {
            "name": "upgrade",
            "samples": 6,
            "permutations": 100,
            "embedder": {"backend": "rouge1"},
            "null": "pooled",
            "min_effect": 0.05,
            "base": {"prompt": NICE},
            "models": [
                {"backend": "replay", "file": DEMO, "label": "v1"},
                {"backend": "replay", "file": DEMO, "label": "v2"},
            ],
        }
    )
    res = run_audit(spec, cache=Cache(tmp_path / "c"))
    assert export.file_stem(res, META, job="model comparison") == "upgrade_v1-vs-v2_2026-11-22_1405"
    rows = list(csv.DictReader(io.StringIO(export.results_csv(res, META))))
    assert [(r["reference_model"], r["null"], r["min_effect"]) for r in rows] == [("v1", "pooled", "0.05")]


def test_json_carries_tool_version_and_time(result):
    d = json.loads(export.results_json(result, META))
    assert d["tool"] == "dbpa" and d["tool_version"] == __version__
    assert d["created_at"].startswith("2026-11-22T14:05") and d["run_id"] == 7
    assert d["exported_at"] and d["settings"]["samples_k"] == 8
    assert len(d["perturbations"][0]["test"]["permutation_statistics"]) == 300


def test_spec_yaml_runs_the_same_audit(result):
    text = export.spec_yaml(result, META)
    assert text.startswith("# dbpa audit spec") and "dbpa audit THIS_FILE" in text
    back = parse_spec(text, source="x.yaml")
    assert back.to_dict() == result.spec.to_dict()


def test_html_report_has_verdict_permutation_chart_and_escapes(result):
    bad = dataclasses.replace(result.perturbations[1], significant=True, name="doctor <b>x</b>")
    evil = dataclasses.replace(result, perturbations=(result.perturbations[0], bad))
    page = export.html_report(
        "Audit <i>", {"m": evil}, {"Permutation tests": figures.permutation_grid(evil)}, META
    )
    assert "<h2>Verdict</h2>" in page
    assert "Control gate failed" in page and "doctor &lt;b&gt;x&lt;/b&gt;" in page
    assert "doctor <b>x</b>" not in page and "<title>Audit &lt;i&gt;</title>" in page
    assert "Permutation tests" in page and "observed " in page
    assert "run 7" in page and __version__ in page and "seed = 3" in page
    assert "p (raw)" in page and "p (adjusted)" in page and ">0.0000<" not in page


def test_html_report_pass_verdict(result):
    ok = dataclasses.replace(
        result, perturbations=tuple(dataclasses.replace(p, significant=False) for p in result.perturbations)
    )
    page = export.html_report("A", [ok], {})
    assert "Control gate passed" in page and "None of the 2 perturbations" in page
