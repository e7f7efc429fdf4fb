"""The lock check: requirements/lock.txt must pin, with hashes, a release of every package that
pyproject.toml asks for (the core and every extra), inside the bounds pyproject gives.

Re-resolving the lock needs the package indexes (``make lock``), so it cannot run offline;
this check reads both files and fails when pyproject.toml was edited without ``make lock``
(a new or re-bounded dependency, a new extra), or when the lock was edited by hand into
something pip's hash-checking mode would refuse.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
NO_DEPS = ROOT / "requirements" / "no-deps.txt"


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """``{canonical name: (exact version, [sha256 hashes])}`` of a pip requirements file in
    pip-compile's form; a line that is not an exact ``name==version`` pin raises ValueError."""
    pins: dict[str, tuple[str, list[str]]] = {}
    logical = re.sub(r"\\\n", " ", text)
    for raw in logical.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()  # comments: "# via numpy"
        if not line:
            continue
        if line.startswith("-"):
            raise ValueError(f"unexpected option in the lock: {line!r}")
        spec, *opts = line.split()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", spec)
        if m is None:
            raise ValueError(f"not an exact pin: {spec!r}")
        hashes = [o.split(":", 1)[1] for o in opts if o.startswith("--hash=sha256:")]
        pins[canonicalize_name(m[1])] = (m[2], hashes)
    return pins


def pyproject_requirements(pyproject: dict) -> dict[str, list[Requirement]]:
    """``{"core", an extra's name or "build": [requirements]}`` of a parsed pyproject.toml
    (the project is installed with --no-build-isolation: its build backend is locked too)."""
    project = pyproject["project"]
    groups = {"core": project.get("dependencies", [])}
    groups.update(project.get("optional-dependencies", {}))
    groups["build"] = pyproject.get("build-system", {}).get("requires", [])
    return {g: [Requirement(r) for r in reqs] for g, reqs in groups.items()}


def lock_problems(pyproject: dict, pins: dict[str, tuple[str, list[str]]]) -> list[str]:
    """One line per requirement of pyproject that the lock does not satisfy, and per pin
    without a hash (pip's --require-hashes refuses the whole install then)."""
    problems = []
    for group, reqs in pyproject_requirements(pyproject).items():
        for req in reqs:
            if req.marker is not None and not req.marker.evaluate({"extra": group}):
                continue
            name = canonicalize_name(req.name)
            if name not in pins:
                problems.append(f"{req} ({group}): not in the lock")
            elif not req.specifier.contains(Version(pins[name][0]), prereleases=True):
                problems.append(f"{req} ({group}): the lock pins {pins[name][0]}")
    problems += [
        f"{name}=={version}: no sha256 hash" for name, (version, hashes) in pins.items() if not hashes
    ]
    return problems


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _make_var(name: str) -> str:
    m = re.search(rf"^{name}\s*:?=\s*(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert m, f"{name} not set in the Makefile"
    return m[1].strip()


# --------------------------------------------------------------------------- the check
def test_the_lock_satisfies_pyproject():
    problems = lock_problems(_pyproject(), parse_lock(LOCK.read_text(encoding="utf-8")))
    assert not problems, "pyproject.toml and requirements/lock.txt disagree (run `make lock`):\n" + "\n".join(
        problems
    )


def test_the_makefile_locks_and_installs_every_extra():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert set(_make_var("LOCK_EXTRAS").split(",")) == set(extras)


def test_torch_is_the_cpu_build():
    version, hashes = parse_lock(LOCK.read_text(encoding="utf-8"))["torch"]
    assert Version(version).local == "cpu" and hashes


def test_the_no_deps_file_pins_what_the_makefile_names():
    pins = parse_lock(NO_DEPS.read_text(encoding="utf-8"))
    named = [Requirement(r) for r in _make_var("NO_DEPS").split()]
    assert {canonicalize_name(r.name): str(r.specifier)[2:] for r in named} == {
        name: version for name, (version, _) in pins.items()
    }
    assert all(hashes for _, hashes in pins.values())


# --------------------------------------------------------------------------- it can fail
PROJECT = {
    "dependencies": ["numpy>=1.26", "pyyaml>=6.0"],
    "optional-dependencies": {
        "local": ["transformers>=4.46,<5.25", "torch==2.13.0"],
        "docs": ["mkdocstrings[python]>=0.26"],
        "win": ["pywin32>=300; sys_platform == 'win32'"],
    },
}
BUILD = {"requires": ["setuptools>=68"]}
FRESH = """\
numpy==2.4.6 \\
    --hash=sha256:89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93
    # via dbpa-core (pyproject.toml)
PyYAML==6.0.3 --hash=sha256:aaaa
transformers==5.24.0 \\
    --hash=sha256:bbbb \\
    --hash=sha256:cccc
torch==2.13.0+cpu \\
    --hash=sha256:dddd
mkdocstrings==1.0.8 \\
    --hash=sha256:eeee
setuptools==84.2.1 \\
    --hash=sha256:ffff
"""


def test_a_fresh_lock_passes():
    pins = parse_lock(FRESH)
    assert pins["pyyaml"] == ("6.0.3", ["aaaa"]) and pins["transformers"][1] == ["bbbb", "cccc"]
    assert (
        lock_problems({"project": PROJECT, "build-system": BUILD}, pins) == []
    )  # torch==2.13.0 takes 2.13.0+cpu


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        # pyproject gained a dependency the lock never resolved
        (
            lambda p, lock: (p["project"]["dependencies"].append("tabulate>=0.9"), lock),
            "tabulate>=0.9 (core): not in the lock",
        ),
        # pyproject's bound moved past the lock's pin
        (
            lambda p, lock: (p["project"]["dependencies"].__setitem__(0, "numpy>=2.5"), lock),
            "numpy>=2.5 (core): the lock pins 2.4.6",
        ),
        # a new extra
        (
            lambda p, lock: (
                p["project"]["optional-dependencies"].__setitem__("postgres", ["psycopg[binary]>=3.1"]),
                lock,
            ),
            "psycopg[binary]>=3.1 (postgres): not in the lock",
        ),
        # the lock hand-edited to a release outside the cap
        (
            lambda p, lock: (None, lock.replace("transformers==5.24.0", "transformers==5.25.0")),
            "transformers<5.25,>=4.46 (local): the lock pins 5.25.0",
        ),
        # the build backend's bound moved
        (
            lambda p, lock: (p["build-system"].__setitem__("requires", ["setuptools>=90"]), lock),
            "setuptools>=90 (build): the lock pins 84.2.1",
        ),
        # a hand-added pin without its hash
        (
            lambda p, lock: (None, lock.replace("PyYAML==6.0.3 --hash=sha256:aaaa", "PyYAML==6.0.3")),
            "pyyaml==6.0.3: no sha256 hash",
        ),
    ],
)
def test_a_stale_lock_fails(edit, problem):
    project = {
        "dependencies": list(PROJECT["dependencies"]),
        "optional-dependencies": dict(PROJECT["optional-dependencies"]),
    }
    pyproject = {"project": project, "build-system": dict(BUILD)}
    _, lock = edit(pyproject, FRESH)
    assert lock_problems(pyproject, parse_lock(lock)) == [problem]


@pytest.mark.parametrize("line", ["numpy>=2.4", "numpy", "-e .", "--index-url https://x"])
def test_a_lock_line_that_is_not_an_exact_pin_is_refused(line):
    with pytest.raises(ValueError):
        parse_lock(line + "\n")
