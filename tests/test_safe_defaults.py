"""Issue 32: safe by default. The dashboard listens on 127.0.0.1 unless told to share (and
then needs a token); its start-up message looks up no external address; `make run PORT=`
picks the port; an environment key goes only to servers allowed on the machine when the
dashboard's rule is on; without a terminal the CLI prints a progress line every few
seconds; a refused connection fails in seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbpa_core import keyhosts
from dbpa_core.backends.base import AuthError
from dbpa_core.backends.openai_compat import OpenAIClientSettings
from dbpa_core.cli import main
from dbpa_core.launcher import is_loopback, option_value, plan

ROOT = Path(__file__).resolve().parents[1]
CANARY = "sk-canary-5e1f0c"


# --------------------------------------------------------------------------- dbpa ui
def test_the_dashboard_listens_on_this_machine_only_by_default():
    s = plan([])
    assert option_value(s.argv, "server.address") == "127.0.0.1"
    assert option_value(s.argv, "browser.serverAddress") == "127.0.0.1"
    assert (s.shared, s.token) == (False, None)
    assert s.link == "http://127.0.0.1:8501/"


def test_the_dashboard_watches_no_source_file_unless_asked():
    """No file watcher by default (``dbpa ui``, ``make run`` and ``streamlit run app.py``
    from the repository): it polled every source file and walked every loaded module's path
    after each rerun. A developer's ``--server.fileWatcherType poll`` comes last and wins."""
    import tomllib

    assert option_value(plan([]).argv, "server.fileWatcherType") == "none"
    dev = plan(["--server.fileWatcherType", "poll"]).argv
    assert option_value(dev, "server.fileWatcherType") == "poll"
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["fileWatcherType"] == "none"


def test_share_serves_every_interface_behind_a_new_token():
    a, b = plan(["--server.port", "8600"], share=True), plan([], share=True)
    assert option_value(a.argv, "server.address") == "0.0.0.0"
    assert a.shared and a.token and len(a.token) >= 20
    assert a.token != b.token  # a new one each start
    assert a.link.endswith(f":8600/?token={a.token}")
    # the host name is shown, so Streamlit prints one URL and asks no one for an address
    assert option_value(a.argv, "browser.serverAddress") not in (None, "0.0.0.0")


@pytest.mark.parametrize("address", ["0.0.0.0", "192.168.1.20", "::"])
def test_any_network_address_needs_a_token(address):
    s = plan(["--server.address", address])
    assert s.shared and s.token
    assert s.argv.count("--server.address") == 1  # the user's, not a second one


def test_a_token_set_on_the_machine_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("DBPA_UI_TOKEN", "tok-from-env")
    assert plan([], share=True).token == "tok-from-env"
    assert plan([]).token == "tok-from-env"  # set: asked for on this machine too
    monkeypatch.delenv("DBPA_UI_TOKEN")
    from dbpa_core.home import settings_file

    settings_file().parent.mkdir(parents=True, exist_ok=True)
    settings_file().write_text("ui_token: tok-from-settings\n")
    assert plan(["--server.address=0.0.0.0"]).token == "tok-from-settings"


@pytest.mark.parametrize(
    "address, loop",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("unix:///tmp/s", True),
        ("0.0.0.0", False),
        ("", False),
        (None, False),
        ("10.0.0.2", False),
        ("myhost", False),
    ],
)
def test_loopback_addresses(address, loop):
    assert is_loopback(address) is loop


def _serve(monkeypatch, argv):
    """``main(argv)`` with Streamlit's start replaced by a recorder."""
    import dbpa_core.launcher as launcher

    seen = {}
    monkeypatch.setattr(launcher, "require_extra", lambda extra: None)
    monkeypatch.setattr(
        "streamlit.web.cli.main", lambda args, prog_name: seen.update(args=args) or sys.exit(0)
    )
    assert main(argv) == 0
    return seen["args"]


def test_dbpa_ui_share_prints_the_link_and_hands_the_token_to_the_dashboard(monkeypatch, capsys):
    import os

    args = _serve(monkeypatch, ["ui", "--share", "--server.port", "8611"])
    err = capsys.readouterr().err
    token = os.environ["DBPA_UI_TOKEN"]  # the dashboard runs in this process
    assert f":8611/?token={token}" in err and "serving the network" in err
    assert option_value(args, "server.address") == "0.0.0.0"


