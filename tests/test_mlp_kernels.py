"""The MLP's CPU kernels: the loop products of small passes and DEPOSITUM's fused MLP iterations.

Odd and even sizes; float64 must agree with NumPy to ~1e-10 and float32 to ~1e-5.
"""

import numpy as np
import pytest

import fedopt
from fedopt import kernels as K
from fedopt.datasets import from_client_ids
from fedopt.kernels import cpu, reference
from fedopt.kernels.cpu import _jit
from fedopt.kernels.cpu import mlp as cpu_mlp
from fedopt.problems import MLP
from fedopt.regularizers import L1

DTYPES = [np.float64, np.float32]


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("m, r, n", [(1, 1, 1), (3, 5, 7), (4, 2, 8), (8, 32, 64), (13, 7, 9), (17, 10, 33)])
def test_loop_products_match_numpy(m, r, n, dtype):
    """``C = A B^T`` (four-row blocks, odd row and unit tails), ``G += S^T A`` (eight-row blocks)
    and ``C = A B``."""
    rng = np.random.default_rng(m + r + n)
    A, B = rng.standard_normal((m, n)).astype(dtype), rng.standard_normal((r, n)).astype(dtype)
    C = np.full((m, r), np.nan, dtype)
    cpu_mlp._times_transpose(A, B, C, dtype(0))
    np.testing.assert_allclose(C, A @ B.T, **tolerances(dtype))
    S, G = rng.standard_normal((m, r)).astype(dtype), rng.standard_normal((r, n)).astype(dtype)
    expected = G + S.T @ A
    cpu_mlp._add_transpose_times(S, A, G)
    np.testing.assert_allclose(G, expected, **tolerances(dtype))
    C = np.full((m, n), np.nan, dtype)
    cpu_mlp._times(S, B, C)
    np.testing.assert_allclose(C, S @ B, **tolerances(dtype))


@pytest.mark.parametrize("dtype, parallel", [(np.float64, False), (np.float32, False), (np.float64, True)],
                         ids=["f64", "f32", "f64-parallel"])
def test_tracking_steps_mlp_matches_reference(dtype, parallel, monkeypatch):
    """``tracking_steps_mlp``: Polyak and Nesterov momentum, with and without tracking, per-node
    parameters and weights; minibatches below and above the loop products' row limits and full passes (a client
    of more than ``CHUNK`` rows takes two)."""
    if parallel:
        monkeypatch.setattr(_jit, "PARALLEL_MIN_WORK", 0)
    rng = np.random.default_rng(7)
    offsets = np.array([0, 1, 8, 8 + cpu_mlp.CHUNK + 45, 8 + cpu_mlp.CHUNK + 61])
    n, steps = 4, 3
    for d, h, k, batch in ((7, 3, 2, 5), (8, 4, 3, 6), (9, 6, 3, cpu_mlp.BACKWARD_LOOP_ROWS + 1),
                           (40, 33, 4, cpu_mlp.LOOP_ROWS + 1)):
        X = rng.standard_normal((offsets[-1], d)).astype(dtype)
        y = rng.integers(0, k, offsets[-1]).astype(dtype)
        p = h * (d + 1) + k * (h + 1)
        drawn = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                          for _ in range(steps)])
        for rows in (drawn, np.empty((steps, n, 0), np.int64)):
            for nesterov, tracking in ((False, True), (True, True), (False, False)):
                state = [(0.3 * rng.standard_normal((n, p))).astype(dtype) for _ in range(5)]  # P, NU, MU, Y, G
                if not nesterov:
                    state[2] = np.empty((0, 0), dtype)
                args = (X, y, offsets, rows, h, k, 0.7, rng.uniform(0.5, 1.5, n), rng.uniform(0.2, 0.8, n), 0.1,
                        0.7, nesterov, tracking, K.SOFT, np.array([0.002, 0.95], dtype), np.empty((0, 0), dtype))
                expected = reference.tracking_steps_mlp(*args, *(a.copy() for a in state))
                got = cpu.tracking_steps_mlp(*args, *(a.copy() for a in state))
                for a, b in zip(got, expected, strict=True):
                    assert a.dtype == dtype
                    np.testing.assert_allclose(a, b, **tolerances(dtype))


@pytest.mark.parametrize("momentum_type", ["polyak", "nesterov"])
@pytest.mark.parametrize("batch_size", [6, None], ids=["minibatch", "full"])
def test_depositum_mlp_fused_iterations_equal_the_step_by_step_ones(momentum_type, batch_size, monkeypatch):
    """DEPOSITUM on the MLP runs its iterations between gossips as one ``tracking_steps_mlp`` call
    on the CPU; on weighted nodes with an l1 prox they walk the step-by-step trajectory and the
    NumPy reference's."""
    kw = dict(rounds=3, lr=0.05, momentum=0.6, momentum_type=momentum_type, comm_period=4, batch_size=batch_size,
              tracking_rate=0.7, seed=2)

    def problem(backend="numba"):
        rng = np.random.default_rng(3)
        X = rng.normal(size=(240, 9))
        y = (X @ rng.normal(size=(9, 3))).argmax(axis=1)
        clients = np.repeat(np.arange(6), [20, 60, 30, 50, 40, 40])
        return MLP(from_client_ids(X, y, clients), hidden=5, weights="samples", backend=backend)

    def trajectory(problem):
        models = []
        fedopt.run("depositum", problem, L1(0.01), **kw,
                   callback=lambda state, row: models.append(state.env.problem.backend.to_numpy(state.x).copy()))
        return np.array(models)

    fused_problem = problem()
    calls = []
    kernel = fused_problem.fused_tracking_steps
    monkeypatch.setattr(fused_problem, "fused_tracking_steps", lambda *args: calls.append(kernel(*args)) or calls[-1])
    fused = trajectory(fused_problem)
    assert len(calls) == 3 and all(calls)
    stepwise_problem = problem()
    monkeypatch.setattr(stepwise_problem, "fused_tracking_steps", lambda *args: False)
    stepwise = trajectory(stepwise_problem)
    assert np.abs(np.diff(fused, axis=0)).max() > 1e-4  # the rounds move
    np.testing.assert_allclose(fused, stepwise, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fused, trajectory(problem("numpy")), rtol=1e-10, atol=1e-12)
