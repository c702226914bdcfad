"""The model kernels on a run axis: ``RUNS`` runs of the same clients stacked as ``N`` client rows.

* client bounds: ``offsets`` of shape ``(3, N)`` whose client rows repeat the data's clients in a
  shuffled order agree with the reference on the same bounds, and with monotone offsets on a copy
  of the data where every client row has its own rows; their third row (the CPU kernels' visiting
  order) changes no bit of the result;
* per-row parameters: a step size and prox parameters per client row (``lr`` of shape ``(N,)``,
  ``thetas`` of shape ``(Q, N, k)``; ``gamma``, ``alpha``, ``beta`` of DEPOSITUM), and equal
  per-row values give bitwise the results of the scalar call;
* the fused GPU local steps with both, on the CUDA simulator where no GPU is present.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

from fedopt.kernels import LEAST_SQUARES, LOGISTIC, MCP, SOFT, SOFTMAX, batched, client_bounds, cpu, reference

SIZES = (3, 6, 1, 8, 5)  # rows of the data's clients: odd and even, one of a single row
RUNS = 3
N = RUNS * len(SIZES)  # client rows
STEPS = 3
BATCH = 4
DTYPES = [np.float64, np.float32]
LOSSES = {"least_squares": (LEAST_SQUARES, 1), "logistic": (LOGISTIC, 1), "softmax": (SOFTMAX, 3)}
EMPTY = np.empty((0, 0))


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)


def assert_close(got, want):
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, **tolerances(b.dtype))


def assert_identical(got, want):
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def stacked_bounds(rng):
    """``(3, N)`` bounds: RUNS copies of the clients of SIZES, shuffled together, visited in a random order."""
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    clients = rng.permutation(np.tile(np.arange(len(SIZES)), RUNS))
    return np.stack([offsets[:-1][clients], offsets[1:][clients], rng.permutation(N)])


def tiled(X, y, bounds, rows):
    """The same problem on copied data: every client row gets its own rows, with monotone
    offsets, and ``rows`` (``(..., N, b)``) is moved to the copies."""
    starts, ends = client_bounds(bounds)
    index = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
    offsets = np.concatenate([[0], np.cumsum(ends - starts)])
    moved = rows - starts[:, None] + offsets[:-1, None] if rows.shape[-1] else rows
    return X[index], y[index], offsets, moved


def draw(rng, bounds, shape):
    """Minibatch rows of shape ``(..., N, b)`` drawn within each client row's bounds (``b = 0``: all rows)."""
    return rng.integers(bounds[0][:, None], bounds[1][:, None], shape) if shape[-1] else np.empty(shape, np.int64)


def make_data(rng, dtype, d, kind=LEAST_SQUARES, n_out=1, storage="dense"):
    m = sum(SIZES)
    X = rng.standard_normal((m, d)).astype(dtype)
    if storage == "csr":
        X = sp.csr_matrix(X * (rng.uniform(size=X.shape) < 0.5))
    y = {LEAST_SQUARES: rng.standard_normal(m), LOGISTIC: np.sign(rng.standard_normal(m)),
         SOFTMAX: rng.integers(0, n_out, m)}[kind]
    return X, y.astype(dtype)


def normal(rng, shape, dtype, scale=0.3):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def per_row_thetas(rng, prox_kind, steps=STEPS, n=N):
    """Prox parameters ``(steps, n, k)`` of SOFT ``(tau, scale)`` or MCP ``(tau, knee, inv)``, one set per row."""
    if prox_kind == SOFT:
        return np.stack([rng.uniform(0.01, 0.05, (steps, n)), rng.uniform(0.8, 1.0, (steps, n))], axis=-1)
    step, lam, gamma = rng.uniform(0.1, 0.3, (steps, n)), rng.uniform(0.02, 0.1, (steps, n)), rng.uniform(2, 4, n)
    return np.stack([step * lam, gamma * lam, 1 / (1 - step / gamma)], axis=-1)


#: The CPU kernels' serial variant in both dtypes, and the parallel one (forced below its work
#: threshold) in float64 only: its compilation is slow.
VARIANTS = pytest.mark.parametrize("dtype, parallel", [(np.float64, False), (np.float32, False), (np.float64, True)],
                                   ids=["f64", "f32", "f64-parallel"])


