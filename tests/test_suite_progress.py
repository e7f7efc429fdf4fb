"""Progress of a suite: the cases bar moves while samples are drawn, the time left is the
suite's, and a bar's detail never loses its rate or time left."""

from __future__ import annotations

from dbpa_core.cases import Case
from dbpa_core.cli.common import fit_detail
from dbpa_core.sampling import Progress
from dbpa_core.suite import _CaseProgress


def test_fit_detail_keeps_the_rate_and_the_time_left():
    d = "cases case-with-a-long-name-0001..case-with-a-long-name-0017: sampling 120/510, 8,004 tokens, 52 tokens/s, about 4.0 min left"
    out = fit_detail(d, 80)
    assert len(out) == 80 and out.endswith("52 tokens/s, about 4.0 min left")
    assert out.startswith("cases case-with") and "…, " in out
    assert fit_detail("short", 80) == "short"
    tiny = fit_detail(d, 20)
    assert len(tiny) == 20 and tiny.endswith("4.0 min left") and tiny.startswith("…")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_cases_bar_moves_while_samples_are_drawn():
    seen: list[Progress] = []
    clock = Clock()
    bar = _CaseProgress(seen.append, 24, ["base", "p"], clock=clock)
    cases = [Case(f"c{i}", ()) for i in range(24)]
    bar.start(0, cases[0])
    bar.fetching(0, cases[:12])
    for done in (0, 60, 120, 180):  # of 12 cases x 2 arms x 10 samples
        clock.t = done / 10
        bar(Progress("sampling", done, 240, "1,000 tokens, 50 tokens/s, about 7 s left"))
    moves = [p.done for p in seen if p.stage == "cases"]
    assert moves[-1] == 9 and moves == sorted(moves)  # 180 of 240 samples of 12 cases
    last = seen[-1]
    # the suite's time left: 18 s for 9 of 24 cases, so about 30 s more; not the fetch's 7 s
    assert last.detail.endswith("50 tokens/s, about 30 s left") and "7 s" not in last.detail
    assert last.eta_s == 30.0
    bar.start(1, cases[1])  # testing case 1 from the cache: the bar does not go back
    assert seen[-1].done == 9


def test_while_a_local_model_decodes_the_bar_follows_its_tokens_and_its_time_left():
    seen: list[Progress] = []
    clock = Clock()
    bar = _CaseProgress(seen.append, 24, ["base", "p"], clock=clock)
    cases = [Case(f"c{i}", ()) for i in range(24)]
    bar.start(0, cases[0])
    bar.fetching(0, cases[:12])  # 12 cases decoded in one batch: no answer done until the end
    clock.t = 10.0
    bar(Progress("sampling", 0, 240, "500 tokens, 50 tokens/s, about 10 s left", 500, 1000, 10.0))
    last = seen[-1]
    assert last.done == 6  # half the tokens of 12 cases
    # 10 s more for these 12 cases, 20 s for each 12 cases: 20 s for the other 12
    assert last.eta_s == 30.0 and last.detail.endswith("50 tokens/s, about 30 s left")
