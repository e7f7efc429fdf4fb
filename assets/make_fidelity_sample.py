"""Write the synthetic fidelity sample data (made by this project; no real survey data).

    .venv/bin/python assets/make_fidelity_sample.py

writes ``assets/fidelity_sample.csv`` (40 multiple-choice questions: real counts and three
simulated respondents, see :mod:`dbpa_core.fidelity.sample`) and
``assets/fidelity_sample_values.csv`` (30 questions answered with a 0-10 rating). Both are
drawn with a fixed seed, so running this again gives the same files byte for byte
(``tests/test_fidelity_data.py`` checks it).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.fidelity.sample import sample_data, sample_values_data  # noqa: E402

SAMPLE = ROOT / "assets" / "fidelity_sample.csv"
SAMPLE_VALUES = ROOT / "assets" / "fidelity_sample_values.csv"


def main() -> None:
    SAMPLE.write_text(sample_data().to_csv(), encoding="utf-8")
    SAMPLE_VALUES.write_text(sample_values_data().to_csv(), encoding="utf-8")
    print(f"wrote {SAMPLE} and {SAMPLE_VALUES}")


if __name__ == "__main__":
    main()
