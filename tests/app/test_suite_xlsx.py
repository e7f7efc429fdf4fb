"""Issue 33: a spreadsheet uploaded on the Suite page (an .xlsx, its first sheet) becomes the
cases in the grid, as the dashboard reads it from the upload box (not only through
``read_cases``): its rows in the editable table, counted under it, and its fields offered to
the base prompt's template."""

import io

from .conftest import errors, plain, successes

SUITE = "pages/suite.py"
# the example suite's fields (its base prompt is a template over them), one cell left empty
ROWS = (
    ["id", "name", "sex", "age", "chol", "hdl", "sbp", "smoker"],
    ["x1", "Ada", "female", 71, 6.1, 1.2, 148, "yes"],
    ["x2", "Bo", "male", 45, 4.9, 1.4, 121, None],
    ["x3", "Cy", "male", 63, 5.5, 1.0, 139, "no"],
)


def _xlsx() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    for row in ROWS:
        sheet.append(row)
    book.create_sheet("notes").append(["not read"])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def test_an_uploaded_spreadsheet_fills_the_grid(make_app):
    at = make_app(page=SUITE)
    up = at.file_uploader(key="suite_cases_up")
    assert "xlsx" in [t.lstrip(".") for t in up.allowed_type]
    mime = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    up.set_value(("vignettes.xlsx", _xlsx(), mime)).run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    assert any("Read 3 cases from vignettes.xlsx: fields id, name, sex, age" in s for s in successes(at))
    # the grid on screen: the editable table drawn from the upload
    (grid,) = [d for d in at.dataframe if str(d.key or "").startswith("suite_cases_editor_")]
    shown = grid.value
    assert list(shown.columns) == ROWS[0]
    assert list(shown["id"]) == ["x1", "x2", "x3"] and list(shown["name"]) == ["Ada", "Bo", "Cy"]
    cases = at.session_state["_suite_cases"]
    assert cases.to_dict("records")[1] == {
        "id": "x2",
        "name": "Bo",
        "sex": "male",
        "age": "45",
        "chol": "4.9",
        "hdl": "1.4",
        "sbp": "121",
        "smoker": "",
    }
    assert any(plain(c.value).startswith("3 cases.") for c in at.caption)
    # the cases are the suite's: its template is previewed for them
    assert [str(o) for o in at.selectbox(key="suite_preview_case").options][:3] == ["x1", "x2", "x3"]
