"""Module-level workloads that worker processes import by name (tests of paritygate.bench)."""

import os
import time

import numpy as np


def sleep_1ms():
    time.sleep(0.001)
    return np.ones(3)


def sleep_3ms():
    time.sleep(0.003)
    return np.ones(3)


def pid():
    return os.getpid()


def chatty(x):
    print("this goes to stderr, not into the protocol")
    return {"twice": 2 * x}


def fails():
    raise RuntimeError("planted failure")
