import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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
