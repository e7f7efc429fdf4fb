import itertools
import os
import random

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_addoption(parser):
    parser.addoption(
        "--shuffle",
        metavar="SEED",
        type=int,
        default=None,
        help="run the test files, and the tests in each file, in an order shuffled by SEED "
        "(a whole number): a test that passes only after another one fails some seed",
    )


def pytest_report_header(config):
    seed = config.getoption("--shuffle")
    return None if seed is None else f"shuffled with --shuffle {seed}"


def _tier(items) -> int:
    """0 for a file with a browser test, 1 with a slow one, 2 otherwise."""
    marks = {m.name for item in items for m in item.iter_markers()}
    return 0 if "browser" in marks else 1 if "slow" in marks else 2


def pytest_collection_modifyitems(config, items):
    """The files that take longest first: those with browser tests and those with slow
    tests, taken in turn, then the rest. Under pytest-xdist (``--dist loadfile``, as make
    test runs it) a file is one unit of work, so a file of minutes that started last would
    leave the other workers idle at the end; started first, the short files fill in around
    it. In turn, because a browser file spends most of its time waiting for the page (a
    third of its time on the CPU, measured) and a slow file computes: all workers on browser
    files at once left the CPU idle for the first minutes.

    With ``--shuffle SEED``: the files in a seeded order within each of those tiers, and
    each file's tests too. A file's tests stay together (its module fixtures are set up
    once), and every pytest-xdist worker, given the same seed, collects the same order, as
    xdist requires."""
    seed = config.getoption("--shuffle")
    rnd = random.Random(seed)
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    files = list(by_file)
    if seed is not None:
        rnd.shuffle(files)
    tiers: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for f in files:  # the order within a tier is kept
        tiers[_tier(by_file[f])].append(f)
    browser, slow = tiers[0], tiers[1]
    turns = [f for pair in itertools.zip_longest(browser, slow) for f in pair if f is not None]
    items[:] = []
    for f in turns + tiers[2]:
        group = by_file[f]
        if seed is not None:
            rnd.shuffle(group)
        items.extend(group)


def cloud(rng, n, d=16, center=None, spread=0.6):
    """n unit-ish embeddings scattered around a center (a stand-in for responses)."""
    if center is None:
        center = np.ones(d)
    return center + spread * rng.standard_normal((n, d))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _private_dbpa_home(tmp_path_factory, monkeypatch):
    """Every test writes its run history and saved models to a temporary DBPA_HOME (the
    CLI records each audit), never to the user's own."""
    monkeypatch.setenv("DBPA_HOME", str(tmp_path_factory.mktemp("dbpa_home")))
    # nor to a team's database the developer's shell may name
    monkeypatch.delenv("DBPA_DATABASE_URL", raising=False)
    monkeypatch.delenv("DBPA_CACHE_URL", raising=False)
    # the dashboard's access token and allowed key servers: never the developer's, and
    # whatever a test (or dbpa ui in-process) sets is undone after it
    for name in ("DBPA_UI_TOKEN", "DBPA_ALLOW_KEY_HOSTS", "DBPA_ALLOW_KEY_ENV"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    # a long CLI run under a busy machine prints no progress line into a test's stderr
    # (the tests of those lines set it themselves)
    monkeypatch.setenv("DBPA_PROGRESS_EVERY", "3600")
    # the fake servers' faults are retried at once, not after half a second and more (the
    # backoff itself is tested in tests/test_hostile_server.py)
    monkeypatch.setattr("dbpa_core.backends.openai_compat.BACKOFF_BASE", 0.01)


@pytest.fixture(autouse=True)
def _keys_unrestricted_after():
    """An AppTest switches on the dashboard's rule for environment keys in this process
    (dbpa_core.keyhosts); switched off again after every test."""
    yield
    from dbpa_core.keyhosts import restrict_to_allowed_hosts

    restrict_to_allowed_hosts(False)


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the whole session (see tests/postgres_server.py), stopped
    at its end; the tests that use it are skipped, with the reason, where it cannot run."""
    from .postgres_server import PostgresServer

    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'dbpa-core[postgres]')")
    server = PostgresServer()
    why = server.why_not()
    if why:
        pytest.skip(why)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """The URL of a new, empty database on the session's PostgreSQL server."""
    return postgres_server.new_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def history_store(request, monkeypatch):
    """Where the run history lives for this test: the SQLite file in DBPA_HOME (the
    default), or a new PostgreSQL database named by DBPA_DATABASE_URL."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("DBPA_DATABASE_URL", url)
        return url
    monkeypatch.delenv("DBPA_DATABASE_URL", raising=False)
    return None


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory):
    """A cache folder holding the MiniLM embeddings of every recorded demo answer
    (assets/demo_replay.jsonl), built once per session (see tests/demo_cache.py): copy it
    (``demo_cache.copy_to``, or ``dashboard(..., cache_from=demo_cache)``), never write to
    it."""
    from .demo_cache import build_shared

    return build_shared(tmp_path_factory.getbasetemp())
