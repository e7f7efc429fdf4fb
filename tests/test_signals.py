"""Ctrl-C and SIGTERM (issue 36): handled once, at the top of every command, with one line,
exit 130 / 143 and the way to resume; an interrupted run leaves every result file or none."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbpa_core.cli.common import Interrupted, signals_handled, stopped
from dbpa_core.outputs import write_files, written_files

from .fake_openai import FakeOpenAI, write_spec

ROOT = Path(__file__).resolve().parents[1]


def _run_and_signal(tmp_path: Path, sig: int, argv: list[str], *, requests: int = 2):
    """``dbpa ARGV`` in its own process against a slow server, signalled once it has
    sent ``requests`` requests (mid-run); (exit code, stdout, stderr, server)."""
    with FakeOpenAI(models=("fake-model", "fake-embed"), latency=1.0) as srv:
        spec = write_spec(tmp_path / "spec.yaml", srv.base_url, samples=6, concurrency=2)
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            DBPA_CACHE_DIR=str(tmp_path / "cache"),
            DBPA_HOME=str(tmp_path / "home"),
        )
        args = [a.replace("SPEC", str(spec)).replace("OUT", str(tmp_path / "out")) for a in argv]
        proc = subprocess.Popen(
            [sys.executable, "-m", "dbpa_core.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        end = time.monotonic() + 90
        while srv.requests < requests and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err, srv


@pytest.mark.slow  # a CLI process per signal, stopped mid-audit (20 s each on 2 busy cores)
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_mid_audit_is_one_line_and_leaves_no_results(tmp_path, sig, code, name):
    rc, _, err, _ = _run_and_signal(tmp_path, sig, ["audit", "SPEC", "--out", "OUT"])
    assert rc == code, err
    assert "Traceback" not in err and "CancelledError" not in err, err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("note:")]
    assert lines == [
        f"stopped ({name}); no results were written. Every answer received so far is cached: "
        "run the same command again to resume."
    ]
    assert not (tmp_path / "out" / "results.json").exists()


def test_every_command_is_guarded_by_main(monkeypatch, capsys):
    # the handling sits at the top of every command (main), not in audit's own code
    from dbpa_core.cli import main, schema

    def interrupted(args):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(schema, "run", interrupted)
    monkeypatch.setattr("dbpa_core.cli.COMMANDS", (schema,))
    assert main(["schema"]) == 143
    assert capsys.readouterr().err.startswith("stopped (SIGTERM); no results were written.")


def test_the_renames_of_a_result_are_not_split_by_a_signal(tmp_path, monkeypatch):
    """A Ctrl-C that arrives while a result's files are being put in place is held until
    all of them are: the folder never mixes two runs, and the stop still happens."""
    (tmp_path / "results.json").write_text("old")
    (tmp_path / "results.csv").write_text("old")
    real = os.replace
    calls = []

    def replace_then_signal(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the signal would be handled here were it not held back
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_signal)
    with signals_handled() as state, pytest.raises(Interrupted) as info:
        write_files(tmp_path, {"results.json": "new", "results.csv": "new"})
        time.sleep(1)  # not reached: the signal is delivered as the renames end
    assert len(calls) == 2
    assert (tmp_path / "results.json").read_text() == (tmp_path / "results.csv").read_text() == "new"
    assert written_files()[-2:] == [str(tmp_path / "results.json"), str(tmp_path / "results.csv")]
    assert state.written_before <= len(written_files()) - 2
    assert info.value.signum == signal.SIGINT


def test_stopped_names_the_results_written_before_the_signal(tmp_path, capsys):
    with signals_handled():
        assert stopped(Interrupted(signal.SIGTERM)) == 143
        assert "no results were written" in capsys.readouterr().err
        write_files(tmp_path, {"results.json": "{}"})
        assert stopped(Interrupted(signal.SIGINT)) == 130
    err = capsys.readouterr().err
    assert err == (
        f"stopped (SIGINT) after the results were written to {tmp_path}: they are complete; "
        "what comes after them (the run history, the summary) may be missing.\n"
    )


def test_handlers_are_given_back_after_a_command():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    from dbpa_core.cli import main

    assert main(["schema", "--out", os.devnull]) == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_signal_after_the_command_finished_says_so_and_keeps_its_exit_code(tmp_path):
    # as the `dbpa` program does: main() with no argv, then the process exits; a Ctrl-C
    # that lands in between is neither lost (exit 0 in silence) nor a traceback
    code = (
        "import os, signal, sys, time\n"
        "from dbpa_core.cli import main\n"
        "sys.argv = ['dbpa', 'schema', '--out', sys.argv[1]]\n"
        "rc = main()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
        "raise SystemExit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "schema.json")],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.endswith("SIGINT came after the command had finished; its output is complete.\n")
    assert "Traceback" not in proc.stderr and (tmp_path / "schema.json").stat().st_size > 0
