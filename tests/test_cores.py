"""How many cores are free now (dbpa_core.cores), which the compiled kernels size their
thread pools from: the permutation engine's numba threads and the decoder's torch threads."""

import os
import time

import pytest

from dbpa_core import cores, permutation
from dbpa_core.permutation import PARALLEL_MIN_WORK, kernel_threads


def test_free_cores_counts_the_other_runnable_threads(monkeypatch):
    readings = iter([3, 2, 4, 2, 3])  # this thread and 1-3 others
    monkeypatch.setattr(cores, "runnable_now", lambda: next(readings))
    monkeypatch.setattr(cores, "own_runnable", lambda: 1)
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert cores.free_cores() == 1  # the least reading: one other, busy
    # our own spinning threads (torch's OpenMP workers after a step) are not other work
    readings = iter([2, 2, 2, 2, 2])
    monkeypatch.setattr(cores, "runnable_now", lambda: next(readings))
    monkeypatch.setattr(cores, "own_runnable", lambda: 2)
    assert cores.free_cores() == 2
    monkeypatch.setattr(cores, "runnable_now", lambda: None)
    assert cores.free_cores() is None


def test_own_runnable_counts_this_processs_busy_threads():
    """A thread of ours that computes (a matrix product, GIL released) is counted as this
    process's runnable thread, beside the caller: that is what free_cores() takes away from
    the machine's count, so torch's own spinning workers never look like other work."""
    import threading

    import torch

    if not os.path.exists("/proc/self/task"):
        pytest.skip("needs /proc")
    stop = threading.Event()

    def work():
        a = torch.randn(384, 384)
        while not stop.is_set():
            a @ a

    t = threading.Thread(target=work)
    t.start()
    try:
        seen = []
        for _ in range(50):
            seen.append(cores.own_runnable())
            time.sleep(0.002)
    finally:
        stop.set()
        t.join()
    assert max(seen) >= 2 and min(seen) >= 1


def test_the_permutation_kernels_take_one_thread_per_free_core(monkeypatch):
    most = permutation.MOST_THREADS
    monkeypatch.setattr(permutation, "free_cores", lambda samples=5: 0)  # every core busy
    assert kernel_threads(PARALLEL_MIN_WORK) == 1
    monkeypatch.setattr(permutation, "free_cores", lambda samples=5: 1)  # one core busy
    assert kernel_threads(PARALLEL_MIN_WORK) == 1
    monkeypatch.setattr(permutation, "free_cores", lambda samples=5: 64)
    assert kernel_threads(PARALLEL_MIN_WORK) == most
    monkeypatch.setattr(permutation, "free_cores", lambda samples=5: None)  # cannot be told
    assert kernel_threads(PARALLEL_MIN_WORK) == most
    # a small call is serial whatever the machine: a parallel region costs more than it saves
    assert kernel_threads(PARALLEL_MIN_WORK - 1) == 1


def test_the_thread_count_leaves_the_p_value_alone(monkeypatch):
    import numpy as np

    from dbpa_core import dbpa_test

    gen = np.random.default_rng(1)
    x, y = gen.standard_normal((30, 8)), 0.3 + gen.standard_normal((30, 8))
    results = []
    for free in (0, 64):
        monkeypatch.setattr(permutation, "free_cores", lambda samples=5, free=free: free)
        results.append(dbpa_test(x, y, n_permutations=2000, rng=3))
    assert results[0].p_value == results[1].p_value
    assert np.array_equal(results[0].permutation_statistics, results[1].permutation_statistics)
