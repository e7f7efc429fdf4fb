"""The History page reads a run through the run interface: a run that cannot reopen on a
dashboard page (a fidelity analysis of a data file) says why in one line, and offers no
button that would open an empty page."""

from dbpa_core.fidelity.analysis import run_fidelity
from dbpa_core.fidelity.data import load_data
from dbpa_core.history import History
from dbpa_core.runs import as_run


def test_a_fidelity_analysis_of_a_file_says_why_it_does_not_reopen(make_app):
    run = as_run({"analysis": run_fidelity(load_data("sample"))}, title="sample fidelity")
    History().record_run(run, source="cli")
    at = make_app(page="pages/history.py")
    assert not at.exception, at.exception
    infos = [i.value for i in at.info]
    assert any("It does not reopen on a page: a fidelity analysis of a data file" in i for i in infos), infos
    assert not [b for b in at.button if b.key == "hist_reopen"]
