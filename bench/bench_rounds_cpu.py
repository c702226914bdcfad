"""CPU benchmarks of whole FedNMap rounds against the physical floor and a per-client NumPy peer.

Logistic regression + l1, float64, ``n`` clients, batch ``b``, ``Q`` local steps:

* sweep shape ``d = 64, n = 100, b = 8, Q = 10``: target at least 50x the per-client NumPy peer
  (``bench/peers/numpy_fednmap.py``), measured side by side in this process;
* MNIST shape ``d = 784, n = 100, b = 64, Q = 10``: target at least 70 % of the floor of
  streaming the sampled rows once (``Q n b d * 8`` bytes at the same-process copy bandwidth;
  the ``% copy`` column) and faster than the peer.

A round includes drawing the minibatch rows, the fused local steps, the weighted average and
the server prox: ``FedNMap.round(state)`` exactly as :func:`fedopt.run` calls it (BLAS on one
thread beside Numba's, ``round_context``). The MLP round (hidden 64) is reported against the
same-process GEMM rate of its largest product, and the
softmax round of ``make demo`` (the bundled digits, elastic net, ``n = 20, b = 32, Q = 10``)
against the rate of one GEMM with all of its minibatch rows, ``(Q n b, d) @ (d, classes)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedopt.algorithms import FedNMap
from fedopt.datasets import load_digits, partition
from fedopt.problems import MLP, Logistic, Softmax
from fedopt.regularizers import L1, ElasticNet
from fedopt.run import round_context

sys.path.insert(0, str(Path(__file__).parent))
from conftest import best_time
from peers.numpy_fednmap import fednmap_round

LAM, GAMMA, LR_LOCAL = 1e-3, 4.0, 0.1
SHAPES = {"sweep": (64, 100, 8, 10, 20_000), "mnist": (784, 100, 64, 10, 60_000)}  # d, n, b, Q, samples


def _logistic(d, n, samples):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, d))
    y = (X @ rng.standard_normal(d) + rng.standard_normal(samples) > 0).astype(int)
    return Logistic(partition(X, y, n, "sorted"), backend="numba")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_fednmap_round_logistic_l1(kbench, shape):
    d, n, b, Q, samples = SHAPES[shape]
    problem, reg = _logistic(d, n, samples), L1(LAM)
    method = FedNMap(local_steps=Q, lr_local=LR_LOCAL, gamma=GAMMA, batch_size=b)
    state = method.init(problem, reg, np.random.default_rng(1), np.zeros(problem.n_params))
    state = method.round(state)  # compile, and nonzero corrections
    kbench.name = f"fednmap-round-{shape}-d{d}-n{n}-b{b}-Q{Q}"
    with round_context(problem.backend):  # as fedopt.run runs them
        kbench.run(lambda: method.round(state), p=Q * n * b * d, rounds=20 if shape == "mnist" else 50)

    # the peer, on the same rows, from the same state; checked against fedopt once
    X, y = problem.dataset.X, 2.0 * problem.dataset.y - 1
    rows = problem.sample_rows(np.random.default_rng(2), b, steps=Q)
    c = list(state.vars["c"])
    check = method.replace()
    ours = _round_with_rows(check, state, rows)
    z_peer, _ = fednmap_round(X, y, rows, state.z, c, LAM, LR_LOCAL, 1.0, GAMMA)
    np.testing.assert_allclose(ours, z_peer, rtol=1e-9, atol=1e-12)
    peer_s = kbench.numpy_time(lambda: fednmap_round(X, y, rows, state.z, c, LAM, LR_LOCAL, 1.0, GAMMA), p=1_000_000)
    elements = Q * n * b * d
    kbench.record(elements, np.float64, elements * 8, numpy_s=peer_s,
                  note="NumPy = per-client peer; target " + ("50x" if shape == "sweep" else ">= 70% of copy"),
                  prox_targets=False)


def _round_with_rows(method, state, rows):
    """``method.round(state)`` with the minibatch rows fixed to ``rows``: the next server point."""
    problem = state.env.problem
    original = problem.sample_rows
    problem.sample_rows = lambda rng, batch, steps=None: rows
    try:
        return method.round(state).z
    finally:
        problem.sample_rows = original


def test_fednmap_round_mlp(kbench):
    d, n, b, Q, hidden, classes = 784, 100, 64, 10, 64, 10
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, d))
    y = (X @ rng.standard_normal((d, classes))).argmax(axis=1)
    problem = MLP(partition(X, y, n, "sorted"), hidden=hidden, backend="numba")
    method = FedNMap(local_steps=Q, lr_local=LR_LOCAL, gamma=GAMMA, batch_size=b)
    state = method.init(problem, L1(LAM), np.random.default_rng(1))
    kbench.name = f"fednmap-round-mlp-h{hidden}-n{n}-b{b}-Q{Q}"
    with round_context(problem.backend):
        kbench.run(lambda: method.round(state), p=Q * n * b * d, rounds=3)
    if not kbench.enabled:
        return
    flops = Q * 2 * n * b * (2 * d * hidden + 3 * hidden * classes)
    A, B = rng.standard_normal((n, b, d)), rng.standard_normal((n, d, hidden))
    C = np.empty((n, b, hidden))
    gemm = 2 * n * b * d * hidden / best_time(lambda: np.matmul(A, B, out=C), rounds=20) / 1e9
    gflops = flops / kbench.min_s / 1e9
    kbench.record(Q * n * b * d, np.float64, None, prox_targets=False,
                  note=f"{gflops:.1f} GFLOP/s = {100 * gflops / gemm:.0f}% of GEMM {gemm:.1f} (target >= 40%)")


def test_fednmap_round_softmax_digits(kbench):
    n, b, Q = 20, 32, 10
    problem = Softmax(load_digits(n), fit_intercept=True, backend="numba")
    d, classes = problem.dataset.n_features, problem.n_out
    method = FedNMap(local_steps=Q, lr_local=1 / Q, gamma=GAMMA, batch_size=b)
    state = method.init(problem, ElasticNet(l1=1e-3, l2=2e-2), np.random.default_rng(1))
    kbench.name = f"fednmap-round-softmax-digits-n{n}-b{b}-Q{Q}"
    with round_context(problem.backend):
        kbench.run(lambda: method.round(state), p=Q * n * b * d, rounds=50)
    if not kbench.enabled:
        return
    flops = Q * n * b * 4 * d * classes  # margins and gradient, two products a step
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((Q * n * b, d)), rng.standard_normal((d, classes))
    C = np.empty((Q * n * b, classes))
    gemm = 2 * Q * n * b * d * classes / best_time(lambda: np.matmul(A, B, out=C), rounds=50) / 1e9
    gflops = flops / kbench.min_s / 1e9
    kbench.record(Q * n * b * d, np.float64, None, prox_targets=False,
                  note=f"{gflops:.1f} GFLOP/s = {100 * gflops / gemm:.0f}% of GEMM {gemm:.1f}")
