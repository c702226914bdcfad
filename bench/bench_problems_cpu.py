"""CPU benchmarks of the batched client oracles (issue targets in the ``note`` column).

* Logistic minibatch gradient, n = 100 clients x batch 64 x d = 784 (float64 and float32), against
  the floor of streaming the sampled rows of ``X`` once: ``bytes = n * b * d * itemsize`` and
  ``% copy`` is the achieved bandwidth over the same-process ``np.copyto`` bandwidth of as many
  elements (target: at least 60 %). ``x NumPy`` is the speed-up over the batched NumPy products
  (gather, then ``matmul``; the code the GPU backend runs on CuPy).
* MLP minibatch gradient (hidden 128, 10 classes) at the same shapes: its GFLOP/s
  (``2 n b (2 d h + 3 h k)`` flops: two products per layer forward and backward, no ``dX``)
  over the GFLOP/s of one batched ``matmul`` ``(n, b, d) @ (n, d, h)`` in this process (target:
  at least 40 %). Shown in the ``% copy`` column as ``% GEMM``; ``x NumPy`` is again over the
  batched products (the CPU runs one task per client instead, :mod:`fedopt.kernels.cpu.mlp`).

Data: MNIST-shaped Gaussian features (60 000 x 784), labels from a random linear model.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedopt import kernels as K
from fedopt.datasets import partition
from fedopt.kernels import batched
from fedopt.problems import MLP, Logistic

N_CLIENTS, BATCH, D, HIDDEN, CLASSES, N_SAMPLES = 100, 64, 784, 128, 10, 60_000


@pytest.fixture(scope="module")
def pooled():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_SAMPLES, D))
    scores = X @ rng.standard_normal((D, CLASSES))
    return X, scores


def _problem(cls, pooled, dtype, labels, **kw):
    X, _ = pooled
    ds = partition(X.astype(dtype), labels, N_CLIENTS, "sorted", dtype=np.dtype(dtype).name)
    return cls(ds, backend="numba", **kw)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_logistic_minibatch_gradient(kbench, pooled, dtype):
    problem = _problem(Logistic, pooled, dtype, (pooled[1][:, 0] > 0).astype(int))
    rng = np.random.default_rng(1)
    W = (rng.standard_normal((N_CLIENTS, problem.n_params)) * 0.01).astype(dtype)
    rows = problem.sample_rows(rng, BATCH)
    out = np.empty_like(W)
    kbench.name = f"logistic-grad-n{N_CLIENTS}-b{BATCH}-d{D}-{np.dtype(dtype).name}"
    kbench.run(lambda: problem.client_grad(W, rows, out=out), p=N_CLIENTS * BATCH * D, rounds=30)
    X, y, offsets = problem._X, problem._y, problem._offsets
    loss, grad = np.empty(0, dtype), np.empty_like(W)
    numpy_s = kbench.numpy_time(
        lambda: batched.linear_oracle(X, y, offsets, W, rows, K.LOGISTIC, 1, 1.0, False, problem._sample_weights, loss,
                                      grad), p=1_000_000)
    np.testing.assert_allclose(grad, out, rtol=1e-4 if dtype == np.float32 else 1e-9, atol=1e-7)
    elements = N_CLIENTS * BATCH * D
    kbench.record(elements, dtype, elements * np.dtype(dtype).itemsize, numpy_s=numpy_s,
                  note="target >= 60% of streaming the rows", prox_targets=False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_mlp_minibatch_gradient(kbench, pooled, dtype):
    problem = _problem(MLP, pooled, dtype, pooled[1].argmax(axis=1), hidden=HIDDEN)
    rng = np.random.default_rng(1)
    W = np.tile(problem.init(0), (N_CLIENTS, 1))
    rows = problem.sample_rows(rng, BATCH)
    out = np.empty_like(W)
    kbench.name = f"mlp-grad-h{HIDDEN}-n{N_CLIENTS}-b{BATCH}-{np.dtype(dtype).name}"
    kbench.run(lambda: problem.client_grad(W, rows, out=out), p=N_CLIENTS * BATCH * D, rounds=10)
    if not kbench.enabled:
        return
    grad = np.empty_like(W)
    numpy_s = kbench.numpy_time(lambda: batched.mlp_oracle(problem._X, problem._y, problem._offsets, W, rows, HIDDEN,
                                                           CLASSES, K.SOFTMAX, 1.0, np.empty(0, dtype),
                                                           np.empty(0, dtype), grad),
                                p=1_000_000)
    np.testing.assert_allclose(grad, out, rtol=1e-4 if dtype == np.float32 else 1e-9, atol=1e-7)
    flops = 2 * N_CLIENTS * BATCH * (2 * D * HIDDEN + 3 * HIDDEN * CLASSES)
    A = rng.standard_normal((N_CLIENTS, BATCH, D)).astype(dtype)
    B = rng.standard_normal((N_CLIENTS, D, HIDDEN)).astype(dtype)
    C = np.empty((N_CLIENTS, BATCH, HIDDEN), dtype)
    from conftest import best_time

    gemm_gflops = 2 * N_CLIENTS * BATCH * D * HIDDEN / best_time(lambda: np.matmul(A, B, out=C), rounds=20) / 1e9
    gflops = flops / kbench.min_s / 1e9
    kbench.benchmark.extra_info.update(gflops=round(gflops, 2), gemm_gflops=round(gemm_gflops, 2),
                                       pct_gemm=round(gflops / gemm_gflops, 3))
    kbench.record(N_CLIENTS * BATCH * D, dtype, None, numpy_s=numpy_s,
                  note=f"{gflops:.1f} GFLOP/s = {100 * gflops / gemm_gflops:.0f}% of GEMM {gemm_gflops:.1f} "
                       "(target >= 40%)", prox_targets=False)
