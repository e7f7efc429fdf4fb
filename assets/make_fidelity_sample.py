"""Write the synthetic fidelity sample data (made by this project; no real survey data).

    .venv/bin/python assets/make_fidelity_sample.py [FOLDER]

writes into ``assets/`` (or FOLDER) ``fidelity_sample.csv`` (40 multiple-choice questions:
real counts and three simulated respondents, see :mod:`dbpa_core.fidelity.sample`) and
``fidelity_sample_values.csv`` (30 questions answered with a 0-10 rating). Both are
drawn with a fixed seed, so running this again gives the same files byte for byte
(``tests/test_fidelity_data.py`` checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.fidelity.sample import sample_data, sample_values_data  # noqa: E402


def main(argv: list[str]) -> None:
    folder = Path(argv[0]) if argv else ROOT / "assets"
    sample, values = folder / "fidelity_sample.csv", folder / "fidelity_sample_values.csv"
    sample.write_text(sample_data().to_csv(), encoding="utf-8")
    values.write_text(sample_values_data().to_csv(), encoding="utf-8")
    print(f"wrote {sample} and {values}")


if __name__ == "__main__":
    main(sys.argv[1:])