def test_dbpa_ui_allow_key_host(monkeypatch, capsys):
    import os

    _serve(monkeypatch, ["ui", "--allow-key-host", "http://127.0.0.1:9000/v1"])
    assert os.environ["DBPA_ALLOW_KEY_HOSTS"] == "http://127.0.0.1:9000/v1"
    assert main(["ui", "--allow-key-host", "ftp://x"]) == 2
    assert "--allow-key-host 'ftp://x' is not an http(s) URL" in capsys.readouterr().err
    # one in the settings file that allows nothing is said at start
    from dbpa_core.home import settings_file

    settings_file().parent.mkdir(parents=True, exist_ok=True)
    settings_file().write_text("allow_key_hosts: [gopher://old.example]\n")
    _serve(monkeypatch, ["ui"])
    assert (
        "warning: 'gopher://old.example' in DBPA_ALLOW_KEY_HOSTS or allow_key_hosts is not an http(s) URL"
        in (capsys.readouterr().err)
    )


def _start_message(monkeypatch, capsys, argv) -> str:
    """What Streamlit prints at start for ``argv`` (its config loaded from the flags the
    way `streamlit run` loads them), with every external-address lookup made to fail."""
    from streamlit import config, net_util
    from streamlit.web import bootstrap

    def no_lookup():
        raise AssertionError("looked up the external address")

    monkeypatch.setattr(net_util, "get_external_ip", no_lookup)
    monkeypatch.setattr(net_util, "_make_blocking_http_get", lambda *a, **k: no_lookup())
    flags = {}
    options = argv[2:]
    for i in range(0, len(options) - 1, 2):
        flags[options[i][2:].replace(".", "_")] = options[i + 1]
    monkeypatch.chdir(ROOT)
    bootstrap.load_config_options(flag_options=flags)
    try:
        bootstrap._print_url(False)
    finally:
        config.get_config_options(force_reparse=True)  # back to the defaults
    return capsys.readouterr().out


@pytest.mark.parametrize("share", [False, True])
def test_the_start_message_looks_up_no_external_address(monkeypatch, capsys, share):
    s = plan(["--server.port", "8612"], share=share)
    out = _start_message(monkeypatch, capsys, s.argv)
    assert "External URL" not in out and "Network URL" not in out
    assert re.search(r"URL: http://\S+:8612", out), out


