"""Reduced precision: float64, float32 and uint8 pixel storage, time per round and what it costs in accuracy.

FedNMap (Q = 10, lr_local = 0.1, gamma = 4, batch 32) on MNIST-shaped images
(:func:`fedopt.datasets.make_mnist_like`: 6000 uint8 images of 784 pixels, 20% held out, 20
clients, sorted partition) with an elastic net (l1 = 1e-4, l2 = 1e-3), for softmax regression
and the MLP (32 hidden units). The same images are stored three ways:

* ``float64``: pixels / 255 in float64, computed in float64;
* ``float32``: pixels / 255 in float32, computed in float32;
* ``uint8``: the raw pixels (one byte each) with ``scale = 1/255``; the kernels scale them as they
  read them and compute in float32.

Each case runs ``FEDOPT_PRECISION_ROUNDS`` rounds (default 200) from the same seed and records
the final test accuracy and ``||F_nat||^2`` on the full training data; the benchmark itself is the
time of one round at the end. Differences of accuracy within a few tenths of a percent are the
noise of a different rounding path, not a trend.

    .venv/bin/python -m pytest bench/bench_precision.py --benchmark-enable --benchmark-only -q -s
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fedopt
from fedopt.datasets import make_mnist_like
from fedopt.problems import MLP, Softmax
from fedopt.regularizers import ElasticNet

STORAGES = ("float64", "float32", "uint8")
HYPER = {"local_steps": 10, "lr_local": 0.1, "gamma": 4.0, "batch_size": 32}
_RESULTS: dict = {}


def _problem(model, storage):
    data = make_mnist_like(6000, n_clients=20, seed=0, dtype=storage)
    return Softmax(data, backend="numba") if model == "softmax" else MLP(data, hidden=32, backend="numba")


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_precision(benchmark, model, storage):
    rounds = int(os.environ.get("FEDOPT_PRECISION_ROUNDS", 200)) if not benchmark.disabled else 3
    problem = _problem(model, storage)
    result = fedopt.run("fednmap", problem, ElasticNet(1e-4, 1e-3), rounds=rounds, eval_every=rounds, seed=0,
                        progress=False, **HYPER)
    benchmark.pedantic(lambda: result.algorithm.round(result.state), warmup_rounds=1, rounds=10, iterations=1)
    last = result.history.last()
    row = {"model": model, "storage": storage, "compute": np.dtype(problem.dtype).name, "rounds": rounds,
           "test_accuracy": last["test_accuracy"], "stationarity": last["stationarity"],
           "objective": last["objective"], "bytes_per_pixel": problem.dataset.X.itemsize}
    if not benchmark.disabled:
        row["round_seconds"] = benchmark.stats.stats.min
    benchmark.extra_info.update(row)
    _RESULTS[model, storage] = row
    reference = _RESULTS.get((model, "float64"))
    relative = abs(row["stationarity"] / reference["stationarity"] - 1) if reference else 0.0
    print(f"\n{model:8s} {storage:8s} compute {row['compute']:8s} accuracy {row['test_accuracy']:.4f} "
          f"||F_nat||^2 {row['stationarity']:.6e} (relative difference to float64 {relative:.1e}) "
          f"round {1e3 * row.get('round_seconds', float('nan')):.2f} ms")
    assert np.isfinite(row["stationarity"]) and 0 <= row["test_accuracy"] <= 1
