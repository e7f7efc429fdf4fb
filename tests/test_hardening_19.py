"""Hardening of the newer surfaces: each test plays one hostile input or fault and fails
without its fix (credentials, odd Unicode, imports, sizes, history, cache, secrets, library)."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core import roc as roc_mod
from dbpa_core.cli import main
from dbpa_core.multitest import significance_stars
from dbpa_core.permutation import (
    MAX_PERMUTATIONS,
    dbpa_test,
    dbpa_test_similarity,
    smallest_p_value,
)
from dbpa_core.power import attainable_significance

from .fake_openai import FakeOpenAI


# --------------------------------------------------------------------------- library
@pytest.mark.parametrize("b", [10**12, 2**64, MAX_PERMUTATIONS + 1])
def test_huge_n_permutations_is_refused_with_the_limit(b):
    x = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.raises(ValueError, match=r"`n_permutations` must be <= 100_000_000"):
        dbpa_test(x, x + 1, n_permutations=b)
    with pytest.raises(ValueError, match="n_permutations"):
        smallest_p_value(5, 5, n_permutations=b)


@pytest.mark.parametrize("k", [0, 1, 5, 6])
def test_similarity_k_out_of_range_names_k(k):
    s = np.eye(6)
    with pytest.raises(ValueError, match=r"`k` must lie in \[2, 4\]"):
        dbpa_test_similarity(s, k, n_permutations=9)


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(k=0, m=5, n_permutations=99), "k"),
        (dict(k=5, m=1, n_permutations=99), "m"),
        (dict(k=5, m=5, n_permutations=0), "n_permutations"),
    ],
)
def test_smallest_p_value_refuses_impossible_tests(kw, name):
    k, m = kw.pop("k"), kw.pop("m")
    with pytest.raises(ValueError, match=f"`{name}`"):
        smallest_p_value(k, m, **kw)


def test_smallest_p_value_text_is_a_type_error_naming_k():
    with pytest.raises(TypeError, match="`k` must be an integer"):
        smallest_p_value("5", 5, n_permutations=99)


def test_attainable_significance_names_correction():
    with pytest.raises(ValueError, match="`correction`"):
        attainable_significance(10, n_permutations=999, correction="x")


@pytest.mark.parametrize(
    "p, exc",
    [
        (float("nan"), ValueError),
        (2.0, ValueError),
        (-0.1, ValueError),
        ("0.01", TypeError),
        (None, TypeError),
        (True, TypeError),
        ([0.01, "x"], TypeError),
    ],
)
def test_significance_stars_refuses_what_is_not_a_p_value(p, exc):
    with pytest.raises(exc, match="`p`"):
        significance_stars(p)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0))
def test_significance_stars_follow_the_thresholds(p):
    want = "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""
    assert significance_stars(p) == want
    assert significance_stars([p, p]) == [want, want]


def test_best_model_at_fpr_refuses_wrong_types():
    r = roc_mod.roc_over_alpha([0.5, 0.9], [0.001, 0.2])
    with pytest.raises(TypeError, match="`rocs` must be a mapping"):
        roc_mod.best_model_at_fpr([r], 0.05)
    with pytest.raises(TypeError, match=r"`rocs\['a'\]` must be a ROCResult"):
        roc_mod.best_model_at_fpr({"a": "not a roc"}, 0.05)
    with pytest.raises(ValueError, match="`max_fpr`"):
        roc_mod.best_model_at_fpr({"a": r}, math.nan)
    assert roc_mod.best_model_at_fpr({"a": r}, 0.05) == ("a", 1.0)


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=-5, max_value=3),
        st.text(max_size=3),
        st.none(),
        st.floats(allow_nan=True),
        st.booleans(),
    )
)
def test_smallest_p_value_gives_a_valid_p_or_a_named_error(k):
    try:
        p = smallest_p_value(k, 5, n_permutations=99)
    except (TypeError, ValueError) as exc:
        assert "`k`" in str(exc)
    else:
        assert 0.0 < p <= 1.0


# --------------------------------------------------------------------------- servers
ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-hardening-19"


class Twisted(FakeOpenAI):
    """The fake server, with each 200 chat answer passed through ``twist`` (a dict in, a
    dict or raw bytes out) before it is sent."""

    def __init__(self, twist, **kw):
        super().__init__(models=("fake-model", "fake-embed"), **kw)
        self.twist = twist

    def _send(self, h, status, body, headers=None):
        if status == 200 and isinstance(body, dict) and "choices" in body:
            body = self.twist(body)
        super()._send(h, status, body, headers)


def _content(extra: str):
    def twist(answer):
        for c in answer["choices"]:
            c["message"]["content"] += extra
        return answer

    return twist


def _spec_file(
    tmp_path,
    url,
    *,
    samples=4,
    max_tokens=50,
    name="fake-model",
    key_env="DBPA_TEST_KEY",
    base="John has these features: age 70",
) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(
        f"""
