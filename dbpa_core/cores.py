"""How many cores this process may use now: its CPU affinity minus the cores other work keeps
busy. The compiled kernels (the permutation engine's numba threads, the local decoder's torch
threads) size their thread pools from it: on a core that other work holds, a second thread
only waits for its share of that core, and every thread of a parallel region waits for it.

Linux tells it through ``/proc`` (the machine's runnable threads, and this process's); where
that cannot be read, :func:`free_cores` says None and the callers keep their defaults.
"""

from __future__ import annotations

import os
import time


def runnable_now() -> int | None:
    """Threads running or ready to run on the whole machine right now, this one included
    (the fourth field of ``/proc/loadavg``); None where that file does not exist."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def own_runnable() -> int:
    """This process's threads that are running or ready to run now (state R in
    ``/proc/self/task/*/stat``), at least 1 (the caller). Torch's OpenMP threads spin for
    a while after each parallel region, so right after a step on two threads the machine
    shows two runnable threads of ours: work of this process, not other work."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        end = stat.rfind(")")  # the name may hold ")": the state follows the last
        n += stat[end + 2 : end + 3] == "R"
    return max(1, n)


def free_cores(samples: int = 5, pause: float = 0.001) -> int | None:
    """The cores this process may use (its CPU affinity) minus those other work keeps busy
    now: the least count of other processes' runnable threads (the machine's minus this
    process's own) over a few readings a millisecond apart (one reading catches passing
    work). None where it cannot be told."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    seen = []
    for i in range(samples):
        n = runnable_now()
        if n is None:
            return None
        seen.append(n - own_runnable())  # our own threads are not other work
        if i + 1 < samples:
            time.sleep(pause)
    return max(0, cores - min(seen))
