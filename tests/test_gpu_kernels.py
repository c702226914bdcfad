"""Parity of the GPU kernels (:mod:`fedopt.kernels.gpu`) with the NumPy reference.

* ``cudasim`` tests run the Numba-CUDA row kernels of :mod:`fedopt.kernels.gpu.rows` on tiny grids
  of 32- or 64-thread blocks: on the CUDA simulator where no GPU is present (``tests/conftest.py``
  sets ``NUMBA_ENABLE_CUDASIM=1`` before Numba is imported), on the device otherwise.
* ``gpu`` tests run every function of :mod:`fedopt.kernels.gpu` on CuPy arrays; they are skipped
  by ``tests/conftest.py`` unless the gpu backend works on this machine.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fedopt.kernels import (
    CLIP,
    CLIP_VECTOR,
    IDENTITY,
    KIND_NAMES,
    MCP,
    MCP_WEIGHTED,
    SCAD,
    SCAD_WEIGHTED,
    SOFT,
    SOFT_MASKED,
    SOFT_WEIGHTED,
    reference,
)

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'fedopt[test]')")

from fedopt.kernels.gpu import rows  # noqa: E402  (only once numba.cuda is known to import)

NO_CUDA = "no CUDA device, and the CUDA simulator is off (NUMBA_ENABLE_CUDASIM=1 must be set before numba is imported)"
DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-10}


@pytest.fixture
def fast_simulator():
    """The simulator runs each CUDA thread as an OS thread and polls them all at every syncthreads;
    a short GIL switch interval makes that about 10x faster."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def assert_close(actual, expected, dtype):
    np.testing.assert_allclose(actual, expected, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)


def scaled_rows(rng, n, p, dtype, scales=(0.05, 1.0, 10.0)):
    """Normal rows multiplied by 0.05, 1, 10, ...: one row usually inside a unit ball, the others outside."""
    return (rng.normal(size=(n, p)) * np.resize(scales, n)[:, None]).astype(dtype)


def run_rows(launcher, z, *args, inplace=False, block=32):
    """``launcher(z, *args, out, block=block)`` on device copies of the arrays; the result on the host."""
    device_z = cuda.to_device(z)
    device_args = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    out = device_z if inplace else cuda.device_array_like(device_z)
    launcher(device_z, *device_args, out, block=block)
    return out.copy_to_host()


# --------------------------------------------------------------------------------------------
# Numba-CUDA row kernels, on the simulator