# ------------------------------------------------------------------------------ client bounds
def check_bounds(name, modules, X, y, bounds, rows, args, fresh=(), W=None):
    """Kernel ``name`` of every module on ``bounds``, and the reference's on the copied data, agree
    with the reference's on ``bounds``; without the visiting order (``bounds[:2]``) each module
    gives bitwise the same. It is called as ``(X, y, offsets, [W,] rows, *args, *copies of fresh)``."""

    def call(module, X, y, offsets, rows):
        head = (X, y, offsets, rows) if W is None else (X, y, offsets, W, rows)
        return getattr(module, name)(*head, *args, *[a.copy() for a in fresh])

    expected = call(reference, X, y, bounds, rows)
    assert_close(call(reference, *tiled(X, y, bounds, rows)), expected)
    for module in modules:
        got = call(module, X, y, bounds, rows)
        assert_close(got, expected)
        assert_identical(got, call(module, X, y, bounds[:2], rows))


def run_steps(module, name, before, lr, prox_kind, thetas, start):
    """``module.name(*before, lr, prox_kind, thetas, w, Z, P)`` from ``Z = P = start`` (copies), ``w`` empty."""
    return getattr(module, name)(*before, lr, prox_kind, thetas, EMPTY.astype(start.dtype), start.copy(),
                                 start.copy())


def outputs(dtype, p):
    """Empty ``loss_out`` and ``grad_out`` of an oracle."""
    return np.empty(N, dtype), np.empty((N, p), dtype)


