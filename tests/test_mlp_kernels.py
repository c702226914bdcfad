"""The MLP's kernels: DEPOSITUM's fused MLP iterations, and the squared-error output
(LEAST_SQUARES) of every MLP kernel against the reference.

Odd and even sizes; float64 must agree with NumPy to ~1e-10 and float32 to ~1e-5.
"""

import numpy as np
import pytest

import fedopt
from fedopt import kernels as K
from fedopt.datasets import from_client_ids
from fedopt.kernels import batched, cpu, reference
from fedopt.kernels.cpu import mlp as cpu_mlp
from fedopt.problems import MLP
from fedopt.regularizers import L1

DTYPES = [np.float64, np.float32]


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


def targets(rng, kind, k, size, dtype):
    """Class codes ``0..k-1`` for SOFTMAX, real targets for LEAST_SQUARES (``k = 1``)."""
    return (rng.integers(0, k, size) if kind == K.SOFTMAX else 2 * rng.standard_normal(size)).astype(dtype)


@pytest.mark.parametrize("dtype, parallel", [(np.float64, False), (np.float32, False), (np.float64, True)],
                         ids=["f64", "f32", "f64-parallel"])
def test_tracking_steps_mlp_matches_reference(dtype, parallel, cpu_variant):
    """``tracking_steps_mlp``: Polyak and Nesterov momentum, with and without tracking, per-node
    parameters and weights; minibatches below and above the loop products' row limits and full passes (a client
    of more than ``CHUNK`` rows takes two); softmax outputs and a squared-error output."""
    cpu_variant(parallel)
    rng = np.random.default_rng(7)
    offsets = np.array([0, 1, 8, 8 + cpu_mlp.CHUNK + 45, 8 + cpu_mlp.CHUNK + 61])
    n, steps = 4, 3
    for d, h, k, batch in ((7, 3, 2, 5), (8, 4, 3, 6), (9, 6, 3, cpu_mlp.BACKWARD_LOOP_ROWS + 1),
                           (40, 33, 4, cpu_mlp.LOOP_ROWS + 1), (8, 5, 1, 7), (9, 4, 1, cpu_mlp.LOOP_ROWS + 1)):
        kind = K.SOFTMAX if k > 1 else K.LEAST_SQUARES
        X = rng.standard_normal((offsets[-1], d)).astype(dtype)
        y = targets(rng, kind, k, offsets[-1], dtype)
        p = h * (d + 1) + k * (h + 1)
        drawn = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                          for _ in range(steps)])
        for rows in (drawn, np.empty((steps, n, 0), np.int64)):
            for nesterov, tracking in ((False, True), (True, True), (False, False)):
                state = [(0.3 * rng.standard_normal((n, p))).astype(dtype) for _ in range(5)]  # P, NU, MU, Y, G
                if not nesterov:
                    state[2] = np.empty((0, 0), dtype)
                args = (X, y, offsets, rows, h, k, kind, 0.7, rng.uniform(0.5, 1.5, n), rng.uniform(0.2, 0.8, n), 0.1,
                        0.7, nesterov, tracking, K.SOFT, np.array([0.002, 0.95], dtype), np.empty((0, 0), dtype))
                for phases in ({}, {"adapt_first": False}, {"adapt_after": True}):
                    expected = reference.tracking_steps_mlp(*args, *(a.copy() for a in state), **phases)
                    got = cpu.tracking_steps_mlp(*args, *(a.copy() for a in state), **phases)
                    for a, b in zip(got, expected, strict=True):
                        assert a.dtype == dtype
                        np.testing.assert_allclose(a, b, **tolerances(dtype))


@pytest.mark.parametrize("dtype, parallel", [(np.float64, False), (np.float32, False), (np.float64, True)],
                         ids=["f64", "f32", "f64-parallel"])