model: {{backend: openai, name: "{name}", base_url: "{url}", api_key_env: {key_env},
        max_retries: 1, timeout: 10}}
embedder: {{backend: openai, name: fake-embed, base_url: "{url}", api_key_env: {key_env},
           max_retries: 1, timeout: 10}}
samples: {samples}
max_tokens: {max_tokens}
permutations: 99
base: {{prompt: "{base}"}}
perturbations:
  - {{name: ahmed, prompt: "Ahmed has these features: age 70"}}
""",
        encoding="utf-8",
    )
    return p


def _audit(tmp_path, spec, *extra):
    return main(
        [
            "--cache-dir",
            str(tmp_path / "cache"),
            "audit",
            str(spec),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            *extra,
        ]
    )


def _said(err: str) -> list[str]:
    """stderr without the spec check's notes and warnings: what the failure said."""
    return [x for x in err.strip().splitlines() if not x.startswith(("note:", "warning:"))]


def _all_bytes(*folders) -> bytes:
    out = b""
    for folder in folders:
        for p in Path(folder).rglob("*"):
            if p.is_file():
                out += p.read_bytes()
    return out


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("DBPA_TEST_KEY", KEY)


def test_a_password_in_base_url_reaches_no_disk_and_no_screen(tmp_path, capsys):
    with Twisted(lambda a: a) as srv:
        url = srv.base_url.replace("http://", "http://alice:s3cr3t-pw@")
        assert _audit(tmp_path, _spec_file(tmp_path, url)) == 0
    said = capsys.readouterr()
    assert "s3cr3t-pw" not in said.out + said.err
    home = Path(os.environ["DBPA_HOME"])
    assert b"s3cr3t-pw" not in _all_bytes(home, tmp_path / "out", tmp_path / "cache")
    assert main(["history", "show", "1", "--json"]) == 0
    shown = capsys.readouterr().out
    assert "s3cr3t-pw" not in shown and "***@127.0.0.1" in shown


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://alice:pw-123@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
        ("postgresql://bob:pw-123@db.example/x", "postgresql://***@db.example/x"),
        ("alice:pw-123@127.0.0.1:8000/v1", "***@127.0.0.1:8000/v1"),  # no scheme
        ("http:/alice:pw-123@127.0.0.1/v1", "http:/***@127.0.0.1/v1"),  # one slash
        ("//alice:pw-123@127.0.0.1/v1", "//***@127.0.0.1/v1"),  # no scheme, two slashes
        ("http://alice:p@ss:pw-123@127.0.0.1/v1", "http://***@127.0.0.1/v1"),  # '@' in the password
        ("sk-pw-123@127.0.0.1", "***@127.0.0.1"),
        ("http://127.0.0.1:8000/v1?tag=a@b", "http://127.0.0.1:8000/v1?tag=a@b"),  # no userinfo
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://[pw-123", "<invalid URL>"),
    ],
)
def test_redact_url_masks_credentials_in_malformed_urls_too(url, shown):
    """A key written into a URL that does not parse as one (no scheme, one slash) is
    masked as well: before, only a well-formed URL's user:password@ part was."""
    from dbpa_core.backends.base import redact_url

    assert redact_url(url) == shown and "pw-123" not in redact_url(url)


