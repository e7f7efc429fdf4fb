"""Flow on the dashboard: a value out of range or an empty prompt is named in the user's
words and Run waits for a valid one; Stop's flag; History of every kind of run."""
import pytest

from .conftest import errors


@pytest.mark.parametrize("k", [1, 0, -5, 99999])
def test_k_out_of_range_disables_run_with_one_line(make_app, k):
    at = make_app(w_samples=k)
    run = next(b for b in at.button if b.label == "Run audit")
    assert run.disabled
    lines = [e for e in errors(at) if "between 2 and 500" in e]
    assert lines and f"it is {k:,}" in lines[0], errors(at)
    assert len(at.sidebar.error) == 1           # said once beside the field too


def test_an_empty_prompt_is_named_in_the_users_words(make_app):
    at = make_app(w_base_prompt="   ")
    run = next(b for b in at.button if b.label == "Run audit")
    assert run.disabled
    text = " ".join(errors(at))
    assert "the prompt is empty" in text and "base.prompt" not in text


def test_k_back_in_range_enables_run(make_app):
    at = make_app(w_samples=1)
    at.sidebar.number_input[0].set_value(12).run()
    run = next(b for b in at.button if b.label == "Run audit")
    assert not run.disabled and not any("between 2 and 500" in e for e in errors(at))


def test_the_progress_line_says_the_bars_own_share():
    """The bar went by tokens (26 %) while its line said 6/180: now the line leads with the
    bar's share and names the answers complete."""
    from dbpa_core.sampling import Progress
    from ui.runner import progress_text

    p = Progress("sampling", 6, 180, "3,456 tokens, 250 tokens/s, estimating the time left",
                 tokens=5_616, tokens_expected=21_600)
    assert p.fraction == pytest.approx(0.26)
    assert progress_text(p).startswith("Sampling responses: 26 % (6 of 180 answers complete)")
    assert progress_text(Progress("embedding", 64, 180)) == "Embedding responses: 64/180"
