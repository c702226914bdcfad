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


@pytest.mark.parametrize("runner", ["fedopt.run", "fedopt.batch"])
def test_queued_device_work_counts_as_training_time(problem, runner, monkeypatch):
    """A device runs a round's kernels after the call returns: the clock is read once they have finished."""
    from fedopt._backend import Backend
    from fedopt.algorithms.fednmap import FedNMap

    clock, queued = FakeClock(), []
    monkeypatch.setattr(importlib.import_module(runner), "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    launch = FedNMap.round

    def asynchronous_round(self, state):
        queued.append(1.0)  # one second of device work, still running when round returns
        return launch(self, state)

    def synchronize(self):
        clock.sleep(sum(queued))
        queued.clear()

    monkeypatch.setattr(FedNMap, "round", asynchronous_round)
    monkeypatch.setattr(Backend, "synchronize", synchronize)
    kw = {"rounds": 3, "local_steps": 2, "batch_size": None}
    if runner == "fedopt.run":
        histories = [fedopt.run("fednmap", problem, L1(0.01), **kw).history]
    else:
        histories = [r.history for r in fedopt.run_batch("fednmap", problem, L1(0.01), seeds=[0, 1], **kw)]
    for history in histories:
        np.testing.assert_allclose(history["seconds"], np.arange(4) / len(histories))


def test_a_resumed_run_goes_on_with_the_training_time_of_the_rounds_before(problem, monkeypatch):
    """seconds used to restart at 0 on resume=, while round and the cost columns went on."""
    from fedopt.algorithms.fednmap import FedNMap

    clock = FakeClock()
    monkeypatch.setattr(importlib.import_module("fedopt.run"), "time",
                        types.SimpleNamespace(perf_counter=clock.perf_counter))
    launch = FedNMap.round

    def slow_round(self, state):
        clock.sleep(1.0)
        return launch(self, state)

    monkeypatch.setattr(FedNMap, "round", slow_round)
    kw = {"local_steps": 2, "batch_size": None}
    first = fedopt.run("fednmap", problem, L1(0.01), rounds=3, **kw)
    resumed = fedopt.run("fednmap", problem, L1(0.01), rounds=2, resume=first.state, **kw)
    np.testing.assert_array_equal(first.history["seconds"], [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(resumed.history["seconds"], [3.0, 4.0, 5.0])
    assert resumed.state.seconds == 5.0 and first.state.seconds == 3.0


def test_synchronize_waits_on_the_device_stream_only_on_the_gpu():
    from fedopt._backend import Backend

    waited = []
    stream = types.SimpleNamespace(synchronize=lambda: waited.append(True))
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    Backend("numba", cupy, None).synchronize()
    assert waited == []
    Backend("gpu", cupy, None).synchronize()
    assert waited == [True]
