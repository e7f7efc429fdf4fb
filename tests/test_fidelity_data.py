"""Fidelity data: the long CSV (counts vs probabilities, values layout, round trip), the
OpinionQA layout on a small folder in its real format, the synthetic sample, and one test
per malformed file (with its line) or bad argument."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dbpa_core.fidelity.data import (
    FidelityDataError,
    from_arrays,
    load_csv,
    load_data,
    load_opinionqa,
    parse_csv,
)
from dbpa_core.fidelity.sample import sample_data, sample_values_data

ROOT = Path(__file__).resolve().parent.parent

GOOD = """scenario,option,real,gpt,llama,question
q1,Agree,30,0.6,12,Do you agree?
q1,Disagree,10,0.4,8,
q2,Yes,5,0.25,3,Any pets?
q2,No,15,0.75,1,
q2,Maybe,0,0,2,
"""


def test_counts_and_probabilities():
    d = parse_csv(GOOD, source="g.csv")
    assert d.kind == "categorical" and d.ids == ("q1", "q2") and d.simulators == ("gpt", "llama")
    assert d.sim_kinds == {"gpt": "probabilities", "llama": "counts"}
    assert d.scenarios[1].options == ("Yes", "No", "Maybe")
    assert d.scenarios[0].question == "Do you agree?" and d.scenarios[1].n == 20
    np.testing.assert_allclose(d.probabilities("llama")[1], [0.5, 1 / 6, 1 / 3])
    np.testing.assert_allclose(d.probabilities("uniform")[1], [1 / 3] * 3)


def test_a_column_summing_to_one_in_only_some_scenarios_is_counts():
    text = "scenario,option,real,sim\na,x,1,1\na,y,1,0\nb,x,1,3\nb,y,1,2\n"
    assert parse_csv(text).sim_kinds["sim"] == "counts"
    text = "scenario,option,real,sim\na,x,1,0.3333\na,y,1,0.6667\nb,x,1,0.5\nb,y,1,0.5\n"
    assert parse_csv(text).sim_kinds["sim"] == "probabilities"


def test_values_layout_with_blanks():
    text = "scenario,real,a,b\ns1,1.5,2,\ns1,-0.5,,3\ns1,2,,\ns2,0,1,1\n"
    d = parse_csv(text)
    assert d.kind == "values" and d.sim_kinds == {"a": "values", "b": "values"}
    np.testing.assert_allclose(d.scenarios[0].real, [1.5, -0.5, 2])
    np.testing.assert_allclose(d.simulated["b"][0], [3])


@pytest.mark.parametrize("data", [sample_data(), sample_values_data(), parse_csv(GOOD)])
def test_csv_round_trip(data):
    again = parse_csv(data.to_csv())
    assert again.ids == data.ids and again.simulators == data.simulators
    assert again.sim_kinds == data.sim_kinds
    for a, b in zip(again.scenarios, data.scenarios, strict=True):
        assert a.options == b.options and a.question == b.question
        np.testing.assert_allclose(a.real, b.real)
    for name in data.simulators:
        for x, y in zip(again.simulated[name], data.simulated[name], strict=True):
            np.testing.assert_allclose(x, y)


def test_option_values():
    d = parse_csv("scenario,option,real\na,1,3\na,2,1\na,5,1\nb,no,1\nb,yes,2\n")
    np.testing.assert_allclose(d.scenarios[0].option_values(), [1, 2, 5])
    np.testing.assert_allclose(d.scenarios[1].option_values(), [-1, 1])


def test_sample_assets_are_what_the_script_makes(tmp_path):
    """The shipped CSVs are the generator's output, byte for byte (deterministic)."""
    assert (ROOT / "assets" / "fidelity_sample.csv").read_text() == sample_data().to_csv()
    assert (ROOT / "assets" / "fidelity_sample_values.csv").read_text() == sample_values_data().to_csv()
    assert sample_data().to_csv() == sample_data().to_csv()
    assert load_data("sample").m == 40
    assert load_csv(ROOT / "assets" / "fidelity_sample.csv").m == 40


