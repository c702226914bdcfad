"""The history's ``seconds``: the time of the rounds only, not that of the evaluations or of the caller's hooks."""

import importlib
import types

import numpy as np
import pytest

import fedopt
from fedopt.datasets import partition
from fedopt.problems import LeastSquares
from fedopt.regularizers import L1


class FakeClock:
    """A ``perf_counter`` that stands still unless a test moves it: only the hooks below take time."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 5))
    return LeastSquares(partition(X, X @ rng.normal(size=5), 4, "iid", seed=0), backend="numpy")


@pytest.mark.parametrize("hook", ["callback", "stop"])
@pytest.mark.parametrize("runner", ["fedopt.run", "fedopt.batch"])
def test_slow_callbacks_and_stops_are_not_training_time(problem, hook, runner, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(importlib.import_module(runner), "time", types.SimpleNamespace(perf_counter=clock.perf_counter))

    def slow(state, row):
        clock.sleep(1.0)
        return False

    kw = {"rounds": 3, "local_steps": 2, "batch_size": None, hook: slow}
    if runner == "fedopt.run":
        histories = [fedopt.run("fednmap", problem, L1(0.01), **kw).history]
    else:
        histories = [r.history for r in fedopt.run_batch("fednmap", problem, L1(0.01), seeds=[0, 1], **kw)]
    assert clock.now >= 4.0  # the hook ran at every evaluation
    for history in histories:
        np.testing.assert_array_equal(history["seconds"], [0.0] * 4)
