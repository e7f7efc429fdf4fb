"""Every output the manual shows is what its command prints today.

Each page's example runs on recorded answers (replay files) or on data shipped with the
project, so the numbers are the same on every machine and no model is loaded; the
comparison is tests/doc_outputs.py's. Most of these run a whole command (seconds to a
minute on a busy machine, MiniLM's embeddings for some): they are marked slow.
"""

from __future__ import annotations

import json

import pytest

from tests.doc_outputs import REPO, assert_shown, documented_block, run_documented, session


@pytest.fixture(scope="module")
def personas_cache(tmp_path_factory, demo_cache):
    """One cache for the recorded personas: the audit fills it, the sensitivity study reads
    it (as on the page, which runs them in that order). It starts as a copy of the session's
    embeddings of the recorded answers (tests/demo_cache.py): MiniLM is not run again."""
    from tests.demo_cache import copy_to

    return copy_to(demo_cache, tmp_path_factory.mktemp("personas-cache") / "cache")


@pytest.fixture(scope="module")
def personas_audit(personas_cache, tmp_path_factory):
    command = "dbpa audit examples/replay_personas.yaml --out out/personas"
    return run_documented(command, tmp_path_factory.mktemp("personas"), cache=personas_cache)


@pytest.mark.slow  # the 180 recorded answers' embeddings: built once per session (demo_cache)
@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_personas_table(personas_audit, page):
    command = "dbpa audit examples/replay_personas.yaml --out out/personas"
    assert_shown(documented_block(page, command), personas_audit.split("\n\n", 1)[0])


@pytest.mark.slow  # the same, with every measure and a second embedder
def test_the_sensitivity_study(personas_audit, personas_cache, tmp_path):
    page = "docs/guides/sensitivity.md"
    command = (
        "dbpa sensitivity examples/replay_personas.yaml --measures all --embedders spec,rouge1 "
        "--cost-models gpt-4o-mini,gpt-4o --out out/sensitivity"
    )
    printed = run_documented(command, tmp_path, cache=personas_cache, stderr=True)
    assert_shown(documented_block(page, "dbpa sensitivity examples/replay_personas.yaml"), printed)
    said = "0 model calls to make (180 samples already cached), estimated cost $0.0000."
    assert said in printed and said in " ".join((REPO / page).read_text().split())


@pytest.mark.slow  # 80 recorded answers compared word by word (ROUGE-L)
def test_the_answer_checks_table(tmp_path):
    page = "docs/guides/checks.md"
    printed = run_documented("dbpa audit examples/replay_checks.yaml --out out/checks", tmp_path)
    assert_shown(documented_block(page, "The table:"), printed)
    # the one-line statement the check and report pages quote is the one results.json holds
    lines = {c["text"] for c in json.loads((tmp_path / "out" / "results.json").read_text())["checks"]}
    quoted = "cites NICE: 10/20 → 1/20, −45 points [−65, −18], p = 0.002 (adjusted p = 0.023) *"
    assert quoted in lines
    assert quoted in (REPO / page).read_text()
    assert quoted in " ".join((REPO / "docs/guides/report.md").read_text().split())


@pytest.mark.parametrize(
    "page, command",
    [
        # 60 recorded answers compared word by word (ROUGE-1), at two looks
        pytest.param(
            "docs/guides/sequential.md",
            "dbpa audit examples/replay_sequential.yaml --out out/sequential",
            marks=pytest.mark.slow,
        ),
        (
            "docs/guides/fidelity.md",
            "dbpa fidelity assets/fidelity_sample.csv --loss tv --gamma 0.5 --eta 0.05 --out out/fidelity",
        ),
        (
            "docs/methods/fidelity.md",
            "dbpa fidelity assets/fidelity_sample.csv --loss tv --gamma 0.5 --eta 0.05 --plan",
        ),
        # the embedded model's recorded survey answers (replayed: no model is loaded)
        ("docs/guides/fidelity.md", "dbpa fidelity --simulate examples/fidelity_replay.yaml --out out/sim"),
    ],
    ids=["sequential", "fidelity", "fidelity-plan", "simulated-respondents"],
)
def test_the_page_shows_what_its_command_prints(page, command, tmp_path):
    assert_shown(documented_block(page, command), run_documented(command, tmp_path))


@pytest.fixture(scope="module")
def wordnet():
    """The battery's word attacks draw their synonyms from WordNet: without it they only
    delete words, and send prompts the recorded answers do not hold."""
    from dbpa_core.attacks.wordnet import available

    if not available():
        pytest.skip("WordNet is not installed: the word attacks would send other prompts")


# the scan page shows a terminal session: `$ dbpa scan ...` lines, each followed by its output
SCAN_ESTIMATE = "dbpa scan examples/model_recorded.yaml --estimate"
SCAN = "dbpa scan examples/model_recorded.yaml --out out/scan --home /tmp/demo-home"


@pytest.mark.slow  # loads WordNet (the battery's word attacks), MiniLM for the whole scan
@pytest.mark.parametrize("command", [SCAN_ESTIMATE, SCAN], ids=["estimate", "scan"])
def test_the_scan(command, wordnet, tmp_path):
    """The scan page's session; the whole scan also writes the JUnit report the CI page
    quotes a test case of."""
    shown = session(documented_block("docs/guides/scan.md", f"$ {SCAN_ESTIMATE}", inside=True))
    junit = " --junit out/junit.xml" if command == SCAN else ""
    assert_shown(shown[command], run_documented(command + junit, tmp_path))
    if junit:
        quoted = documented_block("docs/guides/ci.md", "one of its test cases:")
        assert_shown(quoted, (tmp_path / "junit").read_text(encoding="utf-8"))
        assert f"`{command}{junit}`" in " ".join((REPO / "docs/guides/ci.md").read_text().split())


@pytest.mark.slow  # loads WordNet (the word attacks) for 167 recorded answers
def test_the_battery_table(wordnet, tmp_path):
    command = "dbpa attack examples/attack_replay.yaml --out out/attack"
    assert_shown(documented_block("docs/guides/battery.md", command), run_documented(command, tmp_path))


@pytest.mark.slow  # two audits of recorded answers compared word by word (ROUGE), recorded
def test_the_history_guides_listing_and_comparison(tmp_path):
    """The history page's runs, recorded into a history of their own, then its `dbpa
    history` listing and `history compare` as it shows them (when each run was recorded
    masked on both sides: the ids are the same in a new history)."""
    from tests.doc_outputs import run_documented_in_turn, undated

    page = "docs/guides/history.md"
    made = documented_block(page, "A history of its own")
    shown = session(documented_block(page, "$ dbpa history --home", inside=True))
    commands = [line for line in made.splitlines() if line.startswith("dbpa ")]
    assert len(commands) == 3 and len(shown) == 2
    printed = run_documented_in_turn(commands + list(shown), tmp_path)[len(commands) :]
    for output, got in zip(shown.values(), printed, strict=True):
        assert_shown(undated(output), undated(got))