def test_make_run_takes_a_port():
    def commands(*argv: str) -> list[str]:  # what make would run (not its own "make[1]:" lines:
        # under `make test` this make is a sub-make and says which folder it enters)
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        out = subprocess.run(
            ["make", "--no-print-directory", "-n", "run", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line for line in out.splitlines() if line.strip() and not line.startswith("make")]

    assert "-m dbpa_core.cli ui --server.port 8600" in commands("PORT=8600")[-1]
    assert commands("SHARE=1")[-1].endswith("--server.port 8501 --share")


def test_the_project_config_binds_the_loopback_address():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"


# --------------------------------------------------------------------------- keys
def test_origin():
    assert keyhosts.origin("HTTPS://u:p@API.Example.com/v1") == "https://api.example.com:443"
    assert keyhosts.origin("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000"
    assert keyhosts.origin("http://[::1]:8000") == "http://[::1]:8000"
    assert keyhosts.origin("ftp://x") is None and keyhosts.origin("") is None


def test_outside_the_dashboard_the_spec_decides(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    s = OpenAIClientSettings(base_url="http://127.0.0.1:8799/v1", api_key_env="OPENAI_API_KEY")
    assert s.api_key() == CANARY


def test_in_the_dashboard_an_environment_key_goes_only_to_allowed_servers(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    keyhosts.restrict_to_allowed_hosts()
    stranger = OpenAIClientSettings(base_url="http://127.0.0.1:8799/v1", api_key_env="OPENAI_API_KEY")
    with pytest.raises(AuthError, match=r"The key in \$OPENAI_API_KEY is not sent to http://127.0.0.1:8799"):
        stranger.api_key()
    # the OpenAI API itself (the default) is allowed
    assert OpenAIClientSettings(api_key_env="OPENAI_API_KEY").api_key() == CANARY
    # a key typed in the session goes where it was typed for
    typed = OpenAIClientSettings(base_url="http://127.0.0.1:8799/v1", api_key="sk-typed")
    assert typed.api_key() == "sk-typed"
    # the operator allows the server: the environment variable, or the settings file
    monkeypatch.setenv("DBPA_ALLOW_KEY_HOSTS", "https://other.example, http://127.0.0.1:8799")
    assert stranger.api_key() == CANARY
    monkeypatch.delenv("DBPA_ALLOW_KEY_HOSTS")
    with pytest.raises(AuthError):
        stranger.api_key()
    from dbpa_core.home import settings_file

    settings_file().parent.mkdir(parents=True, exist_ok=True)
    settings_file().write_text("allow_key_hosts: [http://127.0.0.1:8799/v1]\n")
    assert stranger.api_key() == CANARY
    # another port of the same host is another server
    other = OpenAIClientSettings(base_url="http://127.0.0.1:8800/v1", api_key_env="OPENAI_API_KEY")
    with pytest.raises(AuthError):
        other.api_key()


def test_a_canary_never_reaches_a_server_nobody_allowed(monkeypatch, tmp_path):
    """The whole path: an audit in the dashboard's mode against a fake server on another
    port of 127.0.0.1 fails with the one line, and the server saw no canary."""
    from dbpa_core.audit import run_audit
    from dbpa_core.cache import Cache
    from dbpa_core.spec import parse_spec
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    keyhosts.restrict_to_allowed_hosts()
    with FakeOpenAI() as srv:
        spec = parse_spec(
            f"model: {{backend: openai, name: fake-model, base_url: '{srv.base_url}', "
            "api_key_env: OPENAI_API_KEY}\nsamples: 3\nbase: {prompt: hi}\n"
            "perturbations: [{name: p, prompt: ho}]\npermutations: 200\nembedder: {backend: bleu}\n"
        )
        with pytest.raises(AuthError, match="is not sent to"):
            run_audit(spec, cache=Cache(tmp_path / "c"))
        assert not any(CANARY in h for h in srv.auth_headers)
        # allowed on the machine: now it is sent
        monkeypatch.setenv("DBPA_ALLOW_KEY_HOSTS", srv.base_url)
        run_audit(spec, cache=Cache(tmp_path / "c"))
        assert any(CANARY in h for h in srv.auth_headers)


# --------------------------------------------------------------------------- CI output
def test_progress_lines_without_a_terminal(capsys):
    from dbpa_core.cli.common import Bars
    from dbpa_core.sampling import Progress

    bars = Bars(False, lines=True, every=0.05)
    bars(Progress("sampling", 3, 12))
    time.sleep(0.18)
    bars(Progress("sampling", 6, 12, detail="about 1 min left"))
    time.sleep(0.12)
    bars.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3
    assert re.fullmatch(r"\[dbpa 0m00s\] sampling 3/12 \(25%\)", lines[0])
    assert lines[-1].endswith("sampling 6/12 (50%) - about 1 min left")
    time.sleep(0.12)
    assert capsys.readouterr().err == ""  # closed: quiet


def _slow_spec(tmp_path, url) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"model: {{backend: openai, name: fake-model, base_url: '{url}', concurrency: 1}}\n"
        "samples: 4\nbase: {prompt: hi}\nperturbations: [{name: p, prompt: ho}]\n"
        "permutations: 200\nembedder: {backend: bleu}\n"
    )
    return spec


def test_audit_without_a_terminal_prints_progress_lines(tmp_path, monkeypatch, capsys):
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setenv("DBPA_PROGRESS_EVERY", "0.2")
    with FakeOpenAI(latency=0.15) as srv:
        spec = _slow_spec(tmp_path, srv.base_url)
        assert main(["audit", str(spec), "--out", str(tmp_path / "o"), "--no-history"]) == 0
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.startswith("[dbpa ")]
        assert len(lines) >= 2, err
        assert all("\r" not in x and "█" not in x for x in err.splitlines())  # no bars
        assert (
            main(["audit", str(spec), "--out", str(tmp_path / "o2"), "--no-history", "--no-cache", "--quiet"])
            == 0
        )
        assert "[dbpa " not in capsys.readouterr().err


def test_a_refused_connection_fails_in_seconds(tmp_path, capsys, monkeypatch):
    from dbpa_core.backends import openai_compat
    from tests.fake_openai import FakeOpenAI

    waits: list[float] = []
    sleep = openai_compat._sleep

    async def counted(seconds, should_stop):
        waits.append(seconds)
        await sleep(seconds, should_stop)

    monkeypatch.setattr(openai_compat, "_sleep", counted)
    with FakeOpenAI() as srv:
        url = srv.base_url  # then nothing listens there
    spec = _slow_spec(tmp_path, url)
    assert main(["audit", str(spec), "--out", str(tmp_path / "o"), "--no-history", "--quiet"]) == 3
    assert "after 2 tries (connection refused)" in capsys.readouterr().err
    # one retry per request, after a short wait (not the back-off a busy server gets)
    assert waits and max(waits) <= 0.5 and len(waits) <= 8, waits


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} writes them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
def test_dbpa_ui_listens_on_the_loopback_address_and_prints_one_url(tmp_path):
    """The real command: it serves, on 127.0.0.1 only, and its start message has one URL
    (no Network URL, no External URL: no address was looked up)."""
    import os
    import urllib.request

    from tests.app.browser_support import free_port
    from tests.local_http import stop_process

    port = free_port()
    log = tmp_path / "ui.log"
    env = dict(os.environ, DBPA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dbpa_core.cli", "ui", "--server.port", str(port)],
            cwd=tmp_path,  # not the repository: its .streamlit/config.toml plays no part
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
                    == b"ok"
                ):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)
        assert _listening(port) == {"0100007F"}  # 127.0.0.1, nothing else
        text = log.read_text()
        assert f"URL: http://127.0.0.1:{port}" in text
        assert "Network URL" not in text and "External URL" not in text
        assert "token" not in text
    finally:
        stop_process(proc)