class TestRowKernels:
    pytestmark = [  # noqa: RUF012 (pytest reads this list)
        pytest.mark.cudasim,
        pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA),
        pytest.mark.usefixtures("fast_simulator"),
    ]

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize(
        "n, p, centered, inplace",
        [(1, 7, False, False), (3, 33, False, True), (3, 33, True, False), (1, 8, True, True)],
    )
    def test_l2_ball_matches_reference(self, rng, dtype, n, p, centered, inplace):
        z = scaled_rows(rng, n, p, dtype)
        center = rng.normal(scale=0.1, size=p).astype(dtype) if centered else np.zeros(0, dtype)
        expected = reference.project_l2_ball(z, center, 1.0, np.empty_like(z))
        assert_close(run_rows(rows.project_l2_ball, z, center, 1.0, inplace=inplace), expected, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("starts, permuted", [([0, 3, 4, 8], False), ([0, 5, 6, 20, 33], True)])
    @pytest.mark.parametrize("inplace", [False, True])
    def test_group_soft_threshold_matches_reference(self, rng, dtype, starts, permuted, inplace):
        p = starts[-1]
        z = scaled_rows(rng, 2, p, dtype)
        order = rng.permutation(p) if permuted else np.zeros(0, np.int64)
        z[0, order[starts[1] : starts[2]] if permuted else slice(starts[1], starts[2])] = 0  # a zero group stays 0
        starts = np.asarray(starts, np.int64)
        tau = rng.uniform(0.0, 3.0, size=len(starts) - 1).astype(dtype)
        expected = reference.prox_group(z, starts, order, tau, 0.8, np.empty_like(z))
        assert_close(run_rows(rows.prox_group, z, starts, order, tau, 0.8, inplace=inplace), expected, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, p, block, inplace", [(1, 7, 32, False), (3, 33, 32, True), (3, 33, 64, False)])
    @pytest.mark.parametrize("radius", [1.0, 2.5])
    def test_simplex_matches_reference(self, rng, dtype, n, p, block, radius, inplace):
        z = scaled_rows(rng, n, p, dtype)
        expected = reference.project_simplex(z, radius, np.empty_like(z))
        assert_close(run_rows(rows.project_simplex, z, radius, inplace=inplace, block=block), expected, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, p, block, inplace", [(1, 8, 32, False), (3, 33, 32, True), (3, 33, 64, False)])
    @pytest.mark.parametrize("radius", [0.5, 1e3])  # rows outside, or all inside
    def test_l1_ball_matches_reference(self, rng, dtype, n, p, block, radius, inplace):
        z = scaled_rows(rng, n, p, dtype, scales=(0.01, 1.0, 10.0))  # with radius 0.5, row 0 is inside
        expected = reference.project_l1_ball(z, radius, np.empty_like(z))
        assert_close(run_rows(rows.project_l1_ball, z, radius, inplace=inplace, block=block), expected, dtype)

    @pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0 in simulated NumPy scalars
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_non_finite_rows_propagate_like_the_reference(self, rng, dtype):
        z = scaled_rows(rng, 3, 9, dtype)
        z[0, 4] = np.nan
        z[2, 0] = np.inf
        starts = np.array([0, 4, 9], np.int64)
        tau = np.array([0.5, 0.5], dtype)
        empty = np.zeros(0, dtype)
        cases = [
            (rows.project_l2_ball, reference.project_l2_ball, (empty, 1.0)),
            (rows.prox_group, reference.prox_group, (starts, np.zeros(0, np.int64), tau, 1.0)),
            (rows.project_simplex, reference.project_simplex, (1.0,)),
            (rows.project_l1_ball, reference.project_l1_ball, (1.0,)),
        ]
        for launcher, oracle, args in cases:
            expected = oracle(z, *args, np.empty_like(z))
            assert np.isnan(expected).any() and np.isfinite(expected[1]).all()
            assert_close(run_rows(launcher, z, *args), expected, dtype)

    @pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the plain sums, in simulated scalars
    def test_huge_tiny_and_zero_rows_like_the_reference(self, rng):
        """Squared norms that overflow (entries of 1e200) or underflow (1e-170) are computed again,
        scaled by the largest entry: the projection of a huge row is its direction, a tiny row
        keeps its scale, and a zero row stays 0."""
        z = np.zeros((4, 9))
        z[0, :2], z[1, :2], z[3] = [3e200, -4e200], [3e-170, -4e-170], rng.normal(size=9)
        starts, order = np.array([0, 4, 9], np.int64), np.zeros(0, np.int64)
        cases = [(rows.project_l2_ball, reference.project_l2_ball, (np.zeros(0), 1.0)),
                 (rows.project_l2_ball, reference.project_l2_ball, (np.zeros(0), 1e-170)),
                 (rows.prox_group, reference.prox_group, (starts, order, np.array([1e-170, 0.5]), 1.0))]
        for launcher, oracle, args in cases:
            np.testing.assert_allclose(run_rows(launcher, z, *args), oracle(z, *args, np.empty_like(z)), rtol=1e-12,
                                       atol=0)
        np.testing.assert_allclose(run_rows(rows.project_l2_ball, z, np.zeros(0), 1.0)[0, :2], [0.6, -0.8], rtol=1e-12)
        np.testing.assert_allclose(run_rows(rows.prox_group, z, starts, order, np.array([1e-170, 0.5]), 1.0)[1, :2],
                                   [2.4e-170, -3.2e-170], rtol=1e-12)  # norm 5e-170, shrunk by 1 - 1/5

    @pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the plain sums, in simulated scalars
    @pytest.mark.parametrize("centered", [False, True])
    def test_l2_ball_of_a_finite_row_whose_norm_overflows_like_the_reference(self, centered):
        """A finite row whose norm exceeds float64's range (6 entries of 1e308) is projected on the
        ball, not sent to the center by ``radius / inf``: the radius is compared in units of the
        row's largest entry."""
        z = np.zeros((3, 8))
        z[0, :6], z[1, :2], z[2, :5] = 1e308, [1.5e308, -1.5e308], [-1e308, 1e308, 1e308, 1.0, 2.0]
        center = np.full(8, 0.5) if centered else np.zeros(0)
        for radius in (1.0, 1e308):
            expected = reference.project_l2_ball(z, center, radius, np.empty_like(z))
            np.testing.assert_allclose(run_rows(rows.project_l2_ball, z, center, radius), expected, rtol=1e-12, atol=0)
        np.testing.assert_allclose(run_rows(rows.project_l2_ball, z, np.zeros(0), 1e308)[0, :6], 1e308 / np.sqrt(6),
                                   rtol=1e-12)

    #: Rows of float32 entries whose squares are subnormal in float32 (below 1.2e-38) but sum far above SQUARES_MIN.
    TINY_SCALES = (3e-23, 1e-22, 1e-21, 1e-19)

    @pytest.mark.parametrize("p, centered", [(7, False), (8, True)])
    def test_float32_l2_ball_of_tiny_rows_like_the_reference(self, rng, p, centered):
        """float32 entries of 1e-23 .. 1e-19 are squared in float64, as the reference does: float32
        squares keep a few digits of them, or none (6 % off the projection of [3e-23, 4e-23])."""
        z = scaled_rows(rng, 4, p, np.float32, scales=self.TINY_SCALES)
        center = (rng.normal(size=p) * 1e-23).astype(np.float32) if centered else np.zeros(0, np.float32)
        expected = reference.project_l2_ball(z, center, 1e-23, np.empty_like(z))
        diff = expected.astype(np.float64) - (center if centered else 0.0)
        np.testing.assert_allclose(np.linalg.norm(diff, axis=1), 1e-23, rtol=1e-5)  # every row is projected
        np.testing.assert_allclose(run_rows(rows.project_l2_ball, z, center, 1e-23), expected, rtol=1e-5, atol=0)

    @pytest.mark.parametrize("p, permuted", [(7, False), (8, True)])
    def test_float32_group_soft_threshold_of_tiny_rows_like_the_reference(self, rng, p, permuted):
        z = scaled_rows(rng, 4, p, np.float32, scales=self.TINY_SCALES)
        starts = np.array([0, 3, p], np.int64)
        order = rng.permutation(p) if permuted else np.zeros(0, np.int64)
        tau = np.array([1e-23, 2e-23], np.float32)
        expected = reference.prox_group(z, starts, order, tau, 1.0, np.empty_like(z))
        assert (expected != 0).all()  # every group shrunk by its norm, none zeroed
        np.testing.assert_allclose(run_rows(rows.prox_group, z, starts, order, tau, 1.0), expected, rtol=1e-5, atol=0)

    @pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the plain sums, in simulated scalars
    def test_huge_entries_project_exactly_like_the_reference(self):
        """Rows whose largest entry dwarfs the radius, or whose sum overflows, are projected on their
        entries minus the largest (SHIFT_RATIO): [1e16, 1e16, 0] on the unit simplex is [0.5, 0.5, 0]."""
        z = np.zeros((3, 33))
        z[0, :2], z[1, :3], z[2, :2] = [1e16, 1e16], [-1e16, 1e16, 3.0], [1e308, 1e308]
        for launcher, oracle in ((rows.project_simplex, reference.project_simplex),
                                 (rows.project_l1_ball, reference.project_l1_ball)):
            expected = oracle(z, 1.0, np.empty_like(z))
            np.testing.assert_allclose(run_rows(launcher, z, 1.0), expected, rtol=1e-12, atol=0)
            np.testing.assert_allclose(np.abs(expected).sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(run_rows(rows.project_l1_ball, z, 1.0)[1, :3], [-0.5, 0.5, 0.0], rtol=1e-12)

    def test_default_block_fits_the_row_and_bad_blocks_are_refused(self, rng):
        z = scaled_rows(rng, 2, 5, np.float64)
        expected = reference.project_simplex(z, 1.0, np.empty_like(z))
        assert_close(run_rows(rows.project_simplex, z, 1.0, block=None), expected, np.float64)
        for block in (0, 48, 2048):
            with pytest.raises(ValueError, match="power of two"):
                rows.project_simplex(z, 1.0, np.empty_like(z), block=block)


# --------------------------------------------------------------------------------------------
# Every GPU kernel on CuPy arrays, on a device

# theta of each prox code; MCP and SCAD with continuous parameters (tau = 0.3, gamma = 2, a = 3.7)
THETA = {
    IDENTITY: [],
    SOFT: [0.3, 0.9],
    SOFT_WEIGHTED: [0.3, 0.9],
    CLIP: [-0.4, 0.7],
    CLIP_VECTOR: [],
    MCP: [0.3, 0.6, 2.0],
    SCAD: [0.3, 0.6, 1.11, 1.11 / 2.7, 2.7 / 1.7],
    SOFT_MASKED: [0.3, 0.9],
    MCP_WEIGHTED: [0.3, 0.6, 2.0],
    SCAD_WEIGHTED: [0.3, 0.6, 1.11, 1.11 / 2.7, 2.7 / 1.7],
}
SHAPES = [(1, 7), (4, 8), (3, 1001), (2, 4096)]


def prox_case(rng, kind, n, p, dtype):
    """``z`` (with NaN, +-inf and 0 entries), ``theta`` and ``w`` for prox code ``kind``."""
    z = rng.normal(size=(n, p)).astype(dtype)
    z.flat[:4] = [np.nan, np.inf, -np.inf, 0.0]
    theta = np.array(THETA[kind], np.float64)
    if kind == SOFT_WEIGHTED:
        w = rng.uniform(0.5, 2.0, size=(1, p))
    elif kind == CLIP_VECTOR:
        w = np.stack([-rng.uniform(0, 1, p), rng.uniform(0, 1, p)])
    elif kind == SOFT_MASKED:
        w = np.stack([rng.uniform(0.5, 2.0, p), rng.integers(0, 2, p)])
    elif kind in (MCP_WEIGHTED, SCAD_WEIGHTED):  # weights of lam, some 0 (the identity)
        w = rng.uniform(0.0, 2.0, (1, p)) * (np.arange(p) % 3 > 0)
    else:
        w = np.zeros((0, 0))
    return z, theta, w.astype(dtype)


def row_cases(rng, p, dtype):
    """``(name, arguments after z)`` of every row-wise kernel, on host arrays."""
    starts = np.unique(np.r_[0, rng.choice(np.arange(1, p), size=min(p - 1, 5), replace=False), p]).astype(np.int64)
    tau = rng.uniform(0.0, 2.0, size=len(starts) - 1).astype(dtype)
    return [
        ("project_l2_ball", (np.zeros(0, dtype), 1.0)),
        ("project_l2_ball", (rng.normal(size=p).astype(dtype), 2.0)),
        ("prox_group", (starts, np.zeros(0, np.int64), tau, 0.9)),
        ("prox_group", (starts, rng.permutation(p).astype(np.int64), tau, 0.9)),
        ("project_simplex", (1.0,)),
        ("project_simplex", (3.5,)),
        ("project_l1_ball", (1.0,)),
        ("project_l1_ball", (1e6,)),
    ]


@pytest.mark.gpu
class TestGpuKernels:
    @pytest.fixture
    def cp(self):
        return pytest.importorskip("cupy")

    @pytest.fixture
    def kernels(self):
        from fedopt.kernels import gpu

        return gpu

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, p", SHAPES)
    @pytest.mark.parametrize("kind", sorted(KIND_NAMES), ids=KIND_NAMES.get)
    @pytest.mark.parametrize("inplace", [False, True])
    def test_prox_elementwise(self, cp, kernels, rng, dtype, n, p, kind, inplace):
        z, theta, w = prox_case(rng, kind, n, p, dtype)
        expected = reference.prox_elementwise(z, kind, theta, w, np.empty_like(z))
        dz = cp.asarray(z)
        out = dz if inplace else cp.empty_like(dz)
        assert kernels.prox_elementwise(dz, kind, theta, cp.asarray(w), out) is out
        assert_close(out.get(), expected, dtype)

    def test_prox_elementwise_refuses_unknown_kind(self, cp, kernels):
        z = cp.zeros((1, 3))
        with pytest.raises(ValueError, match="unknown prox kind"):
            kernels.prox_elementwise(z, 99, np.zeros(2), cp.zeros((0, 0)), z)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, p", [(1, 7), (3, 1001)])
    @pytest.mark.parametrize("kind", sorted(KIND_NAMES), ids=KIND_NAMES.get)
    @pytest.mark.parametrize("with_c", [False, True])
    @pytest.mark.parametrize("inplace", [False, True])
    def test_normal_map_step(self, cp, kernels, rng, dtype, n, p, kind, with_c, inplace):
        z, theta, w = prox_case(rng, kind, n, p, dtype)
        g = rng.normal(size=(n, p)).astype(dtype)
        c = rng.normal(size=(n, p)).astype(dtype) if with_c else np.zeros((0, 0), dtype)
        z_ref, x_ref = rng.normal(size=(2, p)).astype(dtype)
        args = (0.1, 0.25, kind, theta)
        z_expected, x_expected = reference.normal_map_step(
            z, g, c, z_ref, x_ref, *args, w, np.empty_like(z), np.empty_like(z)
        )
        dz = cp.asarray(z)
        z_out = dz if inplace else cp.empty_like(dz)
        x_out = cp.empty_like(dz)
        operands = [cp.asarray(a) for a in (g, c, z_ref, x_ref)]
        result = kernels.normal_map_step(dz, *operands, *args, cp.asarray(w), z_out, x_out)
        assert result[0] is z_out and result[1] is x_out
        assert_close(z_out.get(), z_expected, dtype)
        assert_close(x_out.get(), x_expected, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, p", SHAPES)
    @pytest.mark.parametrize("inplace", [False, True])
    def test_row_kernels(self, cp, kernels, rng, dtype, n, p, inplace):
        z = scaled_rows(rng, n, p, dtype)
        if n > 1:
            z[-1, 0] = np.nan
        for name, args in row_cases(rng, p, dtype):
            expected = getattr(reference, name)(z, *args, np.empty_like(z))
            dz = cp.asarray(z)
            out = dz if inplace else cp.empty_like(dz)
            device_args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
            assert getattr(kernels, name)(dz, *device_args, out) is out, name
            assert_close(out.get(), expected, dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("n, n_rows, n_cols", [(1, 3, 3), (3, 4, 6), (2, 7, 5)])
    @pytest.mark.parametrize("inplace", [False, True])
    def test_prox_nuclear(self, cp, kernels, rng, dtype, n, n_rows, n_cols, inplace):
        z = rng.normal(size=(n, n_rows * n_cols)).astype(dtype)
        expected = reference.prox_nuclear(z, n_rows, 0.7, np.empty_like(z))
        dz = cp.asarray(z)
        out = dz if inplace else cp.empty_like(dz)
        assert kernels.prox_nuclear(dz, n_rows, 0.7, out) is out
        assert_close(out.get(), expected, dtype)
