"""Every output the manual shows is what its command prints today.

Each page's example runs on recorded answers (replay files) or on data shipped with the
project, so the numbers are the same on every machine and no model is loaded; the
comparison is tests/doc_outputs.py's. Most of these run a whole command (seconds to a
minute on a busy machine, MiniLM's embeddings for some): they are marked slow.
"""

from __future__ import annotations

import json

import pytest

from tests.doc_outputs import REPO, assert_shown, documented_block, run_dbpa, session


@pytest.fixture(scope="module")
def personas_cache(tmp_path_factory):
    """One cache for the recorded personas: the audit fills it, the sensitivity study reads
    it (as on the page, which runs them in that order)."""
    return tmp_path_factory.mktemp("personas-cache")


@pytest.fixture(scope="module")
def personas_audit(personas_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("personas") / "out"
    argv = ["audit", "examples/replay_personas.yaml", "--out", str(out), "--cache-dir", str(personas_cache)]
    return run_dbpa([*argv, "--quiet", "--no-history"], out=out, shown_as="out/personas")


@pytest.mark.slow  # embeds the 180 recorded answers with the embedded MiniLM
@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_personas_table(personas_audit, page):
    command = "dbpa audit examples/replay_personas.yaml --out out/personas"
    assert_shown(documented_block(page, command), personas_audit.split("\n\n", 1)[0])


@pytest.mark.slow  # the same, with every measure and a second embedder
def test_the_sensitivity_study(personas_audit, personas_cache, tmp_path):
    block = documented_block("docs/guides/sensitivity.md", "dbpa sensitivity examples/replay_personas.yaml")
    printed = run_dbpa(
        [
            "sensitivity",
            "examples/replay_personas.yaml",
            *("--measures", "all", "--embedders", "spec,rouge1", "--cost-models", "gpt-4o-mini,gpt-4o"),
            *("--out", str(tmp_path / "o"), "--cache-dir", str(personas_cache), "--quiet", "--no-history"),
        ],
        out=tmp_path / "o",
        shown_as="out/sensitivity",
        stderr=True,
    )
    assert_shown(block, printed)
    said = "0 model calls to make (180 samples already cached), estimated cost $0.0000."
    assert said in printed and said in " ".join((REPO / "docs/guides/sensitivity.md").read_text().split())


@pytest.mark.slow  # 80 recorded answers compared word by word (ROUGE-L)
def test_the_answer_checks_table(tmp_path):
    page = "docs/guides/checks.md"
    printed = run_dbpa(
        [
            "audit",
            "examples/replay_checks.yaml",
            "--out",
            str(tmp_path / "o"),
            "--cache-dir",
            str(tmp_path / "c"),
        ]
        + ["--quiet", "--no-history"],
        out=tmp_path / "o",
        shown_as="out/checks",
    )
    assert_shown(documented_block(page, "The table:"), printed)
    # the one-line statement the check and report pages quote is the one results.json holds
    lines = {c["text"] for c in json.loads((tmp_path / "o" / "results.json").read_text())["checks"]}
    quoted = "cites NICE: 10/20 → 1/20, −45 points [−65, −18], p = 0.002 (adjusted p = 0.023) *"
    assert quoted in lines
    assert quoted in (REPO / page).read_text()
    assert quoted in " ".join((REPO / "docs/guides/report.md").read_text().split())


@pytest.mark.slow  # 60 recorded answers compared word by word (ROUGE-1), at two looks
def test_the_sequential_audit(tmp_path):
    printed = run_dbpa(
        [
            "audit",
            "examples/replay_sequential.yaml",
            "--out",
            str(tmp_path / "o"),
            "--cache-dir",
            str(tmp_path / "c"),
        ]
        + ["--quiet", "--no-history"],
        out=tmp_path / "o",
        shown_as="out/sequential",
    )
    assert_shown(
        documented_block("docs/guides/sequential.md", "dbpa audit examples/replay_sequential.yaml"), printed
    )


def test_the_fidelity_tables(tmp_path):
    command = "dbpa fidelity assets/fidelity_sample.csv --loss tv --gamma 0.5 --eta 0.05 --out out/fidelity"
    printed = run_dbpa(
        [*command.split()[1:-1], str(tmp_path / "o"), "--quiet", "--no-history"],
        out=tmp_path / "o",
        shown_as="out/fidelity",
    )
    assert_shown(documented_block("docs/guides/fidelity.md", command), printed)


def test_the_fidelity_plan():
    command = "dbpa fidelity assets/fidelity_sample.csv --loss tv --gamma 0.5 --eta 0.05 --plan"
    printed = run_dbpa([*command.split()[1:], "--quiet"])
    assert_shown(documented_block("docs/methods/fidelity.md", command), printed)


def test_the_simulated_respondents(tmp_path):
    """The embedded model's recorded survey answers (replayed: no model is loaded)."""
    command = "dbpa fidelity --simulate examples/fidelity_replay.yaml --out out/sim"
    printed = run_dbpa(
        [
            *command.split()[1:-1],
            str(tmp_path / "o"),
            "--cache-dir",
            str(tmp_path / "c"),
            "--quiet",
            "--no-history",
        ],
        out=tmp_path / "o",
        shown_as="out/sim",
    )
    assert_shown(documented_block("docs/guides/fidelity.md", command), printed)


@pytest.fixture(scope="module")
def wordnet():
    """The battery's word attacks draw their synonyms from WordNet: without it they only
    delete words, and send prompts the recorded answers do not hold."""
    from dbpa_core.attacks.wordnet import available

    if not available():
        pytest.skip("WordNet is not installed: the word attacks would send other prompts")


@pytest.fixture(scope="module")
def scan_session():
    return session(
        documented_block(
            "docs/guides/scan.md", "$ dbpa scan examples/model_recorded.yaml --estimate", inside=True
        )
    )


def test_the_scan_estimate(scan_session, wordnet, tmp_path):
    command = "dbpa scan examples/model_recorded.yaml --estimate"
    printed = run_dbpa([*command.split()[1:], "--cache-dir", str(tmp_path / "c")])
    assert_shown(scan_session[command], printed)


@pytest.mark.slow  # a whole scan: MiniLM embeds 260 recorded answers; the battery loads WordNet
def test_the_scan(scan_session, wordnet, tmp_path):
    command = "dbpa scan examples/model_recorded.yaml --out out/scan --home /tmp/demo-home"
    home = tmp_path / "home"
    printed = run_dbpa(
        ["scan", "examples/model_recorded.yaml", "--out", str(tmp_path / "o"), "--home", str(home)]
        + ["--cache-dir", str(tmp_path / "c"), "--quiet"],
        out=tmp_path / "o",
        shown_as="out/scan",
    ).replace(str(home), "/tmp/demo-home")
    assert_shown(scan_session[command], printed)


@pytest.mark.slow  # loads WordNet (the word attacks) for 167 recorded answers
def test_the_battery_table(wordnet, tmp_path):
    command = "dbpa attack examples/attack_replay.yaml --out out/attack"
    printed = run_dbpa(
        [
            *command.split()[1:-1],
            str(tmp_path / "o"),
            "--cache-dir",
            str(tmp_path / "c"),
            "--quiet",
            "--no-history",
        ],
        out=tmp_path / "o",
        shown_as="out/attack",
    )
    assert_shown(documented_block("docs/guides/battery.md", command), printed)
