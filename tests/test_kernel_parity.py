"""Every backend against the NumPy reference, for every regularizer and the fused normal-map step.

Sizes are odd and even, vectors and batches, small (serial kernels) and large enough to take the
parallel and chunked paths; float64 must agree to ~1e-10 and float32 to ~1e-5.
"""

import itertools

import numpy as np
import pytest

from fedopt import regularizers as R
from fedopt.kernels.cpu import _jit

#: Every size runs on all of Numba's threads: the large ones are the parallel variants' parity tests.
pytestmark = pytest.mark.parallel

P = 12  # coordinates of the small cases; regularizers with per-coordinate data are built per p


def make_regularizers(p):
    rng = np.random.default_rng(p)
    return {
        "zero": R.Zero(),
        "l1": R.L1(0.4),
        "l1_weighted": R.L1(0.4, weights=rng.uniform(0, 2, p)),
        "elasticnet": R.ElasticNet(0.3, 0.8),
        "masked_elasticnet": R.Masked(R.ElasticNet(0.3, 0.8), rng.uniform(size=p) < 0.7),
        "masked_l1_weighted": R.Masked(R.L1(0.4, weights=rng.uniform(0, 2, p - 1)), np.arange(p) != 0),
        "masked_mcp": R.Masked(R.MCP(0.6, gamma=2.5), rng.uniform(size=p) < 0.7),
        "masked_scad": R.Masked(R.SCAD(0.5, a=3.7), rng.uniform(size=p) < 0.7),
        "group_contiguous": R.GroupLasso(0.5, groups=1 if p % 2 else 2),
        "group_permuted": R.GroupLasso(0.5, groups=rng.integers(0, 3, p)),
        "box": R.Box(-0.4, 0.6),
        "box_vector": R.Box(-rng.uniform(0, 1, p), rng.uniform(0, 1, p)),
        "nonnegative": R.NonNegative(),
        "l2_ball": R.L2Ball(1.3),
        "l2_ball_center": R.L2Ball(0.7, center=rng.standard_normal(p)),
        "l1_ball": R.L1Ball(1.5),
        "simplex": R.Simplex(2.0),
        "mcp": R.MCP(0.6, gamma=2.5),
        "scad": R.SCAD(0.5, a=3.7),
    }


# (1501, 7): tiles of several short rows, the last one partial
SHAPES = [(7,), (8,), (3, 7), (2, 8), (1, 33), (1501, 7)]
LARGE_SHAPES = [(1, 200_001), (3, 50_000), (20_001, 8)]  # parallel kernels; simplex chunks merged
DTYPES = [np.float64, np.float32]
NAMES = list(make_regularizers(P))


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)


def sample(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 1.5).astype(dtype)