def test_a_model_saved_on_the_dashboard_allows_no_key_variable_on_the_command_line(
    monkeypatch, tmp_path, capsys
):
    """A token holder adds, on the Settings page, a model whose key variable is one of the
    operator's secrets (models.yaml). A command-line spec naming that variable is still
    refused, and the canary never reaches the fake server; only the operator's own config
    (the settings file by hand, $DBPA_ALLOW_KEY_ENV, --allow-key-env) allows it."""
    from dbpa_core.home import save_models, settings_file
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setenv("OPERATOR_SECRET", CANARY)
    with FakeOpenAI() as srv:
        save_models(
            [
                {
                    "backend": "openai",
                    "name": "fake-model",
                    "base_url": srv.base_url,
                    "api_key_env": "OPERATOR_SECRET",
                }
            ]
        )
        spec = tmp_path / "s.yaml"
        spec.write_text(
            f"model: {{backend: openai, name: fake-model, base_url: '{srv.base_url}', "
            "api_key_env: OPERATOR_SECRET, max_retries: 0}\nsamples: 3\nbase: {prompt: hi}\n"
            "perturbations: [{name: p, prompt: ho}]\npermutations: 200\nembedder: {backend: bleu}\n"
        )

        def audit(*extra: str) -> int:
            out = tmp_path / f"o{len(srv.auth_headers)}{len(extra)}"
            return main(
                ["audit", str(spec), "--out", str(out), "--no-history", "--no-cache", "--quiet", *extra]
            )

        assert audit() == 2
        err = capsys.readouterr().err
        assert "'OPERATOR_SECRET' is not an LLM provider's API key variable" in err
        assert srv.auth_headers == []  # nothing was sent at all
        # the operator allows it: on the command line, in the environment, in the settings file
        assert audit("--allow-key-env", "OPERATOR_SECRET") == 0
        assert srv.auth_headers and all(h == f"Bearer {CANARY}" for h in srv.auth_headers)
        seen = len(srv.auth_headers)
        monkeypatch.setenv("DBPA_ALLOW_KEY_ENV", "OTHER_NAME, OPERATOR_SECRET")
        assert audit() == 0 and len(srv.auth_headers) > seen
        monkeypatch.delenv("DBPA_ALLOW_KEY_ENV")
        settings_file().write_text("allow_key_env: [OPERATOR_SECRET]\n")
        seen = len(srv.auth_headers)
        assert audit() == 0 and len(srv.auth_headers) > seen
