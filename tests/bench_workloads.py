"""Module-level workloads that worker processes import by name (tests of paritygate.bench)."""

import os

import numpy as np


def _work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def work_1x():
    _work(10_000)
    return np.ones(3)


def work_3x():
    _work(30_000)
    return np.ones(3)


def pid():
    return os.getpid()


def chatty(x):
    print("this goes to stderr, not into the protocol")
    return {"twice": 2 * x}


def fails():
    raise RuntimeError("planted failure")


def sleeps_then_works():
    import time

    time.sleep(0.05)  # waiting: wall time, no CPU time
    _work(40_000)
    return np.ones(3)


def works():
    # about 2 ms of CPU work beside the 50 ms sleep: the wall-clock ratio stays above 1.5x even
    # when a busy machine stretches the work twentyfold, and the CPU time that waking up costs
    # on a busy core (up to about 1 ms) stays well inside a 4x band
    _work(40_000)
    return np.ones(3)