def check_prox(reg, z, step):
    expected = reg.prox(z, step, backend="numpy")
    got = reg.prox(z, step)
    assert got.dtype == z.dtype and got.shape == z.shape
    np.testing.assert_allclose(got, expected, **tolerances(z.dtype))
    out = np.empty_like(z)
    assert reg.prox(z, step, out=out) is out
    np.testing.assert_allclose(out, expected, **tolerances(z.dtype))
    inplace = z.copy()
    reg.prox(inplace, step, out=inplace)
    np.testing.assert_allclose(inplace, expected, **tolerances(z.dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_prox_matches_reference(name, shape, dtype):
    reg = make_regularizers(shape[-1])[name]
    check_prox(reg, sample(shape, dtype), step=0.7)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", LARGE_SHAPES, ids=str)
@pytest.mark.parametrize("name", ["l1", "mcp", "scad", "box_vector", "group_permuted", "l2_ball_center", "l1_ball",
                                  "simplex"])
def test_prox_matches_reference_on_parallel_paths(name, shape, dtype):
    assert np.prod(shape) >= _jit.PARALLEL_MIN_WORK
    reg = make_regularizers(shape[-1])[name]
    check_prox(reg, sample(shape, dtype, seed=1), step=0.3)


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("shape", [(100, 1000), (100, 700), (1000, 100), (20_001, 8), (1, 200_001), (3, 50_000)],
                         ids=str)
def test_tiles_of_whole_rows_come_in_a_multiple_of_the_threads(shape, threads):
    """The tiles of a parallel call cover every element once; tiles of whole rows (rows shorter than
    a tile) are a multiple of the threads, so that none waits for another's last tile."""
    from fedopt.kernels.cpu.elementwise import BLOCK, _tiles, tile_columns

    n, p = shape
    columns = tile_columns.py_func(n, p, threads)
    assert 0 < columns <= BLOCK
    row_tiles, column_tiles, rows_per_tile = _tiles.py_func(n, p, columns)  # the kernels' own tiling
    assert (row_tiles - 1) * rows_per_tile < n <= row_tiles * rows_per_tile
    assert (column_tiles - 1) * columns < p <= column_tiles * columns or rows_per_tile > 1
    if rows_per_tile > 1:  # tiles of whole rows
        assert column_tiles == 1 and row_tiles % threads == 0
    else:
        assert row_tiles * column_tiles >= 4 * threads


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("extra", [3, 4], ids=["odd", "even"])
@pytest.mark.parametrize("name", ["simplex", "l1_ball"])
def test_long_rows_beyond_the_shift_ratio_match_reference_in_place(name, extra, dtype):
    """Long rows whose largest entries dwarf the radius are projected again on the shifted row; in
    place, that must read the input, not the shrunk row already written over it (it gave NaN)."""
    from fedopt.kernels.cpu.rows import ROW_CHUNK

    z = sample((2, ROW_CHUNK + extra), dtype, seed=7)
    z[0, [5, 9]] = 1e16  # off the sample that brackets the threshold: the safe path
    check_prox(make_regularizers(P)[name], z, step=1.0)


@pytest.mark.parametrize("p", [7, 8, (1 << 16) + 3, (1 << 16) + 4], ids=["7", "8", "long_odd", "long_even"])
@pytest.mark.parametrize("name", ["l2_ball", "l2_ball_center", "group_contiguous", "group_permuted"])
def test_float32_tiny_rows_are_squared_in_float64_like_reference(name, p):
    """float32 entries of 1e-23 .. 1e-19 have squares below float32's normal range (1.2e-38): squared
    in float32 they kept a few digits, or none (the projection of [3e-23, 4e-23] on a ball 6 % off)."""
    rng = np.random.default_rng(p)
    z = (rng.standard_normal((4, p)) * np.array([[3e-23], [1e-22], [1e-21], [1e-19]])).astype(np.float32)
    reg = {
        "l2_ball": R.L2Ball(1e-23),
        "l2_ball_center": R.L2Ball(1e-23, center=rng.standard_normal(p) * 1e-23),
        "group_contiguous": R.GroupLasso(1e-23, groups=np.repeat([0, 1], [3, p - 3])),
        "group_permuted": R.GroupLasso(1e-23, groups=rng.integers(0, 3, p)),
    }[name]
    expected = reg.prox(z, 1.0, backend="numpy")
    assert ((expected != 0) & (expected != z)).any(axis=1).all()  # every row shrunk or projected, not only zeroed
    np.testing.assert_allclose(reg.prox(z, 1.0), expected, rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(7,), (8,), (3, 9), (2, 10)], ids=str)
def test_nuclear_matches_reference(shape, dtype):
    p = shape[-1]
    rows = next(d for d in (3, 2, 1) if p % d == 0)
    check_prox(R.Nuclear(0.5, shape=(rows, p // rows)), sample(shape, dtype), step=0.8)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(7,), (3, 8), (1501, 7), (4, 50_001), (20_001, 8)], ids=str)
@pytest.mark.parametrize("with_correction", [False, True], ids=["no_c", "c"])
@pytest.mark.parametrize("name", ["zero", "l1_weighted", "elasticnet", "box_vector", "mcp", "scad", "group_permuted",
                                  "simplex"])
def test_normal_map_step_matches_reference(name, shape, with_correction, dtype):
    p = shape[-1]
    reg = make_regularizers(p)[name]
    z, grad = sample(shape, dtype, 2), sample(shape, dtype, 3)
    z_ref, x_ref = sample((p,), dtype, 4), sample((p,), dtype, 5)
    correction = sample(shape, dtype, 6) if with_correction else None
    args = (z, grad, z_ref, x_ref, 0.05, 1.5, correction)
    z_expected, x_expected = reg.normal_map_step(*args, backend="numpy")
    z_new, x_new = reg.normal_map_step(*args)
    np.testing.assert_allclose(z_new, z_expected, **tolerances(dtype))
    np.testing.assert_allclose(x_new, x_expected, **tolerances(dtype))
    # in place on the inputs, as the local loop runs it
    z_inplace = z.copy()
    reg.normal_map_step(z_inplace, grad, z_ref, x_ref, 0.05, 1.5, correction, z_out=z_inplace, x_out=z_inplace * 0)
    np.testing.assert_allclose(z_inplace, z_expected, **tolerances(dtype))


@pytest.mark.parametrize("name", ["l1", "mcp", "scad", "box", "l2_ball", "simplex", "l1_ball", "group_contiguous"])
def test_nan_propagates_like_reference(name):
    reg = make_regularizers(9)[name]
    z = sample((2, 9), np.float64)
    z[0, 4] = np.nan
    z[1, 2] = np.inf
    expected = reg.prox(z, 0.5, backend="numpy")
    got = reg.prox(z, 0.5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(got[0]).any(), "a NaN input must stay visible in the output"
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-12)


def test_second_call_does_not_recompile():
    from fedopt.kernels.cpu import elementwise

    reg, z = R.L1(0.1), sample((3, 10), np.float64)
    reg.prox(z, 0.5)
    reg.prox(z.astype(np.float32), 0.5)
    compiled = len(elementwise.prox_elementwise_kernel.serial.signatures)
    assert compiled >= 2
    for dtype, shape in [(np.float64, (3, 10)), (np.float32, (5,)), (np.float64, (2, 4))]:
        R.ElasticNet(0.1, 0.2).prox(sample(shape, dtype), 0.5)
        R.MCP(0.1, 3.0).prox(sample(shape, dtype), 0.5)
        reg.prox(np.asfortranarray(sample((4, 6), dtype)), 0.5)  # converted to C order at the boundary
    assert len(elementwise.prox_elementwise_kernel.serial.signatures) == compiled


@pytest.mark.parametrize("module", ["reference", "cpu"])
def test_kernel_modules_implement_the_contract(module):
    import importlib

    from fedopt.kernels import KERNEL_NAMES

    kernels = importlib.import_module(f"fedopt.kernels.{module}")
    missing = [name for name in KERNEL_NAMES if not callable(getattr(kernels, name, None))]
    assert not missing, f"fedopt.kernels.{module} lacks {missing}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("kind, n_out", [(0, 1), (1, 1), (2, 3)], ids=["least_squares", "logistic", "softmax"])
@pytest.mark.parametrize("storage", ["dense", "csr"])
def test_fused_local_steps_match_reference(kind, n_out, storage, dtype):
    """``local_steps_linear`` on minibatches of 1 to 5 rows (the four-row groups and their short
    tails) and on full batches, with and without an intercept and a shift, for three prox forms;
    CSR rows also centered (the problems' ``center``), which the kernel declines on dense rows."""
    import scipy.sparse as sp

    from fedopt import kernels as K
    from fedopt.kernels import cpu, reference

    rng = np.random.default_rng(kind)
    offsets = np.array([0, 6, 7, 19, 30])
    n, d, steps = 4, 9, 3
    X = rng.standard_normal((30, d)).astype(dtype)
    if storage == "csr":
        X = sp.csr_matrix(X * (rng.uniform(size=X.shape) < 0.5))
    y = [rng.standard_normal(30), np.sign(rng.standard_normal(30)), rng.integers(0, n_out, 30)][kind].astype(dtype)
    mu = rng.uniform(-1, 1, d).astype(dtype)
    proxes = [(K.SOFT, np.tile([0.02, 0.9], (steps, 1))), (K.CLIP, np.tile([-0.3, 0.25], (steps, 1))),
              (K.IDENTITY, np.zeros((steps, 2)))]
    for batch in (1, 2, 3, 4, 5, 0):
        rows = np.empty((steps, n, 0), np.int64) if batch == 0 else np.stack(
            [np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)]) for _ in range(steps)])
        for fit_intercept in (False, True):
            p = n_out * (d + fit_intercept)
            for prox_kind, thetas in proxes:
                for D, center in itertools.product(
                        (np.empty((0, 0), dtype), (0.1 * rng.standard_normal((n, p))).astype(dtype)), (None, mu)):
                    start = (0.3 * rng.standard_normal((n, p))).astype(dtype)
                    args = (X, y, offsets, rows, kind, n_out, 0.7, fit_intercept, D, 0.2, prox_kind,
                            thetas.astype(dtype), np.empty((0, 0), dtype))
                    if center is not None and storage == "dense":
                        assert cpu.local_steps_linear(*args, start, start, center=center) is None
                        continue
                    Z_ref, P_ref = reference.local_steps_linear(*args, start.copy(), start.copy(), center=center)
                    Z, P = cpu.local_steps_linear(*args, start.copy(), start.copy(), center=center)
                    assert Z.dtype == P.dtype == dtype
                    np.testing.assert_allclose(Z, Z_ref, **tolerances(dtype))
                    np.testing.assert_allclose(P, P_ref, **tolerances(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("features", ["float", "uint8"])
def test_mlp_kernels_match_reference(features, dtype):
    """``mlp_oracle`` and ``local_steps_mlp``: odd and even sizes, shared and per-client points,
    minibatches and full passes (a 301-row client takes two chunks), serial and (float64 features)
    parallel variants: the parallel one compiles for about 19 s a storage and dtype, and its source
    is the serial one's, which every pair checks."""
    from fedopt import kernels as K
    from fedopt.kernels import cpu, reference
    from fedopt.kernels.cpu.mlp import CHUNK

    rng = np.random.default_rng(len(features))
    offsets = np.array([0, 1, 8, 8 + CHUNK + 45, 8 + CHUNK + 61])
    n, steps = 4, 3
    parallel = [(40, 33, 4, 33)] if (features, dtype) == ("float", np.float64) else []  # parallel work
    for d, h, k, batch in ((7, 3, 2, 5), (8, 4, 3, 6), *parallel):
        X = rng.standard_normal((offsets[-1], d))
        X = rng.integers(0, 256, X.shape).astype(np.uint8) if features == "uint8" else X.astype(dtype)
        scale = 1 / 255 if features == "uint8" else 0.7
        y = rng.integers(0, k, offsets[-1]).astype(dtype)
        p = h * (d + 1) + k * (h + 1)
        minibatch = np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
        for W in (rng.standard_normal((1, p)).astype(dtype), rng.standard_normal((n, p)).astype(dtype)):
            for rows in (minibatch, np.empty((n, 0), np.int64)):
                unweighted = np.empty(0, dtype)
                loss_ref, grad_ref = reference.mlp_oracle(X, y, offsets, W, rows, h, k, K.SOFTMAX, scale, unweighted,
                                                          np.empty(n, dtype), np.empty((n, p), dtype))
                loss, grad = cpu.mlp_oracle(X, y, offsets, W, rows, h, k, K.SOFTMAX, scale, unweighted,
                                            np.empty(n, dtype), np.empty((n, p), dtype))
                np.testing.assert_allclose(loss, loss_ref, **tolerances(dtype))
                np.testing.assert_allclose(grad, grad_ref, **tolerances(dtype))
                loss_only = cpu.mlp_oracle(X, y, offsets, W, rows, h, k, K.SOFTMAX, scale, unweighted,
                                           np.empty(n, dtype), np.empty((0, 0), dtype))[0]
                np.testing.assert_allclose(loss_only, loss_ref, **tolerances(dtype))
        drawn = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                          for _ in range(steps)])
        for rows in (drawn, np.empty((steps, n, 0), np.int64)):
            for prox_kind, theta in ((K.SOFT, [0.02, 0.9]), (K.CLIP, [-0.3, 0.25]), (K.IDENTITY, [0.0, 0.0])):
                for D in (np.empty((0, 0), dtype), (0.1 * rng.standard_normal((n, p))).astype(dtype)):
                    start = (0.3 * rng.standard_normal((n, p))).astype(dtype)
                    args = (X, y, offsets, rows, h, k, K.SOFTMAX, scale, D, 0.2, prox_kind,
                            np.tile(theta, (steps, 1)).astype(dtype), np.empty((0, 0), dtype))
                    Z_ref, P_ref = reference.local_steps_mlp(*args, start.copy(), start.copy())
                    Z, P = cpu.local_steps_mlp(*args, start.copy(), start.copy())
                    assert Z.dtype == P.dtype == dtype
                    np.testing.assert_allclose(Z, Z_ref, **tolerances(dtype))
                    np.testing.assert_allclose(P, P_ref, **tolerances(dtype))


@pytest.mark.parametrize("shape", [(7, 5), (8, 4), (3, 7, 9), (2, 8, 1)], ids=str)
def test_minibatch_rows_match_reference(shape):
    from fedopt.kernels import reference
    from fedopt.kernels.cpu.sampling import minibatch_rows

    rng = np.random.default_rng(shape[-1])
    sizes = rng.integers(1, 1000, shape[-2]).astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    u = rng.random(shape)
    u[..., 0] = np.nextafter(1.0, 0.0)  # the largest draw stays on the client's last row
    expected = reference.minibatch_rows(u, sizes, starts)
    rows = minibatch_rows(u, sizes, starts)
    assert rows.dtype == np.int64 and rows.shape == shape
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(rows[..., 0], np.broadcast_to(starts + sizes.astype(np.int64) - 1, rows.shape[:-1]))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("kind, n_out, storage", [(0, 1, "dense"), (1, 1, "csr"), (2, 3, "dense"), (2, 3, "csr")],
                         ids=["least_squares", "logistic_csr", "softmax", "softmax_csr"])
def test_tracking_steps_match_reference(kind, n_out, storage, dtype):
    """``tracking_steps`` (DEPOSITUM's local iterations): Polyak and Nesterov momentum, with and
    without tracking (the ablation's ``y = g_new``, beta unused), minibatches and full passes,
    weighted nodes, the serial and (float64, as for the MLP kernels) parallel variants; CSR rows also
    centered (serially)."""
    import scipy.sparse as sp

    from fedopt import kernels as K
    from fedopt.kernels import cpu, reference

    rng = np.random.default_rng(kind + 10 * n_out)
    for n, per_node, d, batch in ((4, 7, 9, 3), *[(12, 40, 64, 25)] * (dtype == np.float64)):  # parallel work
        offsets = np.arange(n + 1) * per_node
        X = rng.standard_normal((offsets[-1], d)).astype(dtype)
        if storage == "csr":
            X = sp.csr_matrix(X * (rng.uniform(size=X.shape) < 0.5))
        y = [rng.standard_normal(offsets[-1]), np.sign(rng.standard_normal(offsets[-1])),
             rng.integers(0, n_out, offsets[-1])][kind].astype(dtype)
        p, steps = n_out * (d + 1), 3
        node_scale = rng.uniform(0.5, 1.5, n)
        minibatch = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                              for _ in range(steps)])
        for rows in (minibatch, np.empty((steps, n, 0), np.int64)):
            for nesterov in (False, True):
                for tracking in (True, False):
                    for prox_kind, theta in ((K.SOFT, [0.02, 0.9]), (K.IDENTITY, [0.0, 0.0])):
                        start = [(0.3 * rng.standard_normal((n, p))).astype(dtype) for _ in range(5)]
                        if not nesterov:
                            start[2] = np.empty((0, 0), dtype)
                        args = (X, y, offsets, rows, kind, n_out, 0.7, True, node_scale, 0.6, 0.2, 0.5, nesterov,
                                tracking, prox_kind, np.array(theta, dtype), np.empty((0, 0), dtype))
                        # centered CSR rows on the serial size only: the parallel variant compiles for a minute
                        centered = storage == "csr" and n == 4
                        centers = (None, rng.uniform(-1, 1, d).astype(dtype)) if centered else (None,)
                        if storage == "dense":  # declined: the caller steps array-wise
                            assert cpu.tracking_steps(*args, *start, center=np.zeros(d, dtype)) is None
                        for phases in ({}, {"adapt_first": False}, {"adapt_after": True},
                                       *({"center": center} for center in centers[1:])):
                            expected = reference.tracking_steps(*args, *[a.copy() for a in start], **phases)
                            result = cpu.tracking_steps(*args, *[a.copy() for a in start], **phases)
                            for got, want in zip(result, expected, strict=True):
                                assert got.dtype == dtype
                                np.testing.assert_allclose(got, want, **tolerances(dtype))