def test_squared_loss_kernels_match_reference(dtype, parallel, cpu_variant):
    """``mlp_oracle`` (Numba and batched) and ``local_steps_mlp`` with one squared-error output:
    odd and even sizes, shared and per-client points, minibatches below and above the loop
    products' row limits and full passes (a client of more than ``CHUNK`` rows takes two)."""
    cpu_variant(parallel)
    rng = np.random.default_rng(11)
    offsets = np.array([0, 1, 8, 8 + cpu_mlp.CHUNK + 45, 8 + cpu_mlp.CHUNK + 61])
    n, steps, empty = 4, 3, np.empty((0, 0), dtype)
    for d, h, batch in ((7, 3, 5), (8, 4, 6), (9, 6, cpu_mlp.BACKWARD_LOOP_ROWS + 1), (40, 33, cpu_mlp.LOOP_ROWS + 1)):
        X = rng.standard_normal((offsets[-1], d)).astype(dtype)
        y = targets(rng, K.LEAST_SQUARES, 1, offsets[-1], dtype)
        p = h * (d + 1) + h + 1
        head = (X, y, offsets)
        minibatch = np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
        for W in (rng.standard_normal((1, p)).astype(dtype), rng.standard_normal((n, p)).astype(dtype)):
            for rows in (minibatch, np.empty((n, 0), np.int64)):
                model = (W, rows, h, 1, K.LEAST_SQUARES, 0.7, np.empty(0, dtype))
                expected = reference.mlp_oracle(*head, *model, np.empty(n, dtype), np.empty((n, p), dtype))
                for module in (cpu, batched):
                    got = module.mlp_oracle(*head, *model, np.empty(n, dtype), np.empty((n, p), dtype))
                    for a, b in zip(got, expected, strict=True):
                        assert a.dtype == dtype
                        np.testing.assert_allclose(a, b, **tolerances(dtype))
                loss_only = cpu.mlp_oracle(*head, *model, np.empty(n, dtype), empty)[0]
                np.testing.assert_allclose(loss_only, expected[0], **tolerances(dtype))
        drawn = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                          for _ in range(steps)])
        thetas = np.tile([0.02, 0.9], (steps, 1)).astype(dtype)
        for rows in (drawn, np.empty((steps, n, 0), np.int64)):
            for D in (empty, (0.1 * rng.standard_normal((n, p))).astype(dtype)):
                start = (0.3 * rng.standard_normal((n, p))).astype(dtype)
                args = (*head, rows, h, 1, K.LEAST_SQUARES, 0.7, D, rng.uniform(0.1, 0.3, n), K.SOFT, thetas, empty)
                expected = reference.local_steps_mlp(*args, start.copy(), start.copy())
                got = cpu.local_steps_mlp(*args, start.copy(), start.copy())
                for a, b in zip(got, expected, strict=True):
                    assert a.dtype == dtype
                    np.testing.assert_allclose(a, b, **tolerances(dtype))


def test_squared_loss_reference_is_its_formula_and_its_gradient_the_finite_differences():
    """The reference squared-loss oracle: ``mean (O - y)^2 / 2`` of the network's output, and a
    gradient equal to the central differences of that loss (float64)."""
    rng = np.random.default_rng(5)
    offsets, (d, h, n, scale) = np.array([0, 6, 13]), (4, 3, 2, 0.7)
    X, y = rng.standard_normal((13, d)), 2 * rng.standard_normal(13)
    p = h * (d + 1) + h + 1
    W, rows = rng.standard_normal((n, p)), np.empty((n, 0), np.int64)

    def oracle(W, grad_out):
        return reference.mlp_oracle(X, y, offsets, W, rows, h, 1, K.LEAST_SQUARES, scale, np.empty(0), np.empty(n),
                                    grad_out)

    loss, grad = oracle(W, np.empty((n, p)))
    for i in range(n):
        W1, b1 = W[i, : h * d].reshape(h, d), W[i, h * d : h * d + h]
        W2, b2 = W[i, h * d + h : -1], W[i, -1]
        X_i, y_i = scale * X[offsets[i] : offsets[i + 1]], y[offsets[i] : offsets[i + 1]]
        outputs = 1 / (1 + np.exp(-(X_i @ W1.T + b1))) @ W2 + b2
        assert loss[i] == pytest.approx(np.mean((outputs - y_i) ** 2) / 2, rel=1e-12)
    eps, empty = 1e-6, np.empty((0, 0))
    # each client's loss depends only on its own row of W: one shift of coordinate j gives every client's partial
    differences = np.stack([(oracle(W + eps * e, empty)[0] - oracle(W - eps * e, empty)[0]) / (2 * eps)
                            for e in np.eye(p)], axis=1)
    np.testing.assert_allclose(grad, differences, rtol=1e-6, atol=1e-8)


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
    monkeypatch.setattr(fused_problem, "fused_tracking_steps",
                        lambda *a, **kw: calls.append(kernel(*a, **kw)) or calls[-1])
    fused = trajectory(fused_problem)
    assert len(calls) == 2 * 3 and all(calls)  # a round: up to the gossip of x, then the gradient
    stepwise_problem = problem()
    monkeypatch.setattr(stepwise_problem, "fused_tracking_steps", lambda *args, **phases: False)
    stepwise = trajectory(stepwise_problem)
    assert np.abs(np.diff(fused, axis=0)).max() > 1e-4  # the rounds move
    np.testing.assert_allclose(fused, stepwise, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fused, trajectory(problem("numpy")), rtol=1e-10, atol=1e-12)
