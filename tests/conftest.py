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