def test_tracking_steps_split_around_the_gossip_equal_one_call():
    """DEPOSITUM's split of an iteration: ``adapt_after`` on the first T - 1 iterations, then the
    last iteration with ``adapt_first=False``, is the T-iteration call when nothing runs between."""
    from fedopt import kernels as K
    from fedopt.kernels import cpu, reference

    rng = np.random.default_rng(5)
    n, per_node, d, batch, steps = 5, 9, 7, 4, 3
    offsets = np.arange(n + 1) * per_node
    X, y = rng.standard_normal((offsets[-1], d)), np.sign(rng.standard_normal(offsets[-1]))
    rows = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], batch) for i in range(n)])
                     for _ in range(steps)])
    for module in (reference, cpu):
        for nesterov in (False, True):
            start = [0.3 * rng.standard_normal((n, d + 1)) for _ in range(5)]
            if not nesterov:
                start[2] = np.empty((0, 0))
            tail = (K.LOGISTIC, 1, 0.7, True, np.ones(n), 0.6, 0.2, 0.5, nesterov, True, K.SOFT,
                    np.array([0.02, 0.9]), np.empty((0, 0)))
            whole = module.tracking_steps(X, y, offsets, rows, *tail, *[a.copy() for a in start])
            split = module.tracking_steps(X, y, offsets, rows[:-1], *tail, *[a.copy() for a in start],
                                          adapt_after=True)
            split = module.tracking_steps(X, y, offsets, rows[-1:], *tail, *split, adapt_first=False)
            for a, b in zip(split, whole, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