def test_a_lone_surrogate_from_the_server_is_replaced_counted_and_cached(tmp_path, caplog):
    with Twisted(_content(" bad \ud800 half")) as srv:
        spec = _spec_file(tmp_path, srv.base_url)
        assert _audit(tmp_path, spec) == 0  # before: a UnicodeEncodeError in the cache write
        said = caplog.text  # a warning line on stderr (logging's last-resort handler)
        assert "8 character(s) that are not valid Unicode" in said and "U+FFFD" in said
        calls = srv.chat_ok
        assert _audit(tmp_path, spec) == 0  # every answer was cached: the rerun pays nothing
        assert srv.chat_ok == calls
    rows = [json.loads(x) for x in (tmp_path / "out" / "responses.jsonl").read_text().splitlines()]
    texts = [r.get("response") or r.get("text") or "" for r in rows]
    assert any("bad \ufffd half" in t for t in texts)


def test_a_lone_surrogate_in_a_spec_prompt_is_one_line(tmp_path, capsys):
    spec = _spec_file(tmp_path, "http://127.0.0.1:9/v1", base="John \\ud800 age 70")
    assert _audit(tmp_path, spec) == 2
    err = capsys.readouterr().err
    assert "\\ud800" in err and "not a character" in err and "Traceback" not in err
    assert len(_said(err)) == 1


def test_a_lone_surrogate_in_a_replay_file_is_replaced(tmp_path, caplog):
    replay = tmp_path / "r.jsonl"
    replay.write_text(
        "".join(
            json.dumps({"prompt": p, "response": f"answer {i} \ud800"}) + "\n"
            for p in ("A?", "B?")
            for i in range(3)
        ),
        encoding="utf-8",
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"model: {{backend: replay, file: {replay}}}\nembedder: {{backend: bleu}}\n"
        "samples: 3\npermutations: 19\nbase: {prompt: 'A?'}\n"
        "perturbations: [{name: b, prompt: 'B?'}]\n"
    )
    assert _audit(tmp_path, spec) == 0
    assert "6 character(s) that are not valid Unicode" in caplog.text
    assert "\ufffd" in (tmp_path / "out" / "responses.jsonl").read_text(encoding="utf-8")


def test_the_cache_never_stores_a_lone_surrogate(tmp_path):
    from dbpa_core.cache import Cache

    c = Cache(tmp_path / "c")
    c.set("k", {"text": "a\udc80b"})
    assert c.get("k") == {"text": "a\ufffdb"}
    c.close()


@pytest.mark.timeout(120)
def test_a_server_that_ignores_max_tokens_is_stopped_at_the_first_answer(tmp_path, capsys):
    with Twisted(_content(" x" * 1_000_000)) as srv:  # 2 MB, under the 8 MB cap
        assert _audit(tmp_path, _spec_file(tmp_path, srv.base_url, max_tokens=50)) == 3
        assert srv.chat_ok <= 8  # the 8 requests sent at once; none retried (not 150 s of it)
    err = capsys.readouterr().err
    # (the fake server's own threads print a traceback when the client hangs up on them)
    assert "max_tokens = 50" in err and "ignores max_tokens" in err and "dbpa_core" not in err
    assert not (tmp_path / "out" / "responses.jsonl").exists()


def test_the_max_tokens_margin_is_generous_for_escaped_text():
    from dbpa_core.backends.openai_compat import answer_byte_limit

    # 300 tokens of 20 characters each, every one escaped as \\uXXXX, fit with room to spare
    assert answer_byte_limit(300) > len(json.dumps({"content": "\u4e2d" * 20 * 300}))
    assert answer_byte_limit(300, n=4) > 4 * 20 * 300 * 6


@pytest.mark.timeout(120)
def test_deeply_nested_json_from_a_server_is_one_line(tmp_path, capsys):
    deep = b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with Twisted(lambda a: deep) as srv:
        assert _audit(tmp_path, _spec_file(tmp_path, srv.base_url, max_tokens=5000)) == 3
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "RecursionError" not in err
    assert len(_said(err)) == 1


