"""Take the manual's screenshots of the dashboard again: runs the browser tour
(``tests/app/test_browser_tour.py``, the demo recordings in headless Chromium) with
``DBPA_DOCS_IMG`` pointing at ``docs/img/``. Run from the repository's root::

    .venv/bin/python docs/make_screenshots.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    env = dict(os.environ, DBPA_DOCS_IMG=str(ROOT / "docs" / "img"))
    sys.exit(
        subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/app/test_browser_tour.py",
            ],
            cwd=ROOT,
            env=env,
        )
    )
