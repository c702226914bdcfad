"""fedopt.run_batch on the GPU backend (skipped without a device): run r equals fedopt.run on the
GPU, and the CPU batch to fp64 parity."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification

import fedopt
from fedopt.datasets import partition
from fedopt.problems import Logistic, Softmax
from fedopt.regularizers import L1

CASES = [
    ("fednmap", Logistic, {"local_steps": 3, "gamma": 2.0, "lr_local": [0.05, 0.1, 0.2]}),
    ("fedcanon", Softmax, {"local_steps": 3, "lr_local": [0.05, 0.1, 0.2]}),
    ("depositum", Logistic, {"comm_period": 3, "lr": [0.05, 0.1, 0.2], "topology": "ring"}),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("method", "model", "extra"), CASES, ids=[c[0] for c in CASES])
def test_gpu_batch_equals_gpu_runs_and_the_cpu_batch(method, model, extra):
    X, y = make_classification(300, 16, n_informative=8, n_classes=3 if model is Softmax else 2, random_state=0)
    data = partition(X, y, n_clients=16, scheme="dirichlet", seed=0)
    seeds = [0, 1, 2]
    common = {"rounds": 6, "eval_every": 3, "batch_size": 8}
    gpu = fedopt.run_batch(method, model(data, backend="gpu"), L1(0.01), seeds=seeds, **common, **extra)
    cpu = fedopt.run_batch(method, model(data, backend="numba"), L1(0.01), seeds=seeds, **common, **extra)
    steps = {k: v for k, v in extra.items() if isinstance(v, list)}
    for r, (on_gpu, on_cpu) in enumerate(zip(gpu, cpu, strict=True)):
        single = fedopt.run(method, model(data, backend="gpu"), L1(0.01), seed=seeds[r], **common,
                            **{**extra, **{k: v[r] for k, v in steps.items()}})
        np.testing.assert_allclose(on_gpu.x, single.x, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(on_gpu.history["stationarity"], single.history["stationarity"], rtol=1e-10)
        np.testing.assert_allclose(on_gpu.x, on_cpu.x, rtol=1e-9, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize(("method", "extra"), [("fednmap", {"local_steps": 3, "lr_local": 0.1}),
                                               ("depositum", {"comm_period": 3, "lr": 0.1, "topology": "ring"})])
def test_gpu_batch_with_each_runs_client_weights(method, extra):
    """Partitions of other client sizes with ``weights="samples"`` in one batch, as the CPU batch."""
    X, y = make_classification(300, 16, n_informative=8, random_state=0)
    data = [partition(X, y, n_clients=16, scheme="dirichlet", seed=s) for s in (0, 1)]
    common = {"seeds": [0, 1], "rounds": 6, "eval_every": 3, "batch_size": 8, **extra}
    gpu = fedopt.run_batch(method, [Logistic(d, weights="samples", backend="gpu") for d in data], L1(0.01), **common)
    cpu = fedopt.run_batch(method, [Logistic(d, weights="samples", backend="numba") for d in data], L1(0.01),
                           **common)
    for on_gpu, on_cpu in zip(gpu, cpu, strict=True):
        np.testing.assert_allclose(on_gpu.x, on_cpu.x, rtol=1e-9, atol=1e-12)
