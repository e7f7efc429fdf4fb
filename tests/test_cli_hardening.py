"""The command line fails early, atomically and in one clean line (issue 7)."""

import os
from pathlib import Path

import pytest

from dbpa_core.cli import main

from .fake_openai import FakeOpenAI

KEY = "sk-cli-hardening-0123456789"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("DBPA_TEST_KEY", KEY)
    monkeypatch.setenv("DBPA_CACHE_DIR", str(tmp_path / "cache"))


def write_spec(tmp_path, url, *, samples=2, extra="  max_retries: 1\n"):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
model:
  backend: openai
  name: fake-model
  base_url: "{url}"
  api_key_env: DBPA_TEST_KEY
  concurrency: 1
{extra}
embedder: {{backend: rouge1}}
samples: {samples}
permutations: 99
base: {{prompt: "John is 70"}}
perturbations: [{{name: p, prompt: "Act as a comedian. John is 70"}}]
""")
    return spec


def server(**kw):
    return FakeOpenAI(api_key=KEY, models=("fake-model",), **kw)


def one_line(err: str) -> str:
    """The one line an error takes. What the plan cannot show (the spec's notes and
    warnings about attainable significance, printed before any call) is not part of it."""
    lines = [
        ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("note: With k", "warning: With k"))
    ]
    assert len(lines) == 1, err
    return lines[0]


# --------------------------------------------------------------------------- --out first
@pytest.mark.parametrize(
    "make_out",
    [
        lambda t: (t / "a-file").write_text("x") and t / "a-file",
        lambda t: (t / "f").write_text("x") and t / "f" / "sub",
        lambda t: Path("/proc/dbpa-out"),
        lambda t: Path("/sys/dbpa-out"),
    ],
)
def test_an_unusable_out_is_refused_before_any_call(tmp_path, capsys, make_out):
    out = make_out(tmp_path)
    with server() as srv:
        assert main(["audit", str(write_spec(tmp_path, srv.base_url)), "--out", str(out), "--quiet"]) == 2
        assert srv.requests == 0
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"error: --out {out}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_folder_is_refused_before_any_call(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    with server() as srv:
        assert (
            main(["audit", str(write_spec(tmp_path, srv.base_url)), "--out", str(ro / "x"), "--quiet"]) == 2
        )
        assert srv.requests == 0
    assert "cannot write" in capsys.readouterr().err


def test_a_new_out_folder_is_created_only_after_the_run(tmp_path):
    out = tmp_path / "new" / "deeper"
    with server() as srv:
        assert main(["audit", str(write_spec(tmp_path, srv.base_url)), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["responses.jsonl", "results.csv", "results.json"]
    assert not list(tmp_path.glob("new/.dbpa-write-test*")) and not list(tmp_path.glob(".dbpa*"))


def test_a_failed_write_never_mixes_two_runs(tmp_path, capsys, monkeypatch):
    import dbpa_core.outputs as audit  # where every result folder is written

    out = tmp_path / "out"
    with server() as srv:
        assert main(["audit", str(write_spec(tmp_path, srv.base_url)), "--out", str(out), "--quiet"]) == 0
        before = {p.name: p.read_text() for p in out.iterdir()}
        real, calls = audit._write_text, []

        def failing(path, text):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            real(path, text)

        monkeypatch.setattr(audit, "_write_text", failing)
        spec = write_spec(tmp_path, srv.base_url, samples=3)  # another run, other results
        assert main(["audit", str(spec), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "running again costs nothing" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == before  # no temp files, no mix
    monkeypatch.setattr(audit, "_write_text", real)
    assert main(["audit", str(spec), "--out", str(out), "--quiet"]) == 0  # from the cache
    assert "0 new calls" in capsys.readouterr().out


# --------------------------------------------------------------------------- server junk
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "fault,match",
    [
        ("choices_str", "sent malformed answers to the chat completion request 2 times"),
        ("retry_after_junk", "kept failing the chat completion request after 2 tries"),
        ("junk", "sent malformed answers"),
        ("no_message", "choice 0 has no message"),
    ],
)
def test_server_junk_exits_3_with_one_line(tmp_path, capsys, fault, match):
    with server(fault=fault) as srv:
        assert (
            main(["audit", str(write_spec(tmp_path, srv.base_url)), "--out", str(tmp_path / "o"), "--quiet"])
            == 3
        )
    assert match in one_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


@pytest.mark.timeout(60)
def test_terminal_escapes_from_the_server_are_never_printed(tmp_path, capsys):
    with server(fault="ansi") as srv:
        assert (
            main(
                [
                    "audit",
                    str(write_spec(tmp_path, srv.base_url, extra="  max_retries: 0\n")),
                    "--out",
                    str(tmp_path / "o"),
                    "--quiet",
                ]
            )
            == 3
        )
    err = capsys.readouterr().err
    assert "boom" in err and "\x1b" not in err and "\x07" not in err and "\x00" not in err


@pytest.mark.timeout(60)
def test_a_password_in_base_url_is_never_printed(tmp_path, capsys):
    with FakeOpenAI(models=("fake-model",)) as srv:
        url = srv.base_url.replace("http://", "http://alice:hunter2@")
        assert main(["audit", str(write_spec(tmp_path, url)), "--out", str(tmp_path / "o"), "--quiet"]) == 0
        capsys.readouterr()
    assert (
        main(
            [
                "audit",
                str(write_spec(tmp_path, url, samples=3, extra="  max_retries: 0\n")),
                "--out",
                str(tmp_path / "o2"),
                "--quiet",
            ]
        )
        == 3
    )  # the server is gone
    out, err = capsys.readouterr()
    assert "Cannot reach http://127.0.0.1" in err
    for text in (out, err, *(p.read_text() for p in (tmp_path / "o").iterdir())):
        assert "hunter2" not in text and "alice" not in text


@pytest.mark.timeout(60)
def test_a_trickling_server_exits_3_saying_timed_out(tmp_path, capsys):
    with server(fault="trickle", trickle_seconds=0.05) as srv:
        spec = write_spec(tmp_path, srv.base_url, extra="  max_retries: 0\n  timeout: 1\n")
        assert main(["audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"]) == 3
    line = one_line(capsys.readouterr().err)
    assert "timed out" in line and "Cannot reach" not in line
