"""``dbpa ... | head``: the reader leaves early; the command ends quietly (no traceback,
no "Exception ignored" from Python's flush at exit) with the shell's code for SIGPIPE."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), DBPA_HOME=str(tmp_path / "h"), DBPA_CACHE_DIR=str(tmp_path / "c")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbpa_core.cli", "schema", "--battery"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader has gone before the first line
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 141
