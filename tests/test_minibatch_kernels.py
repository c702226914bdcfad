"""The minibatch blocks shared by the softmax model and the MLP (``fedopt.kernels.cpu.minibatch``):
the loop products, the vectorized exp and the softmax residual, and the softmax model's kernels
on many classes (the four-by-four product blocks and their tails) and on more rows than a chunk.

Odd and even sizes; float64 must agree with NumPy to ~1e-10 and float32 to ~1e-5.
"""

import numpy as np
import pytest

from fedopt import kernels as K
from fedopt.kernels import cpu, reference
from fedopt.kernels.cpu import minibatch

DTYPES = [np.float64, np.float32]


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("m, r, n", [(1, 1, 1), (3, 5, 7), (4, 2, 8), (8, 32, 64), (13, 7, 9), (17, 10, 33)])
def test_loop_products_match_numpy(m, r, n, dtype):
    """``C = A B^T`` (four-by-four blocks, their row and column tails), ``G += S^T A`` (eight-row
    blocks) and ``C = A B``."""
    rng = np.random.default_rng(m + r + n)
    A, B = rng.standard_normal((m, n)).astype(dtype), rng.standard_normal((r, n)).astype(dtype)
    C = np.full((m, r), np.nan, dtype)
    minibatch.times_transpose(A, B, C, dtype(0))
    np.testing.assert_allclose(C, A @ B.T, **tolerances(dtype))
    S, G = rng.standard_normal((m, r)).astype(dtype), rng.standard_normal((r, n)).astype(dtype)
    expected = G + S.T @ A
    minibatch.add_transpose_times(S, A, G)
    np.testing.assert_allclose(G, expected, **tolerances(dtype))
    C = np.full((m, n), np.nan, dtype)
    minibatch.times(S, B, C)
    np.testing.assert_allclose(C, S @ B, **tolerances(dtype))


@pytest.mark.parametrize("size", [1, 7, 8, 1001])
def test_exp_matches_numpy(size):
    """To 5e-16 relative over the whole float64 range, odd and even lengths (the vector loop's tails)."""
    x = np.random.default_rng(size).uniform(-708, 709.78, size)
    got = x.copy()
    minibatch.exp_in_place(got)
    np.testing.assert_allclose(got, np.exp(x), rtol=5e-16, atol=0)


def test_exp_special_values():
    """NaN stays NaN, overflow gives inf, results below exp(-708) flush to zero, and exactly
    representable cases are exact; float32 values are computed in float64 and rounded."""
    x = np.array([np.nan, np.inf, -np.inf, 709.79, 709.78, -708.5, -800.0, 0.0, np.log(2.0)])
    got = x.copy()
    minibatch.exp_in_place(got)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[[1, 2, 3, 5, 6, 7]], [np.inf, 0.0, np.inf, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(got[[4, 8]], np.exp(x[[4, 8]]), rtol=5e-16)
    x32 = np.random.default_rng(0).uniform(-80, 80, 33).astype(np.float32)
    got32 = x32.copy()
    minibatch.exp_in_place(got32)
    np.testing.assert_array_equal(got32, np.exp(x32.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_softmax_residual_matches_reference(weighted, dtype):
    """Loss and residual of 13 rows of 7 classes, scores far apart (one exp underflows), with and
    without the loss, with and without intercepts."""
    rng = np.random.default_rng(weighted)
    m, k, count = 13, 7, 20
    scores = (rng.standard_normal((m, k)) * 30).astype(dtype)
    scores[0, 1] = scores[0, 0] - 800  # an exp that underflows to 0
    y = rng.integers(0, k, m).astype(dtype)
    weights = rng.uniform(0.5, 2, m).astype(dtype) if weighted else None
    rows = np.empty(0, np.int64)
    for b in (rng.standard_normal(k).astype(dtype), np.empty(0, dtype)):  # intercepts, or none
        loss_ref, R = reference.loss_residual(scores + (b if len(b) else 0), y, K.SOFTMAX)
        if weighted:
            loss_ref, R = loss_ref * weights, R * weights[:, None]
        for want_loss in (True, False):
            out = np.ascontiguousarray(scores.T)  # a row per class
            loss = minibatch.softmax_residual(y, weights, rows, 0, 0, b, dtype(1 / count), want_loss, out,
                                              np.empty(2 * m, dtype))
            np.testing.assert_allclose(loss, loss_ref.sum() if want_loss else 0, **tolerances(dtype))
            np.testing.assert_allclose(out.T, R / count, **tolerances(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("storage", ["float", "uint8"])
@pytest.mark.parametrize("n_out", [4, 10, 11])
def test_softmax_kernels_on_many_classes_and_long_clients(n_out, storage, dtype):
    """``linear_oracle`` (weighted and not) and ``local_steps_linear`` with softmax: class counts
    with and without a column tail, minibatches of 1 to 9 rows and full passes over a client of
    more than a chunk of rows. Weights are checked on float rows: they scale residuals that uint8
    rows reach through the same code, and each weighted uint8 variant took 6 s to compile."""
    rng = np.random.default_rng(n_out)
    offsets = np.array([0, 1, 8, 8 + minibatch.CHUNK + 45])
    n, d, steps, m = 3, 9, 2, offsets[-1]
    X = rng.integers(0, 255, (m, d)).astype(np.uint8) if storage == "uint8" else rng.standard_normal((m, d))
    X = X if storage == "uint8" else X.astype(dtype)
    scale = 1 / 255 if storage == "uint8" else 0.7
    y = rng.integers(0, n_out, m).astype(dtype)
    for fit_intercept in (False, True):
        p = n_out * (d + fit_intercept)
        W = (0.3 * rng.standard_normal((n, p))).astype(dtype)
        for batch in (1, 5, 9, 0):
            rows = np.empty((steps, n, 0), np.int64) if batch == 0 else np.stack(
                [np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)]) for _ in range(steps)])
            weightings = (np.empty(0, dtype), rng.uniform(0.5, 2, m).astype(dtype))
            for weights in weightings if storage == "float" else weightings[:1]:
                args = (X, y, offsets, W, rows[0], K.SOFTMAX, n_out, scale, fit_intercept, weights)
                want = reference.linear_oracle(*args, np.empty(n, dtype), np.empty((n, p), dtype))
                got = cpu.linear_oracle(*args, np.empty(n, dtype), np.empty((n, p), dtype))
                for a, b in zip(got, want, strict=True):
                    assert a.dtype == dtype
                    np.testing.assert_allclose(a, b, **tolerances(dtype))
            args = (X, y, offsets, rows, K.SOFTMAX, n_out, scale, fit_intercept,
                    (0.1 * rng.standard_normal((n, p))).astype(dtype), 0.2, K.SOFT,
                    np.tile([0.02, 0.9], (steps, 1)).astype(dtype), np.empty((0, 0), dtype))
            for got, want in zip(cpu.local_steps_linear(*args, W.copy(), W.copy()),
                                 reference.local_steps_linear(*args, W.copy(), W.copy()), strict=True):
                np.testing.assert_allclose(got, want, **tolerances(dtype))