def shared_soft(dtype):
    return np.tile([0.02, 0.9], (STEPS, 1)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("d", [6, 7])
@pytest.mark.parametrize("storage", ["dense", "csr"])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_linear_kernels_on_client_bounds(loss, storage, d, dtype):
    """``linear_oracle`` (numba, and batched NumPy for dense features) and ``local_steps_linear``."""
    kind, n_out = LOSSES[loss]
    rng = np.random.default_rng(d + 10 * kind)
    bounds = stacked_bounds(rng)
    X, y = make_data(rng, dtype, d, kind, n_out, storage)
    p = n_out * (d + 1)
    model = (kind, n_out, 0.7, True)
    for batch in (BATCH, 0):
        check_bounds("linear_oracle", (cpu, batched) if storage == "dense" else (cpu,), X, y, bounds,
                     draw(rng, bounds, (N, batch)), (*model, np.empty(0, dtype)), outputs(dtype, p),
                     W=normal(rng, (N, p), dtype))
        D, start = normal(rng, (N, p), dtype, 0.1), normal(rng, (N, p), dtype)
        check_bounds("local_steps_linear", (cpu,), X, y, bounds, draw(rng, bounds, (STEPS, N, batch)),
                     (*model, D, 0.2, SOFT, shared_soft(dtype), EMPTY.astype(dtype)), (start, start))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("d", [6, 7])
def test_mlp_kernels_on_client_bounds(d, dtype):
    """``mlp_oracle`` (numba and batched NumPy), ``local_steps_mlp`` and ``tracking_steps_mlp``."""
    rng = np.random.default_rng(d)
    bounds = stacked_bounds(rng)
    h, k = 3, 3
    X, y = make_data(rng, dtype, d, SOFTMAX, k)
    p = h * (d + 1) + k * (h + 1)
    for batch in (BATCH, 0):
        check_bounds("mlp_oracle", (cpu, batched), X, y, bounds, draw(rng, bounds, (N, batch)),
                     (h, k, SOFTMAX, 0.7, np.empty(0, dtype)), outputs(dtype, p), W=normal(rng, (N, p), dtype))
        D, start = normal(rng, (N, p), dtype, 0.1), normal(rng, (N, p), dtype)
        check_bounds("local_steps_mlp", (cpu,), X, y, bounds, draw(rng, bounds, (STEPS, N, batch)),
                     (h, k, SOFTMAX, 0.7, D, 0.2, SOFT, shared_soft(dtype), EMPTY.astype(dtype)), (start, start))
        check_bounds("tracking_steps_mlp", (cpu,), X, y, bounds, draw(rng, bounds, (STEPS, N, batch)),
                     (h, k, SOFTMAX, 0.7, rng.uniform(0.5, 1.5, N), 0.6, 0.2, 0.5, True, True, SOFT,
                      np.array([0.02, 0.9], dtype), EMPTY.astype(dtype)),
                     [normal(rng, (N, p), dtype) for _ in range(5)])


def runs_of(a):
    """``a`` repeated RUNS times along its client axis (the first, or the second of ``(Q, n, b)`` rows)."""
    return np.concatenate([a] * RUNS, axis=max(0, a.ndim - 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_runs_in_order_repeat_the_single_run(dtype):
    """Bounds ``[offsets[:-1], offsets[1:]]`` repeated RUNS times: client row ``r n + i`` gives
    client ``i``'s result on the monotone offsets."""
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    single_bounds = np.stack(client_bounds(offsets))
    bounds = np.tile(single_bounds, RUNS)
    n, p = len(SIZES), 8
    X, y = make_data(rng, dtype, p - 1, LOGISTIC)
    model = (LOGISTIC, 1, 0.7, True)
    for batch in (BATCH, 0):
        rows = draw(rng, single_bounds, (STEPS, n, batch))
        W, D = normal(rng, (n, p), dtype), normal(rng, (n, p), dtype, 0.1)
        for module in (reference, cpu, batched):
            unweighted = np.empty(0, dtype)
            single = module.linear_oracle(X, y, offsets, W, rows[0], *model, unweighted, np.empty(n, dtype),
                                          np.empty((n, p), dtype))
            runs = module.linear_oracle(X, y, bounds, runs_of(W), runs_of(rows[0]), *model, unweighted,
                                        *outputs(dtype, p))
            assert_close(runs, [runs_of(a) for a in single])
        for module in (reference, cpu):
            single = run_steps(module, "local_steps_linear", (X, y, offsets, rows, *model, D), 0.2, SOFT,
                               shared_soft(dtype), W)
            runs = run_steps(module, "local_steps_linear", (X, y, bounds, runs_of(rows), *model, runs_of(D)), 0.2,
                             SOFT, shared_soft(dtype), runs_of(W))
            assert_close(runs, [runs_of(a) for a in single])


def tracking_args(rng, dtype, d, gamma, alpha, beta):
    """``(X, y, args, state)``: ``tracking_steps``'s data, its arguments after ``rows`` (least
    squares, Nesterov momentum, tracking, SOFT) and the five state arrays."""
    X, y = make_data(rng, dtype, d)
    args = (LEAST_SQUARES, 1, 0.7, True, rng.uniform(0.5, 1.5, N), gamma, alpha, beta, True, True, SOFT,
            np.array([0.02, 0.9], dtype), EMPTY.astype(dtype))
    return X, y, args, [normal(rng, (N, d + 1), dtype) for _ in range(5)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("d", [6, 7])
def test_tracking_steps_on_client_bounds(d, dtype):
    rng = np.random.default_rng(d)
    bounds = stacked_bounds(rng)
    X, y, args, state = tracking_args(rng, dtype, d, 0.6, 0.2, 0.5)
    for batch in (BATCH, 0):
        check_bounds("tracking_steps", (cpu,), X, y, bounds, draw(rng, bounds, (STEPS, N, batch)), args, state)


# ------------------------------------------------------------------------------ per-row parameters
@VARIANTS
@pytest.mark.parametrize("prox_kind", [SOFT, MCP], ids=["soft", "mcp"])
@pytest.mark.parametrize("model", ["logistic", "softmax", "softmax_csr", "mlp"])
def test_local_steps_with_per_row_lr_and_thetas(model, prox_kind, dtype, parallel, cpu_variant):
    """Per-row ``lr`` and ``(Q, N, k)`` thetas against the reference; in float64, equal per-row
    values are bitwise the scalar call."""
    cpu_variant(parallel)
    rng = np.random.default_rng(prox_kind)
    bounds = stacked_bounds(rng)
    if model == "mlp":
        h, k, d = 3, 3, 7
        X, y = make_data(rng, dtype, d, SOFTMAX, k)
        name, head, p = "local_steps_mlp", (h, k, SOFTMAX, 0.7), h * (d + 1) + k * (h + 1)
    else:
        kind, n_out = LOSSES[model.removesuffix("_csr")]
        X, y = make_data(rng, dtype, 6, kind, n_out, "csr" if model.endswith("csr") else "dense")
        name, head, p = "local_steps_linear", (kind, n_out, 0.7, True), n_out * 7
    start, D = normal(rng, (N, p), dtype), normal(rng, (N, p), dtype, 0.1)
    for batch in (BATCH, 0):
        before = (X, y, bounds, draw(rng, bounds, (STEPS, N, batch)), *head, D)
        lr, thetas = rng.uniform(0.05, 0.3, N), per_row_thetas(rng, prox_kind).astype(dtype)
        assert_close(run_steps(cpu, name, before, lr, prox_kind, thetas, start),
                     run_steps(reference, name, before, lr, prox_kind, thetas, start))
        if dtype == np.float64:
            shared, tiled_thetas = thetas[:, 0], np.repeat(thetas[:, :1], N, axis=1)
            for module in (reference, cpu):
                assert_identical(run_steps(module, name, before, np.full(N, 0.2), prox_kind, tiled_thetas, start),
                                 run_steps(module, name, before, 0.2, prox_kind, shared, start))


def test_per_row_parameters_of_the_wrong_length_are_refused():
    rng = np.random.default_rng(0)
    bounds = stacked_bounds(rng)
    X, y = make_data(rng, np.float64, 6)
    before = (X, y, bounds, draw(rng, bounds, (STEPS, N, 0)), LEAST_SQUARES, 1, 0.7, True, EMPTY)
    start = np.zeros((N, 7))
    thetas = per_row_thetas(rng, SOFT)
    with pytest.raises(ValueError, match="one per row"):
        run_steps(cpu, "local_steps_linear", before, np.ones(N - 1), SOFT, thetas, start)
    with pytest.raises(ValueError, match="thetas"):
        run_steps(cpu, "local_steps_linear", before, 0.1, SOFT, thetas[:, 1:], start)


@VARIANTS
def test_tracking_steps_with_per_row_parameters(dtype, parallel, cpu_variant):
    """Per-row ``gamma``, ``alpha``, ``beta`` and ``(N, k)`` theta against the reference; equal values
    as in the scalar (and shared theta) call."""
    cpu_variant(parallel)
    rng = np.random.default_rng(3)
    bounds = stacked_bounds(rng)
    gamma, alpha, beta = rng.uniform(0.3, 0.9, N), rng.uniform(0.05, 0.3, N), rng.uniform(0.2, 1.0, N)
    X, y, args, state = tracking_args(rng, dtype, 7, gamma, alpha, beta)
    theta = args[11]
    args = (*args[:11], np.column_stack([rng.uniform(0.0, 0.05, N), np.full(N, 0.9)]).astype(dtype), *args[12:])
    equal = (*args[:5], np.full(N, 0.6), np.full(N, 0.2), np.full(N, 0.5), *args[8:11], np.tile(theta, (N, 1)),
             *args[12:])
    scalars = (*args[:5], 0.6, 0.2, 0.5, *args[8:11], theta, *args[12:])
    for batch in (BATCH, 0):
        head = (X, y, bounds, draw(rng, bounds, (STEPS, N, batch)))
        assert_close(cpu.tracking_steps(*head, *args, *[a.copy() for a in state]),
                     reference.tracking_steps(*head, *args, *[a.copy() for a in state]))
        if dtype == np.float64:
            for module in (reference, cpu):
                assert_identical(module.tracking_steps(*head, *equal, *[a.copy() for a in state]),
                                 module.tracking_steps(*head, *scalars, *[a.copy() for a in state]))


# ------------------------------------------------------------------------------ the GPU local steps
if importlib.util.find_spec("numba.cuda") is not None:
    from numba import cuda
    from test_gpu_local_steps import NO_CUDA, fast_simulator  # noqa: F401  (a fixture)

    gpu_case = pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA)
else:
    gpu_case = pytest.mark.skip(reason="numba-cuda is not installed (pip install 'fedopt[test]')")


@pytest.mark.cudasim
@gpu_case
@pytest.mark.usefixtures("fast_simulator")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_gpu_local_steps_with_bounds_and_per_row_parameters(dtype):
    """Tiny: data clients of 3, 1 and 4 rows; four client rows, the first client twice; 2 steps."""
    from fedopt.kernels.gpu import local_steps

    rng = np.random.default_rng(1)
    bounds = np.array([[3, 0, 3, 4], [4, 3, 4, 8]])
    n, d, steps = bounds.shape[1], 5, 2
    X, y = rng.standard_normal((8, d)).astype(dtype), np.sign(rng.standard_normal(8)).astype(dtype)
    w = EMPTY.astype(dtype)
    for batch, prox_kind in ((3, MCP), (0, SOFT)):
        rows = draw(rng, bounds, (steps, n, batch))
        start, D = normal(rng, (n, d + 1), dtype), normal(rng, (n, d + 1), dtype, 0.1)
        lr, thetas = rng.uniform(0.1, 0.4, n), per_row_thetas(rng, prox_kind, steps, n)
        args = (rows, LOGISTIC, 1, 0.7, True)
        Z_ref, P_ref = reference.local_steps_linear(X, y, bounds, *args, D, lr, prox_kind, thetas, w, start.copy(),
                                                    start.copy())
        Z, P = cuda.to_device(start), cuda.to_device(start)
        assert local_steps.local_steps_linear(cuda.to_device(X), cuda.to_device(y), bounds, *args, cuda.to_device(D),
                                              lr, prox_kind, thetas, cuda.to_device(w), Z, P, block=32) is not None
        assert_close((Z.copy_to_host(), P.copy_to_host()), (Z_ref, P_ref))