# --------------------------------------------------------------------------- dbpa import
def _batch_files(tmp_path, n=3, *, extra_lines=()):
    req = tmp_path / "requests.jsonl"
    out = tmp_path / "output.jsonl"
    req.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"r{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Q?"}]},
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    lines = [
        {
            "id": f"b{i}",
            "custom_id": f"r{i}",
            "error": None,
            "response": {
                "status_code": 200,
                "body": {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer {i}"}}]
                },
            },
        }
        for i in range(n)
    ]
    out.write_text("".join(json.dumps(x) + "\n" for x in [*lines, *extra_lines]))
    return req, out


def _import(*args):
    return main(["import", *map(str, args)])


def test_import_refuses_to_write_over_its_input(tmp_path, capsys):
    req, out = _batch_files(tmp_path)
    before = out.read_bytes()
    assert _import(out, "--requests", req, "--out", out) == 2
    assert out.read_bytes() == before
    assert "is the file being imported" in capsys.readouterr().err
    assert _import(out, "--requests", req, "--out", req, "--force") == 2  # nor the requests
    assert req.read_text().count("custom_id") == 3


def test_import_asks_for_force_to_replace_an_existing_file(tmp_path, capsys):
    req, out = _batch_files(tmp_path)
    target = tmp_path / "replay.jsonl"
    target.write_text("precious\n")
    assert _import(out, "--requests", req, "--out", target) == 2
    assert "already exists: add --force" in capsys.readouterr().err
    assert target.read_text() == "precious\n"
    assert _import(out, "--requests", req, "--out", target, "--force") == 0
    assert target.read_text().count("answer") == 3