def test_the_asset_script_writes_the_same_files(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "assets" / "make_fidelity_sample.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "wrote" in proc.stdout
    for name in ("fidelity_sample.csv", "fidelity_sample_values.csv"):
        assert (tmp_path / name).read_bytes() == (ROOT / "assets" / name).read_bytes()


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "g.csv: the file is empty"),
        ("scenario,option,sim\na,x,1\n", "line 1: no 'real' column"),
        ("scenario,option,real,sim,Sim\n", "line 1: column 'sim' appears twice"),
        ("scenario,option,real,,sim\n", "line 1: column 4 has no name"),
        ("scenario,option,real,uniform\n", "'uniform' is the built-in baseline"),
        ("scenario,option,real,sim\na,x,1,1\na,y,-3,1\n", "line 3: negative count -3 in column 'real'"),
        ("scenario,option,real,sim\na,x,1,1\na,y,2,-0.5\n", "line 3: negative count -0.5 in column 'sim'"),
        (
            "scenario,option,real,sim\na,x,1,1\na,y,two,1\n",
            "line 3: column 'real' must be a number, got 'two'",
        ),
        ("scenario,option,real,sim\na,x,1,1\na,y,nan,1\n", "line 3: column 'real' must be a finite number"),
        (
            "scenario,option,real,sim\na,x,0,1\na,y,0,1\nb,x,1,1\nb,y,1,1\n",
            "lines 2-3: the real counts of scenario 'a' are all zero",
        ),
        (
            "scenario,option,real,sim\na,x,1,0\na,y,1,0\nb,x,1,1\nb,y,1,1\n",
            "lines 2-3: simulator 'sim' gives scenario 'a' no answer (all zero)",
        ),
        (
            "scenario,option,real,sim\na,x,1,1\na,y,1,\n",
            "line 3: simulator 'sim' has no value for option 'y'",
        ),
        ("scenario,option,real,sim\na,x,1,1\na,x,1,1\n", "line 3: option 'x' of scenario 'a' appears twice"),
        ("scenario,option,real,sim\na,x,1,1\nb,x,1,1\nb,y,1,1\n", "line 2: scenario 'a' has 1 option"),
        ("scenario,option,real,sim\na,x,1,1\na,y,1,1\n", "needs at least 2 scenarios (m >= 2), found 1"),
        ("scenario,option,real,sim\na,x,1\n", "line 2: 3 cells for 4 columns"),
        ("scenario,option,real,sim\n,x,1,1\n", "line 2: the scenario cell is empty"),
        ("scenario,real,sim\na,1,\nb,1,2\n", "line 2: simulator 'sim' gives scenario 'a' no values"),
    ],
)
def test_malformed_csv(text, message):
    with pytest.raises(FidelityDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_csv(text, source="g.csv")


def test_file_that_is_not_utf8(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_bytes(b"scenario,option,real\na,x,1\na,\xff,2\n")
    with pytest.raises(FidelityDataError, match=r"bad.csv, line 3: not UTF-8"):
        load_csv(f)
    with pytest.raises(FidelityDataError, match="no such file"):
        load_csv(tmp_path / "missing.csv")


# --------------------------------------------------------------------------- arrays


def test_from_arrays_and_its_bad_input():
    d = from_arrays([[3, 1], [1, 1]], {"s": [[1, 1], [0.5, 0.5]]})
    assert d.sim_kinds["s"] == "counts" and d.scenarios[0].options == ("A", "B")
    with pytest.raises(
        FidelityDataError,
        match=r"simulator 's', scenario 's2': 3 values for 2 "
        r"options .* must match the options",
    ):
        from_arrays([[3, 1], [1, 1]], {"s": [[1, 1], [0.2, 0.3, 0.5]]})
    with pytest.raises(FidelityDataError, match="scenario 's1': negative real counts"):
        from_arrays([[3, -1], [1, 1]])
    with pytest.raises(FidelityDataError, match="scenario 's2': the real counts are all zero"):
        from_arrays([[3, 1], [0, 0]])
    with pytest.raises(FidelityDataError, match="simulator 's' gives scenario 's1' no answer"):
        from_arrays([[3, 1], [1, 1]], {"s": [[0, 0], [1, 1]]})
    with pytest.raises(FidelityDataError, match="needs at least 2 scenarios"):
        from_arrays([[3, 1]])
    with pytest.raises(FidelityDataError, match="may not be called 'uniform'"):
        from_arrays([[3, 1], [1, 1]], {"uniform": [[1, 1], [1, 1]]})


# --------------------------------------------------------------------------- OpinionQA


def opinionqa_folder(tmp_path):
    """A survey folder in OpinionQA's real format (info.csv with 'references' as a Python
    list; <ATTR>_data.json with a comma-split MC_options, as the real files have)."""
    d = tmp_path / "American_Trends_Panel_W99"
    d.mkdir()
    (d / "info.csv").write_text(
        ",key,option_mapping,question,references,option_ordinal\n"
        '0,GUN_W99,"{1.0: \'Yes, I own a gun\', 2.0: ""No, I don\'t own any guns""}",'
        'Do you personally own any guns?,"[\'Yes, I own a gun\', ""No, I don\'t own any guns"", '
        '\'Refused\']","[1.0, 2.0]"\n'
        "1,SAFE_W99,{},How safe is your community?,\"['Very safe', 'Somewhat safe', 'Not safe', "
        '\'Refused\']","[1.0, 2.0, 3.0]"\n'
    )
    (d / "SEX_data.json").write_text(
        json.dumps(
            {
                "GUN_W99": {
                    "MC_options": ["Yes", "I own a gun", '"No', "I don't own any guns\"", "Refused"],
                    "question_text": "Do you personally own any guns?",
                    "Female": {
                        "No, I don't own any guns": 1645.0,
                        "Refused": 28.0,
                        "Yes, I own a gun": 437.0,
                    },
                    "Male": {"No, I don't own any guns": 1138.0, "Refused": 28.0, "Yes, I own a gun": 892.0},
                },
                "SAFE_W99": {
                    "MC_options": ["Very safe", "Somewhat safe", "Not safe", "Refused"],
                    "question_text": "How safe is your community?",
                    "Female": {"Very safe": 510.0, "Somewhat safe": 1243.0, "Not safe": 62.0},
                    "Male": {"Very safe": 659.0, "Somewhat safe": 1143.0, "Not safe": 47.0, "Refused": 4.0},
                },
            }
        )
    )
    return d


def test_opinionqa_layout(tmp_path):
    folder = opinionqa_folder(tmp_path)
    d = load_opinionqa(folder, attribute="SEX")
    assert d.ids == ("GUN_W99 | Female", "GUN_W99 | Male", "SAFE_W99 | Female", "SAFE_W99 | Male")
    gun = d.scenarios[0]
    assert gun.options == ("Yes, I own a gun", "No, I don't own any guns")  # Refused dropped
    np.testing.assert_allclose(gun.real, [437, 1645])
    assert gun.persona == (("SEX", "Female"),) and gun.question == "Do you personally own any guns?"
    one = load_opinionqa(folder, attribute="SEX", groups=["Male"], keep_refused=True)
    assert one.ids == ("GUN_W99", "SAFE_W99") and one.scenarios[1].real[-1] == 4
    assert load_data(folder, attribute="SEX", groups=["Male"]).m == 2


def test_opinionqa_errors(tmp_path):
    folder = opinionqa_folder(tmp_path)
    with pytest.raises(FidelityDataError, match=r"no AGE_data\.json; attributes here: SEX"):
        load_opinionqa(folder, attribute="AGE")
    with pytest.raises(FidelityDataError, match=r"no question has group .Other.; groups: Female, Male"):
        load_opinionqa(folder, attribute="SEX", groups=["Other"])
    with pytest.raises(FidelityDataError, match=r"no info\.csv"):
        load_opinionqa(tmp_path, attribute="SEX")


# --------------------------------------------------------------------------- real given as shares
# QA review 2, M4: a `real` column of shares (0.6, 0.4, the way toplines are published) was
# read as one respondent per question; every simulator then looked like uniform.


def test_real_given_as_shares_is_refused_with_the_fix():
    text = "scenario,option,real,sim\nq1,A,0.6,3\nq1,B,0.4,4\nq2,A,0.7,1\nq2,B,0.3,2\n"
    with pytest.raises(FidelityDataError) as err:
        parse_csv(text, source="real_fraction.csv")
    msg = str(err.value)
    assert msg.startswith(
        "real_fraction.csv, lines 2-3: the real answers of scenario 'q1' look like shares (they sum to 1)"
    )
    assert "`real` must hold counts of answers" in msg and "\n" not in msg
    # rounded toplines (0.33 + 0.33 + 0.33) too, and shares built in code
    with pytest.raises(FidelityDataError, match="look like shares"):
        parse_csv("scenario,option,real\na,x,0.33\na,y,0.33\na,z,0.33\nb,x,5\nb,y,6\nb,z,1\n")
    with pytest.raises(FidelityDataError, match="scenario 's1' look like shares"):
        from_arrays([[0.25, 0.75], [3, 1]])


def test_counts_of_one_respondent_and_weighted_counts_are_counts():
    d = parse_csv("scenario,option,real\na,x,1\na,y,0\nb,x,2.5\nb,y,7.25\n")
    assert [s.n for s in d.scenarios] == [1.0, 9.75]


def test_probabilities_that_do_not_sum_to_one_are_named():
    """QA review 2: 0.5 and 0.6 were read as counts without a word (a typo goes unseen)."""
    d = parse_csv("scenario,option,real,sim,ok\na,x,3,0.5,0.5\na,y,4,0.6,0.5\nb,x,5,0.2,0.2\nb,y,6,0.8,0.8\n")
    assert d.sim_kinds == {"sim": "counts", "ok": "probabilities"}
    assert len(d.notes) == 1 and d.notes[0].startswith(
        "Simulator 'sim' looks like probabilities that do not sum to 1"
    )
    assert not parse_csv("scenario,option,real,sim\na,x,3,2\na,y,4,1\nb,x,5,0\nb,y,6,1\n").notes


def test_opinionqa_skips_unreadable_questions_and_names_them(tmp_path):
    """A duplicate key with other contents in info.csv, an answer on an option that is not
    among the question's options, and counts that are not numbers each skip one question
    (named and counted in one note); a question known only to the json, whose MC_options
    are split at commas, is read with its options joined again."""
    folder = opinionqa_folder(tmp_path)
    info = (folder / "info.csv").read_text()
    info += (
        "2,SAFE_W99,{},How safe is your town?,\"['Very safe', 'Not safe']\",\"[1.0]\"\n"
        "3,ODD_W99,{},Odd?,\"['A', 'B']\",\"[1.0]\"\n"
        "4,BAD_W99,{},Bad?,\"['A', 'B']\",\"[1.0]\"\n"
    )
    (folder / "info.csv").write_text(info)
    blob = json.loads((folder / "SEX_data.json").read_text())
    blob["ODD_W99"] = {"MC_options": ["A", "B"], "Female": {"A": 3.0, "C": 4.0}, "Male": {"A": 1.0, "B": 2.0}}
    blob["BAD_W99"] = {"MC_options": ["A", "B"], "Female": {"A": "many", "B": 2.0}}
    blob["PRIO_W99"] = {
        "MC_options": ["Very important", "Important", "but lower priority", "Not important"],
        "Female": {"Very important": 10.0, "Important, but lower priority": 20.0, "Not important": 5.0},
    }
    (folder / "SEX_data.json").write_text(json.dumps(blob))
    d = load_opinionqa(folder, attribute="SEX", groups=["Female"])
    assert d.ids == ("GUN_W99", "PRIO_W99")
    assert d.scenarios[1].options == ("Very important", "Important, but lower priority", "Not important")
    np.testing.assert_allclose(d.scenarios[1].real, [10, 20, 5])
    assert len(d.notes) == 1
    note = d.notes[0]
    assert note.startswith("Skipped 3 question(s) of American_Trends_Panel_W99 that cannot be read")
    assert "SAFE_W99 (listed twice in info.csv with different contents)" in note
    assert "ODD_W99 (group 'Female' answered 'C', which is not among its options)" in note
    assert "BAD_W99 (the counts of group 'Female' are not non-negative numbers)" in note
    # the note reaches the analysis' warnings
    from dbpa_core.fidelity import run_fidelity

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert any(w.startswith("Skipped 3 question(s)") for w in run_fidelity(d).warnings)


def test_opinionqa_refused_only_when_no_usable_question(tmp_path):
    folder = opinionqa_folder(tmp_path)
    blob = json.loads((folder / "SEX_data.json").read_text())
    for q in blob.values():
        q["Female"] = {"Maybe": 3.0}
    (folder / "SEX_data.json").write_text(json.dumps(blob))
    with pytest.raises(
        FidelityDataError,
        match=r"0 usable question\(s\) for SEX; at least 2 are "
        r"needed \(Skipped 2 question\(s\)",
    ):
        load_opinionqa(folder, attribute="SEX", groups=["Female"])


def test_opinionqa_json_nested_too_deeply_is_one_line(tmp_path):
    """A <ATTRIBUTE>_data.json nested thousands deep: one line, not a RecursionError."""
    folder = opinionqa_folder(tmp_path)
    (folder / "SEX_data.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FidelityDataError, match="nested too deeply") as exc:
        load_opinionqa(folder, attribute="SEX")
    assert "\n" not in str(exc.value)