def test_import_checks_every_output_before_reading_the_input(tmp_path, capsys):
    req, out = _batch_files(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = tmp_path / "replay.jsonl"
    assert _import(out, "--requests", req, "--out", target, "--spec-out", blocker / "spec.yaml") == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and len(_said(err)) == 1
    assert not target.exists()  # the replay file was not written first
    assert _import(out, "--requests", req, "--out", "/dev/full", "--force") == 2
    assert "not a regular file" in capsys.readouterr().err


def test_import_on_a_full_disk_leaves_no_partial_file(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) makes the write fail half-way, as a full disk does."""
    req, out = _batch_files(tmp_path, n=400)
    target = tmp_path / "replay.jsonl"
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))\n"
        "from dbpa_core.cli import main\n"
        f"sys.exit(main(['import', {str(out)!r}, '--requests', {str(req)!r}, '--out', "
        f"{str(target)!r}]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "cannot write" in r.stderr and "nothing was written" in r.stderr
    assert "Traceback" not in r.stderr
    assert not target.exists() and not list(tmp_path.glob(".replay.jsonl*"))


def test_batch_answers_with_no_choices_or_twice_are_problems(tmp_path, capsys):
    empty = {
        "id": "x",
        "custom_id": "r1",
        "error": None,
        "response": {"status_code": 200, "body": {"choices": []}},
    }
    req, out = _batch_files(tmp_path, n=3)
    again = json.loads(out.read_text().splitlines()[0])
    lines = out.read_text().splitlines()
    lines[1] = json.dumps(empty)
    out.write_text("\n".join([*lines, json.dumps(again)]) + "\n")
    from dbpa_core.importers import import_openai_batch

    res = import_openai_batch(out, req)
    problems = " | ".join(str(p) for p in res.problems)
    assert "'r1' was answered with no choices" in problems
    assert "'r0' is answered a second time (first on line 1)" in problems
    assert len(res.records) == 2  # r0 once, r2; never 4 samples from 3 requests


@pytest.mark.parametrize(
    "content, fmt_args, message",
    [
        ("12\n", (), "holds one JSON number"),
        ('"text"\n', (), "holds one JSON string"),
        (
            json.dumps({"custom_id": "r0", "response": {"status_code": 200, "body": {}}}, indent=2),
            ("--requests", "REQ"),
            "holds one JSON object over",
        ),
        ("[1, 2]\n", ("--requests", "REQ"), "holds one JSON array"),
    ],
)
def test_wrong_shaped_imports_are_named_for_what_they_are(tmp_path, capsys, content, fmt_args, message):
    req, _ = _batch_files(tmp_path)
    src = tmp_path / "in.json"
    src.write_text(content)
    args = [str(req) if a == "REQ" else a for a in fmt_args]
    assert _import(src, *args, "--out", tmp_path / "r.jsonl") == 2
    err = capsys.readouterr().err
    assert message in err and "looks like a" not in err


def test_a_bare_promptfoo_list_is_imported(tmp_path, capsys):
    src = tmp_path / "pf.json"
    src.write_text(
        json.dumps(
            [
                {
                    "promptIdx": 0,
                    "prompt": {"raw": "Q?"},
                    "provider": {"id": "m"},
                    "response": {"output": f"a{i}"},
                }
                for i in range(3)
            ],
            indent=1,
        )
    )
    assert _import(src, "--out", tmp_path / "r.jsonl") == 0
    assert (tmp_path / "r.jsonl").read_text().count('"response"') == 3


def test_an_import_source_that_is_a_folder_or_a_fifo_says_so(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert _import(tmp_path, "--out", tmp_path / "a.jsonl") == 2
    assert "is a folder, not a file" in capsys.readouterr().err
    assert _import(fifo, "--out", tmp_path / "b.jsonl") == 2  # never blocks on the pipe
    assert "not a regular file" in capsys.readouterr().err


def test_lone_surrogates_in_an_import_are_replaced_and_noted(tmp_path, capsys):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"q": "Q?", "a": f"answer {i} \ud800"}) + "\n" for i in range(3)))
    assert _import(src, "--prompt-column", "q", "--response-column", "a", "--out", tmp_path / "r.jsonl") == 0
    assert "3 character(s) that are not valid Unicode" in capsys.readouterr().out
    assert "\ufffd" in (tmp_path / "r.jsonl").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- specs
@pytest.mark.parametrize(
    "kind, message",
    [("folder", "is a folder, not a file"), ("fifo", "not a regular file"), ("zero", "not a regular file")],
)
def test_a_spec_path_that_is_not_a_file_says_what_it_is(tmp_path, capsys, kind, message):
    path = {"folder": tmp_path, "fifo": tmp_path / "p", "zero": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "no such spec file" not in err


def test_an_empty_model_name_is_a_spec_mistake(tmp_path, capsys):
    spec = _spec_file(tmp_path, "http://127.0.0.1:9/v1", name="")
    assert _audit(tmp_path, spec) == 2  # not 3, a server failure
    assert "model.name is empty" in capsys.readouterr().err


ISSUE_KEYS = [
    "HOMEBREW_GITHUB_API_TOKEN",
    "CLOUDSDK_AUTH_ACCESS_TOKEN",
    "HCLOUD_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "OP_SERVICE_ACCOUNT_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "TF_API_TOKEN",
    "PULUMI_ACCESS_TOKEN",
    "SUPABASE_SERVICE_ROLE_KEY",
    "TELEGRAM_BOT_TOKEN",
    "ARM_ACCESS_KEY",
    "LINODE_TOKEN",
]


@pytest.mark.parametrize("name", ISSUE_KEYS)
def test_other_services_tokens_are_not_sent_on_a_spec_alone(tmp_path, capsys, name):
    spec = _spec_file(tmp_path, "http://127.0.0.1:9/v1", key_env=name)
    assert main(["estimate", str(spec)]) == 2
    assert "--allow-key-env" in capsys.readouterr().err
    assert main(["estimate", str(spec), "--allow-key-env", name]) == 0


def test_the_users_settings_file_allows_a_key_variable(tmp_path, capsys):
    spec = _spec_file(tmp_path, "http://127.0.0.1:9/v1", key_env="MY_GATEWAY_TOKEN")
    assert main(["estimate", str(spec)]) == 2
    (Path(os.environ["DBPA_HOME"]) / "settings.yaml").write_text("allow_key_env: [MY_GATEWAY_TOKEN]\n")
    assert main(["estimate", str(spec)]) == 0


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "TOGETHER_API_KEY",
        "GROQ_API_KEY",
        "OPENROUTER_API_KEY",
        "FIREWORKS_API_KEY",
        "DEEPSEEK_API_KEY",
        "HF_TOKEN",
        "DBPA_ANYTHING",
    ],
)
def test_llm_providers_key_variables_are_allowed(name):
    from dbpa_core.spec import key_env_allowed

    assert key_env_allowed(name)


# --------------------------------------------------------------------------- history
REPLAY_SPEC = """model: {{backend: replay, file: {file}}}
embedder: {{backend: bleu}}
samples: 4
permutations: 19
base: {{prompt: 'A?'}}
perturbations: [{{name: b, prompt: 'B?'}}, {{name: c, prompt: 'C?'}}]
"""


def _recorded_run(tmp_path) -> int:
    replay = tmp_path / "r.jsonl"
    replay.write_text(
        "".join(
            json.dumps({"prompt": p, "response": f"{p} answer {i}"}) + "\n"
            for p in ("A?", "B?", "C?")
            for i in range(4)
        )
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(REPLAY_SPEC.format(file=replay))
    assert _audit(tmp_path, spec) == 0
    return 1


def _pickled_npy() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_history_show_survives_garbled_rows(tmp_path, capsys):
    run_id = _recorded_run(tmp_path)
    capsys.readouterr()
    db = Path(os.environ["DBPA_HOME"]) / "history.sqlite3"
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE tests SET detail = ? WHERE position = 0", (b"not zlib",))
        con.execute("UPDATE arms SET embeddings = ? WHERE position = 1", (_pickled_npy(),))
        con.execute("UPDATE arms SET responses = ? WHERE position = 2", ("[not json",))
        con.execute("UPDATE audits SET usage = ?", ("{",))
        con.execute("UPDATE tests SET p_adjusted = 'garbage' WHERE position = 1")
    con.close()
    assert main(["history", "show", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert "could not be read" in out
    assert "test 'b': its permutation detail cannot be read" in out
    assert "arm 'b': its embeddings cannot be read" in out
    assert "arm 'c': its responses cannot be read" in out
    assert "test 'c': its p_adjusted is not a number ('garbage')" in out
    assert "c " in out and "b " in out  # both tests still in the table
    assert main(["history", "show", str(run_id), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["unreadable"]) == 5


def test_history_show_leaves_out_an_audit_whose_spec_is_garbled(tmp_path, capsys):
    run_id = _recorded_run(tmp_path)
    db = Path(os.environ["DBPA_HOME"]) / "history.sqlite3"
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE audits SET spec = ?", (b"\xff\xfe garbage",))
        con.execute("UPDATE runs SET created_at = 'yesterday'")
    con.close()
    capsys.readouterr()
    assert main(["history", "show", str(run_id)]) == 0
    assert "its spec cannot be read" in capsys.readouterr().out
    assert main(["history"]) == 0


def test_dbpa_home_that_is_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home-file"
    home.write_text("x")
    monkeypatch.setenv("DBPA_HOME", str(home))
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and len(_said(err)) == 1
    from dbpa_core.home import HomeError, save_models

    with pytest.raises(HomeError, match="is a file, not a folder"):
        save_models([{"backend": "local"}])


def test_a_locked_history_says_so_and_never_advises_moving_it(tmp_path):
    from dbpa_core.history import History, HistoryError

    h = History(tmp_path / "h.sqlite3", timeout=0.2)
    assert h.list() == []
    holder = sqlite3.connect(tmp_path / "h.sqlite3", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryError) as info:
            h.list()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    msg = str(info.value)
    assert "locked by another process" in msg and "try again" in msg
    assert "Move" not in msg and "new one" not in msg


# --------------------------------------------------------------------------- cache
def test_a_read_only_cache_is_not_called_damaged(tmp_path, monkeypatch):
    import diskcache.core

    from dbpa_core.cache import Cache, CacheDamagedError, CacheError

    c = Cache(tmp_path / "c")
    c.set("k", {"text": "kept"})
    c.close()
    real = sqlite3.connect

    def read_only(path, *a, **kw):  # the database file as a read-only mount gives it
        kw.pop("uri", None)
        return real(f"file:{path}?mode=ro", *a, uri=True, **kw)

    monkeypatch.setattr(diskcache.core.sqlite3, "connect", read_only)
    ro = Cache(tmp_path / "c")
    with pytest.raises(CacheError) as info:
        ro.set("k2", {"text": "new"})
    ro.close()
    assert not isinstance(info.value, CacheDamagedError)
    msg = str(info.value)
    assert "read-only" in msg and "cache clear" not in msg and "removes" not in msg
    monkeypatch.setattr(diskcache.core.sqlite3, "connect", real)
    assert Cache(tmp_path / "c").get("k") == {"text": "kept"}  # intact


@pytest.mark.timeout(60)
def test_the_claims_of_a_killed_unreaped_run_are_broken_at_once(tmp_path):
    from dbpa_core.cache import Cache

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom dbpa_core.cache import Cache\n"
            f"c = Cache({str(tmp_path / 'c')!r})\nassert c.claim('sample:1')\n"
            "print('claimed', flush=True)\ntime.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "claimed"
        c = Cache(tmp_path / "c")
        assert c.claim_holder("sample:1")["pid"] == child.pid  # alive: its claim stands
        os.kill(child.pid, signal.SIGKILL)
        deadline = 200
        while deadline and _state(child.pid) != "Z":  # killed, not yet reaped by us
            deadline -= 1
            subprocess.run(["sleep", "0.05"])
        assert _state(child.pid) == "Z"
        assert c.claim_holder("sample:1") is None  # broken at once, not after 45 s
        assert c.claim("sample:1")
        c.close()
    finally:
        child.kill()
        child.wait()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_deeply_nested_json_in_an_import_is_a_problem_row(tmp_path, capsys):
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"q": "Q?", "a": "fine"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    assert _import(src, "--prompt-column", "q", "--response-column", "a", "--out", tmp_path / "r.jsonl") == 2
    err = capsys.readouterr().err
    assert "line 2: not valid JSON here (nested too deeply)" in err and "Recursion" not in err
    pf = tmp_path / "pf.jsonl"
    pf.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert _import(pf, "--from", "promptfoo", "--out", tmp_path / "p.jsonl") == 2
    assert "nested too deeply" in capsys.readouterr().err


@pytest.mark.parametrize("errno_name, said", [("ENOSPC", "is full"), ("EROFS", "read-only")])
def test_a_value_file_that_cannot_be_written_is_one_true_line(tmp_path, monkeypatch, errno_name, said):
    import errno

    import diskcache

    from dbpa_core.cache import Cache, CacheError

    def fail(self, *a, **kw):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    monkeypatch.setattr(diskcache.Disk, "_write", fail)
    c = Cache(tmp_path / "c")
    with pytest.raises(CacheError) as info:
        c.set("emb", np.zeros(50_000))  # 400 KB: stored as a file beside the database
    c.close()
    assert said in str(info.value) and "cache clear" not in str(info.value)


def test_a_server_that_overshoots_max_tokens_a_little_is_said(tmp_path, caplog):
    def overshoot(answer):
        answer["usage"]["completion_tokens"] = 500 * len(answer["choices"])
        return answer

    with Twisted(overshoot) as srv:
        assert _audit(tmp_path, _spec_file(tmp_path, srv.base_url, max_tokens=50)) == 0
    assert "more completion tokens than max_tokens = 50" in caplog.text
    assert "up to 500" in caplog.text


def test_saved_models_keep_no_password_of_their_base_url(tmp_path):
    from dbpa_core.home import save_models
    from dbpa_core.spec_models import load_models

    path = save_models(
        [
            {
                "backend": "openai",
                "name": "m",
                "api_key_env": "OPENAI_API_KEY",
                "base_url": "http://alice:s3cr3t@127.0.0.1:8000/v1",
            }
        ],
        tmp_path / "models.yaml",
    )
    assert "s3cr3t" not in path.read_text() and "alice" not in path.read_text()
    models, problems = load_models(path)
    assert not problems and models[0]["base_url"] == "http://127.0.0.1:8000/v1"
